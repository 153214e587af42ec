//! The decision from an acquisition's outcome to running the request (with the lock, or
//! without it when the layer fails open) or rejecting it, recorded on the request's span and
//! logged.

use lock_core::LockError;

use super::guard::AnyGuard;
use super::rejection;
use super::settings::Settings;
use crate::keyed::decision::refuse;
use crate::rejection::Rejection;

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
        Some(Err(error)) => rejection::for_lock_error(error, settings),
        None => rejection::acquire_timed_out(settings),
    };
    match refuse(rejection, settings, span) {
        None => Decision::Run(None),
        Some(rejection) => Decision::Reject(rejection),
    }
}
