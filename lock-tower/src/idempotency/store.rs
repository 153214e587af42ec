//! [`RecordStore`]: where the idempotency layer keeps its records, and the contract every
//! store keeps.

use std::pin::Pin;
use std::time::Duration;

use lock_core::fenced::Fenced;

use super::error::StoreError;
use super::record::Record;

/// The future of a [`RecordStore`] call.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Where an [`IdempotencyLayer`](crate::IdempotencyLayer) keeps the responses it replays.
///
/// `key` is the request's record key ([`Idempotency::record_key`](crate::Idempotency::record_key):
/// the layer's prefix, the scope and the idempotency key, at most 512 bytes, also the name of
/// the key's lock). [`LockClientStore`](crate::LockClientStore) is the default; implement this trait to
/// keep records elsewhere (the flash-sale example keeps them in its SQL database, so that a
/// handler can write its record in its own transaction).
///
/// # The contract
///
/// * **`get`** returns the record last written under `key` that has not expired, or `None`.
/// * **`put`** writes `record` under `key` to expire after `ttl`, fenced by `token` (the
///   fencing token of the key's lock held by the request), in one atomic step: it is
///   **refused** with [`Fenced::Refused`] (and the stored token) when the store holds an
///   unexpired record under `key` written with a **greater** token; otherwise it replaces
///   whatever is there (nothing, an expired record, a record of a smaller or *equal* token —
///   the same holder writing again) and answers [`Fenced::Written`]. So a request whose lock
///   was taken over cannot overwrite what the newer holder stored.
/// * Both are safe to repeat, and neither may panic on what it reads: a value that is not a
///   record is [`StoreError::corrupt`] (see [`Record::from_bytes`]).
/// * Failures are [`StoreError`]s; say [`StoreError::unavailable`] for the ones that trying
///   later may fix (the layer fails open on those only, when told to).
///
/// A put does not check that the lock is still held (the layer does, just before); the
/// token only orders the writers.
pub trait RecordStore: Send + Sync + 'static {
    /// The record under `key`, if there is one that has not expired.
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Record>>;

    /// Writes `record` under `key` for `ttl`, unless a record of a greater `token` is there.
    fn put<'a>(
        &'a self,
        key: &'a str,
        record: &'a Record,
        token: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, Fenced>;
}
