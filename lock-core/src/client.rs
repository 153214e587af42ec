//! [`LockClient`]: the handle to one Redis deployment, and every lock made from it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::connection::Connection;
use crate::engine::Engine;
use crate::error::LockError;
use crate::eviction::EvictionRisk;

/// A handle to distributed locks on one Redis deployment: made by [`LockClient::connect`] or
/// a builder ([`LockClient::builder`], [`LockClient::builder_sentinel`],
/// [`LockClient::builder_cluster`]).
///
/// Cheap to clone (an `Arc` inside) and usable from many tasks. Each client has a random id;
/// the locks it takes are owned by `<client id>:<holder id>`, where the holder id is new for
/// every acquisition unless a [`reentrant`](crate::reentrant) scope shares one.
///
/// Every primitive is a handle made by a method of the client (each written next to its
/// handle), with the same verbs:
///
/// | handle | take | try once | guard |
/// |---|---|---|---|
/// | [`mutex(name)`](Self::mutex) | `lock()` | `try_lock()` | [`LockGuard`](crate::LockGuard) |
/// | [`fair_lock(name)`](Self::fair_lock) | `lock()` | `try_lock()` | [`LockGuard`](crate::LockGuard) |
/// | [`read_write_lock(name)`](Self::read_write_lock) | `read()` / `write()` | `try_read()` / `try_write()` | [`ReadGuard`](crate::ReadGuard) / [`WriteGuard`](crate::WriteGuard) |
/// | [`semaphore(name, size)`](Self::semaphore) | `acquire(n)` | `try_acquire(n)` | [`SemaphoreGuard`](crate::SemaphoreGuard) |
/// | [`multi_lock(names)`](Self::multi_lock) | `lock()` | `try_lock()` | [`MultiLockGuard`](crate::MultiLockGuard) |
///
/// Each take returns a [`LockRequest`](crate::LockRequest) (`.wait(d)`, `.lease(d)`, then `.await`), each try a
/// [`TryLockRequest`](crate::TryLockRequest) that resolves to `Ok(None)` when the lock is busy; each handle has an
/// `info()`. [`lock`](Self::lock) and [`try_lock`](Self::try_lock) are shortcuts for the
/// mutex.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_core::{LockClient, LockError};
///
/// # async fn f() -> Result<(), LockError> {
/// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.lock("order:42").wait(Duration::from_secs(2)).await?;
/// // ... work that must not run twice at once, guarded by guard.fencing_token() ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    engine: Arc<Engine>,
}

