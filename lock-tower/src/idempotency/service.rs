//! [`Idempotent`]: the service that answers a request with a key once, and replays the
//! answer to its retries.

use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower::Service;
use tracing::Instrument;
use tracing::field::Empty;

use super::config::Settings;
use super::context::Ask;
use super::future::{ResponseFuture, Start};
use super::key::{parse_key, record_name, scope_problem};
use super::prepare::prepare;
use super::rejection;
use crate::body::{BoxError, ResponseBody};
use crate::keyed::extract::{KeyExtractor, shorten};
use crate::macros::{common_impls, inner_service_accessors};
use crate::rejection::Rejection;
use crate::response::{DefaultRejection, OnRejection};

/// Middleware that runs each request with an idempotency key once and answers its retries
/// with the stored response: see [`IdempotencyLayer`](crate::IdempotencyLayer), which builds
/// it, and the [module docs](crate::idempotency) for the behaviour.
///
/// Readiness is the inner service's; the ready service is swapped out for a clone in `call`,
/// as in [`DistributedLock`](crate::DistributedLock).
pub struct Idempotent<S, Sc, R = DefaultRejection> {
    inner: S,
    scope: Arc<Sc>,
    settings: Arc<Settings>,
    on_rejection: Arc<R>,
}

impl<S, Sc, R> Idempotent<S, Sc, R> {
    pub(crate) fn new(
        inner: S,
        scope: Arc<Sc>,
        settings: Arc<Settings>,
        on_rejection: Arc<R>,
    ) -> Self {
        Self {
            inner,
            scope,
            settings,
            on_rejection,
        }
    }

    inner_service_accessors!();
}

impl<S, Sc, R, ReqBody, ResBody> Service<Request<ReqBody>> for Idempotent<S, Sc, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    Sc: KeyExtractor<ReqBody>,
    R: OnRejection<ResBody>,
    ReqBody: Body + From<Bytes> + Send + 'static,
    ReqBody::Data: Send,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body + Send + 'static,
    ResBody::Data: From<Bytes> + Send,
    ResBody::Error: Send,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody, ResBody, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let (settings, on_rejection) = (self.settings.clone(), self.on_rejection.clone());
        let span = tracing::info_span!("idempotency", key = Empty, outcome = Empty, token = Empty);
        let ask = match self.ask(&mut request) {
            Ok(Some(ask)) => ask,
            Ok(None) => {
                span.record("outcome", "no_key");
                let future = span.in_scope(|| self.inner.call(request));
                return ResponseFuture::new(Start::Unlocked(future), settings, on_rejection, span);
            }
            Err(refused) => {
                let (rejection, outcome) = *refused;
                span.record("outcome", outcome);
                let start = Start::Rejected(rejection);
                return ResponseFuture::new(start, settings, on_rejection, span);
            }
        };
        span.record("key", tracing::field::display(shorten(&ask.record_key)));
        // The ready service goes into the future; this one keeps a clone that has not been
        // polled (tower-service: "Be careful when cloning inner services").
        let clone = self.inner.clone();
        let inner = mem::replace(&mut self.inner, clone);
        let prepare =
            prepare(request, ask, settings.clone(), span.clone()).instrument(span.clone());
        let start = Start::Preparing(Box::pin(prepare), inner);
        ResponseFuture::new(start, settings, on_rejection, span)
    }
}

/// A request refused before it is prepared, with its span's outcome.
type Refused = Box<(Rejection, &'static str)>;

impl<S, Sc, R> Idempotent<S, Sc, R> {
    /// The request's key, scope and record key; `None` when it has no key and needs none; or
    /// the rejection (and the span's outcome) when they cannot be had.
    fn ask<B>(&self, request: &mut Request<B>) -> Result<Option<Ask>, Refused>
    where
        Sc: KeyExtractor<B>,
    {
        let settings = &self.settings;
        if let Some(error) = settings.invalid() {
            tracing::error!(%error, "the idempotency layer is misconfigured");
            return Err(Box::new((rejection::misconfigured(error), "error")));
        }
        let mut values = request.headers().get_all(&settings.header).iter();
        let key = match (values.next(), values.next()) {
            (None, _) if settings.required.contains(request.method()) => {
                return Err(Box::new((
                    rejection::key_missing(&settings.header),
                    "missing_key",
                )));
            }
            (None, _) => return Ok(None),
            (Some(_), Some(_)) => {
                let sent_twice = rejection::key_invalid("the header is sent more than once");
                return Err(Box::new((sent_twice, "invalid_key")));
            }
            (Some(value), None) => parse_key(value.as_bytes())
                .map_err(|reason| Box::new((rejection::key_invalid(reason), "invalid_key")))?,
        };
        let scope = if settings.scoped {
            let scope = self.scope.extract_mut(request).filter(|s| !s.is_empty());
            let scope =
                scope.ok_or_else(|| Box::new((rejection::scope_missing(), "missing_scope")))?;
            if let Some(reason) = scope_problem(&scope) {
                return Err(Box::new((rejection::scope_invalid(reason), "invalid_key")));
            }
            Some(scope)
        } else {
            None
        };
        let record_key =
            record_name(&settings.prefix, scope.as_deref(), &key).map_err(|reason| {
                let error = lock_core::LockError::InvalidOption {
                    option: "prefix",
                    reason,
                };
                (rejection::misconfigured(error), "error")
            })?;
        Ok(Some(Ask {
            key,
            scope,
            record_key,
        }))
    }
}

common_impls!(service Idempotent, scope);
