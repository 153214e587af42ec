//! Before the handler: the request body read and fingerprinted, the record looked up (a
//! replay needs no lock), the key's lock taken, the record looked up again under it.

use std::future::poll_fn;
use std::pin::pin;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::Request;
use http_body::Body;
use lock_core::LockGuard;
use tracing::Span;

use super::config::{Settings, WORDS};
use super::context::{Ask, Idempotency, KeyLock, release};
use super::record::{Fingerprint, Record};
use super::rejection;
use crate::body::BoxError;
use crate::keyed::decision::decide;
use crate::rejection::Rejection;

/// What to do with a request once it is prepared.
pub(crate) enum Prepared<B> {
    /// Answer it with a rejection.
    Reject(Rejection),
    /// Answer it with a stored response.
    Replay(Record),
    /// Run the handler without the lock and without storing (failing open).
    Pass(Request<B>),
    /// Run the handler under the key's lock, then store its response.
    Run(Request<B>, KeyLock),
}

/// What a look-up of the record found.
enum Found {
    /// No record.
    Nothing,
    /// This request's record: replay it.
    Replay(Record),
    /// Another request's record under the key.
    Reused,
}

/// Prepares `request` (whose key and scope make `ask`) for the handler.
pub(crate) async fn prepare<B>(
    request: Request<B>,
    ask: Ask,
    settings: Arc<Settings>,
    span: Span,
) -> Prepared<B>
where
    B: Body + From<Bytes> + Send,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let (parts, body) = request.into_parts();
    let body = match read_body(body, settings.max_request_body).await {
        Ok(body) => body,
        Err(rejection) => return Prepared::Reject(rejection),
    };
    let fingerprint = Fingerprint::of(&parts.method, &parts.uri, &body);
    let mut request = Request::from_parts(parts, B::from(body));
    // A completed request's record is replayed without the lock.
    match look_up(&settings, &ask.record_key, fingerprint).await {
        Ok(Found::Nothing) => {}
        Ok(found) => return answer(found, &span),
        Err(rejection) => return fail(&settings, rejection, request, &span),
    }
    let guard = match lock(&settings, &ask.record_key).await {
        Ok(guard) => guard,
        Err(rejection) => return fail(&settings, rejection, request, &span),
    };
    // Under the lock: the request that held it before may have stored its response since.
    match look_up(&settings, &ask.record_key, fingerprint).await {
        Ok(Found::Nothing) => {}
        found => {
            release(guard).await;
            return match found {
                Ok(found) => answer(found, &span),
                Err(rejection) => fail(&settings, rejection, request, &span),
            };
        }
    }
    let token = guard.fencing_token();
    span.record("token", token);
    span.record("outcome", "ran");
    tracing::debug!(fencing_token = token, "idempotency lock acquired");
    let context = Idempotency::new(ask, fingerprint, token, &settings);
    request.extensions_mut().insert(guard.held_lock());
    request.extensions_mut().insert(context.clone());
    Prepared::Run(request, KeyLock::new(guard, context))
}

/// Reads a request body of at most `limit` bytes (trailers are dropped).
async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, Rejection>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    if body.size_hint().lower() > limit as u64 {
        return Err(rejection::body_too_large(limit));
    }
    let mut body = pin!(body);
    let mut read = BytesMut::new();
    while let Some(frame) = poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame.map_err(|e| rejection::body_failed(e.into()))?;
        if let Ok(mut data) = frame.into_data() {
            if read.len().saturating_add(data.remaining()) > limit {
                return Err(rejection::body_too_large(limit));
            }
            while data.has_remaining() {
                let chunk = data.chunk();
                read.put_slice(chunk);
                let n = chunk.len();
                data.advance(n);
            }
        }
    }
    Ok(read.freeze())
}

/// The record under `name`, compared with the request's fingerprint.
async fn look_up(
    settings: &Settings,
    name: &str,
    fingerprint: Fingerprint,
) -> Result<Found, Rejection> {
    match settings.store.get(name).await {
        Ok(None) => Ok(Found::Nothing),
        Ok(Some(record)) if record.fingerprint() == fingerprint => Ok(Found::Replay(record)),
        Ok(Some(_)) => Ok(Found::Reused),
        Err(error) => Err(rejection::store_failed(settings, &error)),
    }
}

/// The answer to a request whose record was found.
fn answer<B>(found: Found, span: &Span) -> Prepared<B> {
    match found {
        Found::Replay(record) if !record.is_replayable() => {
            span.record("outcome", "not_replayable");
            Prepared::Reject(rejection::not_replayable(record.status()))
        }
        Found::Replay(record) => {
            span.record("outcome", "replayed");
            tracing::debug!(
                status = record.status().as_u16(),
                "replaying the stored response"
            );
            Prepared::Replay(record)
        }
        Found::Reused | Found::Nothing => {
            span.record("outcome", "reused");
            Prepared::Reject(rejection::reused())
        }
    }
}

/// Takes the key's lock, bounded by the layer's acquire timeout.
async fn lock(settings: &Settings, name: &str) -> Result<LockGuard, Rejection> {
    let mut request = settings.client.lock(name).wait(settings.wait);
    if let Some(lease) = settings.fixed_lease {
        request = request.lease(lease);
    }
    match tokio::time::timeout(settings.acquire_timeout(), request).await {
        Ok(Ok(guard)) => Ok(guard),
        Ok(Err(error)) => Err(rejection::lock_failed(settings, error)),
        Err(_) => Err(rejection::lock_timed_out(settings)),
    }
}

/// A request that could not be prepared: rejected, or run unprotected when the store or
/// Redis is down and the layer fails open (the keyed layers' one decision tail).
fn fail<B>(
    settings: &Settings,
    rejection: Rejection,
    request: Request<B>,
    span: &Span,
) -> Prepared<B> {
    match decide(rejection, settings.fail_mode, &WORDS, span) {
        None => Prepared::Pass(request),
        Some(rejection) => Prepared::Reject(rejection),
    }
}
