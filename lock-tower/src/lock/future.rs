//! [`ResponseFuture`]: takes the lock, then runs the inner service while holding it.
//!
//! A small state machine (tower-http's style): `poll` dispatches to one function per state,
//! each of which either asks to be polled again later, moves to the next state, or finishes.
//!
//! ```text
//! Acquiring ──▶ Running ──▶ (response with a locked body, streaming)
//!    │            │  │
//!    │            │  ├──▶ Buffering ──▶ Releasing ──▶ (response, lock given back)
//!    │            │  └──────────────────▲
//!    └──▶ Rejected ◀── (lock lost: Abort)
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use http_body::{Body, Frame};
use lock_core::ReentrantScope;
use pin_project_lite::pin_project;
use tower::Service;
use tracing::Span;

use super::acquire::Acquire;
use super::decision::{Decision, decide};
use super::rejection;
use super::request_lock::RequestLock;
use super::settings::Settings;
use crate::body::{BodyHold, ResponseBody};
use crate::config::Release;
use crate::deferred::Deferred;
use crate::keyed::request::KeyedFuture;
use crate::rejection::Rejection;
use crate::response::{OnRejection, answer};

/// The largest response body (by its size hint's upper bound), 64 KiB, read in full under the
/// lock with [`Release::AfterBody`]; larger or unbounded bodies stream, keeping the lock until
/// their last frame.
pub const BUFFER_LIMIT: u64 = 64 * 1024;

/// What the lock layer's future keeps beside its state (see [`Deferred`]).
pub(crate) type Kept<S, ReqBody, R> = Deferred<S, Request<ReqBody>, Settings, R>;

