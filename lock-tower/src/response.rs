//! How a [`Rejection`] becomes the answer the client gets: its JSON problem document (RFC 9457)
//! and default response ([`Rejection::problem_json`], [`Rejection::to_response`]), the
//! [`OnRejection`] hook and its default ([`DefaultRejection`]), and the one event of a
//! rejected request (`debug` or `info`), logged as the response is made. The table of situations and responses
//! is in the crate docs.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use lock_core::LockError;

use crate::body::ResponseBody;
use crate::rejection::Rejection;
use crate::rejection_kind::RejectionKind;
use crate::retry_after::retry_after_secs;

impl Rejection {
    /// The one event of a rejected request (every rejection, whatever its status), emitted
    /// inside the request's span (which carries the `key`): at `debug` for a refusal the
    /// service expects ([`RejectionKind::is_expected`]: busy, rate limited, a bad key, ...),
    /// at `info` for the others (unavailable, lost, misconfigured), with `status`, `code`,
    /// `lock` (the lock's name, when the error names it), `holder_lease_ms` (a busy lock: the
    /// holder's remaining lease as Redis answered it, when it has one), `retry_after_ms`,
    /// `detail` and the `error`, if any.
    pub(crate) fn log(&self) {
        let (lock, holder_lease) = match self.error() {
            Some(LockError::Timeout {
                name, holder_ttl, ..
            }) => (Some(name.as_str()), *holder_ttl),
            Some(LockError::Lost { name }) => (Some(name.as_str()), None),
            _ => (None, None),
        };
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let layer = match self.kind() {
            kind if kind.is_idempotency() => "idempotency",
            RejectionKind::RateLimited => "rate limit",
            _ => self.layer(),
        };
        let error = self
            .logged_error()
            .map(|e| e as &dyn fmt::Display)
            .or_else(|| self.error().map(|e| e as &dyn fmt::Display))
            .map(tracing::field::display);
        // One event, at a level known where it is written.
        macro_rules! rejected {
            ($level:expr) => {
                tracing::event!(
                    $level,
                    status = self.status().as_u16(),
                    code = self.kind().code(),
                    lock,
                    holder_lease_ms = holder_lease.map(ms),
                    retry_after_ms = self.retry_after().map(ms),
                    detail = %self.detail(),
                    error,
                    "request rejected by the {layer} layer"
                )
            };
        }
        if self.kind().is_expected() {
            rejected!(tracing::Level::DEBUG);
        } else {
            rejected!(tracing::Level::INFO);
        }
    }

    /// The default JSON problem document (RFC 9457) for this rejection.
    pub fn problem_json(&self) -> Bytes {
        let mut problem = serde_json::json!({
            "type": "about:blank",
            "title": self.status().canonical_reason().unwrap_or("Error"),
            "status": self.status().as_u16(),
            "code": self.kind().code(),
            "detail": self.detail(),
        });
        if let Some(retry_after) = self.retry_after() {
            problem["retry_after_ms"] = u64::try_from(retry_after.as_millis())
                .unwrap_or(u64::MAX)
                .into();
        }
        Bytes::from(problem.to_string())
    }

    /// The default response: [`status`](Self::status), a `Retry-After` header in whole
    /// seconds (rounded up, at least 1) when [`retry_after`](Self::retry_after) is known, and
    /// the [`problem_json`](Self::problem_json) body.
    ///
    /// Works for any body that can be made from [`Bytes`] (axum's `Body`,
    /// `http_body_util::Full<Bytes>`, ...), so a custom handler can start from it:
    ///
    /// ```
    /// use axum::{body::Body, response::Response};
    /// use lock_tower::Rejection;
    ///
    /// fn with_header(rejection: Rejection) -> Response {
    ///     let mut res = rejection.to_response::<Body>();
    ///     res.headers_mut().insert("x-lock", axum::http::HeaderValue::from_static("1"));
    ///     res
    /// }
    /// ```
    pub fn to_response<B: From<Bytes>>(&self) -> Response<B> {
        let mut res = Response::new(B::from(self.problem_json()));
        *res.status_mut() = self.status();
        let headers = res.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(retry_after) = self.retry_after() {
            headers.insert(
                RETRY_AFTER,
                HeaderValue::from(retry_after_secs(retry_after)),
            );
        }
        res
    }
}

