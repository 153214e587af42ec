//! [`ResponseFuture`]: takes the lock, then runs the inner service while holding it.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{Request, Response};
use http_body::{Body, Frame};
use lock_core::{LockError, LockGuard, ReentrantScope};
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower::Service;
use tracing::{Instrument, Span};

use crate::body::ResponseBody;
use crate::hold::Hold;
use crate::layer::{FailMode, LeaseLost, Release, Settings};
use crate::response::{OnRejection, Rejection, RejectionKind};

pin_project! {
    /// Response future of [`DistributedLock`](crate::DistributedLock).
    ///
    /// It takes the lock (bounded by the layer's acquire timeout), calls the inner service
    /// with the [`HeldLock`](lock_core::HeldLock) in the request's extensions, and hands the
    /// lock on to the [`ResponseBody`] (or releases it first, with
    /// [`Release::AfterHandler`]). Dropping it at any point gives the lock back.
    pub struct ResponseFuture<S, ReqBody, ResBody, R>
    where
        S: Service<Request<ReqBody>>,
        ResBody: Body,
    {
        #[pin]
        state: State<S::Future, S::Response, ResBody>,
        service: Option<S>,
        request: Option<Request<ReqBody>>,
        settings: Arc<Settings<R>>,
        span: Span,
        // The acquisition and the handler run as one lock holder, so the handler can re-enter
        // the request's lock and find it with `lock_core::current_lock`.
        scope: ReentrantScope,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, T, B>
    where
        B: Body,
    {
        // Answered by the layer itself.
        Rejected { rejection: Option<Rejection> },
        // Taking the lock.
        Acquiring { acquire: Acquire },
        // The inner service runs (with the lock, unless `hold` is `None`).
        Running { #[pin] future: F, hold: Option<Hold> },
        // `Release::AfterHandler`: giving the lock back before handing the response on.
        Releasing { hold: Hold, response: Option<T> },
        // `Release::AfterBody` with a small body: reading it in full under the lock, so the
        // lock can be given back before the response goes out in one piece.
        Buffering { buffer: Option<Buffer<B>> },
        // Then giving the lock back.
        ReleasingBuffered { buffer: Option<Buffer<B>> },
        Done,
    }
}

/// A small response body read in full while the lock is held.
struct Buffer<B: Body> {
    hold: Hold,
    parts: http::response::Parts,
    body: Pin<Box<B>>,
    frames: VecDeque<Frame<B::Data>>,
    error: Option<B::Error>,
}

/// The largest response body (by its size hint's upper bound) read in full under the lock
/// with [`Release::AfterBody`]; larger or unbounded bodies stream, keeping the lock until
/// their last frame.
pub const BUFFER_LIMIT: u64 = 64 * 1024;

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

    fn into_response(self) -> Response<ResponseBody<B>> {
        Response::from_parts(self.parts, ResponseBody::buffered(self.frames, self.error))
    }
}

impl<S, ReqBody, ResBody, R> ResponseFuture<S, ReqBody, ResBody, R>
where
    S: Service<Request<ReqBody>>,
    ResBody: Body,
{
    pub(crate) fn rejected(rejection: Rejection, settings: Arc<Settings<R>>, span: Span) -> Self {
        Self::with_state(
            State::Rejected {
                rejection: Some(rejection),
            },
            settings,
            span,
        )
    }

    pub(crate) fn unlocked(future: S::Future, settings: Arc<Settings<R>>, span: Span) -> Self {
        Self::with_state(State::Running { future, hold: None }, settings, span)
    }

    pub(crate) fn acquiring(
        acquire: Acquire,
        service: S,
        request: Request<ReqBody>,
        settings: Arc<Settings<R>>,
        span: Span,
    ) -> Self {
        Self {
            state: State::Acquiring { acquire },
            service: Some(service),
            request: Some(request),
            settings,
            span,
            scope: ReentrantScope::current_or_new(),
        }
    }

    fn with_state(
        state: State<S::Future, S::Response, ResBody>,
        settings: Arc<Settings<R>>,
        span: Span,
    ) -> Self {
        Self {
            state,
            service: None,
            request: None,
            settings,
            span,
            scope: ReentrantScope::current_or_new(),
        }
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
        let _entered = this.span.enter();
        loop {
            match this.state.as_mut().project() {
                StateProj::Rejected { rejection } => {
                    let rejection = rejection
                        .take()
                        .expect("ResponseFuture polled after completion");
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(this.settings.on_rejection.on_rejection(rejection)));
                }
                StateProj::Acquiring { acquire } => {
                    let acquired =
                        ready!(this.scope.enter(|| Pin::new(&mut acquire.future).poll(cx)));
                    let guard = match acquired.decide(this.settings, this.span) {
                        Ok(guard) => guard,
                        Err(rejection) => {
                            this.state.set(State::Rejected {
                                rejection: Some(rejection),
                            });
                            continue;
                        }
                    };
                    let mut request = this.request.take().expect("request taken twice");
                    let hold = guard.map(|guard| {
                        request.extensions_mut().insert(guard.handle());
                        let watch_lost = this.settings.lease_lost == LeaseLost::Abort;
                        Hold::new(guard, watch_lost, this.span.clone())
                    });
                    let mut service = this.service.take().expect("service taken twice");
                    let future = this.scope.enter(|| service.call(request));
                    this.state.set(State::Running { future, hold });
                }
                StateProj::Running { future, hold } => match this.scope.enter(|| future.poll(cx)) {
                    Poll::Ready(Ok(response)) => match (hold.take(), this.settings.release) {
                        (Some(hold), Release::AfterHandler) => this.state.set(State::Releasing {
                            hold,
                            response: Some(response),
                        }),
                        (Some(hold), Release::AfterBody)
                            if response
                                .body()
                                .size_hint()
                                .upper()
                                .is_some_and(|upper| upper <= BUFFER_LIMIT) =>
                        {
                            let (parts, body) = response.into_parts();
                            this.state.set(State::Buffering {
                                buffer: Some(Buffer {
                                    hold,
                                    parts,
                                    body: Box::pin(body),
                                    frames: VecDeque::new(),
                                    error: None,
                                }),
                            });
                        }
                        (hold, _) => {
                            this.state.set(State::Done);
                            let response = response.map(|body| match hold {
                                Some(hold) => ResponseBody::locked(body, hold),
                                None => ResponseBody::new(body),
                            });
                            return Poll::Ready(Ok(response));
                        }
                    },
                    Poll::Ready(Err(error)) => {
                        // The hold drops with the state: the lock is released in the background.
                        this.state.set(State::Done);
                        return Poll::Ready(Err(error));
                    }
                    Poll::Pending => {
                        let lost = hold
                            .as_mut()
                            .is_some_and(|hold| hold.poll_lost(cx).is_ready());
                        if !lost {
                            return Poll::Pending;
                        }
                        // Dropping the state cancels the handler at its current `.await`.
                        this.state.set(State::Rejected {
                            rejection: Some(Rejection::lost(this.settings)),
                        });
                    }
                },
                StateProj::Buffering { buffer } => {
                    let read = buffer.as_mut().expect("buffer taken twice");
                    if read.poll_read(cx).is_pending() {
                        let watch = this.settings.lease_lost == LeaseLost::Abort;
                        if watch && read.hold.poll_lost(cx).is_ready() {
                            // Nothing has gone out yet: answer as for a handler that lost it.
                            this.state.set(State::Rejected {
                                rejection: Some(Rejection::lost(this.settings)),
                            });
                            continue;
                        }
                        return Poll::Pending;
                    }
                    let buffer = buffer.take();
                    this.state.set(State::ReleasingBuffered { buffer });
                }
                StateProj::ReleasingBuffered { buffer } => {
                    let releasing = buffer.as_mut().expect("buffer taken twice");
                    ready!(releasing.hold.poll_release(cx));
                    let buffer = buffer.take().expect("buffer taken twice");
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(buffer.into_response()));
                }
                StateProj::Releasing { hold, response } => {
                    ready!(hold.poll_release(cx));
                    let response = response.take().expect("response taken twice");
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(response.map(ResponseBody::new)));
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            }
        }
    }
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
            State::Releasing { .. } | State::ReleasingBuffered { .. } => "releasing",
            State::Buffering { .. } => "reading the body",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

