//! The rate-limit fields of a response, as the IETF draft "RateLimit header fields for HTTP"
//! (draft-ietf-httpapi-ratelimit-headers-10, September 2025) writes them: `RateLimit-Policy`
//! (the quota) and `RateLimit` (what is left of it), both lists of Structured Fields items
//! whose value is a policy's name.
//!
//! ```text
//! RateLimit-Policy: "default";q=50;w=1, "burst";q=10
//! RateLimit: "default";r=9;t=1
//! ```
//!
//! The draft is not an RFC yet: the names and the syntax may still change.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use lock_core::RateDecision;

use crate::retry_after::{retry_after_secs, whole_seconds};

/// `RateLimit-Policy`: the quota, `"default";q=<permits>;w=<window>` and, when the burst is
/// not those permits, `, "burst";q=<burst>`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// `RateLimit`: what is left of the quota, `"default";r=<remaining>;t=<seconds>`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The name of the layer's rate policy in both fields.
pub const POLICY_NAME: &str = "default";

/// The name of the burst policy in `RateLimit-Policy`: the most permits at once, without a
/// window (the draft's `w` is optional), listed when it differs from the rate policy's `q`.
pub const BURST_POLICY_NAME: &str = "burst";

/// The `RateLimit-Policy` value of `decision`.
///
/// The `"default"` policy says the rate: `w` is the time a full burst takes to come back
/// (burst × emission interval) in whole seconds rounded up, at least 1, and `q` the permits
/// the rate gives over `w` (`w` ÷ interval, rounded down), so `q / w` is the real rate. When
/// the burst (the most permits at once) is not `q`, a second policy `"burst"` says it, with
/// `q` only.
///
/// ```
/// use lock_tower::rate::policy_field;
/// # async fn f(decision: lock_core::RateDecision) {
/// // 10 per second, burst 20: `"default";q=20;w=2`.
/// // 50 per second, burst 10: `"default";q=50;w=1, "burst";q=10`.
/// let value = policy_field(&decision);
/// # }
/// ```
pub fn policy_field(decision: &RateDecision) -> HeaderValue {
    let interval = decision.interval();
    let burst = decision.burst();
    let window =
        whole_seconds(interval.saturating_mul(u32::try_from(burst).unwrap_or(u32::MAX))).max(1);
    let interval_us = interval.as_micros().max(1);
    let quota = u64::try_from(u128::from(window) * 1_000_000 / interval_us).unwrap_or(u64::MAX);
    let mut value = format!("\"{POLICY_NAME}\";q={quota};w={window}");
    if quota != burst {
        value.push_str(&format!(", \"{BURST_POLICY_NAME}\";q={burst}"));
    }
    HeaderValue::try_from(value).expect("digits and ASCII punctuation")
}

/// The `RateLimit` value of `decision`: `r` the permits left after this request, `t` the
/// seconds until quota is available again, rounded up: until the next permit comes back
/// ([`RateDecision::next_permit_after`]; 0 when the whole burst is free). On a `429` it is
/// the `Retry-After`.
pub fn ratelimit_field(decision: &RateDecision) -> HeaderValue {
    let next = decision.next_permit_after();
    let seconds = if decision.is_allowed() {
        whole_seconds(next)
    } else {
        retry_after_secs(decision.retry_after())
    };
    let value = format!("\"{POLICY_NAME}\";r={};t={seconds}", decision.remaining(),);
    HeaderValue::try_from(value).expect("digits and ASCII punctuation")
}

/// Sets both fields of `decision` in `headers`, replacing any the response had.
pub fn insert_fields(headers: &mut HeaderMap, decision: &RateDecision) {
    headers.insert(RATELIMIT_POLICY, policy_field(decision));
    headers.insert(RATELIMIT, ratelimit_field(decision));
}
