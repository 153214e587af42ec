//! [`IdempotencyLayer`]: the builder of the idempotency layer's settings, and the tower
//! `Layer`.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use http::header::HeaderName;
use lock_core::LockClient;

use super::config::{MAX_RECORD_BODY, Settings};
use super::service::Idempotent;
use super::store::RecordStore;
use crate::config::{FailMode, LeaseLost};
use crate::keyed::validate::{fixed_lease_setters, prefix_problem, validate_method};
use crate::macros::common_impls;
use crate::response::DefaultRejection;

/// Applies [`Idempotent`] to a service: a request with an idempotency key runs once, under the
/// key's lock, and its retries get its stored response. See the [module docs](crate::idempotency)
/// for an example, every status code and what is guaranteed.
///
/// Settings never panic: one that cannot work (an empty prefix, a time to live or lease out of
/// range, a record limit over 8 MiB) makes every request with a key answer `500` with a
/// [`RejectionKind::Internal`](crate::RejectionKind::Internal) rejection, logged at `error`;
/// [`validate`](Self::validate) gives that error at start-up.
pub struct IdempotencyLayer<Sc = Unscoped, R = DefaultRejection> {
    scope: Arc<Sc>,
    settings: Settings,
    on_rejection: Arc<R>,
}

/// The scope of an unscoped [`IdempotencyLayer`]: every client shares one namespace of keys
/// (two clients that pick the same key meet: the second is replayed the first's response, or
/// gets `422` if its request differs). Scope keys per client with
/// [`IdempotencyLayer::scope`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Unscoped;

impl<B> crate::keyed::extract::KeyExtractor<B> for Unscoped {
    fn extract(&self, _: &http::Request<B>) -> Option<String> {
        None
    }
}

impl IdempotencyLayer {
    /// A layer that takes each key's lock through `client` and keeps records in its Redis
    /// ([`LockClientStore`](crate::LockClientStore)), with the defaults: header `Idempotency-Key`,
    /// optional for every method, unscoped, prefix `"idem:"`, records kept 24 h, `409` at once
    /// while the key's first request runs, request bodies up to 1 MiB, responses up to 256 KiB
    /// stored with `Content-Type` and `Location`, `5xx` not stored, fail closed (`503`).
    pub fn new(client: LockClient) -> Self {
        Self {
            scope: Arc::new(Unscoped),
            settings: Settings::new(client),
            on_rejection: Arc::new(DefaultRejection),
        }
    }
}

impl<Sc, R> IdempotencyLayer<Sc, R> {
    /// Keeps records in `store` instead of Redis (see [`RecordStore`] for the contract). The
    /// key's lock stays in the client's Redis.
    pub fn store<St: RecordStore>(mut self, store: St) -> Self {
        self.settings.store = Arc::new(store);
        self.settings.store_type = std::any::type_name::<St>();
        self
    }

    /// Scopes keys by what `extractor` finds in each request (the authenticated client's id,
    /// say: a [`Header`](crate::Header) your authentication sets, a
    /// [`PathParam`](crate::PathParam), a closure), so that two clients' keys never meet. A
    /// request with a key and without a scope gets `400`; a scope is 1 to 255 bytes without
    /// control characters. Default: unscoped ([`Unscoped`]).
    pub fn scope<Sc2>(self, extractor: Sc2) -> IdempotencyLayer<Sc2, R> {
        let mut settings = self.settings;
        settings.scoped = true;
        IdempotencyLayer {
            scope: Arc::new(extractor),
            settings,
            on_rejection: self.on_rejection,
        }
    }

    /// The header that carries the key. Default `Idempotency-Key`.
    pub fn header(mut self, name: HeaderName) -> Self {
        self.settings.header = name;
        self
    }

    /// Requires the key for `methods`: a request of one of them without it gets `400`.
    /// Default: none (requests without a key run as they would without the layer).
    pub fn require_for(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.settings.required = methods.into_iter().collect();
        self
    }

