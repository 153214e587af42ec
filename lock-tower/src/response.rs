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
use crate::config::FailMode;
use crate::guard::AnyGuard;
use crate::settings::{Kind, Settings};

/// Why a layer of this crate answered a request itself instead of calling the inner service
/// (or instead of sending its response): the lock layer's kinds, then the
/// [`IdempotencyLayer`](crate::IdempotencyLayer)'s (which also answers with `Unavailable`,
/// `Lost` and `Internal`), then the [`RateLimitLayer`](crate::RateLimitLayer)'s
/// [`RateLimited`](Self::RateLimited) (which also answers with `MissingKey`, `InvalidKey`,
/// `KeyNotInRoute`, `Unavailable` and `Internal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectionKind {
    /// The request has no key and the layer rejects such requests.
    MissingKey,
    /// The request's key cannot be a lock key (too long, control characters, braces, ...).
    InvalidKey,
    /// Another request holds the lock, and it stayed held for as long as the layer waits.
    Busy,
    /// The busy answer of a [`permits(n)`](crate::DistributedLockLayer::permits) layer: all
    /// `n` permits of the key stayed in use for as long as the layer waits. Answered like
    /// [`Busy`](Self::Busy) (the busy status, `Retry-After`).
    PermitsInUse,
    /// Redis could not be reached, did not answer in time, or failed.
    Unavailable,
    /// The lock was lost while the handler ran, and the layer aborted the handler.
    Lost,
    /// The layer or the lock client is misconfigured.
    Internal,
    /// The key extractor looks for something the request's route does not have (a
    /// [`PathParam`](crate::PathParam) naming a parameter the route does not declare): every
    /// request of the route would be refused, so this is the server's fault (`500`), not the
    /// request's. See [`KeyExtractor::route_mismatch`](crate::KeyExtractor::route_mismatch).
    KeyNotInRoute,
    /// The request has no idempotency key, and the layer requires one for its method (`400`).
    IdempotencyKeyMissing,
    /// The idempotency key (or its scope) is not acceptable: empty, longer than 255 bytes,
    /// or not printable ASCII (`400`).
    IdempotencyKeyInvalid,
    /// The layer scopes keys (per client, say) and the request has no scope (`400`).
    IdempotencyScopeMissing,
    /// Another request with the same key is still running (`409` with `Retry-After`).
    IdempotencyKeyInUse,
    /// The key was used for another request: another method, path or body (`422`).
    IdempotencyKeyReused,
    /// The request body is larger than the idempotency layer buffers (`413`).
    RequestBodyTooLarge,
    /// The request body could not be read (`400`).
    RequestBodyFailed,
    /// A request with this key completed, but its response could not be stored for replay
    /// (its body was over [`max_record_body`](crate::IdempotencyLayer::max_record_body), or
    /// it had trailers): the layer keeps a "completed, not replayable" marker instead, and
    /// answers the key's retries with this (`409`, no `Retry-After`: retrying never helps),
    /// never running the handler twice. Use a new key to run it again.
    IdempotencyResponseNotReplayable,
    /// The store of idempotency records could not be reached or failed (`503` with
    /// `Retry-After`).
    RecordStoreUnavailable,
    /// The request's rate limit has no permit left: `429 Too Many Requests` with
    /// `Retry-After` (when the next permit comes, rounded up to whole seconds, at least 1),
    /// from a [`RateLimitLayer`](crate::RateLimitLayer).
    RateLimited,
}

