//! Testing your service without Redis: a lock server kept in the process, on tokio's clock.
//! Only with lock-core's `testing` feature (off by default), which you turn on where your
//! tests are built:
//!
//! ```toml
//! [dev-dependencies]
//! lock-core = { version = "0.1", features = ["testing"] }
//! tokio = { version = "1", features = ["macros", "rt", "test-util"] }
//! ```
//!
//! [`LockClient::in_memory`] gives a client whose locks live in this process. A
//! [`MemoryServer`] is that server made explicit: shared by several clients, so two
//! "instances" of your service contend for its locks as they would on one Redis server, with
//! fault hooks to cut a client off, take the whole server away, slow its replies down, or
//! evict a key.
//!
//! **The same API.** A client of the in-memory server is an ordinary [`LockClient`]: every
//! primitive (mutex, fair lock, read-write lock, semaphore, multi-lock), re-entry,
//! [`run`](crate::LockRequest::run), [`TryLockRequest::run`](crate::TryLockRequest::run),
//! `hold_at_least`, [`Period`](crate::Period), the [`Leader`](crate::Leader), `info()`,
//! `force_unlock`, the [`Guard`](crate::Guard) trait and [`HeldLock`](crate::HeldLock), so
//! `#[distributed_lock]` and lock-tower's `DistributedLockLayer` work on it unchanged; a
//! [`RedLock`](crate::RedLock) takes clients of several `MemoryServer`s as its nodes. Names,
//! options and sizes are checked by the same code, with the same typed errors. The mutex
//! speaks the native protocol ([`MutexProtocol::Native`](crate::MutexProtocol)) unless the
//! builder asks for [`Scripted`](crate::MutexProtocol::Scripted) (so a mutex's `info()` shows
//! its hold count and token to the holder's own client only, as on Valkey 9;
//! [`Hybrid`](crate::MutexProtocol::Hybrid), for servers without the native commands, is
//! refused at build with [`LockError::Unsupported`]); every other
//! operation runs its real Lua script, the one sent to Redis, in an embedded Lua 5.1 whose
//! `redis.call` reaches the server's commands, so the keys are the same in the same formats.
//! Fencing tokens strictly increase per name, across releases, expiries and force-unlocks.
//!
//! **Time is tokio's.** Leases expire, the watchdog renews and [`lost()`](crate::Guard::lost)
//! fires on `tokio::time`, so in a test with a paused clock (`#[tokio::test(start_paused =
//! true)]`, which needs tokio's `test-util` feature in your dev-dependencies) a 30 s lease runs
//! out the moment the test waits for it, without sleeping. The server's `TIME` is a fixed
//! epoch (2026-01-01T00:00:00Z) plus exactly the time tokio's clock has moved since the server
//! was made (on a paused clock it stands still between calls, so sleeping exactly a
//! `Retry-After` finds the permit back). Nothing in it reads the system clock: a
//! [`Period`](crate::Period)'s name still does.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::testing::MemoryServer;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! // In a test: #[tokio::test(start_paused = true)] async fn ...
//! let server = MemoryServer::new();
//! let (a, b) = (server.client().await?, server.client().await?);
//!
//! let guard = a.lock("job:nightly").await?;
//! // The watchdog renews the 30 s lease every 10 s: an hour later it is still held.
//! tokio::time::sleep(Duration::from_secs(3600)).await;
//! assert!(guard.is_held());
//!
//! // Instance a is cut off: its renewals fail and its lease runs out.
//! server.set_client_reachable(&a, false);
//! guard.lost().await; // on tokio's clock: the test does not wait 30 s
//! assert!(!guard.is_held());
//!
//! // Instance b takes over once the lease is over in the server, with a newer token.
//! let taken = b.lock("job:nightly").wait(Duration::from_secs(5)).await?;
//! assert!(taken.fencing_token() > guard.fencing_token());
//! # Ok(()) }
//! ```
//!
//! `#[distributed_lock]` on it (lock-tower's layer works the same way, given the client: the
//! workspace guide's *Testing without Redis* chapter sends `tower::ServiceExt::oneshot` requests
//! through one, as do the workspace's `tests/tests/memory.rs`):
//!
//! ```
//! use std::time::Duration;
//! use lock_core::{LockClient, LockError, distributed_lock};
//!
//! #[distributed_lock(key = "invoice:{id}", client = client, wait = "2s")]
//! async fn issue(client: &LockClient, id: u64) -> Result<u64, LockError> {
//!     Ok(id * 100)
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), LockError> {
//! let client = LockClient::in_memory().await?;
//! assert_eq!(issue(&client, 7).await?, 700);
//!
//! // Another instance holds the invoice: the call waits its 2 s (of tokio's clock), then
//! // gives up.
//! let held = client.lock("invoice:7").await?;
//! assert!(matches!(issue(&client, 7).await, Err(LockError::Timeout { .. })));
//! held.unlock().await?;
//! assert_eq!(issue(&client, 7).await?, 700);
//! # Ok(()) }
//! ```
//!
//! # What it does not tell you
//!
//! The fault hooks are for tests of *your* code's reactions (a lost lock, an outage, a slow
//! reply); one process proves nothing about instances of a service on several machines. The
//! in-memory server does not honour, and a test on it says nothing about:
//!
//! - **other processes**: only clients made from the same [`MemoryServer`] in this process
//!   share locks;
//! - **a server's own clock**: the clock is tokio's (see above), never stepped, never skewed
//!   between clients;
//! - **replication, failover, persistence**: there are no replicas
//!   ([`min_replicas`](crate::LockClientBuilder::min_replicas) makes `build()` fail with
//!   [`LockError::Unsupported`]), no restart, and no key is lost unless a test
//!   [`evict`](MemoryServer::evict)s it; the keys live as long as the server does;
//! - **Sentinel and Cluster**: one server, no slots (a multi-lock is always one call; an
//!   `.atomic()` multi-lock never fails with `CrossSlot`), plain `PUBLISH`;
//! - **the network**: calls are applied in the order they are made, replies are never lost
//!   (so a resent command, or a reply lost after a command was applied, never happens unless
//!   [`delay_replies`](MemoryServer::delay_replies) reaches the response timeout), an
//!   unreachable server refuses at once (it never blackholes for the connect timeout), and a
//!   pool, TLS and ACL users do not exist
//!   ([`connect_primaries`](crate::LockClientBuilder::connect_primaries) fails with
//!   [`LockError::Unsupported`]);
//! - **Redis's limits and costs**: memory, eviction (`maxmemory-policy` reads `noeviction`),
//!   the cost of a call, a script's time limit;
//! - **commands the lock code does not send**: the server answers the ones it sends (and an
//!   application's [`fenced`](crate::fenced) and [`Connection`](crate::Connection) commands),
//!   held to a real server's by the workspace's `memory_vs_redis` suite (the same random
//!   commands and scripts to both, replies and keys compared), not every Redis command.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::memory::Server;
use crate::builder::LockClientBuilder;
use crate::client::LockClient;
use crate::error::LockError;
use crate::layout::LockKeys;

/// A lock server kept in this process, shared by the clients made from it: for tests (see
/// the [module docs](self)). Cheap to clone (an `Arc` inside); it lives as long as any clone
/// or any of its clients.
///
/// Its faults are off when it is made: reachable, replies at once.
#[derive(Clone)]
pub struct MemoryServer {
    server: Arc<Server>,
}

impl MemoryServer {
    /// A new, empty server. Its clock starts at 2026-01-01T00:00:00Z and moves with tokio's
    /// clock from now on.
    pub fn new() -> MemoryServer {
        MemoryServer {
            server: Server::new(),
        }
    }

    /// A builder for a client of this server, with the same options and defaults as a Redis
    /// client's ([`LockClient::builder`]): key prefix, watchdog lease, fence TTL, mutex
    /// protocol, owner description, metric label, connect and response timeouts (the
    /// response timeout bounds [`delay_replies`](Self::delay_replies)). Options that need a
    /// Redis deployment fail in [`build`](LockClientBuilder::build) as elsewhere: a pool
    /// ([`LockError::InvalidOption`]), a TLS certificate ([`LockError::InvalidOption`]),
    /// `min_replicas` ([`LockError::Unsupported`]: there are no replicas).
    pub fn builder(&self) -> LockClientBuilder {
        LockClientBuilder::memory(self.server.clone())
    }

    /// A client of this server with the default options. Each client has its own id, watchdog
    /// and pub/sub subscriber, as a service instance would.
    pub async fn client(&self) -> Result<LockClient, LockError> {
        self.builder().build().await
    }

    /// The server `client` is connected to, if it is a client of an in-memory server (made by
    /// [`LockClient::in_memory`] or from a `MemoryServer`).
    pub fn of(client: &LockClient) -> Option<MemoryServer> {
        let memory = client.engine().backend().memory()?;
        Some(MemoryServer {
            server: memory.link().server().clone(),
        })
    }

    /// Takes the server away from every client (`false`) or brings it back (`true`). While it
    /// is away, every call fails at once with [`LockError::Unavailable`] and is not applied,
    /// every client's subscriptions drop (waiters look again every 200 ms, as without a
    /// pub/sub connection), renewals fail, and each hold is lost when its lease runs out on
    /// the client's side. The keys stay, and their leases run on: a lock whose lease ends
    /// while the server is away is free when it comes back. Default: reachable.
    pub fn set_reachable(&self, reachable: bool) {
        self.server.set_faults(|f| f.down = !reachable);
    }

    /// Cuts `client` off from the server (`false`) or connects it again (`true`), as
    /// [`set_reachable`](Self::set_reachable) does for every client, while the other clients
    /// go on: a network partition of one instance. Returns false, and does nothing, when
    /// `client` is not a client of this server. Default: reachable.
    pub fn set_client_reachable(&self, client: &LockClient, reachable: bool) -> bool {
        let Some(memory) = client.engine().backend().memory() else {
            return false;
        };
        let link = memory.link();
        if !Arc::ptr_eq(link.server(), &self.server) {
            return false;
        }
        link.set_cut(!reachable);
        true
    }

    /// Delays every reply by `delay` on tokio's clock (`Duration::ZERO`, the default: none).
    /// A call is applied at once and answered `delay` later; a delay of the client's response
    /// timeout or more (default 1 s) answers [`LockError::ResponseTimeout`] after the response
    /// timeout instead, though the call was applied, as a Redis server that answers too late.
    /// Messages to waiters are not delayed.
    pub fn delay_replies(&self, delay: Duration) {
        self.server.set_faults(|f| f.delay = delay);
    }

    /// Deletes `key` as if the server had evicted it (or an operator had deleted it); returns
    /// whether there was one. To evict a lock by its name, see
    /// [`evict_lock`](Self::evict_lock). The holder learns it at its next renewal (at most a
    /// third of its lease later) and its guard is lost; nothing is published, so waiters
    /// learn it when they look again.
    pub fn evict(&self, key: &str) -> bool {
        self.server.evict(key)
    }

    /// Evicts every key of the lock named `name` under the default key prefix (`"lock:"`),
    /// whatever its kind (mutex, fair lock, read-write lock, semaphore: the keys
    /// [`layout::LockKeys`](crate::layout::LockKeys) names), as [`evict`](Self::evict) does
    /// for one key; returns how many keys there were. A client built with another
    /// [`key_prefix`](LockClientBuilder::key_prefix) uses
    /// [`evict_lock_with_prefix`](Self::evict_lock_with_prefix). A name that is not a valid
    /// lock name ([`validate_name`](crate::validate_name)) has no keys: 0.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let server = lock_core::testing::MemoryServer::new();
    /// let client = server.client().await?;
    /// let guard = client.lock("job:nightly").await?;
    /// assert_eq!(server.evict_lock("job:nightly"), 1);
    /// guard.lost().await; // at its next renewal
    /// # Ok(()) }
    /// ```
    pub fn evict_lock(&self, name: &str) -> usize {
        self.evict_lock_with_prefix(crate::builder::DEFAULT_KEY_PREFIX, name)
    }

    /// [`evict_lock`](Self::evict_lock) for a client whose key prefix is `prefix`. An
    /// invalid prefix or name ([`validate_prefix`](crate::validate_prefix)) has no keys: 0.
    pub fn evict_lock_with_prefix(&self, prefix: &str, name: &str) -> usize {
        let Ok(keys) = LockKeys::new(prefix, name) else {
            return 0;
        };
        keys.keys()
            .filter(|(_, key)| self.server.evict(key))
            .count()
    }

    /// Every key the server holds now, sorted (a key whose time to live has run out is gone).
    /// With the default protocol and prefix, a server whose locks are all released keeps only
    /// `lock:fence`, the mutexes' fencing counter; a free fair lock or writer keeps its lock
    /// string for the fence TTL (default 1 h); a client with an owner description keeps
    /// `lock:client:<id>` for 3 watchdog leases.
    pub fn keys(&self) -> Vec<String> {
        self.server.keys()
    }

    /// Runs one command as the server answers a client's connection, and returns its reply
    /// (an error reply as [`redis::Value::ServerError`]); no fault applies. The server has the
    /// commands the lock code, [`fenced`](crate::fenced) and guarded updates
    /// ([`update`](crate::update)) send, and those services commonly send beside their locks,
    /// with Redis's semantics: `GET`, `GETDEL`, `SET` (`NX`, `XX`, `IFEQ`, `GET`, `PX`, `EX`,
    /// `KEEPTTL`), `INCR`, `DECR`, `INCRBY`, `DECRBY`, `MGET`, `MSET`, `MSETNX`, `DELIFEQ`,
    /// `DEL`, `EXISTS` (of one key or many), `PTTL`, `TTL`, `PEXPIRE`, `EXPIRE`, `TYPE`,
    /// `HGET`, `HMGET`, `HSET`, `HDEL`, `HGETALL`, `HINCRBY`, `ZADD`, `ZCARD`, `ZSCORE`, `ZRANGE` (by index),
    /// `ZRANGEBYSCORE`, `ZREMRANGEBYSCORE`, `ZREM`, `PUBLISH`, `SPUBLISH`, `TIME`, `PING`,
    /// `INFO`, `COMMAND INFO`, `CONFIG GET`; and scripts: `EVAL`, `EVALSHA`,
    /// `SCRIPT LOAD | EXISTS | FLUSH`, run in Lua 5.1 with `redis.call`, `redis.pcall`,
    /// `redis.error_reply` and `redis.status_reply`. Anything else is an unknown command,
    /// whose error names it and says it is the in-memory backend.
    ///
    /// ```
    /// use redis::Value;
    ///
    /// let server = lock_core::testing::MemoryServer::new();
    /// let mut eval = redis::cmd("EVAL");
    /// eval.arg("return redis.call('SET', KEYS[1], ARGV[1], 'NX')").arg(1).arg("k").arg("v");
    /// assert_eq!(server.command(&eval), Value::Okay);
    /// assert_eq!(server.command(redis::cmd("GET").arg("k")), Value::BulkString(b"v".to_vec()));
    /// ```
    pub fn command(&self, cmd: &redis::Cmd) -> redis::Value {
        self.server.command(cmd)
    }

    /// Every key the server holds now, sorted, with what it holds (see [`StoredKey`]).
    pub fn dump(&self) -> Vec<StoredKey> {
        self.server
            .dump()
            .into_iter()
            .map(|(key, kind, value, pttl)| StoredKey {
                key,
                kind,
                value,
                pttl,
            })
            .collect()
    }

    /// The channel of every message published since the last call, in order; the first call
    /// starts recording (and returns nothing).
    pub fn published(&self) -> Vec<Vec<u8>> {
        self.server.published()
    }
}

/// One key of a [`MemoryServer::dump`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredKey {
    /// The key.
    pub key: String,
    /// Its type, as `TYPE` names it: `string`, `hash` or `zset`.
    pub kind: &'static str,
    /// Its value: a string's bytes (one item); a hash's fields and values, in the order they
    /// were first set; a sorted set's members and scores (as `ZSCORE` writes them), by score
    /// then member.
    pub value: Vec<Vec<u8>>,
    /// Its time to live in ms, as `PTTL` answers it (-1: none).
    pub pttl: i64,
}

impl Default for MemoryServer {
    fn default() -> Self {
        MemoryServer::new()
    }
}

impl std::fmt::Debug for MemoryServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryServer")
            .field("faults", &self.server.faults())
            .finish_non_exhaustive()
    }
}

// The constructor lives here, next to the server it makes.
impl LockClient {
    /// A client whose locks are kept in this process, on tokio's clock: for tests of your
    /// service without Redis (see [`testing`](crate::testing)). Its server is its own; for
    /// several clients sharing one (two instances contending) and for the fault hooks, make a
    /// [`MemoryServer`] (or get this one's with [`MemoryServer::of`]). Default options, as
    /// [`LockClient::connect`]'s.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let client = lock_core::LockClient::in_memory().await?;
    /// let guard = client.lock("order:42").await?;
    /// assert!(client.try_lock("order:42").await?.is_none());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn in_memory() -> Result<LockClient, LockError> {
        MemoryServer::new().client().await
    }
}
