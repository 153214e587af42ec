//! Exactly once at the HTTP edge: [`IdempotencyLayer`] runs a request that carries an
//! idempotency key once, under the key's lock, keeps its response, and answers the key's
//! retries with it (the IETF httpapi `Idempotency-Key` draft).
//!
//! A request with an `Idempotency-Key` header:
//!
//! 1. **first time**: the layer reads its body (up to [`max_request_body`]) and fingerprints
//!    it (method, path and query, body: [`Fingerprint`]), takes the key's lock (a lock-core
//!    mutex, fenced), runs the handler with the same bytes, stores the response (status, the
//!    [`replay_headers`], the body up to [`max_record_body`]) and the fingerprint in a
//!    [`RecordStore`] for [`ttl`], gives the lock back, and answers;
//! 2. **again while the first still runs**: `409 Conflict` with `Retry-After` (the holder's
//!    remaining lease; or, with a [`wait`], it waits for the first to finish and is replayed
//!    its response);
//! 3. **again after it completed**: the stored response, marked `Idempotent-Replayed: true`,
//!    without running the handler, on any instance;
//! 4. **again with another request** (another method, path or body): `422`;
//! 5. **again after it completed with a response too large to keep** (over
//!    [`max_record_body`], or with trailers): `409` `idempotency_response_not_replayable`,
//!    never a second run (the layer stores a "completed, not replayable" marker,
//!    [`Record::not_replayable`]).
//!
//! The key is the header's value, bare (`Idempotency-Key: 8e03978e`) or as a structured-field
//! string (`Idempotency-Key: "8e03978e"`, RFC 8941, the form the IETF draft writes): both are
//! the key `8e03978e`.
//!
//! # Names: what to give lockctl
//!
//! The key's lock and its record share one name, [`record_key`]`(prefix, scope, key)`:
//! `prefix + scope + ":" + key`, so an unscoped layer's (prefix `idem:`) is **`idem::<key>`**
//! (an empty scope between the two colons) and a scoped one's `idem:<scope>:<key>`; a key
//! with whitespace or braces (or a very long one) is hashed (`idem:sha256:<hex>`). Look at a
//! key with `lockctl status --idempotency-key 8e03978e` (`--scope S` for a scoped layer,
//! `--idempotency-prefix P` for another prefix), or with the name itself, `lockctl status
//! 'idem::8e03978e'`: its lock (held while the first request runs) and its record (size,
//! fencing token). Inside a handler, [`Idempotency::record_key`] says the same name.
//!
//! # Leases: slow handlers and crash takeover
//!
//! By default the key's lock has the client's **watchdog lease**, renewed while the request
//! runs: a slow handler keeps it, and when an instance crashes mid-request the key's retries
//! get `409` until that lease runs out, then run on another instance. Its length,
//! [`LockClientBuilder::watchdog_lease`](lock_core::LockClientBuilder::watchdog_lease)
//! (default 30 s), is the crash-takeover setting (the example sets 10 s).
//! [`fixed_lease`](IdempotencyLayer::fixed_lease) instead holds the lock for a fixed time
//! that is never renewed: a handler that runs longer loses it and stores nothing.
//!
//! Requests without the header run as they would without the layer, unless their method is
//! one the layer [requires a key for](IdempotencyLayer::require_for) (`400`).
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use axum::http::{HeaderName, Method, StatusCode};
//! use axum::{Extension, Router, routing::post};
//! use lock_core::LockClient;
//! use lock_tower::{Header, Idempotency, IdempotencyLayer};
//!
//! async fn charge(idem: Option<Extension<Idempotency>>, body: String) -> (StatusCode, String) {
//!     // Once per key: retries get this response back, byte for byte. Pass the fencing token
//!     // with the charge's writes, so a request that lost the key's lock cannot write late.
//!     let token = idem.map(|Extension(idem)| idem.fencing_token());
//!     (StatusCode::CREATED, format!("charged {body} (token {token:?})"))
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Crash takeover: the watchdog lease, renewed while a request runs, is how long a key
//!     // stays `409` after its instance died mid-request (default 30 s).
//!     let client = LockClient::builder("redis://127.0.0.1:6379")
//!         .watchdog_lease(Duration::from_secs(10))
//!         .build()
//!         .await?;
//!     let app = Router::new().route(
//!         "/charges",
//!         post(charge).route_layer(
//!             IdempotencyLayer::new(client)
//!                 // Keys are the client's own: scope them by who sends them.
//!                 .scope(Header::new(HeaderName::from_static("x-client-id")))
//!                 .require_for([Method::POST]),
//!         ),
//!     );
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//!     axum::serve(listener, app).await?;
//!     Ok(())
//! }
//! ```
//!
//! Add it with `route_layer`, outside any [`DistributedLockLayer`](crate::DistributedLockLayer)
//! of the route (added after it), so that a replay needs no other lock. The handler finds
//! [`Idempotency`] (the key, the record key, the fencing token) and the key's
//! [`HeldLock`](lock_core::HeldLock) in the request's extensions; a `DistributedLockLayer`
//! inside puts its own `HeldLock` there instead, so read the key's token from `Idempotency`.
//!
//! # Status codes
//!
//! Rejections are the crate's [`Rejection`](crate::Rejection)s: a JSON problem document
//! (RFC 9457, `application/problem+json`) with a `code`, or what
//! [`on_rejection`](IdempotencyLayer::on_rejection) makes of them. Each is logged once at
//! `info` ("request rejected by the idempotency layer").
//!
//! | situation | status | `code` ([`RejectionKind`](crate::RejectionKind)) | stored |
//! |---|---|---|---|
//! | no key, and none [required](IdempotencyLayer::require_for) for the method | the handler's | | no |
//! | no key, and one is required | 400 | `idempotency_key_missing` | |
//! | a key that is empty, over 255 bytes ([`MAX_KEY_LEN`]), not printable ASCII, a bad structured-field string, or sent twice | 400 | `idempotency_key_invalid` | |
//! | a scoped layer and no scope in the request | 400 | `idempotency_scope_missing` | |
//! | a scope that is over 255 bytes or has control characters | 400 | `idempotency_key_invalid` | |
//! | a body over [`max_request_body`] (1 MiB) | 413 | `request_body_too_large` | |
//! | a body that fails while it is read | 400 | `request_body_failed` | |
//! | the key's record, made by this same request (fingerprint) | the record's, with `Idempotent-Replayed: true` | | (it is) |
//! | the key's record, made by another request | 422 | `idempotency_key_reused` | |
//! | the key's lock held by its first request, past [`wait`] | 409, `Retry-After`: the holder's remaining lease (else [`retry_after`](IdempotencyLayer::retry_after), 1 s) | `idempotency_key_in_use` | |
//! | the key's record is a "completed, not replayable" marker of this same request | 409, no `Retry-After` | `idempotency_response_not_replayable` | (it is) |
//! | the handler answers, a [final](IdempotencyLayer::store_if) response (not `5xx`, no `Retry-After`), body within [`max_record_body`] (256 KiB) | the handler's | | **yes** |
//! | the handler answers `5xx`, or with `Retry-After` (a lock layer inside found its lock busy, say) | the handler's | | no: a retry runs again |
//! | the handler's body is larger, or has trailers | the handler's, whole | | a "completed, not replayable" marker (logged at `warn`) |
//! | the inner service fails (its error type), or the client goes away | | | no |
//! | the key's lock lost while the handler runs ([`LeaseLost::Abort`](crate::LeaseLost::Abort)) | 503, `Retry-After` | `lock_lost` | no |
//! | the same with [`LeaseLost::Continue`](crate::LeaseLost::Continue) | the handler's | | no |
//! | the store unavailable ([`FailMode::Closed`](crate::FailMode::Closed)); **Redis down with the default store**, whose record read comes first | 503, `Retry-After` | `idempotency_store_unavailable` | |
//! | Redis unavailable for the lock while the store answers (a store of your own) (`Closed`) | 503, `Retry-After` | `lock_unavailable` | |
//! | either, with [`FailMode::Open`](crate::FailMode::Open) | the handler's, run without lock or record | | no |
//! | a stored record that cannot be read | 500 | `lock_error` | |
//! | a setting that cannot work | 500 | `lock_error` | |
//!
//! Every `Retry-After` is whole seconds (rounded up, at least 1), and the body's
//! `retry_after_ms` is the same value in milliseconds. Alert on Redis outages behind this
//! layer with `idempotency_store_unavailable` as well as `lock_unavailable`: with the default
//! store the record is read first, so an outage is seen there.
//!
//! Bad input never panics: a key is checked as bytes before anything else, the scope and
//! the key make a lock name (hashed when they cannot be one as they are), and a stored record
//! is decoded with every length checked.
//!
//! # What is guaranteed, and what is not
//!
//! * **One at a time per key**, across every instance that shares the Redis: the handler runs
//!   only under the key's lock (its fencing token is in [`Idempotency`]).
//! * **A stored response is the answer** to every retry of the same request with the key until
//!   its [`ttl`] (24 h) runs out: same status, kept headers and body bytes, from any
//!   instance, without the handler (and without the lock: a replay is one read).
//! * **Nothing is stored unless the response was made and stored under the lock**: a handler
//!   that fails, is cancelled, or loses the key's lock stores nothing, so its retry runs again.
//!   The lock is checked before the store; and a request whose lock was taken over stores with
//!   an older fencing token than the newer holder, so the store refuses its late write if the
//!   newer holder has stored (the [`RecordStore`] contract).
//! * **Not exactly-once by itself.** With [`LockClientStore`] (the default) the record is written
//!   after the handler's work: a crash, a lost lock or a store failure between the two loses
//!   the record, and the retry runs the handler again. Make the handler's writes cope (fenced by
//!   [`Idempotency::fencing_token`], conditional), or write the record **in the handler's own
//!   database transaction** with a store of that database (see [`Idempotency`]): the business
//!   rows and the record then commit together, and a retry after a crash is replayed, not
//!   re-applied.
//! * A store that loses data (a Redis failover to a replica without the record, an evicting
//!   `maxmemory-policy`) loses replays: the retry runs again.
//! * After the [`ttl`], or for a request with another key, nothing is remembered.
//!
//! # Tracing
//!
//! Every request with a key gets an `INFO` span `idempotency` with `key` (the record key,
//! shortened), `outcome` (`replayed`, `ran` then `stored` / `stored_by_handler` /
//! `not_replayable` (its marker stored) / `not_stored` / `lost`, `not_replayable` (a retry
//! answered from a marker), `in_use`, `reused`, `invalid_key`, `missing_key`,
//! `missing_scope`, `unavailable`, `fail_open`, `error`; `no_key` for a request without one)
//! and `token` (the fencing token). Events: the rejection's `info`; `warn` for a response too
//! large to keep (its marker stored instead), a store that failed or a lost lock, and for
//! failing open; `debug` for acquisitions, stores, replays and releases.
//!
//! [`max_request_body`]: IdempotencyLayer::max_request_body
//! [`max_record_body`]: IdempotencyLayer::max_record_body
//! [`replay_headers`]: IdempotencyLayer::replay_headers
//! [`ttl`]: IdempotencyLayer::ttl
//! [`wait`]: IdempotencyLayer::wait

mod config;
mod context;
mod error;
mod finish;
mod future;
mod key;
mod layer;
mod prepare;
mod record;
mod redis_store;
mod rejection;
mod service;
mod store;

pub use config::{
    DEFAULT_MAX_RECORD_BODY, DEFAULT_MAX_REQUEST_BODY, DEFAULT_TTL, IDEMPOTENCY_KEY,
    IDEMPOTENT_REPLAYED, MAX_RECORD_BODY, is_final,
};
pub use context::Idempotency;
pub use error::{StoreError, StoreErrorKind};
pub use future::ResponseFuture;
pub use key::{MAX_KEY_LEN, MAX_SCOPE_LEN, record_key};
pub use layer::{IdempotencyLayer, Unscoped};
pub use record::{Fingerprint, Record};
pub use redis_store::LockClientStore;
#[allow(deprecated)]
pub use redis_store::RedisStore;
pub use service::Idempotent;
pub use store::{RecordStore, StoreFuture};
