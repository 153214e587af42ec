//! The idempotency layer's answers in place of the handler's, as [`Rejection`]s: the table
//! of situations and responses is in the [module docs](super).

use http::StatusCode;
use http::header::HeaderName;
use lock_core::LockError;

use super::config::Settings;
use super::error::{StoreError, StoreErrorKind};
use crate::rejection::Rejection;
use crate::rejection_kind::RejectionKind;

/// The key header is missing, and the layer requires it for the request's method.
pub(crate) fn key_missing(header: &HeaderName) -> Rejection {
    Rejection::new(
        RejectionKind::IdempotencyKeyMissing,
        StatusCode::BAD_REQUEST,
        format!("this request needs an `{header}` header"),
    )
}

/// The key is not acceptable, for `reason` (which never repeats it).
pub(crate) fn key_invalid(reason: &str) -> Rejection {
    Rejection::new(
        RejectionKind::IdempotencyKeyInvalid,
        StatusCode::BAD_REQUEST,
        format!("the request's idempotency key is invalid: {reason}"),
    )
}

/// The layer scopes keys and the request has no scope.
pub(crate) fn scope_missing() -> Rejection {
    Rejection::new(
        RejectionKind::IdempotencyScopeMissing,
        StatusCode::BAD_REQUEST,
        "the request does not say whose idempotency key it is",
    )
}

/// The scope is not acceptable, for `reason`.
pub(crate) fn scope_invalid(reason: &str) -> Rejection {
    Rejection::new(
        RejectionKind::IdempotencyKeyInvalid,
        StatusCode::BAD_REQUEST,
        format!("the request's idempotency scope is invalid: {reason}"),
    )
}

/// Another request with the key holds its lock (`error`: lock-core's busy answer). Retry
/// after the holder's remaining lease when lock-core saw it (when the key is free at the
/// latest, unless its holder renews), else the layer's `retry_after`.
pub(crate) fn in_use(settings: &Settings, error: LockError) -> Rejection {
    let retry_after = match &error {
        LockError::Timeout {
            holder_ttl: Some(ttl),
            ..
        } => *ttl,
        _ => settings.retry_after,
    };
    Rejection::new(
        RejectionKind::IdempotencyKeyInUse,
        StatusCode::CONFLICT,
        "a request with this idempotency key is still being processed: retry later",
    )
    .with_retry_after(retry_after)
    .with_error(error)
}

/// The key's first request completed, and its response could not be kept for replay.
pub(crate) fn not_replayable(status: StatusCode) -> Rejection {
    Rejection::new(
        RejectionKind::IdempotencyResponseNotReplayable,
        StatusCode::CONFLICT,
        format!(
            "a request with this idempotency key completed (status {}), but its response was \
             too large to keep for replay: it is not run again; use a new key to repeat it",
            status.as_u16()
        ),
    )
}

/// The key's record was made by another request.
pub(crate) fn reused() -> Rejection {
    Rejection::new(
        RejectionKind::IdempotencyKeyReused,
        StatusCode::UNPROCESSABLE_ENTITY,
        "this idempotency key was used for another request (another method, path or body)",
    )
}

/// The request body is over the layer's limit.
pub(crate) fn body_too_large(limit: usize) -> Rejection {
    Rejection::new(
        RejectionKind::RequestBodyTooLarge,
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than {limit} bytes, the most this endpoint reads"),
    )
}

/// The request body could not be read.
pub(crate) fn body_failed(error: impl std::fmt::Display) -> Rejection {
    Rejection::new(
        RejectionKind::RequestBodyFailed,
        StatusCode::BAD_REQUEST,
        "the request body could not be read",
    )
    .with_logged_error(error)
}

/// The record store failed: `503` (`500` for a record it cannot read).
pub(crate) fn store_failed(settings: &Settings, error: &StoreError) -> Rejection {
    let rejection = if error.kind() == StoreErrorKind::Corrupt {
        Rejection::new(
            RejectionKind::Internal,
            StatusCode::INTERNAL_SERVER_ERROR,
            "the stored response of this idempotency key cannot be read",
        )
        .by_idempotency_layer()
    } else {
        Rejection::new(
            RejectionKind::RecordStoreUnavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            "the store of idempotency records is unavailable",
        )
        .with_retry_after(settings.unavailable_retry_after)
    };
    rejection.with_logged_error(error)
}

/// Taking the key's lock failed.
pub(crate) fn lock_failed(settings: &Settings, error: LockError) -> Rejection {
    match error {
        LockError::Timeout { .. } => in_use(settings, error),
        ref e if e.is_unavailable() || e.is_lost() => Rejection::new(
            RejectionKind::Unavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            "the lock service is unavailable",
        )
        .with_retry_after(settings.unavailable_retry_after)
        .with_error(error)
        .by_idempotency_layer(),
        _ => misconfigured(error),
    }
}

/// Taking the key's lock took longer than the layer's bound.
pub(crate) fn lock_timed_out(settings: &Settings) -> Rejection {
    Rejection::new(
        RejectionKind::Unavailable,
        StatusCode::SERVICE_UNAVAILABLE,
        "the lock service did not answer in time",
    )
    .with_retry_after(settings.unavailable_retry_after)
    .by_idempotency_layer()
}

/// The key's lock was lost while the handler ran: nothing was stored.
pub(crate) fn lost(settings: &Settings) -> Rejection {
    Rejection::new(
        RejectionKind::Lost,
        StatusCode::SERVICE_UNAVAILABLE,
        "the idempotency key's lock was lost while the request ran; nothing was recorded: retry",
    )
    .with_retry_after(settings.unavailable_retry_after)
    .by_idempotency_layer()
}

/// A setting that cannot work, or a lock error no request can fix.
pub(crate) fn misconfigured(error: LockError) -> Rejection {
    Rejection::misconfigured(error).by_idempotency_layer()
}
