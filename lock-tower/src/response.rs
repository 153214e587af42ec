//! Every answer the layer gives instead of the inner service's, in one place: the decision
//! from an acquisition's outcome to running the request or rejecting it ([`decide`]), the
//! [`Rejection`], and how it becomes a response ([`OnRejection`], [`DefaultRejection`]). The
//! table of situations and responses is in the crate docs.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};
use lock_core::LockError;

use crate::body::ResponseBody;
use crate::config::{FailMode, Settings};
use crate::hold::Guarded;

/// Why the layer answered a request itself instead of calling the inner service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectionKind {
    /// The request has no key and the layer rejects such requests.
    MissingKey,
    /// The request's key cannot be a lock key (too long, control characters, braces, ...).
    InvalidKey,
    /// Another request holds the lock, and it stayed held for as long as the layer waits.
    Busy,
    /// Redis could not be reached, did not answer in time, or failed.
    Unavailable,
    /// The lock was lost while the handler ran, and the layer aborted the handler.
    Lost,
    /// The layer or the lock client is misconfigured.
    Internal,
}

impl RejectionKind {
    /// A short machine-readable code, the `code` member of the default JSON body.
    pub fn code(self) -> &'static str {
        match self {
            RejectionKind::MissingKey => "missing_lock_key",
            RejectionKind::InvalidKey => "invalid_lock_key",
            RejectionKind::Busy => "lock_busy",
            RejectionKind::Unavailable => "lock_unavailable",
            RejectionKind::Lost => "lock_lost",
            RejectionKind::Internal => "lock_error",
        }
    }
}

impl fmt::Display for RejectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// What to do with a request once its acquisition ended.
pub(crate) enum Decision {
    /// Run the inner service, with the lock (or without it, failing open).
    Run(Option<Guarded>),
    Reject(Rejection),
}

/// Decides from an acquisition's outcome (`None`: cut off by the layer's acquire timeout),
/// records it on the request's span and logs it: `debug` for an acquisition, `warn` for a
/// request run without the lock (failing open), `error` for a misconfiguration. A rejection's
/// own `info` event is [`Rejection::log`]'s, when it becomes the response.
pub(crate) fn decide(
    outcome: Option<Result<Guarded, LockError>>,
    settings: &Settings,
    span: &tracing::Span,
) -> Decision {
    let rejection = match outcome {
        Some(Ok(guard)) => {
            span.record("outcome", "acquired");
            tracing::debug!(
                lock = guard.name(),
                fencing_token = guard.fencing_token(),
                "lock acquired"
            );
            return Decision::Run(Some(guard));
        }
        Some(Err(error)) => Rejection::for_lock_error(error, settings),
        None => Rejection::acquire_timed_out(settings),
    };
    let error = rejection.error().map(tracing::field::display);
    match rejection.kind() {
        RejectionKind::Unavailable if settings.fail_mode == FailMode::Open => {
            span.record("outcome", "fail_open");
            tracing::warn!(
                error,
                detail = rejection.detail(),
                "lock service unavailable; running the request without the lock (fail open)"
            );
            return Decision::Run(None);
        }
        RejectionKind::Busy => {
            span.record("outcome", "busy");
        }
        RejectionKind::Unavailable => {
            span.record("outcome", "unavailable");
        }
        _ => {
            span.record("outcome", "error");
            tracing::error!(error, "could not take the lock; the layer is misconfigured");
        }
    }
    Decision::Reject(rejection)
}

/// The layer's decision not to run the inner service (or to abort it), with everything a
/// response needs: the status the layer's settings chose, how long the client should wait
/// before retrying, and the lock error behind it, if any.
///
/// [`DefaultRejection`] turns it into a JSON problem response; pass your own function to
/// [`DistributedLockLayer::on_rejection`](crate::DistributedLockLayer::on_rejection) to
/// answer differently, possibly starting from [`Rejection::to_response`].
#[derive(Debug)]
pub struct Rejection {
    kind: RejectionKind,
    status: StatusCode,
    retry_after: Option<Duration>,
    detail: String,
    error: Option<LockError>,
}

