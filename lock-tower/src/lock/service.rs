//! [`DistributedLock`]: the service that takes the lock before calling the inner one.

use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use tower::Service;
use tracing::field::Empty;

use super::acquire::Acquire;
use super::future::ResponseFuture;
use super::settings::Settings;
use crate::body::ResponseBody;
use crate::deferred::Deferred;
use crate::keyed::extract::KeyExtractor;
use crate::keyed::request::name_request;
use crate::macros::{common_impls, inner_service_accessors};
use crate::response::{DefaultRejection, OnRejection};

/// Middleware that holds a Redis lock, named after a key from each request, while the inner
/// service handles the request and its response body is sent.
///
/// Built by [`DistributedLockLayer`](crate::DistributedLockLayer); see the [crate docs](crate)
/// for the behaviour.
///
/// Readiness is the inner service's: nothing is reserved in `poll_ready`, because the lock
/// depends on the request. The lock is taken in the response future, after which the inner
/// service (the ready one, swapped out for a clone) is called. Under axum every service is
/// always ready, so this only matters for capacity-reserving layers placed *inside* this one:
/// their reservation is held while the request waits for the lock.
pub struct DistributedLock<S, K, R = DefaultRejection> {
    inner: S,
    extractor: Arc<K>,
    settings: Arc<Settings>,
    on_rejection: Arc<R>,
}

impl<S, K, R> DistributedLock<S, K, R> {
    pub(crate) fn new(
        inner: S,
        extractor: Arc<K>,
        settings: Arc<Settings>,
        on_rejection: Arc<R>,
    ) -> Self {
        Self {
            inner,
            extractor,
            settings,
            on_rejection,
        }
    }

    inner_service_accessors!();
}

impl<S, K, R, ReqBody, ResBody> Service<Request<ReqBody>> for DistributedLock<S, K, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    K: KeyExtractor<ReqBody>,
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
            "distributed_lock",
            key = Empty,
            outcome = Empty,
            wait_ms = Empty,
            held_ms = Empty,
            lost = Empty,
        );
        let kept = Deferred::new(self.settings.clone(), self.on_rejection.clone(), span);
        let extractor = &*self.extractor;
        name_request(
            extractor,
            &mut self.inner,
            request,
            kept,
            |inner, name, request, kept| {
                // The ready service goes into the future; this one keeps a clone that has not
                // been polled (tower-service: "Be careful when cloning inner services").
                let clone = inner.clone();
                let ready = mem::replace(inner, clone);
                let acquire = Acquire::start(kept.settings(), name, request.method(), kept.span());
                ResponseFuture::acquiring(acquire, ready, request, kept)
            },
        )
    }
}

common_impls!(service DistributedLock, extractor);
