//! A flash-sale inventory app that sells exactly its stock across several instances.
//!
//! Several `flash-sale serve` processes share one Redis and one database (SQLite by default,
//! PostgreSQL with `DATABASE_URL=postgres://...`). The locks from `lock-core` make the sale
//! safe across them:
//!
//! * the purchase — a multi-step business transaction — runs under
//!   `#[distributed_lock(key = "sale:{sale_id}:stock")]`, and its stock write carries the
//!   lock's fencing token so a holder that stalled past its lease cannot write stale stock
//!   ([`shop`]); with `--stock-in redis` the stock is a Redis counter instead, taken by a
//!   guarded update that checks the lock in the same step ([`stock`]);
//! * a `lock-tower` layer keyed on the buyer per sale turns double clicks away with `409`,
//!   and one keyed on the order id makes payment callbacks idempotent ([`api`]);
//! * lock-core's rate limits keep one buyer's purchase attempts and one client's API requests
//!   to a quota shared by every instance, answering `429` beyond it ([`limits`]);
//! * `lock-tower`'s idempotency layer answers the retries of a purchase or a payment that
//!   carries an `Idempotency-Key` with its first answer, recorded in the database in the
//!   transaction that wrote the order or the payment ([`idempotency`]).
//!
//! The binary also has the load tool ([`load`], `flash-sale load`) that checks the sale's
//! invariants straight in the database ([`invariants`]), and the demo ([`demo`],
//! `flash-sale demo`) that starts everything, sells 100 items to 5,000 requests over 3
//! instances, and ends with a `RESULT` line.
//!
//! Each instance serves its metrics at `GET /metrics` ([`telemetry`]) and the state of a
//! sale's stock lock at `GET /api/sales/{sale_id}/lock`, which the storefront's lock panel
//! shows ([`panel`]).

#![forbid(unsafe_code)]

pub mod api;
pub mod cluster;
pub mod db;
pub mod demo;
pub mod error;
pub mod greedy;
pub mod idempotency;
pub mod invariants;
pub mod limits;
pub mod load;
pub mod model;
pub mod outcome;
pub mod panel;
pub mod serve;
pub mod shop;
pub mod stock;
pub mod telemetry;
