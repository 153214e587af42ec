//! [`DistributedLockLayer`]: the layer, its settings and their defaults.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use lock_core::{LockClient, MAX_LEASE, MIN_LEASE};
use tower::Layer;

use crate::response::DefaultRejection;
use crate::service::DistributedLock;

/// The prefix put in front of every key unless [`DistributedLockLayer::prefix`] sets another.
pub const DEFAULT_PREFIX: &str = "http:";

/// The longest key (without the prefix) accepted unless
/// [`DistributedLockLayer::max_key_len`] sets another, in bytes.
pub const DEFAULT_MAX_KEY_LEN: usize = 128;

/// How much longer than `wait` an acquisition may take before the layer gives up on Redis,
/// unless [`DistributedLockLayer::acquire_timeout`] sets the bound.
pub const DEFAULT_REDIS_ALLOWANCE: Duration = Duration::from_secs(2);

/// The `Retry-After` of a `503` unless [`DistributedLockLayer::unavailable_retry_after`] sets
/// another.
pub const DEFAULT_UNAVAILABLE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What to do with a request whose extractor finds no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MissingKey {
    /// Answer `400 Bad Request` without calling the inner service. The default.
    #[default]
    Reject,
    /// Call the inner service without a lock (and without the
    /// [`HeldLock`](lock_core::HeldLock) extension). Only choose this when the handler
    /// rejects such requests itself or does not need the lock for them.
    PassThrough,
}

/// What to do when Redis cannot be reached, does not answer in time or fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FailMode {
    /// Fail closed: answer `503 Service Unavailable` with `Retry-After` and do not run the
    /// inner service. The default: the lock exists because running two requests for one key
    /// at once is wrong, and without Redis nothing prevents it.
    #[default]
    Closed,
    /// Fail open: run the inner service without a lock (and without the
    /// [`HeldLock`](lock_core::HeldLock) extension), logging a warning. For locks that only
    /// save work, where an occasional overlap is harmless.
    Open,
}

/// What to do when the lock is lost while the request is running (its lease ran out: Redis
/// was unreachable for longer than the lease, a fixed lease was too short, or someone deleted
/// it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LeaseLost {
    /// Stop the request: drop the handler's future (it is cancelled at its current `.await`)
    /// and answer `503` with `Retry-After`; if the response body is already streaming, end it
    /// with an error. The default, since another request may now hold the lock.
    #[default]
    Abort,
    /// Let the request finish. The handler can watch
    /// [`HeldLock::is_held`](lock_core::HeldLock::is_held) or
    /// [`HeldLock::lost`](lock_core::HeldLock::lost) and pass the
    /// [`fencing token`](lock_core::HeldLock::fencing_token) to the resource it updates, so
    /// late writes are refused.
    Continue,
}

/// When a request gives its lock back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Release {
    /// When the response body is complete (or dropped, if the client goes away): the lock
    /// covers everything the body still produces, e.g. a stream read from the database. A
    /// small body (size hint at most [`BUFFER_LIMIT`](crate::future::BUFFER_LIMIT)) is read in
    /// full under the lock, which is given back before the response is handed on; a larger
    /// one streams, and the release completes before its last frame is handed out. The
    /// default.
    #[default]
    AfterBody,
    /// When the handler has returned its response, before the response is handed on. For
    /// handlers whose body does not depend on the locked resource; a slow client then does
    /// not keep the lock.
    AfterHandler,
}

/// The layer's settings, shared by its services and their futures.
pub(crate) struct Settings<R> {
    pub(crate) client: LockClient,
    pub(crate) prefix: String,
    pub(crate) wait: Duration,
    pub(crate) lease: Option<Duration>,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) max_key_len: usize,
    pub(crate) missing_key: MissingKey,
    pub(crate) fail_mode: FailMode,
    pub(crate) lease_lost: LeaseLost,
    pub(crate) release: Release,
    pub(crate) busy_status: StatusCode,
    pub(crate) max_retry_after: Option<Duration>,
    pub(crate) unavailable_retry_after: Duration,
    pub(crate) on_rejection: Arc<R>,
}

impl<R> Settings<R> {
    /// The bound on one whole acquisition, waiting included.
    pub(crate) fn acquire_timeout(&self) -> Duration {
        self.acquire_timeout
            .unwrap_or_else(|| self.wait.saturating_add(DEFAULT_REDIS_ALLOWANCE))
    }

