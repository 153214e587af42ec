//! The one fail-open rule of the lock and rate-limit layers: a request that Redis being
//! unavailable would reject runs without the layer instead when the layer fails open.

use crate::config::FailMode;
use crate::rejection::Rejection;
use crate::rejection_kind::RejectionKind;

/// The target of this file's event: the one it had when the rule lived in `response`, so log
/// filters that name that module keep seeing it.
const TARGET: &str = "lock_tower::response";

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
        target: TARGET,
        error = rejection.error().map(tracing::field::display),
        detail = rejection.detail(),
        "{message}"
    );
    true
}
