//! A [tower] layer that serialises HTTP requests per key (an order id, a user id) across every
//! instance of a service, with a Redis lock from [`lock_core`].
//!
//! Each request that passes through [`DistributedLockLayer`] takes the lock named
//! `prefix + key`, where a [`KeyExtractor`] finds the key in the request; the inner service
//! runs while the lock is held, and the lock is given back once the response body has been
//! sent. Requests for different keys run concurrently; requests for the same key, on any
//! instance, run one at a time or are turned away.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use axum::{Extension, Router, body::Body, extract::Path, http::Request, routing::post};
//! use lock_core::{HeldLock, LockClient};
//! use lock_tower::{DistributedLockLayer, PathParam, header_value};
//!
//! async fn pay(Path(order_id): Path<String>, Extension(lock): Extension<HeldLock>) -> String {
//!     // Only one request per order gets here at a time, on any instance. Pass the fencing
//!     // token to the database so a request that lost its lock cannot write late.
//!     format!("paid {order_id} with token {:?}", lock.fencing_token())
//! }
//!
//! async fn buy(Path(sale_id): Path<String>) -> String {
//!     format!("one item of sale {sale_id}")
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let client = LockClient::connect("redis://127.0.0.1:6379").await?;
//!     let app = Router::new()
//!         // Locks `order:<order_id>`: a second payment of the same order meanwhile gets 409.
//!         .route(
//!             "/orders/{order_id}/pay",
//!             post(pay).route_layer(
//!                 DistributedLockLayer::new(client.clone(), PathParam::new("order_id"))
//!                     .prefix("order:"),
//!             ),
//!         )
//!         // Locks `http:<user id>`: one purchase per user at a time, queueing up to 200 ms.
//!         .route(
//!             "/sales/{sale_id}/orders",
//!             post(buy).route_layer(
//!                 DistributedLockLayer::new(client, |req: &Request<Body>| {
//!                     header_value(req, "x-user-id")
//!                 })
//!                 .wait(Duration::from_millis(200)),
//!             ),
//!         );
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//!     axum::serve(listener, app).await?;
//!     Ok(())
//! }
//! ```
//!
//! Add the layer with `route_layer` (of a `MethodRouter`, as above, or of a `Router`), not
//! `Router::layer`: it then runs only for requests that matched a route, so route parameters
//! exist and unknown paths stay `404` instead of becoming `400` or `409`. Note that
//! `Router::route_layer` applies to *every* route added before it, so give each route its
//! own layer as above, or build one `Router` per layer and `merge` them.
//!
//! The handler finds the lock in the request extensions as a [`HeldLock`](lock_core::HeldLock)
//! (`Extension<HeldLock>` in axum): its name, its fencing token, and whether it is still held.
//!
//! # Kinds of lock
//!
//! | layer | per key | handler's fencing token |
//! |---|---|---|
//! | [`DistributedLockLayer::new`] | a [`Mutex`](lock_core::Mutex): one request at a time | yes |
//! | [`.fair()`](DistributedLockLayer::fair) | a [`FairLock`](lock_core::FairLock): one at a time, waiting requests in arrival order | yes |
//! | [`.read_write()`](DistributedLockLayer::read_write) | a [`ReadWriteLock`](lock_core::ReadWriteLock): `GET`/`HEAD`/`OPTIONS` read together, other methods write alone ([`read_write_by`](DistributedLockLayer::read_write_by) chooses the side yourself) | writers |
//! | [`.permits(n)`](DistributedLockLayer::permits) | a [`Semaphore`](lock_core::Semaphore) of `n`: at most `n` requests at once, across every instance | no |
//!
//! # A lock is not idempotency
//!
//! The layer stops two requests for one key from running *at the same time*. A retried
//! request that arrives after the first one finished (a payment callback replayed by the
//! provider, a double click after a slow response) takes the free lock and runs again. Make
//! the handler check a durable record of what it already did, under the lock, and write it
//! with the fencing token (see the `lock-core` docs, "a lock is not idempotency"), or put an
//! [`IdempotencyLayer`] in front of it: requests with an `Idempotency-Key` run once and their
//! retries are answered with the stored response (see [`idempotency`]).
//!
//! # Rate limits
//!
//! A lock lets one request per key in at a time; a rate limit lets many in, at a rate.
//! [`RateLimitLayer`] takes one permit of a Redis rate limit ([`lock_core::RateLimit`]) per
//! request, keyed by the same extractors under a prefix (default `"rate:"`), so every
//! instance shares one allowance per key. Requests past it get `429 Too Many Requests` with
//! `Retry-After` and a `rate_limited` problem document, and every checked response carries
//! the `RateLimit-Policy` and `RateLimit` fields of the IETF draft. It fails closed (`503`)
//! unless told [`fail_open`](RateLimitLayer::fail_open); the quota is one
//! [`Quota`](lock_core::Quota) or chosen per request ([`quota_by`](RateLimitLayer::quota_by)).
//!
//! ```no_run
//! use axum::{Router, routing::post};
//! use lock_core::{LockClient, Quota};
//! use lock_tower::{PathParam, RateLimitLayer};
//!
//! # async fn f(client: LockClient) -> Router {
//! async fn buy() -> &'static str { "ordered" }
//!
//! // 5 purchase attempts per second per buyer, across every instance.
//! Router::new().route(
//!     "/buyers/{buyer}/orders",
//!     post(buy).route_layer(
//!         RateLimitLayer::new(client, PathParam::new("buyer"), Quota::per_second(5))
//!             .prefix("rate:buy:"),
//!     ),
//! )
//! # }
//! ```
//!
//! See the [`rate`] module for the responses, the defaults, tracing and a test on the
//! in-memory backend.
//!
//! # Defaults and status codes
//!
//! | setting | default | |
//! |---|---|---|
//! | [`prefix`](DistributedLockLayer::prefix) | `"http:"` | lock name = prefix + key; always present, so a request cannot lock names outside it |
//! | [`wait`](DistributedLockLayer::wait) | zero: one attempt, fail fast | how long to queue for a busy lock |
//! | [`busy_status`](DistributedLockLayer::busy_status) | `409 Conflict` | or `423`, `429`, `503`; with `Retry-After` |
//! | [`max_retry_after`](DistributedLockLayer::max_retry_after) | 5 s | the busy `Retry-After` is the recent average hold time of this layer's requests (before any of them has released its lock: the layer's `wait`, at least 1 s), at most the holder's remaining lease and this cap |
//! | [`acquire_timeout`](DistributedLockLayer::acquire_timeout) | `wait` + 2 s | hard bound on taking the lock; past it `503` |
//! | [`fail_mode`](DistributedLockLayer::fail_mode) | [`FailMode::Closed`]: `503` + `Retry-After` when Redis is unavailable | [`FailMode::Open`] runs the handler unlocked |
//! | [`missing_key`](DistributedLockLayer::missing_key) | [`MissingKey::Reject`]: `400` | [`MissingKey::PassThrough`] runs the handler unlocked |
//! | [`max_key_len`](DistributedLockLayer::max_key_len) | 128 bytes | longer keys, empty keys, keys with control characters, whitespace or braces: `400` |
//! | [`hash_keys`](DistributedLockLayer::hash_keys) | off | on: keys that break the rules lock the SHA-256 of the key instead of getting `400` (sanitise or hash ids you do not control) |
//! | [`unavailable_retry_after`](DistributedLockLayer::unavailable_retry_after) | 1 s | `Retry-After` of a `503` |
//! | [`on_lease_lost`](DistributedLockLayer::on_lease_lost) | [`LeaseLost::Abort`]: cancel the handler, `503` | [`LeaseLost::Continue`] lets it finish |
//! | [`release`](DistributedLockLayer::release) | [`Release::AfterBody`]: after the last body frame | [`Release::AfterHandler`]: when the handler returns |
//! | [`fixed_lease`](DistributedLockLayer::fixed_lease) | the client's watchdog lease, renewed while the request runs | a fixed lease, never renewed |
//! | [`on_rejection`](DistributedLockLayer::on_rejection) | [`DefaultRejection`]: JSON problem document | any `Fn(Rejection) -> Response<B>` |
//!
//! Every situation and its response:
//!
//! | situation | [`RejectionKind`] | status | `Retry-After` |
//! |---|---|---|---|
//! | no key in the request ([`MissingKey::Reject`]) | `MissingKey` | 400 | no |
//! | no key because the route cannot have one: a [`PathParam`] the route does not declare, or no matched route ([`MissingKey::Reject`]) | `KeyNotInRoute` | 500 | no |
//! | key too long, control characters, not a valid lock name | `InvalidKey` | 400 | no |
//! | lock held by another request past `wait` | `Busy` | 409 (see [`busy_status`](DistributedLockLayer::busy_status)) | recent average hold time (at first the `wait`, at least 1 s), capped |
//! | all `n` permits in use past `wait` ([`.permits(n)`](DistributedLockLayer::permits)) | `PermitsInUse` | as `Busy` | as `Busy` |
//! | Redis down, slow or failing ([`FailMode::Closed`]) | `Unavailable` | 503 | [`unavailable_retry_after`](DistributedLockLayer::unavailable_retry_after) |
//! | lease lost while the handler ran ([`LeaseLost::Abort`]) | `Lost` | 503 | [`unavailable_retry_after`](DistributedLockLayer::unavailable_retry_after) |
//! | a setting that cannot work (empty prefix, lease out of range, 0 permits), or a Redis that refuses the client (an ACL permission, a password: `NoPermission`, `AuthRequired`, `Tls`) | `Internal` | 500 | no |
//!
//! The default body is a small JSON problem document (RFC 9457,
//! `content-type: application/problem+json`) that never repeats the request's key:
//!
//! ```json
//! {"type":"about:blank","title":"Conflict","status":409,"code":"lock_busy",
//!  "detail":"another request holds the lock for this resource","retry_after_ms":1000}
//! ```
//!
//! `retry_after_ms` and `Retry-After` are one value: the layer's estimate rounded up to whole
//! seconds, at least 1 (what the header can carry), so a client that reads either waits as
//! long.
//!
//! The inner service's error type is never changed: the layer answers with responses, so
//! under axum it stays `Infallible`.
//!
//! **Fail closed by default.** When Redis is down or too slow, a request cannot know whether
//! another request holds its key, so by default it is answered `503 Service Unavailable` with
//! `Retry-After` (never later than the acquire timeout) rather than run unprotected. Choose
//! [`FailMode::Open`] only for locks that merely avoid duplicate work.
//!
//! # The lock's lifetime
//!
//! * It is taken before the inner service is called, and given back once the response body
//!   is complete: a small body (a size hint of at most [`lock::BUFFER_LIMIT`], 64 KiB, as
//!   for any `Full`, JSON or string body) is read in full under the lock, the lock is given
//!   back, and the response goes out in one piece; a larger or open-ended body streams under
//!   the lock, and the release completes *before* its last frame goes out. Either way a client
//!   that has the whole response can lock the same key again at once.
//! * If the client disconnects, the handler's future or the body is dropped and the lock is
//!   released in the background at once (not when the lease runs out).
//! * If the lock is lost while the request runs (its lease expired: Redis unreachable for
//!   longer than the lease, or a fixed lease too short), the handler is cancelled and the
//!   client gets `503`, or the body is cut off if it is already streaming; see [`LeaseLost`].
//!   A response is never sent as a success without a valid lock: the lock is checked (its
//!   validity against the clock, not only the `lost` signal) before the handler is polled,
//!   again when its response is ready, before each frame of a streaming body goes out, and
//!   the release's own answer is checked before the response (or a streaming body's last
//!   frame) is handed on; a handler that finishes in the step after its process stalled past
//!   the lease gets `503`, its response dropped. What ran before the handler's last `.await`
//!   did run: give its writes the [fencing token](lock_core::HeldLock::fencing_token).
//! * Every request is its own lock owner, so two requests for one key always exclude each
//!   other, even from one task. The exception is a request future polled inside a
//!   [`lock_core::reentrant`] scope (unusual for a server: its connection tasks are not): the
//!   scope owns what it locks, so such requests would re-enter each other's locks.
//! * The handler runs as the request's lock holder (a [`lock_core::ReentrantScope`]): taking
//!   the same lock again (with `LockClient::lock` on the same client or `#[distributed_lock]`
//!   on the same name) re-enters it instead of waiting for itself, and
//!   [`lock_core::current_lock`] finds it. The [`HeldLock`](lock_core::HeldLock) extension is the handler's view
//!   of it too. Tasks the handler spawns are other holders.
//!
//! # Streaming bodies: serve with `TCP_NODELAY`
//!
//! For a streaming body (above [`lock::BUFFER_LIMIT`] or of unknown size) the last frame
//! goes out only once the lock is released, so the response leaves in at least two writes.
//! With Nagle's algorithm on (the default for `axum::serve`), the last write can wait for the
//! client's delayed ACK, about 40 ms on Linux. Small bodies are not affected (they are read
//! under the lock and sent in one piece after the release). For streaming responses, turn it
//! on:
//!
//! ```no_run
//! # async fn f(app: axum::Router) -> std::io::Result<()> {
//! use axum::serve::ListenerExt;
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000")
//!     .await?
//!     .tap_io(|tcp| {
//!         let _ = tcp.set_nodelay(true);
//!     });
//! axum::serve(listener, app).await
//! # }
//! ```
//!
//! # Tracing
//!
//! Every request gets an `INFO` span `distributed_lock` with the fields `key` (the lock name,
//! shortened to 64 characters), `outcome` (`acquired`, `busy`, `unavailable`, `fail_open`,
//! `missing_key`, `invalid_key`, `no_key` for a pass-through, `error`), `wait_ms` (time spent
//! taking the lock), `held_ms` (time it was held) and `lost` (set when it was lost while
//! held). The handler runs inside it, so its own events carry the key.
//!
//! Events: exactly one per rejected request, `request rejected by the lock layer`, at
//! `debug` for the refusals a service expects (409 busy, 400 missing or invalid key: see
//! [`RejectionKind::is_expected`]) and at `info` for the others (503 unavailable or lost,
//! 500 misconfigured), with
//! `status`, `code` (see [`RejectionKind::code`]), `lock` (the lock's name when the error
//! names it), `holder_lease_ms` (for a busy lock, the holder's remaining lease from Redis's
//! busy answer — free to know, since the attempt reads it — absent when the lock has no
//! expiry or the layer's own acquire timeout cut the wait), `retry_after_ms`, `detail` and
//! `error` (for a busy lock: what was busy and how long the request waited, e.g. ``lock
//! `order:42` is held by another request (busy: a single attempt, no wait)``); the key is on
//! its span. Also: `warn` when a request runs without the lock
//! (failing open) or a lock is lost while its handler runs, `error` for a misconfigured layer
//! (besides its 500's `info`; for a key the route cannot have, once per route, with the
//! `parameter` and the `route`), `debug` for acquisitions and releases. A default
//! `tracing_subscriber::fmt()` prints the `info` events:
//!
//! ```text
//! INFO distributed_lock{key=order:42 outcome="busy" wait_ms=0}: lock_tower::response: request rejected by the lock layer status=409 code="lock_busy" lock="order:42" holder_lease_ms=29873 retry_after_ms=1000 ...
//! ```
//!
//! # Layer order
//!
//! Layers *inside* this one (closer to the handler) run while the lock is held, and any
//! capacity they reserve in `poll_ready` stays reserved while the request waits for the lock.
//! Put timeouts that should also bound the wait for the lock *outside* it.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// A lock guard kept alive by a `match` that then locks the same mutex deadlocks: it happened.
#![warn(clippy::significant_drop_in_scrutinee)]

