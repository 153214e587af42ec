//! [`DistributedLockLayer`]: the builder of the layer's settings, and the tower `Layer`.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use lock_core::{LockClient, Semaphore};

use super::service::DistributedLock;
use super::settings::{Kind, Settings};
use crate::config::{LeaseLost, Release, Side};
use crate::keyed::settings::key_setters;
use crate::keyed::validate::{fixed_lease_setters, validate_method};
use crate::macros::common_impls;
use crate::response::DefaultRejection;

/// Applies [`DistributedLock`] to a service: each request takes the Redis lock named
/// `prefix + key`, where the key comes from the request, and holds it while the inner
/// service runs and its response body is sent.
///
/// The lock is a mutex unless [`fair`](Self::fair), [`read_write`](Self::read_write) or
/// [`permits`](Self::permits) says otherwise. See the [crate docs](crate) for an example, the
/// defaults and the status codes.
///
/// Settings never panic: one that cannot work (an empty prefix, a lease outside 10 ms to 30
/// days, a semaphore of 0 permits) makes every request answer `500` with a
/// [`RejectionKind::Internal`](crate::RejectionKind::Internal) rejection carrying the
/// [`LockError::InvalidOption`](lock_core::LockError::InvalidOption), logged at `error`;
/// [`validate`](Self::validate) gives that error at start-up.
pub struct DistributedLockLayer<K, R = DefaultRejection> {
    extractor: Arc<K>,
    settings: Settings,
    on_rejection: Arc<R>,
}

impl<K> DistributedLockLayer<K> {
    /// A layer that locks the key `extractor` finds in each request, through `client`, with
    /// the defaults: a mutex, prefix `"http:"`, fail fast when the lock is busy (`409`),
    /// `400` for a missing or bad key, fail closed (`503`) when Redis is unavailable, abort
    /// when the lock is lost, release after the response body.
    pub fn new(client: LockClient, extractor: K) -> Self {
        Self {
            extractor: Arc::new(extractor),
            settings: Settings::new(client),
            on_rejection: Arc::new(DefaultRejection),
        }
    }
}

impl<K, R> DistributedLockLayer<K, R> {
    /// The namespace of this layer's locks: the lock name is `prefix + key` (e.g. prefix
    /// `order:` and key `42` lock `order:42`), so a request can only lock names under it.
    /// Default `"http:"`. It must not be empty, and follows lock-core's rule for prefixes
    /// ([`validate_prefix`](lock_core::validate_prefix)): at most 128 bytes without braces,
    /// whitespace or control characters.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.keys.set_prefix(prefix.into());
        self
    }

    /// Takes a fair lock per key ([`FairLock`](lock_core::FairLock)): requests that wait get
    /// it in arrival order, across instances. Only useful with a [`wait`](Self::wait).
    pub fn fair(mut self) -> Self {
        self.settings.kind = Kind::Fair;
        self
    }

    /// Takes a read-write lock per key: `GET`, `HEAD` and `OPTIONS` requests take the read
    /// side (they run together), every other method the write side (alone). The handler's
    /// [`HeldLock`](lock_core::HeldLock) has a fencing token for writers only.
    pub fn read_write(self) -> Self {
        self.read_write_by(Side::of_method)
    }

    /// Takes a read-write lock per key, with `side` choosing each request's side from its
    /// method.
    pub fn read_write_by(mut self, side: fn(&Method) -> Side) -> Self {
        self.settings.kind = Kind::ReadWrite(side);
        self
    }

    /// Limits requests per key to `n` at once across every instance: a semaphore of `n`
    /// permits per key (1 to 100,000), one permit per request. Requests beyond it wait (up
    /// to [`wait`](Self::wait)) or get the busy status. The handler's
    /// [`HeldLock`](lock_core::HeldLock) has no fencing token.
    pub fn permits(mut self, n: u32) -> Self {
        let valid = (1..=Semaphore::MAX_SIZE).contains(&n);
        self.settings.keys.check(
            "permits",
            (!valid).then(|| format!("{n} is outside 1..={}", Semaphore::MAX_SIZE)),
        );
        self.settings.kind = Kind::Permits(n);
        self
    }

    /// How long a request waits for a busy lock before it is answered with
    /// [`busy_status`](Self::busy_status). Default zero: a single attempt, fail fast.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.settings.wait = wait;
        self
    }

    fixed_lease_setters!(
        settings.keys,
        settings.fixed_lease,
        "Holds each lock for a fixed lease that is never renewed (10 ms to 30 days, as for \
        [`LockRequest::lease`](lock_core::LockRequest::lease)): a request that runs longer \
        loses its lock (see [`on_lease_lost`](Self::on_lease_lost)). Default: the client's \
        watchdog lease, renewed for as long as the request runs."
    );

    /// The bound on a whole acquisition, waiting and Redis round trips included: past it the
    /// request is answered as if Redis were unavailable (`503`), so a slow or hung Redis never
    /// holds requests for longer. Default: [`wait`](Self::wait) + 2 s. A bound shorter than
    /// `wait` cuts the wait short.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.settings.acquire_timeout = Some(timeout);
        self
    }

    key_setters!(
        store: "Redis",
        bound: "within [`acquire_timeout`](Self::acquire_timeout)",
        without: "without a lock (and without the [`HeldLock`](lock_core::HeldLock) extension)",
        unavailable: "Redis unavailable, lock lost",
    );

    /// What to do when the lock is lost while the request runs. Default
    /// [`LeaseLost::Abort`] (`503`, or a cut-off body).
    pub fn on_lease_lost(mut self, policy: LeaseLost) -> Self {
        self.settings.lease_lost = policy;
        self
    }

    /// When the lock is given back. Default [`Release::AfterBody`].
    pub fn release(mut self, release: Release) -> Self {
        self.settings.release = release;
        self
    }

    /// The status of a request that found the lock busy: `409 Conflict` by default; `423
    /// Locked`, `429 Too Many Requests` and `503 Service Unavailable` are the usual
    /// alternatives. It comes with `Retry-After`.
    pub fn busy_status(mut self, status: StatusCode) -> Self {
        self.settings.busy_status = status;
        self
    }

    /// Caps the `Retry-After` of a busy answer (default 5 s). Below the cap it is how long
    /// this layer's requests have held their locks lately (a moving average), and never more
    /// than the holder's remaining lease; then rounded up to whole seconds (at least 1): one
    /// value, which the header says in seconds and the JSON body's `retry_after_ms` in
    /// milliseconds.
    pub fn max_retry_after(mut self, max: Duration) -> Self {
        self.settings.max_retry_after = max;
        self
    }

    validate_method!(
        settings.keys,
        "Checked: [`prefix`](Self::prefix), [`fixed_lease`](Self::fixed_lease) (10 ms to 30 days), \
        [`permits`](Self::permits) (1 to 100,000). Not checked: whether a \
        [`PathParam`](crate::PathParam)'s parameter is in the route the layer is put on, \
        which the layer learns from the first request routed to it (see the guide's HTTP \
        chapter)."
    );

    /// Answers rejections with `on_rejection` instead of [`DefaultRejection`]'s JSON problem
    /// documents. The [`Rejection`](crate::Rejection) it gets carries the status the other
    /// settings chose and the `Retry-After` duration.
    pub fn on_rejection<F>(self, on_rejection: F) -> DistributedLockLayer<K, F> {
        DistributedLockLayer {
            extractor: self.extractor,
            settings: self.settings,
            on_rejection: Arc::new(on_rejection),
        }
    }
}

common_impls!(layer DistributedLockLayer => DistributedLock, extractor);
