//! Rate limits per key for HTTP services: [`RateLimitLayer`] takes one permit of a Redis
//! rate limit ([`lock_core::RateLimit`], GCRA on the server's clock) for each request, so
//! every instance of a service shares one allowance per key (a user, an API token, an IP).
//!
//! The key comes from the request through the same [`KeyExtractor`](crate::KeyExtractor)s as
//! the lock layer's ([`PathParam`](crate::PathParam), [`Header`](crate::Header),
//! [`QueryParam`](crate::QueryParam), [`PathSegment`](crate::PathSegment), the client's
//! address with [`PeerIp`](crate::PeerIp) or [`ForwardedIp`](crate::ForwardedIp), closures
//! such as `|req| header_value(req, "x-api-key")`), checked by the same rules, under a
//! prefix. The
//! quota is one [`Quota`](lock_core::Quota) or, with [`RateLimitLayer::quota_by`], chosen
//! per request ([`QuotaPolicy`]: tiers).
//!
//! ```
//! use axum::{Router, body::Body, http::Request, routing::post};
//! use lock_core::{LockClient, Quota};
//! use lock_tower::{RateLimitLayer, header_value};
//!
//! async fn search() -> &'static str {
//!     "results"
//! }
//!
//! # async fn app(client: LockClient) -> Router {
//! // 10 searches per second per API key, up to 20 at once: `rate:search:<key>`.
//! Router::new().route(
//!     "/search",
//!     post(search).route_layer(
//!         RateLimitLayer::new(
//!             client,
//!             |req: &Request<Body>| header_value(req, "x-api-key"),
//!             Quota::per_second(10).burst(20),
//!         )
//!         .prefix("rate:search:"),
//!     ),
//! )
//! # }
//! ```
//!
//! # Responses
//!
//! Every response that went through a check carries the IETF draft's fields
//! (draft-ietf-httpapi-ratelimit-headers-10, see [`RATELIMIT_POLICY`] and [`RATELIMIT`]):
//!
//! ```text
//! RateLimit-Policy: "default";q=50;w=1, "burst";q=10
//! RateLimit: "default";r=9;t=1
//! ```
//!
//! `w` is the seconds a full burst takes to come back (rounded up, at least 1) and `q` the
//! permits the rate gives over `w`, so `q / w` is the rate (50 per second above); the burst,
//! when it is not that `q`, is a second policy `"burst"` with `q` only. `r` is the permits
//! left and `t` the seconds until quota is available again: until the next permit comes back
//! (rounded up; 0 when the whole burst is free), so on a `429` it is the `Retry-After`.
//!
//! | situation | [`RejectionKind`](crate::RejectionKind) (body's `code`) | status | `Retry-After` | RateLimit fields |
//! |---|---|---|---|---|
//! | a permit was free | (the inner service answers) | its own | no | yes |
//! | no permit left | `RateLimited` (`rate_limited`) | 429 | when the next permit comes, whole seconds rounded up, at least 1 | yes (`r=0`) |
//! | no key in the request ([`MissingKey::Reject`](crate::MissingKey::Reject)) | `MissingKey` (`missing_lock_key`) | 400 | no | no |
//! | a [`PathParam`](crate::PathParam) the route does not declare (logged at `error` once per route) | `KeyNotInRoute` (`lock_key_not_in_route`) | 500 | no | no |
//! | key too long, control characters, not a valid name | `InvalidKey` (`invalid_lock_key`) | 400 | no | no |
//! | the store down, slow past the client's timeouts (or [`check_timeout`](RateLimitLayer::check_timeout)), or failing ([`FailMode::Closed`](crate::FailMode::Closed)) | `Unavailable` (`lock_unavailable`) | 503 | [`unavailable_retry_after`](RateLimitLayer::unavailable_retry_after) | no |
//! | the same, with [`fail_open`](RateLimitLayer::fail_open) | (the inner service answers, unlimited) | its own | no | no |
//! | the same, with [`fail_local`](RateLimitLayer::fail_local) | decided in this instance (approximate: `N` instances admit up to `N` × the quota) | as above: its own, or `429` | as above | yes |
//! | a setting that cannot work: an empty prefix, a quota [`Quota::check`](lock_core::Quota::check) refuses (at build, or from [`quota_by`](RateLimitLayer::quota_by)), a store that refuses the client (ACL, password, no scripting) | `Internal` (`lock_error`) | 500 | no | no |
//!
//! The `429`'s body is the crate's JSON problem document (RFC 9457,
//! `application/problem+json`), which never repeats the key:
//!
//! ```json
//! {"type":"about:blank","title":"Too Many Requests","status":429,"code":"rate_limited",
//!  "detail":"too many requests: the rate limit of this resource has no permit left",
//!  "retry_after_ms":1000}
//! ```
//!
//! [`on_rejection`](RateLimitLayer::on_rejection) answers differently; the RateLimit fields
//! are added to its `429` all the same.
//!
//! # Defaults
//!
//! | setting | default | |
//! |---|---|---|
//! | [`prefix`](RateLimitLayer::prefix) | `"rate:"` | limit name = prefix + key |
//! | quota | none: [`RateLimitLayer::new`] takes one | or [`quota_by`](RateLimitLayer::quota_by) |
//! | [`fail_mode`](RateLimitLayer::fail_mode) | [`FailMode::Closed`](crate::FailMode::Closed): `503` | [`fail_open`](RateLimitLayer::fail_open) lets requests through; [`fail_local`](RateLimitLayer::fail_local) limits in each instance |
//! | [`check_timeout`](RateLimitLayer::check_timeout) | none of its own: the client's [`response_timeout`](lock_core::LockClientBuilder::response_timeout) (1 s) for the one call, after up to its [`connect_timeout`](lock_core::LockClientBuilder::connect_timeout) (2 s) when no pooled connection answers | one call per request, never retried |
//! | [`missing_key`](RateLimitLayer::missing_key) | [`MissingKey::Reject`](crate::MissingKey::Reject): `400` | [`MissingKey::PassThrough`](crate::MissingKey::PassThrough) lets the request through unlimited |
//! | [`max_key_len`](RateLimitLayer::max_key_len) | 128 bytes | |
//! | [`hash_keys`](RateLimitLayer::hash_keys) | off | |
//! | [`unavailable_retry_after`](RateLimitLayer::unavailable_retry_after) | 1 s | |
//!
//! # Metrics and tracing
//!
//! Every check the layer sends is counted by lock-core, with its `metrics` feature on, in
//! `lock_rate_limit_decisions_total{kind="rate_limit", outcome}` (`allowed`, `limited`,
//! `unavailable`, `invalid`), with a `family` label where the client has a
//! [`metric_label`](lock_core::LockClientBuilder::metric_label) (give it the limit's name,
//! prefix included, and map each prefix to a family); see [`lock_core::metrics`].
//!
//! Every request also gets an `INFO` span `rate_limit` with the fields `family` (the layer's
//! prefix: one per kind of limit, never a key), `key` (the limit's name, shortened to 64
//! characters), `outcome` (`allowed`, `limited`, `unavailable`, `fail_open`, `missing_key`,
//! `invalid_key`, `no_key` for a pass-through, `error`) and `remaining`: counted by `family`
//! and `outcome` (with `tracing-opentelemetry`, or a subscriber layer of your own), they also
//! give the requests that never reached Redis (missing or bad keys). Events: one per
//! rejected request, `request rejected by the rate limit layer` (`debug` for a `429` or a
//! bad key, which a service expects; `info` for a `503` or a `500`), with `status`, `code`,
//! `retry_after_ms`, `detail` and `error`; `warn` when a request is let through failing
//! open; `error` for a misconfigured layer; `debug` for an allowed request.
//!
//! # Testing with the in-memory backend
//!
//! lock-core's in-memory server (its `testing` feature, in your dev-dependencies) runs the
//! same script on tokio's clock, so a test can spend a limit and wait for it to come back
//! without Redis and without sleeping (`start_paused`: tokio's `test-util` feature):
//!
//! ```
//! use std::time::Duration;
//!
//! use axum::{Router, body::Body, http::{Request, StatusCode}, routing::get};
//! use lock_core::{LockClient, Quota};
//! use lock_tower::{PathParam, RateLimitLayer};
//! use tower::ServiceExt;
//!
//! // In a test: #[tokio::test(start_paused = true)] async fn ...
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let client = LockClient::in_memory().await.unwrap();
//! // 2 per second per user: a permit every 500 ms, 2 at once.
//! let app = Router::new().route(
//!     "/users/{user}",
//!     get(|| async { "hello" }).route_layer(RateLimitLayer::new(
//!         client,
//!         PathParam::new("user"),
//!         Quota::per_second(2),
//!     )),
//! );
//! let get = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();
//!
//! let res = app.clone().oneshot(get("/users/7")).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//! assert_eq!(res.headers()["ratelimit-policy"], "\"default\";q=2;w=1");
//! assert_eq!(res.headers()["ratelimit"], "\"default\";r=1;t=1");
//! app.clone().oneshot(get("/users/7")).await.unwrap();
//!
//! // The third request within the second is refused, with the time to wait.
//! let res = app.clone().oneshot(get("/users/7")).await.unwrap();
//! assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(res.headers()["retry-after"], "1");
//! assert_eq!(res.headers()["ratelimit"], "\"default\";r=0;t=1");
//!
//! // Another user has a limit of their own; user 7's permits come back one per 500 ms.
//! let res = app.clone().oneshot(get("/users/8")).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//! tokio::time::sleep(Duration::from_secs(1)).await;
//! let res = app.oneshot(get("/users/7")).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//! # }
//! ```
//!
//! # Faults
//!
//! A restart or failover that loses a limit's key gives that key a full burst again (see
//! [`lock_core::rate_limit`]); a limited request takes nothing, so clients retrying in a loop
//! do not push their limit further away. Put the layer *outside* layers that do expensive
//! work (and inside authentication, when the key is the authenticated user), so refused
//! requests cost one store call.

mod config;
mod future;
mod headers;
mod layer;
mod quota;
mod service;

pub use future::ResponseFuture;
pub use headers::{
    BURST_POLICY_NAME, POLICY_NAME, RATELIMIT, RATELIMIT_POLICY, insert_fields, policy_field,
    ratelimit_field,
};
pub use layer::RateLimitLayer;
pub use quota::QuotaPolicy;
pub use service::RateLimit;

/// The former name of [`RateLimit`], the rate-limit service (tower-http's naming: the
/// layer is `XLayer`, its service `X`).
#[deprecated(since = "0.1.0", note = "renamed `lock_tower::rate::RateLimit`")]
pub type RateLimitService<S, K, Q, R = crate::response::DefaultRejection> = RateLimit<S, K, Q, R>;

/// The former name of [`ResponseFuture`], the rate-limit service's response future.
#[deprecated(since = "0.1.0", note = "renamed `lock_tower::rate::ResponseFuture`")]
pub type RateLimitFuture<S, ReqBody, ResBody, R> = ResponseFuture<S, ReqBody, ResBody, R>;
