//! [`ResponseFuture`]: waits for the rate limit's decision, then runs the inner service or
//! answers the request itself.
//!
//! ```text
//! Checking ──▶ Running ──▶ (the inner service's response, with the RateLimit fields)
//!    │
//!    └──▶ Rejected ──▶ (429 with the RateLimit fields, 503, 500 ...)
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use http_body::Body;
use lock_core::{LockError, RateDecision};
use pin_project_lite::pin_project;
use tower::Service;
use tracing::Span;

use crate::body::ResponseBody;
use crate::deferred::Deferred;
use crate::keyed::decision::refuse;
use crate::keyed::request::KeyedFuture;
use crate::rate::config::RateSettings;
use crate::rate::headers::insert_fields;
use crate::rejection::Rejection;
use crate::response::{OnRejection, answer};

/// A check of a request's rate limit under way.
pub(crate) type Check = Pin<Box<dyn Future<Output = Result<RateDecision, LockError>> + Send>>;

/// What the rate-limit future keeps beside its state (see [`Deferred`]).
pub(crate) type Kept<S, ReqBody, R> = Deferred<S, Request<ReqBody>, RateSettings, R>;

pin_project! {
    /// Response future of [`RateLimit`](super::RateLimit).
    ///
    /// It takes one permit of the request's rate limit (one call to the store, bounded by
    /// the client's response timeout), then calls the inner service and adds the
    /// `RateLimit-Policy` and `RateLimit` fields to its response, or answers the request
    /// itself (`429` with the same fields, `503`, `500`, ...).
    pub struct ResponseFuture<S, ReqBody, ResBody, R>
    where
        S: Service<Request<ReqBody>>,
    {
        #[pin]
        state: State<S::Future>,
        kept: Kept<S, ReqBody, R>,
        body: PhantomData<fn() -> ResBody>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // Answered by the layer itself (with the decision's fields, when there is one).
        Rejected { rejection: Option<Rejection>, decision: Option<RateDecision> },
        // Taking a permit.
        Checking { check: Check },
        // The inner service runs (with the decision's fields to add, unless it runs without
        // a decision: failing open, or a request without a key let through).
        Running { #[pin] future: F, decision: Option<RateDecision> },
        Done,
    }
}

impl<S, ReqBody, ResBody, R> ResponseFuture<S, ReqBody, ResBody, R>
where
    S: Service<Request<ReqBody>>,
{
    pub(crate) fn checking(
        check: Check,
        (service, request): (S, Request<ReqBody>),
        kept: Kept<S, ReqBody, R>,
    ) -> Self {
        let state = State::Checking { check };
        Self::with(state, kept.calling(service, request))
    }

    fn with(state: State<S::Future>, kept: Kept<S, ReqBody, R>) -> Self {
        Self {
            state,
            kept,
            body: PhantomData,
        }
    }
}

impl<S, ReqBody, ResBody, R> KeyedFuture<S, ReqBody, RateSettings, R>
    for ResponseFuture<S, ReqBody, ResBody, R>
where
    S: Service<Request<ReqBody>>,
{
    fn rejected(rejection: Rejection, kept: Kept<S, ReqBody, R>) -> Self {
        let state = State::Rejected {
            rejection: Some(rejection),
            decision: None,
        };
        Self::with(state, kept)
    }

    fn passed(future: S::Future, kept: Kept<S, ReqBody, R>) -> Self {
        let state = State::Running {
            future,
            decision: None,
        };
        Self::with(state, kept)
    }
}

impl<S, ReqBody, ResBody, R> Future for ResponseFuture<S, ReqBody, ResBody, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    R: OnRejection<ResBody>,
    ResBody: Body,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let (pending, settings, on_rejection, span) = this.kept.parts();
        let _entered = span.enter();
        loop {
            let next = match this.state.as_mut().project() {
                StateProj::Rejected {
                    rejection,
                    decision,
                } => {
                    let mut response = answer(rejection, on_rejection);
                    if let Some(decision) = decision {
                        insert_fields(response.headers_mut(), decision);
                    }
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(response));
                }
                StateProj::Checking { check } => {
                    let checked = ready!(check.as_mut().poll(cx));
                    let (service, request) =
                        pending.take().expect("service and request taken twice");
                    decide(checked, service, request, settings, span)
                }
                StateProj::Running { future, decision } => {
                    let output = ready!(future.poll(cx)).map(|response| {
                        let mut response = response.map(ResponseBody::new);
                        if let Some(decision) = decision {
                            insert_fields(response.headers_mut(), decision);
                        }
                        response
                    });
                    this.state.set(State::Done);
                    return Poll::Ready(output);
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            };
            this.state.set(next);
        }
    }
}

/// After the check: calls the inner service (allowed, or failing open), or rejects the
/// request. Records the outcome on the request's span and logs it: `debug` for an allowed
/// request, `warn` for one let through without a decision (failing open), `error` for a
/// misconfiguration; a rejection's own `info` event is [`Rejection::log`]'s.
fn decide<S, ReqBody>(
    checked: Result<RateDecision, LockError>,
    mut service: S,
    request: Request<ReqBody>,
    settings: &RateSettings,
    span: &Span,
) -> State<S::Future>
where
    S: Service<Request<ReqBody>>,
{
    let error = match checked {
        Ok(decision) => {
            span.record("remaining", decision.remaining());
            if !decision.is_allowed() {
                span.record("outcome", "limited");
                return State::Rejected {
                    rejection: Some(Rejection::rate_limited(decision.retry_after())),
                    decision: Some(decision),
                };
            }
            span.record("outcome", "allowed");
            tracing::debug!(remaining = decision.remaining(), "rate limit: allowed");
            let future = service.call(request);
            return State::Running {
                future,
                decision: Some(decision),
            };
        }
        Err(error) => error,
    };
    let rejection = Rejection::for_rate_limit_error(error, settings.keys.unavailable_retry_after);
    match refuse(rejection, settings, span) {
        None => State::Running {
            future: service.call(request),
            decision: None,
        },
        rejection => State::Rejected {
            rejection,
            decision: None,
        },
    }
}

impl<S, ReqBody, ResBody, R> fmt::Debug for ResponseFuture<S, ReqBody, ResBody, R>
where
    S: Service<Request<ReqBody>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Rejected { .. } => "rejected",
            State::Checking { .. } => "checking",
            State::Running { .. } => "running",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}
