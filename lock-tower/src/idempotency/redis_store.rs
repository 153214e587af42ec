//! [`LockClientStore`] (formerly `RedisStore`): records next to the key's lock, through
//! lock-core's [`record`](lock_core::record) API on the layer's own [`LockClient`]: in its
//! Redis, or in its in-memory server on lock-core's `memory` backend.

use std::fmt;
use std::time::Duration;

use lock_core::fenced::Fenced;
use lock_core::record::Records;
use lock_core::{LockClient, LockError};

use super::error::StoreError;
use super::record::Record;
use super::store::{RecordStore, StoreFuture};

/// The default [`RecordStore`]: the records of the layer's own [`LockClient`] (whatever its
/// backend: Redis, or lock-core's in-memory server in tests). Each record is one Redis string
/// next to the key's lock,
/// `P{name}:record` (`P` the client's key prefix, `name` the
/// [record key](crate::Idempotency::record_key)), in the lock's Cluster slot, written with
/// lock-core's fenced put ([`Records::put`]: one Lua script, or a compare-and-set with `SET …
/// IFEQ` on a Valkey without Lua) and expiring with its time to live.
///
/// # What it guarantees, and what not
///
/// * A completed request's record is found by every instance that shares the Redis: its
///   retries are replayed, and a request that finds the key's lock busy gets `409`.
/// * The record is written after the handler's own work, so **a crash (or a Redis failure)
///   after the handler's writes and before the record is stored loses the record**: the retry
///   then runs the handler again. The handler's own writes must cope: fence them with the
///   token (`Idempotency::fencing_token`) and make them conditional (`UPDATE … WHERE status =
///   'reserved'`), or write the record in the handler's own transaction with a store of your
///   database (as the flash-sale example does).
/// * Redis persistence and replication apply: a record acknowledged by a primary that then
///   fails before its replica or its disk has it is lost (the retry runs again), as for locks.
/// * An evicting `maxmemory-policy` may drop records before their time.
#[derive(Clone)]
pub struct LockClientStore {
    records: Records,
}

impl LockClientStore {
    /// Records on `client`'s Redis, under its key prefix.
    pub fn new(client: &LockClient) -> Self {
        Self {
            records: client.records(),
        }
    }
}

impl RecordStore for LockClientStore {
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Record>> {
        Box::pin(async move {
            match self.records.get(key).await.map_err(store_error)? {
                Some(stored) => Record::from_bytes(stored.value()).map(Some),
                None => Ok(None),
            }
        })
    }

    fn put<'a>(
        &'a self,
        key: &'a str,
        record: &'a Record,
        token: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, Fenced> {
        Box::pin(async move {
            self.records
                .put(key, &record.to_bytes(), token, ttl)
                .await
                .map_err(store_error)
        })
    }
}

/// The former name of [`LockClientStore`], which is not Redis-only: it keeps records wherever
/// its [`LockClient`] keeps locks.
#[deprecated(
    since = "0.1.0",
    note = "renamed `LockClientStore` (it is not Redis-only)"
)]
pub type RedisStore = LockClientStore;

fn store_error(error: LockError) -> StoreError {
    if error.is_unavailable() {
        StoreError::unavailable(error)
    } else if matches!(&error, LockError::UnexpectedReply(_))
        || matches!(&error, LockError::Redis(e) if e.code() == Some("WRONGTYPE"))
    {
        StoreError::corrupt(error)
    } else {
        StoreError::other(error)
    }
}

impl fmt::Debug for LockClientStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClientStore")
            .field("records", &self.records)
            .finish()
    }
}
