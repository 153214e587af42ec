//! The decision from an acquisition's outcome to running the request (with the lock, or
//! without it when the layer fails open) or rejecting it, recorded on the request's span and
//! logged.

use lock_core::LockError;

use crate::fail_open::fails_open;
use crate::guard::AnyGuard;
use crate::rejection::Rejection;
use crate::rejection_kind::RejectionKind;
use crate::settings::Settings;

/// The target of this file's events: the one they had when the decision lived in `response`,
/// so log filters that name that module keep seeing them.
const TARGET: &str = "lock_tower::response";

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
                target: TARGET,
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
            tracing::error!(target: TARGET, error, "could not take the lock; the layer is misconfigured");
        }
    }
    Decision::Reject(rejection)
}