    fn with_rejection<F>(self, on_rejection: F) -> Settings<F> {
        Settings {
            client: self.client,
            prefix: self.prefix,
            wait: self.wait,
            lease: self.lease,
            acquire_timeout: self.acquire_timeout,
            max_key_len: self.max_key_len,
            missing_key: self.missing_key,
            fail_mode: self.fail_mode,
            lease_lost: self.lease_lost,
            release: self.release,
            busy_status: self.busy_status,
            max_retry_after: self.max_retry_after,
            unavailable_retry_after: self.unavailable_retry_after,
            on_rejection: Arc::new(on_rejection),
        }
    }
}

// Manual impl: `R` sits behind an `Arc` and need not be `Clone`.
impl<R> Clone for Settings<R> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            prefix: self.prefix.clone(),
            wait: self.wait,
            lease: self.lease,
            acquire_timeout: self.acquire_timeout,
            max_key_len: self.max_key_len,
            missing_key: self.missing_key,
            fail_mode: self.fail_mode,
            lease_lost: self.lease_lost,
            release: self.release,
            busy_status: self.busy_status,
            max_retry_after: self.max_retry_after,
            unavailable_retry_after: self.unavailable_retry_after,
            on_rejection: self.on_rejection.clone(),
        }
    }
}

impl<R> fmt::Debug for Settings<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("client", &self.client)
            .field("prefix", &self.prefix)
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .field("acquire_timeout", &self.acquire_timeout())
            .field("max_key_len", &self.max_key_len)
            .field("missing_key", &self.missing_key)
            .field("fail_mode", &self.fail_mode)
            .field("lease_lost", &self.lease_lost)
            .field("release", &self.release)
            .field("busy_status", &self.busy_status)
            .field("max_retry_after", &self.max_retry_after)
            .field("unavailable_retry_after", &self.unavailable_retry_after)
            .field("on_rejection", &std::any::type_name::<R>())
            .finish()
    }
}

/// Applies [`DistributedLock`] to a service: each request takes the Redis lock named
/// `prefix + key`, where the key comes from the request, and holds it while the inner
/// service runs and its response body is sent.
///
/// See the [crate docs](crate) for an example, the defaults and the status codes.
pub struct DistributedLockLayer<K, R = DefaultRejection> {
    extractor: Arc<K>,
    settings: Settings<R>,
}

impl<K> DistributedLockLayer<K> {
    /// A layer that locks the key `extractor` finds in each request, through `client`, with
    /// the defaults: prefix [`DEFAULT_PREFIX`], fail fast when the lock is busy (`409`),
    /// `400` for a missing or bad key, fail closed (`503`) when Redis is unavailable, abort
    /// when the lock is lost, release after the response body.
    pub fn new(client: LockClient, extractor: K) -> Self {
        Self {
            extractor: Arc::new(extractor),
            settings: Settings {
                client,
                prefix: DEFAULT_PREFIX.to_owned(),
                wait: Duration::ZERO,
                lease: None,
                acquire_timeout: None,
                max_key_len: DEFAULT_MAX_KEY_LEN,
                missing_key: MissingKey::Reject,
                fail_mode: FailMode::Closed,
                lease_lost: LeaseLost::Abort,
                release: Release::AfterBody,
                busy_status: StatusCode::CONFLICT,
                max_retry_after: None,
                unavailable_retry_after: DEFAULT_UNAVAILABLE_RETRY_AFTER,
                on_rejection: Arc::new(DefaultRejection),
            },
        }
    }
}

