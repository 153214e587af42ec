//! [`RateLimit`]: the service that takes a permit of the request's rate limit before
//! calling the inner one.

use std::fmt;
use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use lock_core::{LockError, Quota};
use tower::Service;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::body::ResponseBody;
use crate::deferred::Deferred;
use crate::keyed::extract::KeyExtractor;
use crate::keyed::request::{KeyedFuture, name_request};
use crate::macros::inner_service_accessors;
use crate::rate::config::RateSettings;
use crate::rate::future::{Check, ResponseFuture};
use crate::rate::quota::QuotaPolicy;
use crate::rejection::Rejection;
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
pub struct RateLimit<S, K, Q, R = DefaultRejection> {
    inner: S,
    extractor: Arc<K>,
    quota: Arc<Q>,
    settings: Arc<RateSettings>,
    on_rejection: Arc<R>,
}

impl<S, K, Q, R> RateLimit<S, K, Q, R> {
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

impl<S, K, Q, R, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, K, Q, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    K: KeyExtractor<ReqBody>,
    Q: QuotaPolicy<ReqBody>,
    R: OnRejection<ResBody>,
    ResBody: Body,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody, ResBody, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let span = tracing::info_span!(
            "rate_limit",
            family = %self.settings.keys.rules.prefix,
            key = Empty,
            outcome = Empty,
            remaining = Empty,
        );
        let kept = Deferred::new(self.settings.clone(), self.on_rejection.clone(), span);
        let (extractor, quota) = (&*self.extractor, &self.quota);
        name_request(
            extractor,
            &mut self.inner,
            request,
            kept,
            |inner, name, request, kept| {
                let quota = quota.quota(&request);
                let span = kept.span();
                if let Err(error) = quota.check() {
                    tracing::error!(parent: span, %error, %quota, "the rate limit's quota cannot work");
                    span.record("outcome", "error");
                    let rejection = Rejection::misconfigured(error).by_rate_limit_layer();
                    return ResponseFuture::rejected(rejection, kept);
                }
                let check = check(kept.settings(), name, quota, span);
                // The ready service goes into the future; this one keeps a clone that has not
                // been polled (tower-service: "Be careful when cloning inner services").
                let clone = inner.clone();
                let ready = mem::replace(inner, clone);
                ResponseFuture::checking(check, (ready, request), kept)
            },
        )
    }
}

/// The check of the limit `name` with `quota`: one call to the store, bounded by the layer's
/// `check_timeout` when it has one, and decided by this instance while the store is
/// unavailable when the layer fails locally.
fn check(settings: &RateSettings, name: String, quota: Quota, span: &Span) -> Check {
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
    Box::pin(check.instrument(span.clone()))
}

impl<S: Clone, K, Q, R> Clone for RateLimit<S, K, Q, R> {
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

impl<S: fmt::Debug, K, Q, R> fmt::Debug for RateLimit<S, K, Q, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("extractor", &std::any::type_name::<K>())
            .field("quota", &std::any::type_name::<Q>())
            .field("settings", &self.settings)
            .field("on_rejection", &std::any::type_name::<R>())
            .finish()
    }
}
