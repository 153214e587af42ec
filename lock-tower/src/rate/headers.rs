//! The rate-limit fields of a response, as the IETF draft "RateLimit header fields for HTTP"
//! (draft-ietf-httpapi-ratelimit-headers-10, September 2025) writes them: `RateLimit-Policy`
//! (the quota) and `RateLimit` (what is left of it), both lists of Structured Fields items
//! whose value is the policy's name.
//!
//! ```text
//! RateLimit-Policy: "default";q=20;w=2
//! RateLimit: "default";r=17;t=1
//! ```
//!
//! The draft is not an RFC yet: the names and the syntax may still change.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use lock_core::RateDecision;

use crate::retry_after::whole_seconds;

/// `RateLimit-Policy`: the quota, `"default";q=<burst>;w=<window>`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// `RateLimit`: what is left of the quota, `"default";r=<remaining>;t=<reset>`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The name of the layer's one policy in both fields.
pub const POLICY_NAME: &str = "default";

/// The `RateLimit-Policy` value of `decision`: `q` is the burst (the most permits at once:
/// the quota units of the window) and `w` the window, the time a full burst takes to come
/// back (burst × emission interval), in seconds rounded up, at least 1.
///
/// ```
/// use lock_tower::rate::policy_field;
/// # async fn f(decision: lock_core::RateDecision) {
/// // 10 per second, burst 20: `"default";q=20;w=2`.
/// let value = policy_field(&decision);
/// # }
/// ```
pub fn policy_field(decision: &RateDecision) -> HeaderValue {
    let window = decision
        .interval()
        .saturating_mul(u32::try_from(decision.burst()).unwrap_or(u32::MAX));
    let value = format!(
        "\"{POLICY_NAME}\";q={};w={}",
        decision.burst(),
        whole_seconds(window).max(1)
    );
    HeaderValue::try_from(value).expect("digits and ASCII punctuation")
}

/// The `RateLimit` value of `decision`: `r` the permits left after this request, `t` the
/// seconds until a full burst is free again (rounded up; 0 when it is).
pub fn ratelimit_field(decision: &RateDecision) -> HeaderValue {
    let value = format!(
        "\"{POLICY_NAME}\";r={};t={}",
        decision.remaining(),
        whole_seconds(decision.reset_after())
    );
    HeaderValue::try_from(value).expect("digits and ASCII punctuation")
}

/// Sets both fields of `decision` in `headers`, replacing any the response had.
pub fn insert_fields(headers: &mut HeaderMap, decision: &RateDecision) {
    headers.insert(RATELIMIT_POLICY, policy_field(decision));
    headers.insert(RATELIMIT, ratelimit_field(decision));
}
