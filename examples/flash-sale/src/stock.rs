//! Where a sale's stock is kept: in the database (`sales.stock`, the default) or in Redis
//! (`--stock-in redis`), beside the sale's stock lock.
//!
//! # In the database
//!
//! The purchase claims the sale with its fencing token, reads the stock and writes the new
//! stock with the order in one transaction, only while the claim stands: see [`crate::shop`].
//!
//! # In Redis
//!
//! The stock is a counter at [`redis_key`] (`stock:{sale:<id>:stock}`, in the stock lock's
//! Cluster slot). The purchase takes one unit with a **guarded update** of lock-core
//! (`held.update().take(key, 1, 0)`): one server-side step that checks the purchase still
//! holds the sale's stock lock and only then decrements the counter, never below 0. A holder
//! that stalled past its lease finds its lock gone at that step and takes nothing (the
//! purchase is answered `503 stale_lock`); a unit is never sold twice. The order is then
//! written to the database with the counter's new value as `sales.stock`, which there is
//! only a copy for the API and the invariants (written only downwards, so a late copy never
//! raises it).
//!
//! What each store protects, and what it does not:
//! - both: the stock never goes below zero and no unit is sold twice, also under a stalled
//!   holder;
//! - in Redis, the unit is taken before the order is written: if the database then refuses the
//!   order, the unit is given back while the lock is still held (another guarded update),
//!   and counted as lost (logged) if it is not — a unit may go unsold, never be sold twice;
//! - the per-buyer limit is a read of the buyer's orders under the lock in both; with the
//!   stock in Redis a stalled holder's order can still land after a newer holder's read of the
//!   same buyer (its unit was taken while it held the lock, so the stock stays exact).
//!
//! Without the locks (`--no-lock`) the Redis store reads the counter and writes it back
//! decremented, as a hand-written shop would: the control that oversells.

use lock_core::{HeldLock, LockClient, LockError, Updated};

use crate::error::ApiError;
use crate::model::SaleId;

/// Where a sale's stock is kept (`serve --stock-in`, `demo --stock-in`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StockStore {
    /// `sales.stock` in the database, written with the fencing token (the default).
    #[default]
    Sql,
    /// A counter in Redis, taken with a guarded update (see the module docs).
    Redis,
}

impl StockStore {
    /// `"sql"` or `"redis"`, as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            StockStore::Sql => "sql",
            StockStore::Redis => "redis",
        }
    }
}

/// The name of sale `id`'s stock lock, the one its purchases take.
pub fn lock_name(id: &SaleId) -> String {
    format!("sale:{id}:stock")
}

/// The Redis key of sale `id`'s stock counter: `stock:{sale:<id>:stock}`, in the Cluster slot
/// of its stock lock, so a guarded update can check the lock and take from it in one step.
pub fn redis_key(id: &SaleId) -> Result<String, ApiError> {
    lock_core::update::key_in_slot("stock:", &lock_name(id)).map_err(redis_error)
}

/// What a guarded take of one unit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// One unit taken.
    Sold {
        /// The units left after this one.
        left: i64,
    },
    /// Nothing left: nothing taken.
    SoldOut,
    /// The purchase does not hold the sale's lock any more: nothing taken.
    NotHeld,
}

fn redis_error(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(&format!("stock in Redis: {e}"))
}

/// Sets sale `id`'s counter to `stock` (when the sale is created).
pub async fn put(locks: &LockClient, id: &SaleId, stock: i64) -> Result<(), ApiError> {
    let mut conn = locks.connection();
    lock_core::redis::cmd("SET")
        .arg(redis_key(id)?)
        .arg(stock)
        .query_async::<()>(&mut conn)
        .await
        .map_err(redis_error)
}

/// Sale `id`'s counter, if it has one.
pub async fn read(locks: &LockClient, id: &SaleId) -> Result<Option<i64>, ApiError> {
    let mut conn = locks.connection();
    lock_core::redis::cmd("GET")
        .arg(redis_key(id)?)
        .query_async(&mut conn)
        .await
        .map_err(redis_error)
}

/// Takes one unit of sale `id` while `held` is still the sale's stock lock's holder.
pub async fn take(held: &HeldLock, id: &SaleId) -> Result<Taken, ApiError> {
    match held.update().take(&redis_key(id)?, 1, 0).send().await {
        Ok(Updated::Applied { values }) => match values.first() {
            Some(&left) => Ok(Taken::Sold { left }),
            None => Err(ApiError::internal(&"a take answered no value")),
        },
        Ok(Updated::NotEnough { .. }) => Ok(Taken::SoldOut),
        Ok(Updated::NotHeld) => Ok(Taken::NotHeld),
        Ok(other) => Err(ApiError::internal(&format!("a take answered {other:?}"))),
        Err(LockError::Lost { .. }) => Ok(Taken::NotHeld),
        Err(e) => Err(redis_error(e)),
    }
}

/// Gives back the unit a purchase took when its order could not be written: applied only
/// while `held` still holds the lock (no other purchase has seen the counter since). A unit
/// that cannot be given back is logged as lost (the sale sells one fewer: never one more).
pub async fn give_back(held: &HeldLock, id: &SaleId) {
    let outcome = match redis_key(id) {
        Ok(key) => held.update().add(&key, 1).send().await,
        Err(e) => {
            tracing::warn!(sale = %id, error = %e, "no stock key to give a unit back to");
            return;
        }
    };
    if !matches!(outcome, Ok(Updated::Applied { .. })) {
        tracing::warn!(sale = %id, ?outcome,
            "a unit taken for an order that was not written could not be given back");
    }
}