/// Turns a [`Rejection`] into the response the client gets.
///
/// Implemented by [`DefaultRejection`] and by every `Fn(Rejection) -> Response<B>`, where `B`
/// is the inner service's response body type (axum's `Body` under axum):
///
/// ```
/// use axum::response::{IntoResponse, Response};
/// use axum::http::StatusCode;
/// use lock_tower::{Rejection, RejectionKind};
///
/// let on_rejection = |rejection: Rejection| -> Response {
///     match rejection.kind() {
///         RejectionKind::Busy => (StatusCode::CONFLICT, "order is being processed").into_response(),
///         _ => rejection.to_response(),
///     }
/// };
/// # let _ = on_rejection;
/// ```
pub trait OnRejection<B: http_body::Body> {
    /// The response for `rejection`.
    fn on_rejection(&self, rejection: Rejection) -> Response<ResponseBody<B>>;
}

impl<B, F> OnRejection<B> for F
where
    F: Fn(Rejection) -> Response<B>,
    B: http_body::Body,
{
    fn on_rejection(&self, rejection: Rejection) -> Response<ResponseBody<B>> {
        self(rejection).map(ResponseBody::new)
    }
}

/// The response of a future's `Rejected` state: its rejection (taken: a future answers once),
/// logged once, as `on_rejection` makes it.
pub(crate) fn answer<B, R>(
    rejection: &mut Option<Rejection>,
    on_rejection: &R,
) -> Response<ResponseBody<B>>
where
    B: http_body::Body,
    R: OnRejection<B>,
{
    let rejection = rejection
        .take()
        .expect("ResponseFuture polled after completion");
    rejection.log();
    on_rejection.on_rejection(rejection)
}

/// The default answer: [`Rejection::to_response`], a JSON problem document with the status
/// the layer's settings chose and `Retry-After` when it is known.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct DefaultRejection;

impl<B: http_body::Body> OnRejection<B> for DefaultRejection {
    fn on_rejection(&self, rejection: Rejection) -> Response<ResponseBody<B>> {
        let res: Response<Bytes> = rejection.to_response();
        res.map(ResponseBody::full)
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::*;

    #[test]
    fn default_response_is_a_problem_document() {
        let rejection = Rejection::new(RejectionKind::Busy, StatusCode::LOCKED, "busy")
            .with_retry_after(Duration::from_millis(1500));
        let res: Response<Bytes> = rejection.to_response();
        assert_eq!(res.status(), StatusCode::LOCKED);
        assert_eq!(res.headers()[RETRY_AFTER], "2");
        assert_eq!(res.headers()[CONTENT_TYPE], "application/problem+json");
        let body: serde_json::Value = serde_json::from_slice(res.body()).unwrap();
        assert_eq!(body["status"], 423);
        assert_eq!(body["title"], "Locked");
        assert_eq!(body["code"], "lock_busy");
        // One value: the header's whole seconds, in milliseconds.
        assert_eq!(body["retry_after_ms"], 2000);
        // A holder about to release (0 ms left) still says 1 s in both, never 0 beside 1.
        let soon = Rejection::new(RejectionKind::Busy, StatusCode::CONFLICT, "busy")
            .with_retry_after(Duration::ZERO);
        let res: Response<Bytes> = soon.to_response();
        assert_eq!(res.headers()[RETRY_AFTER], "1");
        let body: serde_json::Value = serde_json::from_slice(res.body()).unwrap();
        assert_eq!(body["retry_after_ms"], 1000);
        assert_eq!(soon.retry_after(), Some(Duration::from_secs(1)));
    }

    #[test]
    fn bad_key_responses_have_no_retry_after() {
        let res: Response<Bytes> = Rejection::invalid_key("it is too long").to_response();
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
        assert!(res.headers().get(RETRY_AFTER).is_none());
        let body: serde_json::Value = serde_json::from_slice(res.body()).unwrap();
        assert_eq!(body["code"], "invalid_lock_key");
        assert!(body.get("retry_after_ms").is_none());
    }
}
