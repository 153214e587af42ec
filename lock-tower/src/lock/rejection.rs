//! The lock layer's answers in place of the handler's, as [`Rejection`]s: a failed or
//! timed-out acquisition, and a lock lost while the request ran. The table of situations and
//! responses is in the [crate docs](crate).

use http::StatusCode;
use lock_core::LockError;

use super::settings::{Kind, Settings};
use crate::rejection::Rejection;
use crate::rejection_kind::RejectionKind;
use crate::retry_after::busy_retry_after;

/// The rejection for a failed acquisition.
pub(crate) fn for_lock_error(error: LockError, settings: &Settings) -> Rejection {
    let unavailable = |detail: &str| {
        Rejection::new(
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
            Rejection::new(kind, settings.busy_status, detail)
                .with_retry_after(retry_after)
                .with_logged_error(logged)
        }
        LockError::InvalidName { reason, .. } => Rejection::invalid_key(reason),
        // Settings that cannot work, here or on the Redis side (an ACL, certificates).
        LockError::InvalidOption { .. }
        | LockError::NoClient
        | LockError::SizeMismatch { .. }
        | LockError::NoPermission { .. }
        | LockError::AuthRequired { .. }
        | LockError::Tls { .. } => return Rejection::misconfigured(error),
        LockError::Lost { .. } => unavailable("the lock was lost while it was being taken"),
        _ => unavailable("the lock service is unavailable"),
    };
    rejection.with_error(error)
}

/// The rejection for an acquisition cut off by the layer's own bound.
pub(crate) fn acquire_timed_out(settings: &Settings) -> Rejection {
    Rejection::new(
        RejectionKind::Unavailable,
        StatusCode::SERVICE_UNAVAILABLE,
        "the lock service did not answer in time",
    )
    .with_retry_after(settings.keys.unavailable_retry_after)
}

/// The rejection for a request aborted because its lock was lost.
pub(crate) fn lost(settings: &Settings) -> Rejection {
    Rejection::new(
        RejectionKind::Lost,
        StatusCode::SERVICE_UNAVAILABLE,
        "the lock was lost while the request was running",
    )
    .with_retry_after(settings.keys.unavailable_retry_after)
}
