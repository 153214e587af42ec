//! [`ResponseFuture`]: prepares the request, runs the handler under the key's lock, then
//! stores its response.
//!
//! A small state machine, as the lock layer's: `poll` dispatches to one function per state.
//!
//! ```text
//! Preparing ──▶ Running ──▶ Finishing ──▶ (the handler's response, stored)
//!    │  │          │  └──▶ (not locked: the response as it is)
//!    │  └──▶ (a replay)  │
//!    └──────▶ Rejected ◀─┴── (lock lost: Abort)
//! ```

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use tower::Service;
use tracing::{Instrument, Span};

use super::config::{IDEMPOTENT_REPLAYED, Settings};
use super::context::KeyLock;
use super::finish::{Finished, finish};
use super::prepare::Prepared;
use super::record::Record;
use super::rejection;
use crate::body::ResponseBody;
use crate::config::LeaseLost;
use crate::rejection::Rejection;
use crate::response::{OnRejection, answer};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

pin_project! {
    /// Response future of [`Idempotent`](crate::Idempotent).
    ///
    /// It reads the request body, replays a stored response or takes the key's lock, calls
    /// the inner service with the [`Idempotency`](crate::Idempotency) and the
    /// [`HeldLock`](lock_core::HeldLock) in the request's extensions, stores its response and
    /// gives the lock back. Dropping it at any point gives the lock back (in the background)
    /// and stores nothing.
    pub struct ResponseFuture<S, ReqBody, ResBody, R>
    where
        S: Service<Request<ReqBody>>,
        ResBody: Body,
    {
        #[pin]
        state: State<S::Future, ReqBody, ResBody>,
        service: Option<S>,
        settings: Arc<Settings>,
        on_rejection: Arc<R>,
        span: Span,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, Q, B>
    where
        B: Body,
    {
        // Answered by the layer itself.
        Rejected { rejection: Option<Rejection> },
        // Reading the body, looking the record up, taking the lock.
        Preparing { future: BoxFuture<Prepared<Q>> },
        // The inner service runs (under the key's lock, unless `held` is `None`).
        Running { #[pin] future: F, held: Option<KeyLock> },
        // Storing the response and giving the lock back.
        Finishing { future: BoxFuture<Finished<B>> },
        Done,
    }
}

/// What a state's poll came to.
// Made once per step and matched at once: no use boxing the response.
#[allow(clippy::large_enum_variant)]
enum Step<F, Q, B: Body, E> {
    /// Go on in this state.
    Next(State<F, Q, B>),
    /// The response future's output.
    Ready(Result<Response<ResponseBody<B>>, E>),
}

/// How a request's future starts.
pub(crate) enum Start<S: Service<Request<Q>>, Q> {
    /// Answered by the layer at once.
    Rejected(Rejection),
    /// Without a key: the inner service's future, as it is.
    Unlocked(S::Future),
    /// With a key: preparing, then the ready inner service.
    Preparing(BoxFuture<Prepared<Q>>, S),
}

impl<S, ReqBody, ResBody, R> ResponseFuture<S, ReqBody, ResBody, R>
where
    S: Service<Request<ReqBody>>,
    ResBody: Body,
{
    pub(crate) fn new(
        start: Start<S, ReqBody>,
        settings: Arc<Settings>,
        on_rejection: Arc<R>,
        span: Span,
    ) -> Self {
        let (state, service) = match start {
            Start::Rejected(rejection) => (
                State::Rejected {
                    rejection: Some(rejection),
                },
                None,
            ),
            Start::Unlocked(future) => (State::Running { future, held: None }, None),
            Start::Preparing(future, service) => (State::Preparing { future }, Some(service)),
        };
        Self {
            state,
            service,
            settings,
            on_rejection,
            span,
        }
    }
}

impl<S, ReqBody, ResBody, R> Future for ResponseFuture<S, ReqBody, ResBody, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    R: OnRejection<ResBody>,
    ResBody: Body + Send + 'static,
    ResBody::Data: From<Bytes> + Send,
    ResBody::Error: Send,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let _entered = this.span.enter();
        loop {
            let step = match this.state.as_mut().project() {
                StateProj::Rejected { rejection } => {
                    Step::Ready(Ok(answer(rejection, &**this.on_rejection)))
                }
                StateProj::Preparing { future } => {
                    let prepared = ready!(future.as_mut().poll(cx));
                    let service = this.service.take().expect("service taken twice");
                    call(prepared, service, this.span)
                }
                StateProj::Running { future, held } => {
                    ready!(running(future, held, this.settings, this.span, cx))
                }
                StateProj::Finishing { future } => {
                    let finished = ready!(future.as_mut().poll(cx));
                    match finished {
                        Finished::Respond(response) => Step::Ready(Ok(response)),
                        Finished::Reject(rejection) => Step::Next(State::Rejected {
                            rejection: Some(rejection),
                        }),
                    }
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            };
            match step {
                Step::Next(state) => this.state.set(state),
                Step::Ready(output) => {
                    this.state.set(State::Done);
                    return Poll::Ready(output);
                }
            }
        }
    }
}

/// After preparing: replays, rejects, or calls the inner service (under the lock, or failing
/// open without it).
fn call<S, ReqBody, B>(
    prepared: Prepared<ReqBody>,
    mut service: S,
    span: &Span,
) -> Step<S::Future, ReqBody, B, S::Error>
where
    S: Service<Request<ReqBody>>,
    B: Body,
{
    let (request, held) = match prepared {
        Prepared::Reject(rejection) => {
            return Step::Next(State::Rejected {
                rejection: Some(rejection),
            });
        }
        Prepared::Replay(record) => return Step::Ready(Ok(replay(&record))),
        Prepared::Pass(request) => (request, None),
        Prepared::Run(request, held) => (request, Some(held)),
    };
    let future = span.in_scope(|| service.call(request));
    Step::Next(State::Running { future, held })
}

/// The response of a stored record, marked as a replay.
fn replay<B: Body>(record: &Record) -> Response<ResponseBody<B>> {
    let (mut parts, body) = record.to_response::<Bytes>().into_parts();
    parts
        .headers
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    Response::from_parts(parts, ResponseBody::full(body))
}

/// The inner service runs: its response goes on to be stored, or out as it is (unlocked), or
/// the request is aborted when the lock is lost.
fn running<F, Q, B, E>(
    future: Pin<&mut F>,
    held: &mut Option<KeyLock>,
    settings: &Arc<Settings>,
    span: &Span,
    cx: &mut Context<'_>,
) -> Poll<Step<F, Q, B, E>>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body + Send + 'static,
    B::Data: From<Bytes> + Send,
    B::Error: Send,
{
    let abort = settings.lease_lost == LeaseLost::Abort;
    // Dropping the state cancels the handler at its current `.await`; the lock is released in
    // the background and nothing is stored.
    let lost = || {
        span.record("outcome", "lost");
        tracing::warn!("the idempotency lock was lost while the request ran");
        Poll::Ready(Step::Next(State::Rejected {
            rejection: Some(rejection::lost(settings)),
        }))
    };
    if abort && held.as_ref().is_some_and(KeyLock::is_lost) {
        return lost();
    }
    let response = match future.poll(cx) {
        Poll::Ready(Ok(response)) => response,
        // The handler failed: nothing is stored; the lock goes with `held`.
        Poll::Ready(Err(error)) => return Poll::Ready(Step::Ready(Err(error))),
        Poll::Pending => {
            if abort
                && held
                    .as_mut()
                    .is_some_and(|held| held.poll_lost(cx).is_ready())
            {
                return lost();
            }
            return Poll::Pending;
        }
    };
    let Some(held) = held.take() else {
        return Poll::Ready(Step::Ready(Ok(response.map(ResponseBody::new))));
    };
    let finishing = finish(response, held, settings.clone(), span.clone()).instrument(span.clone());
    Poll::Ready(Step::Next(State::Finishing {
        future: Box::pin(finishing),
    }))
}

impl<S, ReqBody, ResBody, R> fmt::Debug for ResponseFuture<S, ReqBody, ResBody, R>
where
    S: Service<Request<ReqBody>>,
    ResBody: Body,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Rejected { .. } => "rejected",
            State::Preparing { .. } => "preparing",
            State::Running { held: Some(_), .. } => "running locked",
            State::Running { held: None, .. } => "running unlocked",
            State::Finishing { .. } => "finishing",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}
