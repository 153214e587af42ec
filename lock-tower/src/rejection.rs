//! [`Rejection`]: a layer's decision not to run the inner service (or to abort it), with the
//! status, `Retry-After`, detail and error a response needs, and the constructor for every
//! situation the lock, idempotency and rate-limit layers answer themselves. How it becomes a
//! response (and its log event) is in `response`.

use std::fmt;
use std::time::Duration;

use http::StatusCode;
use lock_core::LockError;

use crate::rejection_kind::RejectionKind;
use crate::retry_after::retry_after_secs;

/// The layer's decision not to run the inner service (or to abort it), with everything a
/// response needs: the status the layer's settings chose, how long the client should wait
/// before retrying, and the lock error behind it, if any.
///
/// [`DefaultRejection`](crate::DefaultRejection) turns it into a JSON problem response; pass your own function to
/// [`DistributedLockLayer::on_rejection`](crate::DistributedLockLayer::on_rejection) to
/// answer differently, possibly starting from [`Rejection::to_response`].
#[derive(Debug)]
pub struct Rejection {
    kind: RejectionKind,
    status: StatusCode,
    retry_after: Option<Duration>,
    detail: String,
    error: Option<LockError>,
    /// How the log describes `error` when lock-core's own words would mislead: a busy lock
    /// is a [`LockError::Timeout`] even after a single attempt, which did not time out.
    logged_error: Option<String>,
    /// The layer that gave it, for the log: `lock`, `idempotency` (which also gives some of
    /// the lock layer's kinds) or `rate limit`.
    layer: &'static str,
}

impl Rejection {
    pub(crate) fn new(kind: RejectionKind, status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            kind,
            status,
            retry_after: None,
            detail: detail.into(),
            error: None,
            logged_error: None,
            layer: "lock",
        }
    }

    /// The rejection for a request without a key, with the layer's `detail` (which says
    /// what the key was for).
    pub(crate) fn missing_key(detail: &'static str) -> Self {
        Self::new(RejectionKind::MissingKey, StatusCode::BAD_REQUEST, detail)
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

    /// The rejection for a request whose route lacks the key the extractor looks for.
    pub(crate) fn key_not_in_route() -> Self {
        Self::new(
            RejectionKind::KeyNotInRoute,
            StatusCode::INTERNAL_SERVER_ERROR,
            "the server is misconfigured: this route does not provide the key of its lock",
        )
    }

    pub(crate) fn invalid_key(reason: &str) -> Self {
        Self::new(
            RejectionKind::InvalidKey,
            StatusCode::BAD_REQUEST,
            format!("the request's lock key is invalid: {reason}"),
        )
    }

    /// Marks a rejection of a kind several layers give as `layer`'s (for its log): `lock`
    /// (the default), `idempotency` or `rate limit`.
    pub(crate) fn by_layer(mut self, layer: &'static str) -> Self {
        self.layer = layer;
        self
    }

    /// Marks a rejection of a kind both layers give as the idempotency layer's (for its log).
    pub(crate) fn by_idempotency_layer(self) -> Self {
        self.by_layer("idempotency")
    }

    /// Marks a rejection of a kind several layers give as the rate-limit layer's (for its
    /// log).
    pub(crate) fn by_rate_limit_layer(self) -> Self {
        self.by_layer("rate limit")
    }

    /// The answer of a request whose rate limit had no permit left: `429`, with
    /// `retry_after` (rounded up to whole seconds, at least 1).
    pub(crate) fn rate_limited(retry_after: Duration) -> Self {
        Self::new(
            RejectionKind::RateLimited,
            StatusCode::TOO_MANY_REQUESTS,
            "too many requests: the rate limit of this resource has no permit left",
        )
        .with_retry_after(retry_after)
    }

    /// The answer of a rate-limit layer whose check failed with `error`: `503` with
    /// `unavailable_retry_after` when the store is down, slow or failing, `400` for a name
    /// the store refuses, `500` for a setting or a server that cannot work.
    pub(crate) fn for_rate_limit_error(
        error: LockError,
        unavailable_retry_after: Duration,
    ) -> Self {
        let rejection = match &error {
            LockError::InvalidName { reason, .. } => Self::invalid_key(reason),
            LockError::InvalidOption { .. }
            | LockError::NoClient
            | LockError::NoPermission { .. }
            | LockError::AuthRequired { .. }
            | LockError::Tls { .. }
            | LockError::Unsupported { .. } => {
                return Self::misconfigured(error).by_rate_limit_layer();
            }
            _ => Self::new(
                RejectionKind::Unavailable,
                StatusCode::SERVICE_UNAVAILABLE,
                "the rate limit's store is unavailable",
            )
            .with_retry_after(unavailable_retry_after),
        };
        rejection.with_error(error).by_rate_limit_layer()
    }

    /// How the log describes what went wrong, for an error that is not a [`LockError`].
    pub(crate) fn with_logged_error(mut self, error: impl fmt::Display) -> Self {
        self.logged_error = Some(error.to_string());
        self
    }

    /// Sets the one value `Retry-After` and the body's `retry_after_ms` both say: `retry_after`
    /// rounded up to whole seconds, at least 1 (what the header can carry), so they agree.
    pub(crate) fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(Duration::from_secs(retry_after_secs(retry_after)));
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
    /// (`Busy`, `PermitsInUse`, `Unavailable`, `Lost`, `IdempotencyKeyInUse`,
    /// `RecordStoreUnavailable`): always whole seconds, at least 1 (the layer's estimate
    /// rounded up), the one value the `Retry-After` header and the body's `retry_after_ms`
    /// both say.
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

    /// How the log describes what went wrong, when lock-core's own words would mislead (or
    /// the error is not a [`LockError`]).
    pub(crate) fn logged_error(&self) -> Option<&String> {
        self.logged_error.as_ref()
    }

    /// The layer that gave it, for the log.
    pub(crate) fn layer(&self) -> &'static str {
        self.layer
    }
}
