//! The one decision tail of the keyed layers: once the store's call failed, a request either
//! runs without the layer (the layer fails open and the store is unavailable) or is
//! rejected, with its outcome on the request's span and a misconfiguration logged.

use super::settings::Keyed;
use super::words::Words;
use crate::config::FailMode;
use crate::rejection::Rejection;
use crate::rejection_kind::RejectionKind;

/// The target of this file's events: the one they had when the decision lived in `response`,
/// so log filters that name that module keep seeing them.
const TARGET: &str = "lock_tower::response";

/// What a request that the store's failure would answer with `rejection` gets: `None` to run
/// without the layer (Redis unavailable and the layer fails open: the outcome `fail_open` is
/// recorded and the layer's fail-open words logged at `warn`, with the error and the
/// rejection's detail), or the rejection, with the outcome recorded (`busy`, `unavailable`,
/// `invalid_key`, or `error`, logged at `error` as a misconfiguration). A rejection's own
/// `info` event is [`Rejection::log`]'s, when it becomes the response.
pub(crate) fn refuse<C: Keyed>(
    rejection: Rejection,
    settings: &C,
    span: &tracing::Span,
) -> Option<Rejection> {
    decide(rejection, settings.keys().fail_mode, &C::WORDS, span)
}

/// [`refuse`] for a layer that is told its fail mode and words directly (the idempotency
/// layer, whose keys are not [`Keyed`]). An outage is a rejection of kind `Unavailable` or
/// `RecordStoreUnavailable` (a record store's); a key in use is `in_use`, a lock lost while
/// the request ran `unavailable`; an `error` is logged as a misconfiguration when it carries
/// the [`LockError`](lock_core::LockError) that caused it.
pub(crate) fn decide(
    rejection: Rejection,
    fail_mode: FailMode,
    words: &Words,
    span: &tracing::Span,
) -> Option<Rejection> {
    let outage = matches!(
        rejection.kind(),
        RejectionKind::Unavailable | RejectionKind::RecordStoreUnavailable
    );
    if outage && fail_mode == FailMode::Open {
        span.record("outcome", "fail_open");
        tracing::warn!(
            target: TARGET,
            error = rejection.error().map(tracing::field::display),
            detail = rejection.detail(),
            "{}",
            words.fail_open
        );
        return None;
    }
    let outcome = match rejection.kind() {
        _ if outage => "unavailable",
        RejectionKind::Busy | RejectionKind::PermitsInUse => "busy",
        RejectionKind::IdempotencyKeyInUse => "in_use",
        RejectionKind::Lost => "unavailable",
        RejectionKind::InvalidKey => "invalid_key",
        _ => "error",
    };
    span.record("outcome", outcome);
    if outcome == "error"
        && let Some(error) = rejection.error()
    {
        tracing::error!(target: TARGET, error = %error, "{}; the layer is misconfigured", words.failed);
    }
    Some(rejection)
}