impl LockClient {
    /// Whether the server's `maxmemory-policy` can evict lock keys (silently losing locks
    /// under memory pressure), as read once when the client was built; see [`EvictionRisk`].
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), lock_core::LockError> {
    /// let client = lock_core::LockClient::connect("redis://127.0.0.1:6379").await?;
    /// if client.eviction_risk().evicts() {
    ///     eprintln!("{}", client.eviction_risk());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn eviction_risk(&self) -> &EvictionRisk {
        &self.engine.config().eviction
    }

    /// The shortest lease accepted: 10 ms.
    pub const MIN_LEASE: Duration = crate::util::MIN_LEASE;

    /// The longest lease accepted: 30 days.
    pub const MAX_LEASE: Duration = crate::util::MAX_LEASE;

    /// The longest lock name accepted: 512 bytes (see [`validate_name`](crate::validate_name)
    /// for the other rules).
    pub const MAX_NAME_LEN: usize = crate::name::MAX_NAME_LEN;

    pub(crate) fn from_engine(engine: Arc<Engine>) -> Self {
        Self { engine }
    }

    /// The engine behind this client.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The watchdog lease of this client.
    pub fn watchdog_lease(&self) -> Duration {
        self.engine.config().watchdog_lease
    }

    /// The key prefix of this client.
    pub fn key_prefix(&self) -> &str {
        &self.engine.config().prefix
    }

    /// What the Redis deployment can do, as found when this client connected, and the mutex
    /// protocol it speaks (see [`MutexProtocol`](crate::MutexProtocol)).
    pub fn server_capabilities(&self) -> &crate::capabilities::ServerCapabilities {
        self.engine.capabilities()
    }

    /// This client's id: 32 lowercase hex digits, random per client, the part before the `:`
    /// of every owner id it writes to Redis (`LockInfo::owner` is `<client id>:<holder>`).
    ///
    /// Log it at start-up, or set an
    /// [`owner_description`](crate::LockClientBuilder::owner_description) (which `lockctl
    /// status` shows next to the owner), so that an operator can tell which instance holds a
    /// lock.
    pub fn client_id(&self) -> &str {
        self.engine.client_id()
    }

    /// The owner description that the client of `owner` recorded (see
    /// [`LockClientBuilder::owner_description`](crate::LockClientBuilder::owner_description)),
    /// looked up under this client's prefix with one `GET`.
    ///
    /// `owner` is an owner id as `info()` shows it (`LockInfo::owner`,
    /// `SemaphoreInfo::holder_owners`, ...: `<client id>:<holder>`), or a bare client id.
    /// `Ok(None)` when that client recorded no description, when it is gone and its record
    /// expired, when `owner` does not start with a client id (32 lowercase hex digits), and
    /// when the stored value is not a description a client could have written (over 128
    /// bytes, control characters: it is never passed on to a terminal). Errors are Redis's
    /// ([`LockError::Unavailable`], [`LockError::NoPermission`], ...).
    ///
    /// ```no_run
    /// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
    /// let info = client.mutex("order:42").info().await?;
    /// if let Some(owner) = &info.owner {
    ///     let who = client.owner_description(owner).await?;
    ///     println!("held by {owner} ({})", who.as_deref().unwrap_or("no description"));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn owner_description(&self, owner: &str) -> Result<Option<String>, LockError> {
        crate::description::look_up(&self.engine, owner).await
    }

    /// Shuts the client down, for a service that stops gracefully: its locks are given back
    /// at once instead of blocking their names until their leases run out.
    ///
    /// 1. From the first moment, no acquisition starts: each is refused with
    ///    [`LockError::ShutDown`] (one that already had its turn is answered first, and given
    ///    back with the rest).
    /// 2. The watchdog and the pub/sub task stop: nothing is renewed any more.
    /// 3. Every hold of the client (every lock, read or write side, permit or multi-lock name
    ///    a guard of this client holds, re-entries included) is given back, up to 32 at once.
    /// 4. Every later call of this client and of its clones (acquisitions, `info`, rate
    ///    limits, idempotency records, [`connection`](Self::connection)'s commands) fails
    ///    with [`LockError::ShutDown`], before anything is sent.
    ///
    /// **Bounded**: it returns within the client's
    /// [`connect_timeout`](crate::LockClientBuilder::connect_timeout) plus its
    /// [`response_timeout`](crate::LockClientBuilder::response_timeout) (2 s + 1 s by
    /// default), whatever Redis does; a hold that could not be given back by then (Redis
    /// down) is logged at `warn` and expires with its lease. Returns how many holds were
    /// given back. Guards still alive afterwards report their lock as no longer held, and
    /// dropping them sends nothing. Only the first call does anything; later ones return 0.
    ///
    /// Call it once the server has stopped serving (after axum's graceful shutdown has
    /// finished the requests in flight); see the guide's production chapter.
    ///
    /// ```no_run
    /// # async fn f(client: lock_core::LockClient) {
    /// let released = client.shutdown().await;
    /// eprintln!("gave back {released} locks");
    /// # }
    /// ```
    pub async fn shutdown(&self) -> usize {
        self.engine.shut_down().await
    }

    /// A connection for the application's own commands on this client's deployment (its
    /// [fenced](crate::fenced) writes, say), through this client's connections: it works
    /// again by itself after a server restart or a failover, and on `in_memory` (the
    /// `testing` feature) it talks to the in-memory server. See [`Connection`].
    pub fn connection(&self) -> Connection {
        Connection::new(self.engine.clone())
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("prefix", &self.engine.config().prefix)
            .field("watchdog_lease", &self.engine.config().watchdog_lease)
            .finish_non_exhaustive()
    }
}
