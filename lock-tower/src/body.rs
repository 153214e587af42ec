//! [`ResponseBody`]: the response body of a locked request, which keeps the lock until the
//! body has been sent.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use lock_core::LockError;
use pin_project_lite::pin_project;

/// What a [`ResponseBody`] holds while it streams: a layer's hold on a Redis object (the lock
/// layer's lock), watched for its loss and given back once the body has ended. The layers
/// that keep something until their body ends implement it; the body knows no layer.
pub(crate) trait BodyHold: Send + Sync {
    /// The held object's name (for the error that cuts the body off).
    fn name(&self) -> &str;

    /// Whether losing the hold cuts the body off ([`LeaseLost::Abort`](crate::LeaseLost::Abort)).
    fn aborts_on_loss(&self) -> bool;

    /// True (once) if the hold is found lost now, without waiting.
    fn check_lost(&mut self) -> bool;

    /// Ready once the hold is lost; pending forever when its loss is not watched.
    fn poll_lost(&mut self, cx: &mut Context<'_>) -> Poll<()>;

    /// Gives the hold back: ready with `Err(name)` when the store said it was already gone.
    fn poll_release(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), String>>;
}

/// The error type of [`ResponseBody`]: the inner body's error, or the lock's loss when
/// [`LeaseLost::Abort`](crate::LeaseLost::Abort) cut the body short.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project! {
    /// The body of every response that passes through the layer.
    ///
    /// For a request that holds the lock with a streaming body (the default
    /// [`Release::AfterBody`](crate::Release::AfterBody) and a body larger than
    /// [`BUFFER_LIMIT`](crate::lock::BUFFER_LIMIT)) it keeps the lock until the inner body
    /// has ended, and gives it back *before* handing out the body's last frame, so a client
    /// that has read the whole response can take the lock again at once. Dropped early (the
    /// client went away), it releases the lock in the background. A small body has been read
    /// in full, and the lock given back, before the response was handed on.
    ///
    /// With [`LeaseLost::Abort`](crate::LeaseLost::Abort), losing the lock while the body
    /// streams ends the body with an error (the client sees a cut-off response, never a
    /// complete one that was produced without the lock).
    ///
    /// Rejections made by the layer itself use this type too, with a body of their own.
    pub struct ResponseBody<B>
    where
        B: Body,
    {
        #[pin]
        kind: Kind<B>,
        hold: Option<Box<dyn BodyHold>>,
        // The inner body's last frame, kept back while the lock is released.
        last: Option<Frame<B::Data>>,
        // The inner body has ended (its end, or its last frame, has been seen).
        ended: bool,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B>
    where
        B: Body,
    {
        Inner { #[pin] body: B },
        Full { data: Option<Bytes> },
        // A small body read in full while the lock was held (see `ResponseFuture`), replayed
        // frame by frame, then its error if it ended with one; or the start of a body read
        // ahead (by the idempotency layer), then the `rest` of it.
        Buffered {
            frames: VecDeque<Frame<B::Data>>,
            error: Option<B::Error>,
            rest: Option<Pin<Box<B>>>,
        },
    }
}

impl<B: Body> ResponseBody<B> {
    /// Wraps a body that holds no lock.
    pub fn new(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
            hold: None,
            last: None,
            ended: false,
        }
    }

    /// A complete body of the layer's own (a rejection).
    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
            hold: None,
            last: None,
            ended: false,
        }
    }

    /// A body that was read in full (and its lock given back) before the response went out.
    pub(crate) fn buffered(frames: VecDeque<Frame<B::Data>>, error: Option<B::Error>) -> Self {
        Self {
            kind: Kind::Buffered {
                frames,
                error,
                rest: None,
            },
            hold: None,
            last: None,
            ended: false,
        }
    }

    /// The `frames` already read from a body, then the `rest` of it.
    pub(crate) fn chained(frames: VecDeque<Frame<B::Data>>, rest: Pin<Box<B>>) -> Self {
        Self {
            kind: Kind::Buffered {
                frames,
                error: None,
                rest: Some(rest),
            },
            hold: None,
            last: None,
            ended: false,
        }
    }

    /// Wraps a body that keeps `hold` until it ends.
    pub(crate) fn locked(body: B, hold: impl BodyHold + 'static) -> Self {
        Self {
            kind: Kind::Inner { body },
            hold: Some(Box::new(hold)),
            last: None,
            ended: false,
        }
    }

    /// True while this body still holds its request's lock.
    pub fn holds_lock(&self) -> bool {
        self.hold.is_some()
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let mut body = match this.kind.project() {
            KindProj::Full { data } => {
                return Poll::Ready(data.take().map(|data| Ok(Frame::data(data.into()))));
            }
            KindProj::Buffered {
                frames,
                error,
                rest,
            } => {
                if let Some(frame) = frames.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                if let Some(e) = error.take() {
                    return Poll::Ready(Some(Err(e.into())));
                }
                return match rest {
                    Some(rest) => rest.as_mut().poll_frame(cx).map_err(Into::into),
                    None => Poll::Ready(None),
                };
            }
            KindProj::Inner { body } => body,
        };
        let Some(hold) = this.hold.as_mut() else {
            if *this.ended {
                return Poll::Ready(this.last.take().map(Ok));
            }
            return body.poll_frame(cx).map_err(Into::into);
        };
        // The lock is gone: the body ends with an error; dropping the hold just tidies up.
        let lost = |hold: &mut Option<Box<dyn BodyHold>>, ended: &mut bool, name: String| {
            *hold = None;
            *ended = true;
            Poll::Ready(Some(Err(LockError::Lost { name }.into())))
        };
        if !*this.ended {
            if hold.poll_lost(cx).is_ready() {
                let name = hold.name().to_owned();
                return lost(this.hold, this.ended, name);
            }
            let frame = ready!(body.as_mut().poll_frame(cx));
            // A frame made after the loss (the body was ready in the same poll in which the
            // lease was found to have run out) never goes out.
            if hold.check_lost() {
                let name = hold.name().to_owned();
                return lost(this.hold, this.ended, name);
            }
            match frame {
                Some(Ok(frame)) if !body.is_end_stream() => return Poll::Ready(Some(Ok(frame))),
                Some(Ok(frame)) => *this.last = Some(frame),
                Some(Err(e)) => {
                    *this.hold = None;
                    *this.ended = true;
                    return Poll::Ready(Some(Err(e.into())));
                }
                None => {}
            }
            *this.ended = true;
        }
        // The inner body is done: release, then hand out what was kept back, unless Redis
        // said the lock was already gone (then the body was not all made under it).
        if let Err(name) = ready!(hold.poll_release(cx))
            && hold.aborts_on_loss()
        {
            *this.last = None;
            return lost(this.hold, this.ended, name);
        }
        *this.hold = None;
        Poll::Ready(this.last.take().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full { data } => data.is_none(),
            Kind::Buffered {
                frames,
                error,
                rest,
            } => {
                frames.is_empty()
                    && error.is_none()
                    && rest.as_ref().is_none_or(|rest| rest.is_end_stream())
            }
            Kind::Inner { body } => {
                if self.ended {
                    self.hold.is_none() && self.last.is_none()
                } else {
                    // A locked body is not over before its lock is given back.
                    self.hold.is_none() && body.is_end_stream()
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Buffered { frames, rest, .. } => {
                let read: u64 = frames
                    .iter()
                    .filter_map(Frame::data_ref)
                    .map(|d| d.remaining() as u64)
                    .sum();
                let Some(rest) = rest else {
                    return SizeHint::with_exact(read);
                };
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(read));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(read));
                }
                hint
            }
            Kind::Inner { body } => {
                if self.ended {
                    let kept = self
                        .last
                        .as_ref()
                        .and_then(Frame::data_ref)
                        .map_or(0, |d| d.remaining() as u64);
                    SizeHint::with_exact(kept)
                } else {
                    body.size_hint()
                }
            }
        }
    }
}

impl<B: Body> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseBody")
            .field("holds_lock", &self.hold.is_some())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::Full;

    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn the_body_is_send_and_sync_when_the_inner_body_is() {
        assert_send_sync::<ResponseBody<Full<Bytes>>>();
    }

    #[tokio::test]
    async fn a_full_body_yields_its_bytes_once() {
        use http_body_util::BodyExt;

        let body = ResponseBody::<Full<Bytes>>::full(Bytes::from_static(b"{}"));
        assert_eq!(body.size_hint().exact(), Some(2));
        assert!(!body.holds_lock());
        assert_eq!(body.collect().await.unwrap().to_bytes(), "{}");
        let empty = ResponseBody::<Full<Bytes>>::full(Bytes::new());
        assert!(empty.is_end_stream());
    }

    #[tokio::test]
    async fn an_unlocked_body_passes_the_inner_one_through() {
        use http_body_util::BodyExt;

        let body = ResponseBody::new(Full::new(Bytes::from_static(b"abc")));
        assert_eq!(body.size_hint().exact(), Some(3));
        assert_eq!(body.collect().await.unwrap().to_bytes(), "abc");
    }
}
