//! The app's rate limits, on lock-core's `rate_limit`: one decision is one call to the Redis
//! every instance shares, so three instances let one buyer through at the quota's rate, not
//! three times it.
//!
//! | limit | name | default | on |
//! |---|---|---|---|
//! | per buyer | `buyer:<X-User-Id>` | 2 per second, 5 at once | purchase attempts (`POST /api/sales/{id}/orders`) |
//! | per client | `client:<X-Client-Id>`, else `client:<peer IP>` | 200 per second, 400 at once | the storefront's API (`/api/…`), payment callbacks excepted |
//!
//! A refused request is answered `429 Too Many Requests` with `Retry-After` (the rate limit's
//! `retry_after`, rounded up to whole seconds), as a problem document like the app's other
//! rejections: code `buyer_rate_limited` or `client_rate_limited`.
//!
//! * **Where the per-buyer limit sits**: inside the idempotency layer (a retry of a request
//!   with its `Idempotency-Key` is answered from its record and costs no attempt) and outside
//!   the buyer lock and the purchase, so an attempt over the quota takes no lock, reads no
//!   database and never queues at the sale's stock lock.
//! * **The client**: `X-Client-Id` when the request has a well-formed one (the demo's load
//!   gives each simulated browser its own, since all of them come from one loopback address),
//!   else the peer's IP address. Behind a proxy, key on the address the proxy reports; a
//!   client can send any `X-Client-Id`, so in production this header would come from a
//!   session, not from the client.
//! * **Payment callbacks** are not limited: they come from the payment provider, and refusing
//!   one would leave an order unpaid.
//! * **Redis unavailable**: the limits let the request through (fail open) and log a warning;
//!   a purchase then meets its locks, which answer `503`.
//!
//! `serve --no-limit` (and `demo --no-limit`) turns both off, to show what they prevent.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::Method;
use lock_core::{LockClient, Quota};

use crate::error::ApiError;
use crate::model::UserId;
use crate::shop::Shop;

/// The default per-buyer quota on purchase attempts: 2 per second, 5 at once.
pub const BUYER_QUOTA: Quota = Quota::per_second(2).burst(5);
/// The default per-client quota on the API: 200 per second, 400 at once.
pub const CLIENT_QUOTA: Quota = Quota::per_second(200).burst(400);
/// The header that names a client for the per-client limit.
pub const CLIENT_ID_HEADER: &str = "x-client-id";
/// The problem code of a purchase refused by the per-buyer limit.
pub const BUYER_LIMITED: &str = "buyer_rate_limited";
/// The problem code of a request refused by the per-client limit.
pub const CLIENT_LIMITED: &str = "client_rate_limited";

/// The quotas of an instance's rate limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Per buyer, on purchase attempts.
    pub buyer: Quota,
    /// Per client, on the API.
    pub client: Quota,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            buyer: BUYER_QUOTA,
            client: CLIENT_QUOTA,
        }
    }
}

/// The rate limit's name of buyer `user`.
pub fn buyer_limit_name(user: &str) -> String {
    format!("buyer:{user}")
}

/// The rate limit's name of a client.
pub fn client_limit_name(client: &str) -> String {
    format!("client:{client}")
}

/// Takes one permit of `name`'s limit: `Err(429)` when it has none free; `Ok` when it had,
/// and when Redis could not say (fail open).
async fn take(
    locks: &LockClient,
    name: String,
    quota: Quota,
    code: &'static str,
) -> Result<(), ApiError> {
    match locks.rate_limit(&name).quota(quota).check().await {
        Ok(decision) if decision.is_allowed() => Ok(()),
        Ok(decision) => Err(ApiError::rate_limited(
            code,
            format!(
                "too many requests for {name} (at most {quota}): try again in {:?}",
                decision.retry_after()
            ),
            decision.retry_after().max(Duration::from_millis(1)),
        )),
        Err(error) => {
            tracing::warn!(%error, %name, "rate limit unavailable: letting the request through");
            Ok(())
        }
    }
}

/// The per-buyer limit on purchase attempts: a route layer of `POST
/// /api/sales/{sale_id}/orders`. A request without a well-formed `X-User-Id` passes (the
/// handler answers it `400`).
pub async fn per_buyer(State(shop): State<Arc<Shop>>, req: Request, next: Next) -> Response {
    let user = req
        .headers()
        .get("x-user-id")
        .and_then(|v| v.to_str().ok())
        .filter(|u| UserId::is_valid(u))
        .map(buyer_limit_name);
    if let (Some(name), Some(limits)) = (user, shop.limits())
        && let Err(refused) = take(shop.locks(), name, limits.buyer, BUYER_LIMITED).await
    {
        return refused.into_response();
    }
    next.run(req).await
}

/// Who a request comes from, for the per-client limit: its `X-Client-Id` if well-formed, else
/// its peer's IP address, else `unknown`.
fn client_of(req: &Request) -> String {
    let header = req
        .headers()
        .get(CLIENT_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|c| UserId::is_valid(c));
    match header {
        Some(client) => client.to_owned(),
        None => req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or_else(|| "unknown".to_owned(), |c| c.0.ip().to_string()),
    }
}

/// Whether the per-client limit applies to `req`: the API, but not payment callbacks.
fn limited_route(req: &Request) -> bool {
    let path = req.uri().path();
    path.starts_with("/api/") && !(req.method() == Method::POST && path.ends_with("/pay"))
}

/// The per-client limit on the API: a layer of the whole router (inside the rejection
/// counter, so its `429`s are counted).
pub async fn per_client(State(shop): State<Arc<Shop>>, req: Request, next: Next) -> Response {
    if let Some(limits) = shop.limits().filter(|_| limited_route(&req))
        && let Err(refused) = take(
            shop.locks(),
            client_limit_name(&client_of(&req)),
            limits.client,
            CLIENT_LIMITED,
        )
        .await
    {
        return refused.into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_quotas_are_valid_and_named() {
        assert!(BUYER_QUOTA.check().is_ok());
        assert!(CLIENT_QUOTA.check().is_ok());
        assert!(lock_core::validate_name(&buyer_limit_name("buyer-000001")).is_ok());
        assert!(lock_core::validate_name(&client_limit_name("::1")).is_ok());
    }

    #[test]
    fn payment_callbacks_are_not_limited() {
        let req = |method: Method, path: &str| {
            Request::builder()
                .method(method)
                .uri(path)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        assert!(limited_route(&req(Method::GET, "/api/sales/s/stats")));
        assert!(limited_route(&req(Method::POST, "/api/sales/s/orders")));
        assert!(!limited_route(&req(Method::POST, "/api/orders/o/pay")));
        assert!(!limited_route(&req(Method::GET, "/metrics")));
        assert!(!limited_route(&req(Method::GET, "/")));
    }
}
