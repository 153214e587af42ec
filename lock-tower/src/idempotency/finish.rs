//! After the handler: its response read (up to the layer's limit) while the key's lock is
//! held, stored, and the lock given back before the response goes out.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::Response;
use http_body::{Body, Frame};
use lock_core::fenced::Fenced;
use tracing::Span;

use super::config::Settings;
use super::context::{Idempotency, KeyLock};
use super::record::Record;
use super::rejection;
use crate::body::ResponseBody;
use crate::config::LeaseLost;
use crate::rejection::Rejection;

/// How a request ends once its handler has answered.
// Made once per request and moved straight out of its future: no use boxing the response.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Finished<B: Body> {
    /// Hand this response on.
    Respond(Response<ResponseBody<B>>),
    /// Answer with this rejection instead (the lock was lost: nothing was stored).
    Reject(Rejection),
}

/// What reading a response body came to.
enum Read<B: Body> {
    /// All of it, within the limit.
    Whole(Bytes),
    /// Not all: over the limit, or trailers (which are not kept). What was read, then the
    /// rest.
    Partial(VecDeque<Frame<B::Data>>, Pin<Box<B>>),
    /// It failed after what was read.
    Failed(VecDeque<Frame<B::Data>>, B::Error),
}

/// What storing came to.
enum Stored {
    Yes,
    /// The lock was lost (found so, or a newer holder stored first): not stored.
    Lost,
    /// The store failed: not stored.
    Failed,
}

/// Stores the handler's `response` (when it is final and its body fits) under the
/// key's lock, gives the lock back, and says how to answer.
pub(crate) async fn finish<B>(
    response: Response<B>,
    held: KeyLock,
    settings: Arc<Settings>,
    span: Span,
) -> Finished<B>
where
    B: Body + Send,
    B::Data: From<Bytes> + Send,
    B::Error: Send,
{
    let (parts, body) = response.into_parts();
    let status = parts.status;
    if held.context.is_stored() || !(settings.store_if)(&parts) {
        let stored = held.context.is_stored();
        span.record(
            "outcome",
            if stored {
                "stored_by_handler"
            } else {
                "not_stored"
            },
        );
        tracing::debug!(
            status = status.as_u16(),
            "{}",
            if stored {
                "the handler stored the record itself"
            } else {
                "response not stored (not final): a retry runs the request again"
            }
        );
        held.release().await;
        return Finished::Respond(Response::from_parts(parts, ResponseBody::new(body)));
    }
    let body = match read_response(body, settings.max_record_body).await {
        Read::Whole(body) => body,
        Read::Partial(frames, rest) => {
            let lost = held.is_lost();
            keep_marker(&held.context, lost, &settings, status, &span).await;
            held.release().await;
            let body = ResponseBody::chained(frames, rest);
            return Finished::Respond(Response::from_parts(parts, body));
        }
        Read::Failed(frames, error) => {
            span.record("outcome", "not_stored");
            tracing::warn!("the response body failed: not stored");
            held.release().await;
            let body = ResponseBody::buffered(frames, Some(error));
            return Finished::Respond(Response::from_parts(parts, body));
        }
    };
    let lost = held.is_lost();
    let record = held
        .context
        .record(parts.status, &parts.headers, body.clone());
    let stored = store(&held.context, lost, &settings, record, &span).await;
    held.release().await;
    match stored {
        Stored::Lost if settings.lease_lost == LeaseLost::Abort => {
            Finished::Reject(rejection::lost(&settings))
        }
        Stored::Yes | Stored::Lost | Stored::Failed => {
            Finished::Respond(Response::from_parts(parts, ResponseBody::full(body)))
        }
    }
}

/// Stores the "completed, not replayable" marker of a response too large to keep (or with
/// trailers), so the key's retries are answered `409` instead of running again.
async fn keep_marker(
    context: &Idempotency,
    lost: bool,
    settings: &Settings,
    status: http::StatusCode,
    span: &Span,
) {
    tracing::warn!(
        status = status.as_u16(),
        max_record_body = settings.max_record_body,
        "the response is larger than the idempotency layer keeps, or has trailers: answered, \
         and a \"completed, not replayable\" marker stored, so a retry is answered 409 and \
         never runs the request again"
    );
    let marker = Record::not_replayable(context.fingerprint(), status);
    let stored = store(context, lost, settings, marker, span).await;
    if matches!(stored, Stored::Yes) {
        span.record("outcome", "not_replayable");
    }
}

/// Reads a response body, up to `limit` bytes of data.
async fn read_response<B>(body: B, limit: usize) -> Read<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    let mut body = Box::pin(body);
    let mut read = BytesMut::new();
    let so_far = |read: BytesMut| -> VecDeque<Frame<B::Data>> {
        (!read.is_empty())
            .then(|| Frame::data(B::Data::from(read.freeze())))
            .into_iter()
            .collect()
    };
    loop {
        let frame = match poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            None => return Read::Whole(read.freeze()),
            Some(Err(error)) => return Read::Failed(so_far(read), error),
            Some(Ok(frame)) => frame,
        };
        match frame.into_data() {
            Ok(data) if read.len().saturating_add(data.remaining()) <= limit => read.put(data),
            Ok(data) => {
                let mut frames = so_far(read);
                frames.push_back(Frame::data(data));
                return Read::Partial(frames, body);
            }
            Err(trailers) => {
                let mut frames = so_far(read);
                frames.push_back(trailers);
                return Read::Partial(frames, body);
            }
        }
    }
}

/// Stores `record` (the response, or the not-replayable marker) as the key's record, unless
/// the lock was `lost`.
async fn store(
    context: &Idempotency,
    lost: bool,
    settings: &Settings,
    record: Record,
    span: &Span,
) -> Stored {
    if lost {
        span.record("outcome", "lost");
        tracing::warn!("the idempotency lock was lost while the request ran: response not stored");
        return Stored::Lost;
    }
    let (key, token) = (context.record_key(), context.fencing_token());
    match settings.store.put(key, &record, token, settings.ttl).await {
        Ok(Fenced::Written) => {
            span.record("outcome", "stored");
            tracing::debug!("response stored");
            Stored::Yes
        }
        Ok(Fenced::Refused { stored }) => {
            span.record("outcome", "lost");
            tracing::warn!(
                stored,
                fencing_token = token,
                "a newer holder of the idempotency key stored its response first (this \
                 request's lock was lost): not stored"
            );
            Stored::Lost
        }
        Err(error) => {
            span.record("outcome", "not_stored");
            tracing::warn!(
                %error,
                "could not store the response: it is answered, and a retry runs the request again"
            );
            Stored::Failed
        }
    }
}
