//! [`RateLimitService`]: the service that takes a permit of the request's rate limit before
//! calling the inner one.

use std::fmt;
use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use http_body::Body;
use lock_core::LockError;
use tower::Service;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::body::ResponseBody;
use crate::config::MissingKey;
use crate::deferred::Deferred;
use crate::extract::{KeyExtractor, shorten};
use crate::key::lock_name;
use crate::macros::inner_service_accessors;
use crate::rate::config::RateSettings;
use crate::rate::future::RateLimitFuture;
use crate::rate::quota::QuotaPolicy;
use crate::rejection::Rejection;
use crate::rejection_kind::RejectionKind;
use crate::response::{DefaultRejection, OnRejection};

/// Middleware that takes one permit of a Redis rate limit, named after a key from each
/// request, before the inner service handles the request.
///
/// Built by [`RateLimitLayer`](crate::RateLimitLayer); see the [`rate`](crate::rate) module
/// docs for the behaviour.
///
/// Readiness is the inner service's: nothing is reserved in `poll_ready`, because the limit
/// depends on the request. The permit is taken in the response future, after which the
/// inner service (the ready one, swapped out for a clone) is called.
pub struct RateLimitService<S, K, Q, R = DefaultRejection> {
    inner: S,
    extractor: Arc<K>,
    quota: Arc<Q>,
    settings: Arc<RateSettings>,
    on_rejection: Arc<R>,
}

impl<S, K, Q, R> RateLimitService<S, K, Q, R> {
    pub(crate) fn new(
        inner: S,
        extractor: Arc<K>,
        quota: Arc<Q>,
        settings: Arc<RateSettings>,
        on_rejection: Arc<R>,
    ) -> Self {
        Self {
            inner,
            extractor,
            quota,
            settings,
            on_rejection,
        }
    }

    inner_service_accessors!();
}

/// What became of a request before its check: the limit's name, or the layer's answer (with
/// the outcome for the span), or `None` to let it through without a limit.
enum Named {
    Limit(String),
    Reject(Rejection, &'static str),
    PassThrough,
}

impl<S, K, Q, R, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S, K, Q, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    K: KeyExtractor<ReqBody>,
    Q: QuotaPolicy<ReqBody>,
    R: OnRejection<ResBody>,
    ResBody: Body,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = RateLimitFuture<S, ReqBody, ResBody, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let (settings, on_rejection) = (self.settings.clone(), self.on_rejection.clone());
        let span = tracing::info_span!(
            "rate_limit",
            family = %settings.keys.rules.prefix,
            key = Empty,
            outcome = Empty,
            remaining = Empty,
        );
        let kept = || Deferred::new(settings.clone(), on_rejection.clone(), span.clone());
        let reject = |rejection, outcome| {
            span.record("outcome", outcome);
            RateLimitFuture::rejected(rejection, kept())
        };
        let name = match self.name(&mut request, &span) {
            Named::Limit(name) => name,
            Named::Reject(rejection, outcome) => return reject(rejection, outcome),
            Named::PassThrough => {
                span.record("outcome", "no_key");
                let future = span.in_scope(|| self.inner.call(request));
                return RateLimitFuture::unlimited(future, kept());
            }
        };
        let quota = self.quota.quota(&request);
        if let Err(error) = quota.check() {
            tracing::error!(parent: &span, %error, %quota, "the rate limit's quota cannot work");
            return reject(
                Rejection::misconfigured(error).by_rate_limit_layer(),
                "error",
            );
        }
        let limit = settings.client.rate_limit(name).quota(quota);
        let bound = settings.check_timeout;
        let local = settings.local.clone();
        let check = async move {
            let checked = match bound {
                None => limit.check().await,
                Some(bound) => tokio::time::timeout(bound, limit.check())
                    .await
                    .unwrap_or(Err(LockError::ResponseTimeout(bound))),
            };
            match (checked, local) {
                (Err(error), Some(local)) if error.is_unavailable() => {
                    tracing::debug!(%error,
                        "rate limit store unavailable; decided by this instance");
                    local.check(limit.name(), quota)
                }
                (checked, _) => checked,
            }
        };
        let check = Box::pin(check.instrument(span.clone()));
        // The ready service goes into the future; this one keeps a clone that has not been
        // polled (tower-service: "Be careful when cloning inner services").
        let clone = self.inner.clone();
        let inner = mem::replace(&mut self.inner, clone);
        RateLimitFuture::checking(check, (inner, request), kept())
    }
}

impl<S, K, Q, R> RateLimitService<S, K, Q, R> {
    /// The name of `request`'s limit: the prefix and its key, with the layer's rules for
    /// bad settings, missing keys and bad keys.
    fn name<B>(&self, request: &mut Request<B>, span: &Span) -> Named
    where
        K: KeyExtractor<B>,
    {
        let settings = &self.settings;
        if let Some(error) = settings.keys.invalid() {
            tracing::error!(parent: span, %error, "the rate-limit layer is misconfigured");
            let rejection = Rejection::misconfigured(error).by_rate_limit_layer();
            return Named::Reject(rejection, "error");
        }
        let Some(key) = self.extractor.extract_mut(request) else {
            if settings.keys.missing_key == MissingKey::PassThrough {
                return Named::PassThrough;
            }
            if let Some(mismatch) = self.extractor.route_mismatch(request) {
                if settings.keys.mismatched_routes.first(mismatch.route()) {
                    tracing::error!(
                        parent: span,
                        parameter = mismatch.parameter(),
                        route = mismatch.route(),
                        "the rate-limit layer's key is not in this route: {mismatch}; every \
                         request of the route is answered 500 (logged once per route)"
                    );
                }
                let rejection = Rejection::key_not_in_route().by_rate_limit_layer();
                return Named::Reject(rejection, "error");
            }
            let rejection = Rejection::new(
                RejectionKind::MissingKey,
                StatusCode::BAD_REQUEST,
                "the request does not say whose rate limit applies",
            );
            return Named::Reject(rejection.by_rate_limit_layer(), "missing_key");
        };
        match lock_name(&settings.keys.rules, &key) {
            Ok(name) => {
                span.record("key", tracing::field::display(shorten(&name)));
                Named::Limit(name)
            }
            Err(reason) => {
                span.record("key", tracing::field::display(shorten(&key)));
                tracing::debug!(parent: span, reason, "invalid rate-limit key");
                let rejection = Rejection::invalid_key(&reason).by_rate_limit_layer();
                Named::Reject(rejection, "invalid_key")
            }
        }
    }
}

impl<S: Clone, K, Q, R> Clone for RateLimitService<S, K, Q, R> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            extractor: self.extractor.clone(),
            quota: self.quota.clone(),
            settings: self.settings.clone(),
            on_rejection: self.on_rejection.clone(),
        }
    }
}

impl<S: fmt::Debug, K, Q, R> fmt::Debug for RateLimitService<S, K, Q, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("extractor", &std::any::type_name::<K>())
            .field("quota", &std::any::type_name::<Q>())
            .field("settings", &self.settings)
            .field("on_rejection", &std::any::type_name::<R>())
            .finish()
    }
}
