//! The one decision tail of the keyed layers: once the store's call failed, a request either
//! runs without the layer (the layer fails open and the store is unavailable) or is
//! rejected, with its outcome on the request's span and a misconfiguration logged.

use super::settings::Keyed;
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
    let words = &C::WORDS;
    if rejection.kind() == RejectionKind::Unavailable && settings.keys().fail_mode == FailMode::Open
    {
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
        RejectionKind::Busy | RejectionKind::PermitsInUse => "busy",
        RejectionKind::Unavailable => "unavailable",
        RejectionKind::InvalidKey => "invalid_key",
        _ => "error",
    };
    span.record("outcome", outcome);
    if outcome == "error" {
        let error = rejection.error().map(tracing::field::display);
        tracing::error!(target: TARGET, error, "{}; the layer is misconfigured", words.failed);
    }
    Some(rejection)
}