impl RejectionKind {
    /// A short machine-readable code, the `code` member of the default JSON body.
    pub fn code(self) -> &'static str {
        match self {
            RejectionKind::MissingKey => "missing_lock_key",
            RejectionKind::InvalidKey => "invalid_lock_key",
            RejectionKind::Busy => "lock_busy",
            RejectionKind::PermitsInUse => "lock_permits_in_use",
            RejectionKind::Unavailable => "lock_unavailable",
            RejectionKind::Lost => "lock_lost",
            RejectionKind::Internal => "lock_error",
            RejectionKind::KeyNotInRoute => "lock_key_not_in_route",
            RejectionKind::IdempotencyKeyMissing => "idempotency_key_missing",
            RejectionKind::IdempotencyKeyInvalid => "idempotency_key_invalid",
            RejectionKind::IdempotencyScopeMissing => "idempotency_scope_missing",
            RejectionKind::IdempotencyKeyInUse => "idempotency_key_in_use",
            RejectionKind::IdempotencyKeyReused => "idempotency_key_reused",
            RejectionKind::RequestBodyTooLarge => "request_body_too_large",
            RejectionKind::RequestBodyFailed => "request_body_failed",
            RejectionKind::IdempotencyResponseNotReplayable => {
                "idempotency_response_not_replayable"
            }
            RejectionKind::RecordStoreUnavailable => "idempotency_store_unavailable",
            RejectionKind::RateLimited => "rate_limited",
        }
    }

    /// Whether the [`IdempotencyLayer`](crate::IdempotencyLayer) gives this kind (and the lock
    /// layer never does).
    pub fn is_idempotency(self) -> bool {
        matches!(
            self,
            RejectionKind::IdempotencyKeyMissing
                | RejectionKind::IdempotencyKeyInvalid
                | RejectionKind::IdempotencyScopeMissing
                | RejectionKind::IdempotencyKeyInUse
                | RejectionKind::IdempotencyKeyReused
                | RejectionKind::RequestBodyTooLarge
                | RejectionKind::RequestBodyFailed
                | RejectionKind::RecordStoreUnavailable
                | RejectionKind::IdempotencyResponseNotReplayable
        )
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
    Run(Option<AnyGuard>),
    Reject(Rejection),
}

