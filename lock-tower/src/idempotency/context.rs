//! [`Idempotency`]: what a handler learns of its request's key, and how it writes the record
//! itself; and [`KeyLock`], the key's lock while the handler runs.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http::header::{HeaderMap, HeaderName};
use lock_core::{LockGuard, Lost};

use super::config::Settings;
use super::record::{Fingerprint, Record};

/// The request's idempotency key, as the handler finds it in the request's extensions
/// (`Extension<Idempotency>` in axum) when the [`IdempotencyLayer`](crate::IdempotencyLayer)
/// runs it: its key, scope and record key, the fingerprint of the request, and the fencing
/// token of the key's lock, which the request holds while the handler runs.
///
/// Cheap to clone. Requests without a key (and requests run without the lock, failing open)
/// have none.
///
/// # Writing the record in the handler's own transaction
///
/// By default the layer stores the response once the handler has returned it. A handler
/// that writes to a database can write the record itself, in the transaction that writes its
/// business rows, so that the rows and the record are committed together (and a crash
/// between them cannot make a retry run twice):
///
/// 1. make the response's [`Record`] with [`record`](Self::record);
/// 2. write it in the transaction with a [`RecordStore`](crate::RecordStore) of the
///    database, under [`record_key`](Self::record_key), fenced by
///    [`fencing_token`](Self::fencing_token), for [`ttl`](Self::ttl); roll back if the put is
///    refused (a newer holder of the key stored first: this request's lock was lost);
/// 3. commit, then call [`mark_stored`](Self::mark_stored), and answer with
///    [`Record::to_response`] so that the answer and every replay are the same bytes.
///
/// The layer then does not store the response again (and its store must be the database's,
/// so that it finds the record).
#[derive(Clone)]
pub struct Idempotency {
    inner: Arc<Inner>,
}

struct Inner {
    key: String,
    scope: Option<String>,
    record_key: String,
    fingerprint: Fingerprint,
    token: u64,
    ttl: Duration,
    replay_headers: Arc<[HeaderName]>,
    stored: AtomicBool,
}

impl Idempotency {
    pub(crate) fn new(ask: Ask, fingerprint: Fingerprint, token: u64, settings: &Settings) -> Self {
        Self {
            inner: Arc::new(Inner {
                key: ask.key,
                scope: ask.scope,
                record_key: ask.record_key,
                fingerprint,
                token,
                ttl: settings.ttl,
                replay_headers: settings.replay_headers.clone(),
                stored: AtomicBool::new(false),
            }),
        }
    }

    /// The idempotency key, as the client sent it (without the quotes of a quoted key).
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// The scope the layer's scope extractor found (`None` for an unscoped layer).
    pub fn scope(&self) -> Option<&str> {
        self.inner.scope.as_deref()
    }

    /// The key of the request's record in the [`RecordStore`](crate::RecordStore), which is
    /// also the name of its lock: the layer's prefix, the scope, `:`, the key (see
    /// [`IdempotencyLayer::prefix`](crate::IdempotencyLayer::prefix)).
    pub fn record_key(&self) -> &str {
        &self.inner.record_key
    }

    /// The request's fingerprint (method, path and query, body).
    pub fn fingerprint(&self) -> Fingerprint {
        self.inner.fingerprint
    }

    /// The fencing token of the key's lock: pass it with the handler's writes, and to a
    /// record put.
    pub fn fencing_token(&self) -> u64 {
        self.inner.token
    }

    /// How long the record is kept ([`IdempotencyLayer::ttl`](crate::IdempotencyLayer::ttl)).
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// The record of a response with `status`, `headers` (only those the layer keeps:
    /// [`replay_headers`](crate::IdempotencyLayer::replay_headers)) and `body`, made by this
    /// request.
    pub fn record(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        body: impl Into<Bytes>,
    ) -> Record {
        let mut kept = HeaderMap::new();
        for name in self.inner.replay_headers.iter() {
            for value in headers.get_all(name) {
                kept.append(name.clone(), value.clone());
            }
        }
        Record::new(self.inner.fingerprint, status, kept, body.into())
    }

    /// Says that the handler has stored the record itself (committed): the layer will not
    /// store the response again.
    pub fn mark_stored(&self) {
        self.inner.stored.store(true, Ordering::Release);
    }

    /// Whether [`mark_stored`](Self::mark_stored) was called.
    pub fn is_stored(&self) -> bool {
        self.inner.stored.load(Ordering::Acquire)
    }
}

impl fmt::Debug for Idempotency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("key", &self.inner.key)
            .field("scope", &self.inner.scope)
            .field("record_key", &self.inner.record_key)
            .field("fencing_token", &self.inner.token)
            .field("stored", &self.is_stored())
            .finish_non_exhaustive()
    }
}

/// What a request asks for: its key, its scope, and the name they make.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub(crate) key: String,
    pub(crate) scope: Option<String>,
    /// The record key, also the lock's name.
    pub(crate) record_key: String,
}

/// The key's lock while the handler runs, with the request's [`Idempotency`].
pub(crate) struct KeyLock {
    pub(crate) guard: LockGuard,
    pub(crate) context: Idempotency,
    /// Resolves when the lock is lost: made on the first poll that needs it.
    lost: Option<Lost>,
}

impl KeyLock {
    pub(crate) fn new(guard: LockGuard, context: Idempotency) -> Self {
        Self {
            guard,
            context,
            lost: None,
        }
    }

    /// True when the lock is found lost now (its validity is read against the clock).
    pub(crate) fn is_lost(&self) -> bool {
        !self.guard.is_held()
    }

    /// Ready once the lock is lost.
    pub(crate) fn poll_lost(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_lost() {
            return Poll::Ready(());
        }
        let lost = self.lost.get_or_insert_with(|| self.guard.lost());
        Pin::new(lost).poll(cx)
    }

    /// Gives the lock back (see [`release`]).
    pub(crate) async fn release(self) {
        release(self.guard).await;
    }
}

/// Gives a key's lock back, waiting for Redis's answer (bounded by the client's timeouts); a
/// failure is logged, and the lease expires the lock.
pub(crate) async fn release(guard: LockGuard) {
    match guard.unlock().await {
        Ok(true) => tracing::debug!("idempotency lock released"),
        Ok(false) => tracing::debug!("the idempotency lock had already expired"),
        Err(error) => {
            tracing::warn!(%error, "could not release the idempotency lock; its lease will expire it");
        }
    }
}

impl fmt::Debug for KeyLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyLock")
            .field("guard", &self.guard)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}