impl Rejection {
    pub(crate) fn new(kind: RejectionKind, status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            kind,
            status,
            retry_after: None,
            detail: detail.into(),
            error: None,
        }
    }

    pub(crate) fn missing_key() -> Self {
        Self::new(
            RejectionKind::MissingKey,
            StatusCode::BAD_REQUEST,
            "the request does not say which resource to lock",
        )
    }

    /// The rejection for a layer whose settings cannot work (a bad prefix, lease or size):
    /// every request gets it, with the error.
    pub(crate) fn misconfigured(error: LockError) -> Self {
        Self::new(
            RejectionKind::Internal,
            StatusCode::INTERNAL_SERVER_ERROR,
            "the lock is misconfigured",
        )
        .with_error(error)
    }

    pub(crate) fn invalid_key(reason: &str) -> Self {
        Self::new(
            RejectionKind::InvalidKey,
            StatusCode::BAD_REQUEST,
            format!("the request's lock key is invalid: {reason}"),
        )
    }

    /// The rejection for a failed acquisition.
    pub(crate) fn for_lock_error(error: LockError, settings: &Settings) -> Self {
        let unavailable = |detail: &str| {
            Self::new(
                RejectionKind::Unavailable,
                StatusCode::SERVICE_UNAVAILABLE,
                detail,
            )
            .with_retry_after(settings.unavailable_retry_after)
        };
        let rejection = match &error {
            LockError::Timeout { holder_ttl, .. } => {
                // The holder is likely done in about the time this layer's requests hold
                // their locks; never later than its lease, never more than the cap.
                let estimate = settings.hold_times.average();
                let retry_after = match (*holder_ttl, estimate) {
                    (Some(ttl), Some(estimate)) => ttl.min(estimate),
                    (ttl, estimate) => ttl.or(estimate).unwrap_or(Duration::from_secs(1)),
                }
                .min(settings.max_retry_after);
                Self::new(
                    RejectionKind::Busy,
                    settings.busy_status,
                    "another request holds the lock for this resource",
                )
                .with_retry_after(retry_after)
            }
            LockError::InvalidName { reason, .. } => Self::invalid_key(reason),
            // Settings that cannot work, here or on the Redis side (an ACL, certificates).
            LockError::InvalidOption { .. }
            | LockError::NoClient
            | LockError::SizeMismatch { .. }
            | LockError::NoPermission { .. }
            | LockError::Tls { .. } => return Self::misconfigured(error),
            LockError::Lost { .. } => unavailable("the lock was lost while it was being taken"),
            _ => unavailable("the lock service is unavailable"),
        };
        rejection.with_error(error)
    }

    /// The rejection for an acquisition cut off by the layer's own bound.
    pub(crate) fn acquire_timed_out(settings: &Settings) -> Self {
        Self::new(
            RejectionKind::Unavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            "the lock service did not answer in time",
        )
        .with_retry_after(settings.unavailable_retry_after)
    }

    /// The rejection for a request aborted because its lock was lost.
    pub(crate) fn lost(settings: &Settings) -> Self {
        Self::new(
            RejectionKind::Lost,
            StatusCode::SERVICE_UNAVAILABLE,
            "the lock was lost while the request was running",
        )
        .with_retry_after(settings.unavailable_retry_after)
    }

    /// The one `info` event of a rejected request (every rejection, whatever its status),
    /// emitted inside the request's `distributed_lock` span (which carries the `key`):
    /// `status`, `code`, `lock` (the lock's name, when the error names it), `holder_lease_ms`
    /// (a busy lock: the holder's remaining lease as Redis answered it, when it has one),
    /// `retry_after_ms`, `detail` and the `error`, if any.
    pub(crate) fn log(&self) {
        let (lock, holder_lease) = match &self.error {
            Some(LockError::Timeout {
                name, holder_ttl, ..
            }) => (Some(name.as_str()), *holder_ttl),
            Some(LockError::Lost { name }) => (Some(name.as_str()), None),
            _ => (None, None),
        };
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        tracing::info!(
            status = self.status.as_u16(),
            code = self.kind.code(),
            lock,
            holder_lease_ms = holder_lease.map(ms),
            retry_after_ms = self.retry_after.map(ms),
            detail = %self.detail,
            error = self.error.as_ref().map(tracing::field::display),
            "request rejected by the lock layer"
        );
    }

    pub(crate) fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    pub(crate) fn with_error(mut self, error: LockError) -> Self {
        self.error = Some(error);
        self
    }

    /// Why the layer answered.
    pub fn kind(&self) -> RejectionKind {
        self.kind
    }

    /// The status code the layer's settings chose for this rejection.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// How long the client should wait before trying again, when that is known
    /// (`Busy`, `Unavailable`, `Lost`).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// A sentence for humans, safe to show to the client: it never contains the request's
    /// key.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The lock error behind the rejection, if there is one. It may name the lock: log it,
    /// do not send it to the client.
    pub fn error(&self) -> Option<&LockError> {
        self.error.as_ref()
    }

    /// Takes the lock error behind the rejection, if there is one.
    pub fn into_error(self) -> Option<LockError> {
        self.error
    }

    /// The default JSON problem document (RFC 9457) for this rejection.
    pub fn problem_json(&self) -> Bytes {
        let mut problem = serde_json::json!({
            "type": "about:blank",
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "code": self.kind.code(),
            "detail": self.detail,
        });
        if let Some(retry_after) = self.retry_after {
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
        *res.status_mut() = self.status;
        let headers = res.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(retry_after) = self.retry_after {
            headers.insert(
                RETRY_AFTER,
                HeaderValue::from(retry_after_secs(retry_after)),
            );
        }
        res
    }
}

/// Whole seconds for `Retry-After`: rounded up, at least 1.
pub(crate) fn retry_after_secs(d: Duration) -> u64 {
    d.as_secs()
        .saturating_add(u64::from(d.subsec_nanos() > 0))
        .max(1)
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
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(2001)), 3);
    }

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
        assert_eq!(body["retry_after_ms"], 1500);
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