/// Decides from an acquisition's outcome (`None`: cut off by the layer's acquire timeout),
/// records it on the request's span and logs it: `debug` for an acquisition, `warn` for a
/// request run without the lock (failing open), `error` for a misconfiguration. A rejection's
/// own `info` event is [`Rejection::log`]'s, when it becomes the response.
pub(crate) fn decide(
    outcome: Option<Result<AnyGuard, LockError>>,
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
    let fail_open = "lock service unavailable; running the request without the lock (fail open)";
    if fails_open(&rejection, settings.keys.fail_mode, span, fail_open) {
        return Decision::Run(None);
    }
    let error = rejection.error().map(tracing::field::display);
    match rejection.kind() {
        RejectionKind::Busy | RejectionKind::PermitsInUse => {
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

/// Whether a request that `rejection` would answer runs without the layer instead: true when
/// Redis is unavailable and the layer fails open ([`FailMode::Open`]), in which case it
/// records the outcome `fail_open` on the request's span and logs `message` at `warn`, with
/// the error and the rejection's detail. The one fail-open rule of the lock and rate-limit
/// layers.
pub(crate) fn fails_open(
    rejection: &Rejection,
    fail_mode: FailMode,
    span: &tracing::Span,
    message: &str,
) -> bool {
    if rejection.kind() != RejectionKind::Unavailable || fail_mode != FailMode::Open {
        return false;
    }
    span.record("outcome", "fail_open");
    tracing::warn!(
        error = rejection.error().map(tracing::field::display),
        detail = rejection.detail(),
        "{message}"
    );
    true
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

    /// The rejection for a failed acquisition.
    pub(crate) fn for_lock_error(error: LockError, settings: &Settings) -> Self {
        let unavailable = |detail: &str| {
            Self::new(
                RejectionKind::Unavailable,
                StatusCode::SERVICE_UNAVAILABLE,
                detail,
            )
            .with_retry_after(settings.keys.unavailable_retry_after)
        };
        let rejection = match &error {
            LockError::Timeout {
                name, holder_ttl, ..
            } => {
                let retry_after = busy_retry_after(
                    *holder_ttl,
                    settings.hold_times.average(),
                    settings.wait,
                    settings.max_retry_after,
                );
                let (kind, detail, what) = match settings.kind {
                    Kind::Permits(1) => (
                        RejectionKind::PermitsInUse,
                        "the only permit for this resource is in use".to_owned(),
                        format!("the only permit of `{name}` is in use"),
                    ),
                    Kind::Permits(n) => (
                        RejectionKind::PermitsInUse,
                        format!("all {n} permits for this resource are in use"),
                        format!("all {n} permits of `{name}` are in use"),
                    ),
                    _ => (
                        RejectionKind::Busy,
                        "another request holds the lock for this resource".to_owned(),
                        format!("lock `{name}` is held by another request"),
                    ),
                };
                // The attempt found it busy: say so, and how long it waited, rather than
                // "timed out after 247µs" for a single try.
                let logged = match settings.wait.min(settings.acquire_timeout()) {
                    wait if wait.is_zero() => format!("{what} (busy: a single attempt, no wait)"),
                    wait => format!("{what} (busy for the whole {wait:?} wait)"),
                };
                let mut rejection =
                    Self::new(kind, settings.busy_status, detail).with_retry_after(retry_after);
                rejection.logged_error = Some(logged);
                rejection
            }
            LockError::InvalidName { reason, .. } => Self::invalid_key(reason),
            // Settings that cannot work, here or on the Redis side (an ACL, certificates).
            LockError::InvalidOption { .. }
            | LockError::NoClient
            | LockError::SizeMismatch { .. }
            | LockError::NoPermission { .. }
            | LockError::AuthRequired { .. }
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
        .with_retry_after(settings.keys.unavailable_retry_after)
    }

    /// The rejection for a request aborted because its lock was lost.
    pub(crate) fn lost(settings: &Settings) -> Self {
        Self::new(
            RejectionKind::Lost,
            StatusCode::SERVICE_UNAVAILABLE,
            "the lock was lost while the request was running",
        )
        .with_retry_after(settings.keys.unavailable_retry_after)
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
        let layer = match self.kind {
            kind if kind.is_idempotency() => "idempotency",
            RejectionKind::RateLimited => "rate limit",
            _ => self.layer,
        };
        tracing::info!(
            status = self.status.as_u16(),
            code = self.kind.code(),
            lock,
            holder_lease_ms = holder_lease.map(ms),
            retry_after_ms = self.retry_after.map(ms),
            detail = %self.detail,
            error = self
                .logged_error
                .as_ref()
                .map(|e| e as &dyn fmt::Display)
                .or_else(|| self.error.as_ref().map(|e| e as &dyn fmt::Display))
                .map(tracing::field::display),
            "request rejected by the {layer} layer"
        );
    }

    /// Marks a rejection of a kind both layers give as the idempotency layer's (for its log).
    pub(crate) fn by_idempotency_layer(mut self) -> Self {
        self.layer = "idempotency";
        self
    }

    /// Marks a rejection of a kind several layers give as the rate-limit layer's (for its
    /// log).
    pub(crate) fn by_rate_limit_layer(mut self) -> Self {
        self.layer = "rate limit";
        self
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

/// The `Retry-After` of a busy answer before any of the layer's requests has released a lock:
/// the layer's wait, at least this.
pub(crate) const FIRST_BUSY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The `Retry-After` of a busy answer: how long the layer's requests have held their locks
/// lately (`recent_hold`, a moving average) or, before any has released one, the layer's
/// `wait` and at least [`FIRST_BUSY_RETRY_AFTER`]; never longer than the holder's remaining
/// lease (when it has one) nor than `cap`.
pub(crate) fn busy_retry_after(
    holder_ttl: Option<Duration>,
    recent_hold: Option<Duration>,
    wait: Duration,
    cap: Duration,
) -> Duration {
    let estimate = recent_hold.unwrap_or_else(|| wait.max(FIRST_BUSY_RETRY_AFTER));
    holder_ttl
        .map_or(estimate, |ttl| ttl.min(estimate))
        .min(cap)
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
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn busy_retry_after_is_the_recent_hold_or_at_first_the_wait_bounded() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let cap = s(5);
        // History: the recent holds, below the holder's lease and the cap.
        assert_eq!(
            busy_retry_after(Some(s(30)), Some(ms(200)), s(0), cap),
            ms(200)
        );
        assert_eq!(
            busy_retry_after(Some(ms(80)), Some(ms(200)), s(0), cap),
            ms(80)
        );
        assert_eq!(busy_retry_after(None, Some(s(60)), s(0), cap), cap);
        // No history yet: the wait, at least a second, not the 30 s watchdog lease.
        assert_eq!(busy_retry_after(Some(s(30)), None, s(0), cap), s(1));
        assert_eq!(busy_retry_after(Some(s(30)), None, ms(200), cap), s(1));
        assert_eq!(busy_retry_after(Some(s(30)), None, ms(2500), cap), ms(2500));
        assert_eq!(busy_retry_after(None, None, s(0), cap), s(1));
        assert_eq!(busy_retry_after(Some(ms(300)), None, s(0), cap), ms(300));
        assert_eq!(busy_retry_after(Some(s(30)), None, s(60), cap), cap);
        assert_eq!(busy_retry_after(Some(s(30)), None, s(0), ms(300)), ms(300));
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