pin_project! {
    /// Response future of [`DistributedLock`](crate::DistributedLock).
    ///
    /// It takes the lock (bounded by the layer's acquire timeout), calls the inner service
    /// with the [`HeldLock`](lock_core::HeldLock) in the request's extensions, and hands the
    /// lock on to the [`ResponseBody`] (or releases it first, with
    /// [`Release::AfterHandler`] or a small body). Dropping it at any point gives the lock
    /// back.
    pub struct ResponseFuture<S, ReqBody, ResBody, R>
    where
        S: Service<Request<ReqBody>>,
        ResBody: Body,
    {
        #[pin]
        state: State<S::Future, ResBody>,
        kept: Kept<S, ReqBody, R>,
        // The acquisition and the handler run as one lock holder, so the handler can re-enter
        // the request's lock and find it with `lock_core::current_lock`.
        scope: ReentrantScope,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B>
    where
        B: Body,
    {
        // Answered by the layer itself.
        Rejected { rejection: Option<Rejection> },
        // Taking the lock.
        Acquiring { acquire: Acquire },
        // The inner service runs (with the lock, unless `hold` is `None`).
        Running { #[pin] future: F, hold: Option<RequestLock> },
        // `Release::AfterBody` with a small body: reading it in full under the lock, so the
        // lock can be given back before the response goes out in one piece.
        Buffering { buffer: Option<Buffer<B>> },
        // Giving the lock back before handing the response on.
        Releasing { hold: RequestLock, response: Option<Response<ResponseBody<B>>> },
        Done,
    }
}

/// What a state's poll came to.
enum Step<F, B: Body, E> {
    /// Go on in this state.
    Next(State<F, B>),
    /// The response future's output.
    Ready(Result<Response<ResponseBody<B>>, E>),
}

impl<S, ReqBody, ResBody, R> ResponseFuture<S, ReqBody, ResBody, R>
where
    S: Service<Request<ReqBody>>,
    ResBody: Body,
{
    pub(crate) fn acquiring(
        acquire: Acquire,
        service: S,
        request: Request<ReqBody>,
        kept: Kept<S, ReqBody, R>,
    ) -> Self {
        let state = State::Acquiring { acquire };
        Self::with(state, kept.calling(service, request))
    }

    fn with(state: State<S::Future, ResBody>, kept: Kept<S, ReqBody, R>) -> Self {
        Self {
            state,
            kept,
            scope: ReentrantScope::current_or_new(),
        }
    }
}

impl<S, ReqBody, ResBody, R> KeyedFuture<S, ReqBody, Settings, R>
    for ResponseFuture<S, ReqBody, ResBody, R>
where
    S: Service<Request<ReqBody>>,
    ResBody: Body,
{
    fn rejected(rejection: Rejection, kept: Kept<S, ReqBody, R>) -> Self {
        let state = State::Rejected {
            rejection: Some(rejection),
        };
        Self::with(state, kept)
    }

    fn passed(future: S::Future, kept: Kept<S, ReqBody, R>) -> Self {
        Self::with(State::Running { future, hold: None }, kept)
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
            let step = match this.state.as_mut().project() {
                StateProj::Rejected { rejection } => {
                    Step::Ready(Ok(answer(rejection, on_rejection)))
                }
                StateProj::Acquiring { acquire } => {
                    let acquired = ready!(this.scope.enter(|| Pin::new(acquire).poll(cx)));
                    span.record("wait_ms", millis(acquired.waited));
                    let decision = decide(acquired.outcome, settings, span);
                    let (service, request) =
                        pending.take().expect("service and request taken twice");
                    Step::Next(call(decision, service, request, settings, this.scope, span))
                }
                StateProj::Running { future, hold } => {
                    ready!(running(future, hold, settings, this.scope, cx))
                }
                StateProj::Buffering { buffer } => ready!(buffering(buffer, settings, cx)),
                StateProj::Releasing { hold, response } => {
                    let released = ready!(hold.poll_release(cx));
                    if released.is_ok() || !hold.aborts_on_loss() {
                        Step::Ready(Ok(response.take().expect("response taken twice")))
                    } else {
                        // Redis says the lock was gone before the request gave it back: the
                        // response was made without it, so it is dropped unsent.
                        Step::Next(State::Rejected {
                            rejection: Some(rejection::lost(settings)),
                        })
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

/// After the acquisition: calls the inner service (with the lock, or failing open without
/// it), or rejects the request.
fn call<S, ReqBody, B: Body>(
    decision: Decision,
    mut service: S,
    mut request: Request<ReqBody>,
    settings: &Settings,
    scope: &ReentrantScope,
    span: &Span,
) -> State<S::Future, B>
where
    S: Service<Request<ReqBody>>,
{
    let guard = match decision {
        Decision::Run(guard) => guard,
        Decision::Reject(rejection) => {
            return State::Rejected {
                rejection: Some(rejection),
            };
        }
    };
    let hold = guard.map(|guard| {
        request.extensions_mut().insert(guard.held_lock());
        RequestLock::new(guard, settings, span.clone())
    });
    let future = scope.enter(|| service.call(request));
    State::Running { future, hold }
}

/// The inner service runs: hands its response on (with the lock in the body, or after
/// releasing it), or aborts it when the lock is lost.
fn running<F, B, E>(
    future: Pin<&mut F>,
    hold: &mut Option<RequestLock>,
    settings: &Settings,
    scope: &ReentrantScope,
    cx: &mut Context<'_>,
) -> Poll<Step<F, B, E>>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body,
{
    // Dropping the state cancels the handler at its current `.await` (and drops a response it
    // made after the loss); the hold drops with it and the lock is released in the background.
    let lost = || {
        Poll::Ready(Step::Next(State::Rejected {
            rejection: Some(rejection::lost(settings)),
        }))
    };
    // The loss first: a handler that is ready in the same poll in which its lease is found to
    // have run out (its runtime or process stalled past the lease) did not run under the lock.
    if hold.as_mut().is_some_and(BodyHold::check_lost) {
        return lost();
    }
    let response = match scope.enter(|| future.poll(cx)) {
        Poll::Ready(Ok(response)) => response,
        Poll::Ready(Err(error)) => return Poll::Ready(Step::Ready(Err(error))),
        Poll::Pending => {
            if hold
                .as_mut()
                .is_some_and(|hold| hold.poll_lost(cx).is_ready())
            {
                return lost();
            }
            return Poll::Pending;
        }
    };
    // ... and again once the response is ready: it is accepted only under a valid lock.
    if hold.as_mut().is_some_and(BodyHold::check_lost) {
        return lost();
    }
    let Some(hold) = hold.take() else {
        return Poll::Ready(Step::Ready(Ok(response.map(ResponseBody::new))));
    };
    let small = response
        .body()
        .size_hint()
        .upper()
        .is_some_and(|upper| upper <= BUFFER_LIMIT);
    Poll::Ready(match settings.release {
        Release::AfterHandler => Step::Next(State::Releasing {
            hold,
            response: Some(response.map(ResponseBody::new)),
        }),
        Release::AfterBody if small => {
            let (parts, body) = response.into_parts();
            Step::Next(State::Buffering {
                buffer: Some(Buffer {
                    hold,
                    parts,
                    body: Box::pin(body),
                    frames: VecDeque::new(),
                    error: None,
                }),
            })
        }
        Release::AfterBody => {
            Step::Ready(Ok(response.map(|body| ResponseBody::locked(body, hold))))
        }
    })
}

/// A small body is read in full under the lock; then the lock is given back.
fn buffering<F, B: Body, E>(
    buffer: &mut Option<Buffer<B>>,
    settings: &Settings,
    cx: &mut Context<'_>,
) -> Poll<Step<F, B, E>> {
    let read = buffer.as_mut().expect("buffer taken twice");
    // Nothing has gone out yet: a loss is answered as for a handler that lost it, whether it
    // comes while the body is read or is found once it has been.
    let lost = || {
        Poll::Ready(Step::Next(State::Rejected {
            rejection: Some(rejection::lost(settings)),
        }))
    };
    if read.hold.check_lost() {
        return lost();
    }
    if read.poll_read(cx).is_pending() {
        if read.hold.poll_lost(cx).is_ready() {
            return lost();
        }
        return Poll::Pending;
    }
    if read.hold.check_lost() {
        return lost();
    }
    let Buffer {
        hold,
        parts,
        frames,
        error,
        ..
    } = buffer.take().expect("buffer taken twice");
    let response = Response::from_parts(parts, ResponseBody::buffered(frames, error));
    Poll::Ready(Step::Next(State::Releasing {
        hold,
        response: Some(response),
    }))
}

/// A small response body read in full while the lock is held.
struct Buffer<B: Body> {
    hold: RequestLock,
    parts: http::response::Parts,
    body: Pin<Box<B>>,
    frames: VecDeque<Frame<B::Data>>,
    error: Option<B::Error>,
}

impl<B: Body> Buffer<B> {
    /// Reads the body to its end (or its first error).
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match ready!(self.body.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => self.frames.push_back(frame),
                Some(Err(e)) => {
                    self.error = Some(e);
                    return Poll::Ready(());
                }
                None => return Poll::Ready(()),
            }
        }
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl<S, ReqBody, ResBody, R> fmt::Debug for ResponseFuture<S, ReqBody, ResBody, R>
where
    S: Service<Request<ReqBody>>,
    ResBody: Body,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Rejected { .. } => "rejected",
            State::Acquiring { .. } => "acquiring",
            State::Running { hold: Some(_), .. } => "running locked",
            State::Running { hold: None, .. } => "running unlocked",
            State::Buffering { .. } => "reading the body",
            State::Releasing { .. } => "releasing",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}
