//! Distributed locks on Redis for async Rust.
//!
//! `lock-core` gives services that run as several instances mutual exclusion across
//! processes: a reentrant, owner-checked lock whose lease a watchdog renews while you hold
//! it, waiting through pub/sub instead of polling, a fencing token with every acquisition,
//! and a guard that tells you when the lock is lost.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{LockClient, LockError};
//!
//! # async fn run() -> Result<(), LockError> {
//! let client = LockClient::builder("redis://127.0.0.1:6379")
//!     .key_prefix("shop:lock:")
//!     .watchdog_lease(Duration::from_secs(30))
//!     .build()
//!     .await?;
//!
//! // Wait up to 2 s; the watchdog keeps the lock for as long as the guard lives.
//! let guard = client.lock("order:42").wait(Duration::from_secs(2)).await?;
//! let token = guard.fencing_token(); // write it with your update; refuse older tokens
//! # let _ = token;
//! guard.unlock().await?;
//!
//! // A single attempt with a fixed 10 s lease that is never renewed.
//! if let Some(guard) = client.try_lock("job:nightly").lease(Duration::from_secs(10)).await? {
//!     // ...
//!     drop(guard); // released in the background
//! }
//! # Ok(()) }
//! ```
//!
//! # Guarantees and their limits
//!
//! * **Mutual exclusion** holds on one Redis server while every holder's lease is honoured.
//!   A holder that stalls longer than its lease (a long GC-like pause, a frozen VM) can
//!   overlap with the next holder: no lease-based lock can prevent that. Its guard reports
//!   the loss ([`LockGuard::lost`], [`LockGuard::is_held`]), and a resource that checks
//!   [`LockGuard::fencing_token`] refuses its late writes.
//! * **Fencing tokens** strictly increase per lock name. A free lock's counter expires after
//!   [`LockClientBuilder::fence_ttl`] so per-request names do not pile up; a new counter is
//!   seeded from the server clock in microseconds, which stays ahead of every earlier token
//!   as long as the server clock does not step back by more than the time the counter was
//!   gone.
//! * **Retries are safe**: every command carries the hold count the client expects, so a
//!   command repeated after a lost reply is recognised and not applied twice; a release
//!   retried after its reply was lost does not release twice.
//! * **Cancellation**: dropping an acquisition future at any point leaves no lock behind (an
//!   acquisition whose reply never arrived is undone in the background). Dropping a guard
//!   releases it in the background; it never blocks and never panics, and if the runtime is
//!   gone the lease expires the lock.
//! * **Replication**: a failover to a replica that had not received the lock can grant it
//!   twice. [`LockClientBuilder::min_replicas`] makes every acquisition wait (`WAIT`) for
//!   replicas to confirm it, and gives back the ones they do not; it closes that window for
//!   the crash of a primary, not every failover (see there). [`RedLock`] over independent
//!   masters survives the loss of a minority of them (with the caveats written in
//!   [`redlock`]).
//!
//! # Deployments
//!
//! | deployment | client | notes |
//! |---|---|---|
//! | one server | [`LockClient::builder`] | a bb8 pool (or yours) of multiplexed connections |
//! | Redis Sentinel | [`LockClient::builder_sentinel`] | asks the sentinels for the primary, follows failovers (commands, renewals, pub/sub); [`LockError::NoPrimary`] while none is known |
//! | Redis Cluster (7.0+) | [`LockClient::builder_cluster`] | one slot per lock (hash tag `{name}`), MOVED/ASK followed, sharded pub/sub, renewals grouped by slot; a multi-lock across slots is taken in a stable order with rollback |
//!
//! The lock logic is the same on all three: only how a script reaches its node differs.
//!
//! # The primitives
//!
//! | what | made by | guard |
//! |---|---|---|
//! | reentrant lock | [`LockClient::lock`], [`LockClient::try_lock`] | [`LockGuard`] |
//! | several locks, all or none | [`LockClient::multi_lock`] | [`MultiLockGuard`] |
//! | fair lock (arrival order) | [`LockClient::fair_lock`] | [`LockGuard`] |
//! | read-write lock | [`LockClient::read_write_lock`] | [`ReadGuard`] / [`LockGuard`] |
//! | semaphore (leased permits) | [`LockClient::semaphore`] | [`SemaphoreGuard`] |
//! | RedLock over independent masters | [`RedLock::new`] | [`RedLockGuard`] |
//!
//! # Redis data model
//!
//! See [`name`] for the keys of a lock. The scripts live in `src/scripts/*.lua`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backend;
mod client;
mod error;
pub mod fair;
mod global;
mod guard;
pub mod multi;
mod mutex;
pub mod name;
pub mod redlock;
pub mod rwlock;
mod scope;
mod scripts;
pub mod semaphore;
mod waiters;
mod watchdog;

pub use client::{
    DEFAULT_FENCE_TTL, DEFAULT_KEY_PREFIX, DEFAULT_WATCHDOG_LEASE, LockClient, LockClientBuilder,
    LockInfo, MAX_LEASE, MIN_LEASE,
};
pub use error::LockError;
pub use fair::{DEFAULT_WAITER_TIMEOUT, FairLock, FairRequest};
pub use global::{global_client, install_global};
pub use guard::{HeldLock, LockGuard};
pub use multi::{MAX_MULTI_NAMES, MultiLockGuard, MultiLockRequest};
pub use mutex::{LockRequest, TryLockRequest};
pub use redlock::{RedLock, RedLockBuilder, RedLockGuard, RedLockRequest, RedLockTryRequest};
pub use rwlock::{ReadGuard, ReadWriteLock, RwRequest};
pub use scope::{ReentrantScope, current_lock, reentrant};
pub use semaphore::{
    MAX_PERMITS, MAX_PERMITS_PER_ACQUISITION, PermitRequest, Semaphore, SemaphoreGuard,
};

#[cfg(feature = "macros")]
pub use lock_macros::distributed_lock;

/// Not public API: what `#[distributed_lock]` expands to. May change in any release.
#[doc(hidden)]
#[path = "__private.rs"]
pub mod __private;

/// The README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
