//! [`QuotaPolicy`]: the quota of a request's rate limit, the same for every request or chosen
//! from the request (tiers).

use http::Request;
use lock_core::Quota;

/// Gives the [`Quota`] of a request's rate limit.
///
/// Implemented by [`Quota`] itself (every request has the same quota) and by every
/// `Fn(&Request<B>) -> Quota`, so a closure can choose a tier from the request (a plan
/// header set by your gateway, an authenticated extension):
///
/// ```
/// use axum::http::Request;
/// use lock_core::Quota;
/// use lock_tower::QuotaPolicy;
///
/// let by_plan = |req: &Request<()>| match req.headers().get("x-plan") {
///     Some(plan) if plan == "pro" => Quota::per_second(100).burst(200),
///     _ => Quota::per_second(5),
/// };
/// let req = Request::builder().header("x-plan", "pro").body(()).unwrap();
/// assert_eq!(by_plan.quota(&req).rate(), 100);
/// ```
///
/// A quota that cannot work ([`Quota::check`]) is the server's fault: the request is answered
/// `500` with a [`RejectionKind::Internal`](crate::RejectionKind::Internal) rejection
/// carrying the [`LockError::InvalidOption`](lock_core::LockError::InvalidOption), logged at
/// `error`.
///
/// The quota is part of the limit's state in the store only through the emission interval
/// and burst each check sends: two requests for one key with different quotas share the
/// key's state, each judged by its own quota. Give tiers different keys (or prefixes) when
/// that is not what you want.
pub trait QuotaPolicy<B> {
    /// The quota of `request`'s rate limit.
    fn quota(&self, request: &Request<B>) -> Quota;
}

impl<B> QuotaPolicy<B> for Quota {
    fn quota(&self, _request: &Request<B>) -> Quota {
        *self
    }
}

impl<B, F> QuotaPolicy<B> for F
where
    F: Fn(&Request<B>) -> Quota,
{
    fn quota(&self, request: &Request<B>) -> Quota {
        self(request)
    }
}