impl<K, R> DistributedLockLayer<K, R> {
    /// The namespace of this layer's locks: the lock name is `prefix + key` (e.g. prefix
    /// `order:` and key `42` lock `order:42`), so a request can only lock names under it.
    /// Default [`DEFAULT_PREFIX`].
    ///
    /// # Panics
    ///
    /// If `prefix` is empty, or has braces, whitespace or control characters, or is longer
    /// than 128 bytes.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        let valid = !prefix.is_empty()
            && prefix.len() <= 128
            && !prefix.contains(['{', '}'])
            && !prefix.chars().any(|c| c.is_whitespace() || c.is_control());
        assert!(
            valid,
            "lock-tower: the prefix {prefix:?} must be 1 to 128 bytes without braces, \
             whitespace or control characters"
        );
        self.settings.prefix = prefix;
        self
    }

    /// How long a request waits for a busy lock before it is answered with
    /// [`busy_status`](Self::busy_status). Default zero: a single attempt, fail fast.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.settings.wait = wait;
        self
    }

    /// Holds each lock for a fixed lease that is never renewed (10 ms to 24 h): a request
    /// that runs longer loses its lock (see [`on_lease_lost`](Self::on_lease_lost)). Default:
    /// the client's watchdog lease, renewed for as long as the request runs.
    ///
    /// # Panics
    ///
    /// If `lease` is outside [`MIN_LEASE`]..=[`MAX_LEASE`].
    pub fn lease(mut self, lease: Duration) -> Self {
        assert!(
            (MIN_LEASE..=MAX_LEASE).contains(&lease),
            "lock-tower: the lease {lease:?} is outside {MIN_LEASE:?}..={MAX_LEASE:?}"
        );
        self.settings.lease = Some(lease);
        self
    }

    /// The bound on a whole acquisition, waiting and Redis round trips included: past it the
    /// request is answered as if Redis were unavailable (`503`), so a slow or hung Redis never
    /// holds requests for longer. Default: [`wait`](Self::wait) +
    /// [`DEFAULT_REDIS_ALLOWANCE`]. A bound shorter than `wait` cuts the wait short.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.settings.acquire_timeout = Some(timeout);
        self
    }

    /// The longest key accepted, in bytes, not counting the prefix; longer keys get `400`.
    /// Default [`DEFAULT_MAX_KEY_LEN`]. Prefix and key together can never exceed the lock-name
    /// limit of 512 bytes.
    pub fn max_key_len(mut self, max: usize) -> Self {
        self.settings.max_key_len = max;
        self
    }

    /// What to do with requests without a key. Default [`MissingKey::Reject`] (`400`).
    pub fn missing_key(mut self, policy: MissingKey) -> Self {
        self.settings.missing_key = policy;
        self
    }

    /// What to do when Redis is unavailable. Default [`FailMode::Closed`] (`503`).
    pub fn fail_mode(mut self, mode: FailMode) -> Self {
        self.settings.fail_mode = mode;
        self
    }

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

    /// Caps the `Retry-After` of a busy answer. Without a cap (the default) it is the
    /// holder's remaining lease, which for a watchdog lease is up to the whole lease (30 s by
    /// default) even when the holder is about to finish.
    pub fn max_retry_after(mut self, max: Duration) -> Self {
        self.settings.max_retry_after = Some(max);
        self
    }

    /// The `Retry-After` of a `503` (Redis unavailable, lock lost). Default
    /// [`DEFAULT_UNAVAILABLE_RETRY_AFTER`].
    pub fn unavailable_retry_after(mut self, retry_after: Duration) -> Self {
        self.settings.unavailable_retry_after = retry_after;
        self
    }

    /// Answers rejections with `on_rejection` instead of [`DefaultRejection`]'s JSON problem
    /// documents. The [`Rejection`](crate::Rejection) it gets carries the status the other
    /// settings chose and the `Retry-After` duration.
    pub fn on_rejection<F>(self, on_rejection: F) -> DistributedLockLayer<K, F> {
        DistributedLockLayer {
            extractor: self.extractor,
            settings: self.settings.with_rejection(on_rejection),
        }
    }
}

impl<S, K, R> Layer<S> for DistributedLockLayer<K, R> {
    type Service = DistributedLock<S, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        DistributedLock::from_parts(
            inner,
            self.extractor.clone(),
            Arc::new(self.settings.clone()),
        )
    }
}

// Manual impl: `derive(Clone)` would require `K: Clone` and `R: Clone`, which sit behind
// `Arc`s and need not be.
impl<K, R> Clone for DistributedLockLayer<K, R> {
    fn clone(&self) -> Self {
        Self {
            extractor: self.extractor.clone(),
            settings: self.settings.clone(),
        }
    }
}

impl<K, R> fmt::Debug for DistributedLockLayer<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DistributedLockLayer")
            .field("extractor", &std::any::type_name::<K>())
            .field("settings", &self.settings)
            .finish()
    }
}