pub mod body;
mod config;
mod deferred;
pub mod idempotency;
mod keyed;
pub mod lock;
mod macros;
pub mod rate;
mod rejection;
mod rejection_kind;
mod response;
mod retry_after;

pub use config::{FailMode, LeaseLost, MissingKey, Release, Side};
#[allow(deprecated)]
pub use idempotency::RedisStore;
pub use idempotency::{
    Fingerprint, Idempotency, IdempotencyLayer, Idempotent, LockClientStore, Record, RecordStore,
    StoreError, StoreErrorKind, Unscoped,
};
pub use keyed::client_ip::ForwardedIp;
#[cfg(feature = "axum")]
pub use keyed::client_ip::PeerIp;
#[cfg(feature = "axum")]
pub use keyed::extract::PathParam;
pub use keyed::extract::{
    Header, KeyExtractor, PathSegment, QueryParam, RouteMismatch, header_value,
};
pub use lock::{DistributedLock, DistributedLockLayer};
pub use rate::{QuotaPolicy, RateLimitLayer};
pub use rejection::Rejection;
pub use rejection_kind::RejectionKind;
pub use response::{DefaultRejection, OnRejection};

/// The former name of [`rate::RateLimit`], the rate-limit service.
#[deprecated(since = "0.1.0", note = "renamed `lock_tower::rate::RateLimit`")]
pub type RateLimitService<S, K, Q, R = DefaultRejection> = rate::RateLimit<S, K, Q, R>;

/// The lock layer's response future and its buffering limit at their former path: they are
/// [`lock::ResponseFuture`] and [`lock::BUFFER_LIMIT`] (each layer's module has its own
/// `ResponseFuture`, as in tower-http).
pub mod future {
    pub use crate::lock::{BUFFER_LIMIT, ResponseFuture};
}

/// The crate README's example, compiled as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
