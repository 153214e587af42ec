//! [`ApiError`]: every failure of the app, and how it becomes an HTTP response.
//!
//! Errors are answered as JSON problem documents (RFC 9457), the same shape `lock-tower` uses
//! for its own rejections, so clients read one `code` field whoever answered:
//!
//! ```json
//! {"type":"about:blank","title":"Gone","status":410,"code":"sold_out","detail":"no stock left"}
//! ```

use std::fmt;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use lock_core::LockError;

/// A failed request: an HTTP status, a machine-readable code and a human-readable detail.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A short machine-readable code (`sold_out`, `already_ordered`, ...).
    pub code: &'static str,
    /// What happened, for people.
    pub detail: String,
    /// Set on `503`s and `429`s: when to try again.
    pub retry_after: Option<Duration>,
}

impl ApiError {
    /// An error with `status`, `code` and `detail`.
    pub fn new(status: StatusCode, code: &'static str, detail: String) -> Self {
        Self {
            status,
            code,
            detail,
            retry_after: None,
        }
    }

    /// `400 Bad Request`.
    pub fn bad_request(code: &'static str, detail: String) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, detail)
    }

    /// `404 Not Found`.
    pub fn not_found(code: &'static str, detail: String) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, detail)
    }

    /// `410 Gone`: the sale has no stock left.
    pub fn sold_out() -> Self {
        Self::new(StatusCode::GONE, "sold_out", "no stock left".to_owned())
    }

    /// `503 Service Unavailable` with `Retry-After`.
    pub fn unavailable(code: &'static str, detail: String, retry_after: Duration) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, code, detail)
        }
    }

    /// `429 Too Many Requests` with `Retry-After`: a rate limit refused the request
    /// ([`crate::limits`]).
    pub fn rate_limited(code: &'static str, detail: String, retry_after: Duration) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, code, detail)
        }
    }

    /// `500`: logged with its cause; the client learns nothing about it.
    pub fn internal(cause: &dyn fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error".to_owned(),
        )
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status.as_u16(), self.code, self.detail)
    }
}

impl std::error::Error for ApiError {}

impl From<LockError> for ApiError {
    fn from(e: LockError) -> Self {
        match &e {
            LockError::Timeout { holder_ttl, .. } => ApiError::unavailable(
                "busy",
                "too many buyers at once: try again".to_owned(),
                holder_ttl.unwrap_or(Duration::from_secs(1)),
            ),
            LockError::Lost { .. } => ApiError::unavailable(
                "lock_lost",
                "the purchase lost its lock and was not completed: try again".to_owned(),
                Duration::from_secs(1),
            ),
            e if e.is_unavailable() => ApiError::unavailable(
                "lock_unavailable",
                "the lock service is unavailable: try again".to_owned(),
                Duration::from_secs(1),
            ),
            _ => ApiError::internal(&e),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                tracing::warn!(error = %e, "database unavailable");
                ApiError::unavailable(
                    "database_unavailable",
                    "the database is unavailable: try again".to_owned(),
                    Duration::from_secs(1),
                )
            }
            _ => ApiError::internal(&e),
        }
    }
}

/// The problem `code` of an error response, in its extensions: for the rejection counter
/// ([`crate::panel::track`]). The app's errors and the lock layers' rejections carry one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub &'static str);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "type": "about:blank",
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "code": self.code,
            "detail": self.detail,
        });
        let mut response = (self.status, body.to_string()).into_response();
        response.extensions_mut().insert(ErrorCode(self.code));
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(after) = self.retry_after {
            let secs = after.as_secs_f64().ceil().max(1.0) as u64;
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// Shortens user input for an error message (at most 64 characters).
pub(crate) fn shorten(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}
