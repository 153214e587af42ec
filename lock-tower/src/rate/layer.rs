//! [`RateLimitLayer`]: the builder of the layer's settings, and the tower `Layer`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockClient, Quota};

use crate::keyed::settings::key_setters;
use crate::keyed::validate::validate_method;
use crate::rate::config::RateSettings;
use crate::rate::service::RateLimit;
use crate::response::DefaultRejection;

/// Applies [`RateLimit`] to a service: each request takes one permit of the Redis
/// rate limit ([`lock_core::RateLimit`]) named `prefix + key`, where the key comes from the
/// request; a request without a permit is answered `429 Too Many Requests`.
///
/// `Q` is the quota: a [`Quota`] (every key has the same) or a closure choosing one per
/// request ([`quota_by`](Self::quota_by)); see [`QuotaPolicy`](crate::QuotaPolicy). See the
/// [`rate`](crate::rate) module docs for an example, the defaults and the status codes.
///
/// Settings never panic: one that cannot work (an empty prefix, a quota [`Quota::check`]
/// refuses) makes every request answer `500` with a
/// [`RejectionKind::Internal`](crate::RejectionKind::Internal) rejection carrying the
/// [`LockError::InvalidOption`](lock_core::LockError::InvalidOption), logged at `error`;
/// [`validate`](Self::validate) gives that error at start-up.
pub struct RateLimitLayer<K, Q = Quota, R = DefaultRejection> {
    extractor: Arc<K>,
    quota: Arc<Q>,
    settings: RateSettings,
    on_rejection: Arc<R>,
}

impl<K> RateLimitLayer<K> {
    /// A layer that takes a permit of the limit of the key `extractor` finds in each request,
    /// through `client`, with `quota` (e.g. `Quota::per_second(10).burst(20)`), and the
    /// defaults: prefix `"rate:"`, `400` for a missing or bad key, fail closed (`503`) when
    /// the store is unavailable.
    pub fn new(client: LockClient, extractor: K, quota: Quota) -> Self {
        let mut settings = RateSettings::new(client);
        let problem = quota.check().err().map(|error| match error {
            lock_core::LockError::InvalidOption { option, reason } => format!("{option}: {reason}"),
            other => other.to_string(),
        });
        settings.keys.check("quota", problem);
        Self {
            extractor: Arc::new(extractor),
            quota: Arc::new(quota),
            settings,
            on_rejection: Arc::new(DefaultRejection),
        }
    }
}

impl<K, Q, R> RateLimitLayer<K, Q, R> {
    /// Chooses each request's quota with `quota` (tiers: a plan, a kind of client), instead
    /// of one [`Quota`] for all: any `Fn(&Request<B>) -> Quota`, see
    /// [`QuotaPolicy`](crate::QuotaPolicy). A quota it gives that cannot work answers that
    /// request `500`, logged at `error`. Replaces the layer's quota (and whether it could
    /// work).
    pub fn quota_by<F>(mut self, quota: F) -> RateLimitLayer<K, F, R> {
        self.settings.keys.check("quota", None);
        RateLimitLayer {
            extractor: self.extractor,
            quota: Arc::new(quota),
            settings: self.settings,
            on_rejection: self.on_rejection,
        }
    }

    /// The namespace of this layer's limits: the limit's name is `prefix + key` (e.g. prefix
    /// `rate:login:` and key `u-7` take a permit of `rate:login:u-7`), so a request can only
    /// spend permits under it. It is also the `family` field of the layer's tracing span.
    /// Default `"rate:"`. It must not be empty, and follows lock-core's rule for prefixes
    /// ([`validate_prefix`](lock_core::validate_prefix)): at most 128 bytes without braces,
    /// whitespace or control characters.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.keys.set_prefix(prefix.into());
        self
    }

    key_setters!(
        store: "the store",
        bound: "within the client's \
            [`connect_timeout`](lock_core::LockClientBuilder::connect_timeout) and \
            [`response_timeout`](lock_core::LockClientBuilder::response_timeout), or the \
            layer's [`check_timeout`](Self::check_timeout)",
        without: "unlimited (and without the RateLimit fields)",
        unavailable: "the store unavailable, failing closed",
    );

    /// Bounds a whole check, getting a connection from the client's pool included: past it
    /// the store counts as unavailable ([`fail_mode`](Self::fail_mode)). Default: no bound
    /// of the layer's own, only the client's: its
    /// [`response_timeout`](lock_core::LockClientBuilder::response_timeout) (default 1 s) for
    /// the one call, after up to its
    /// [`connect_timeout`](lock_core::LockClientBuilder::connect_timeout) (default 2 s) when
    /// no pooled connection answers.
    pub fn check_timeout(mut self, timeout: Duration) -> Self {
        self.settings.check_timeout = Some(timeout);
        self
    }

    /// While the store is unavailable (down, or slower than the client's timeouts or
    /// [`check_timeout`](Self::check_timeout)), decides each request in this process instead
    /// of answering `503` or letting it through: the same GCRA with the same quota, on this
    /// instance's clock ([`LocalRateLimits`](lock_core::LocalRateLimits)),
    /// with the same `429`s and RateLimit fields. **Approximate**: each instance keeps its
    /// own allowance, so `N` instances admit up to `N` × the quota, and nothing taken in the
    /// store before the outage is known here. Decisions made so are logged at `debug`
    /// (`rate limit store unavailable; decided by this instance`). Overrides the
    /// [`fail_mode`](Self::fail_mode) for the store's unavailability; default off.
    pub fn fail_local(mut self) -> Self {
        self.settings.local = Some(Arc::new(lock_core::LocalRateLimits::new()));
        self
    }

    validate_method!(
        settings.keys,
        "Checked: [`prefix`](Self::prefix) and the [`Quota`] given to \
        [`new`](RateLimitLayer::new) ([`Quota::check`]). Not checked: the quotas a \
        [`quota_by`](Self::quota_by) closure gives (one per request), and whether a \
        [`PathParam`](crate::PathParam)'s parameter is in the route."
    );

    /// Answers rejections with `on_rejection` instead of [`DefaultRejection`]'s JSON problem
    /// documents. A `429`'s response gets the `RateLimit-Policy` and `RateLimit` fields
    /// added after it, whatever `on_rejection` made.
    pub fn on_rejection<F>(self, on_rejection: F) -> RateLimitLayer<K, Q, F> {
        RateLimitLayer {
            extractor: self.extractor,
            quota: self.quota,
            settings: self.settings,
            on_rejection: Arc::new(on_rejection),
        }
    }
}

impl<S, K, Q, R> tower::Layer<S> for RateLimitLayer<K, Q, R> {
    type Service = RateLimit<S, K, Q, R>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(
            inner,
            self.extractor.clone(),
            self.quota.clone(),
            Arc::new(self.settings.clone()),
            self.on_rejection.clone(),
        )
    }
}

impl<K, Q, R> Clone for RateLimitLayer<K, Q, R> {
    fn clone(&self) -> Self {
        Self {
            extractor: self.extractor.clone(),
            quota: self.quota.clone(),
            settings: self.settings.clone(),
            on_rejection: self.on_rejection.clone(),
        }
    }
}

impl<K, Q, R> fmt::Debug for RateLimitLayer<K, Q, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("extractor", &std::any::type_name::<K>())
            .field("quota", &std::any::type_name::<Q>())
            .field("settings", &self.settings)
            .field("on_rejection", &std::any::type_name::<R>())
            .finish()
    }
}