    /// The namespace of this layer's locks and records: a request's record key (and lock name)
    /// is `prefix + scope + ":" + key` (hashed when it cannot be a lock name; see
    /// [`Idempotency::record_key`](crate::Idempotency::record_key)). Default `"idem:"`; 1 to
    /// 128 bytes without braces, whitespace or control characters. Give layers that must not
    /// share records different prefixes.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.settings
            .invalid
            .check("prefix", prefix_problem(&prefix));
        self.settings.prefix = prefix;
        self
    }

    /// How long a record is kept: retries within it are replayed; after it, a request with
    /// the key runs again. Default 24 hours; 1 ms to 30 days.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        let valid = (lock_core::record::MIN_TTL..=lock_core::record::MAX_TTL).contains(&ttl);
        let problem = (!valid).then(|| format!("{ttl:?} is outside 1ms..=30 days"));
        self.settings.invalid.check("ttl", problem);
        self.settings.ttl = ttl;
        self
    }

    /// How long a request waits for a key whose first request is still running, before it
    /// is answered `409`; if that request finishes within it, this one is replayed its
    /// response. Default zero: `409` at once (the IETF draft's answer).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.settings.wait = wait;
        self
    }

    fixed_lease_setters!(
        settings.invalid,
        settings.fixed_lease,
        "Holds each key's lock for a **fixed lease that is never renewed** (10 ms to 30 \
        days): a handler that runs longer loses the lock (see \
        [`on_lease_lost`](Self::on_lease_lost)), and its response is not stored.\n\n\
        Without it (the default) the lock has the client's **watchdog lease**, renewed while \
        the request runs, so a slow handler keeps it: that lease \
        ([`LockClientBuilder::watchdog_lease`](lock_core::LockClientBuilder::watchdog_lease), \
        default 30 s) is the crash-takeover setting: when an instance dies mid-request, the \
        key's retries get `409` until it runs out, then run on another instance. Shorten it \
        on the client for a faster takeover (see the [module docs](crate::idempotency)' \
        example)."
    );

    /// The `Retry-After` of a `409` (the key's first request still runs) when the holder's
    /// remaining lease is not known; when it is (lock-core reads it with the busy answer),
    /// `Retry-After` is that lease, rounded up to whole seconds. Default 1 s.
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.settings.retry_after = retry_after;
        self
    }

    /// The `Retry-After` of a `503` (the store or Redis unavailable, the lock lost). Default
    /// 1 s.
    pub fn unavailable_retry_after(mut self, retry_after: Duration) -> Self {
        self.settings.unavailable_retry_after = retry_after;
        self
    }

    /// The largest request body the layer reads (it reads the whole body of a request with a
    /// key to fingerprint it, and hands the handler the same bytes; trailers are not passed
    /// on): larger ones get `413`, as soon as their `Content-Length` or the bytes read say so.
    /// Default 1 MiB.
    pub fn max_request_body(mut self, bytes: usize) -> Self {
        self.settings.max_request_body = bytes;
        self
    }

    /// The largest response body stored: a larger one (or one with trailers) is answered as it
    /// is but not stored (logged at `warn`), so a retry runs the request again. Default 256
    /// KiB; at most 8 MiB. The whole stored body is read, under the lock, before the response
    /// goes out.
    pub fn max_record_body(mut self, bytes: usize) -> Self {
        let problem = (bytes > MAX_RECORD_BODY)
            .then(|| format!("{bytes} bytes is more than {MAX_RECORD_BODY}"));
        self.settings.invalid.check("max_record_body", problem);
        self.settings.max_record_body = bytes;
        self
    }

    /// The response headers kept in a record and replayed. Default `Content-Type` and
    /// `Location`. A replay has these and `Idempotent-Replayed: true`, nothing else.
    pub fn replay_headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        self.settings.replay_headers = names.into_iter().collect();
        self
    }

    /// Which responses are stored, by their status, headers and extensions; the others are
    /// answered as they are and their retries run again. Default
    /// [`is_final`](crate::idempotency::is_final): every response but a `5xx` or one with
    /// `Retry-After`.
    pub fn store_if(mut self, store: fn(&http::response::Parts) -> bool) -> Self {
        self.settings.store_if = store;
        self
    }

    /// What to do when the store or Redis is unavailable. Default [`FailMode::Closed`]:
    /// `503` with `Retry-After`. [`FailMode::Open`] runs the request without the lock and
    /// without storing its response (logged at `warn`).
    pub fn fail_mode(mut self, mode: FailMode) -> Self {
        self.settings.fail_mode = mode;
        self
    }

    /// Shorthand for [`fail_mode(FailMode::Open)`](Self::fail_mode): an unavailable store
    /// or Redis lets requests through without the lock and without storing their responses.
    pub fn fail_open(self) -> Self {
        self.fail_mode(FailMode::Open)
    }

    /// What to do when the key's lock is lost while the handler runs. Either way nothing is
    /// stored. Default [`LeaseLost::Abort`]: the handler is cancelled (or its response
    /// dropped) and the request answered `503`; [`LeaseLost::Continue`] lets it finish and
    /// sends its response.
    pub fn on_lease_lost(mut self, policy: LeaseLost) -> Self {
        self.settings.lease_lost = policy;
        self
    }

    validate_method!(
        settings,
        "Checked: [`prefix`](Self::prefix), [`ttl`](Self::ttl), \
        [`fixed_lease`](Self::fixed_lease) (10 ms to 30 days) and \
        [`max_record_body`](Self::max_record_body)."
    );

    /// Answers rejections with `on_rejection` instead of [`DefaultRejection`]'s JSON problem
    /// documents (the same [`OnRejection`](crate::OnRejection) as the lock layer's).
    pub fn on_rejection<F>(self, on_rejection: F) -> IdempotencyLayer<Sc, F> {
        IdempotencyLayer {
            scope: self.scope,
            settings: self.settings,
            on_rejection: Arc::new(on_rejection),
        }
    }
}

common_impls!(layer IdempotencyLayer => Idempotent, scope);