/// The acquisition of a request's lock, bounded by the layer's acquire timeout.
pub(crate) struct Acquire {
    future: Pin<Box<dyn Future<Output = Acquired> + Send>>,
}

/// How an acquisition ended.
struct Acquired {
    /// `None`: cut off by the acquire timeout.
    result: Option<Result<LockGuard, LockError>>,
    waited: Duration,
}

impl Acquire {
    pub(crate) fn start<R>(settings: &Settings<R>, name: String, span: &Span) -> Self {
        let timeout = settings.acquire_timeout();
        let mut request = settings.client.lock(name).wait(settings.wait.min(timeout));
        if let Some(lease) = settings.lease {
            request = request.lease(lease);
        }
        let future = async move {
            let start = Instant::now();
            let result = tokio::time::timeout(timeout, request).await.ok();
            Acquired {
                result,
                waited: start.elapsed(),
            }
        };
        Self {
            future: Box::pin(future.instrument(span.clone())),
        }
    }
}

impl Acquired {
    /// The guard to run with (`None`: run without a lock, failing open), or the rejection.
    fn decide<R>(
        self,
        settings: &Settings<R>,
        span: &Span,
    ) -> Result<Option<LockGuard>, Rejection> {
        span.record(
            "wait_ms",
            u64::try_from(self.waited.as_millis()).unwrap_or(u64::MAX),
        );
        let rejection = match self.result {
            Some(Ok(guard)) => {
                span.record("outcome", "acquired");
                tracing::debug!(waited = ?self.waited, fencing_token = guard.fencing_token(), "lock acquired");
                return Ok(Some(guard));
            }
            Some(Err(error)) => Rejection::for_lock_error(error, settings),
            None => Rejection::acquire_timed_out(settings),
        };
        match rejection.kind() {
            RejectionKind::Unavailable if settings.fail_mode == FailMode::Open => {
                span.record("outcome", "fail_open");
                tracing::warn!(
                    error = rejection.error().map(tracing::field::display),
                    detail = rejection.detail(),
                    "lock service unavailable; running the request without the lock (fail open)"
                );
                Ok(None)
            }
            RejectionKind::Busy => {
                span.record("outcome", "busy");
                tracing::debug!(waited = ?self.waited, "lock busy");
                Err(rejection)
            }
            RejectionKind::Unavailable => {
                span.record("outcome", "unavailable");
                tracing::warn!(
                    error = rejection.error().map(tracing::field::display),
                    detail = rejection.detail(),
                    "lock service unavailable; request rejected"
                );
                Err(rejection)
            }
            _ => {
                span.record("outcome", "error");
                tracing::error!(
                    error = rejection.error().map(tracing::field::display),
                    "could not take the lock"
                );
                Err(rejection)
            }
        }
    }
}
