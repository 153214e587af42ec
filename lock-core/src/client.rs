//! [`LockClient`], its builder and its configuration.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bb8::Pool;
use bb8_redis::RedisConnectionManager;
use tokio::sync::{OwnedMutexGuard, mpsc};

use crate::backend::{Backend, Cluster, Sentinel, Standalone, Topology, sentinel};
use crate::error::LockError;
use crate::guard::{Hold, Kind, Lease, Status};
use crate::mutex::{LockRequest, TryLockRequest};
use crate::name::{LockKeys, validate_prefix};
use crate::scripts::Publishing;
use crate::waiters::{Source, Waiters};
use crate::{scope, scripts, watchdog};

/// The key prefix used unless [`LockClientBuilder::key_prefix`] says otherwise.
pub const DEFAULT_KEY_PREFIX: &str = "lock:";
/// The watchdog lease used unless [`LockClientBuilder::watchdog_lease`] says otherwise.
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);
/// How long a fencing counter lives unless [`LockClientBuilder::fence_ttl`] says otherwise.
pub const DEFAULT_FENCE_TTL: Duration = Duration::from_secs(3600);
/// The shortest lease accepted.
pub const MIN_LEASE: Duration = Duration::from_millis(10);
/// The longest lease accepted.
pub const MAX_LEASE: Duration = Duration::from_secs(30 * 24 * 3600);

const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(30);
const DEFAULT_POOL_SIZE: u32 = 16;
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) fn check_lease(option: &'static str, lease: Duration) -> Result<(), LockError> {
    if lease < MIN_LEASE || lease > MAX_LEASE {
        return Err(LockError::InvalidOption {
            option,
            reason: format!("{lease:?} is outside {MIN_LEASE:?}..={MAX_LEASE:?}"),
        });
    }
    Ok(())
}

fn check_timeout(option: &'static str, d: Duration) -> Result<(), LockError> {
    if d < Duration::from_millis(1) || d > Duration::from_secs(3600) {
        return Err(LockError::InvalidOption {
            option,
            reason: format!("{d:?} is outside 1ms..=1h"),
        });
    }
    Ok(())
}

pub(crate) struct Config {
    pub(crate) prefix: String,
    pub(crate) watchdog_lease: Duration,
    pub(crate) fence_ttl: Duration,
    /// Replicas that must confirm an acquisition, and how long to wait for them.
    pub(crate) min_replicas: Option<(u32, Duration)>,
}

/// The deployment a builder connects to.
enum Deployment {
    Standalone {
        url: String,
    },
    Cluster {
        urls: Vec<String>,
    },
    Sentinel {
        urls: Vec<String>,
        service: String,
        primary_url: Option<String>,
    },
}

/// Builds a [`LockClient`]. Made by [`LockClient::builder`], [`LockClient::builder_cluster`]
/// or [`LockClient::builder_sentinel`].
pub struct LockClientBuilder {
    deployment: Deployment,
    min_replicas: Option<(u32, Duration)>,
    prefix: String,
    watchdog_lease: Duration,
    fence_ttl: Duration,
    pool: Option<Pool<RedisConnectionManager>>,
    pool_size: u32,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl LockClientBuilder {
    /// The prefix of every Redis key and channel of this client (default `"lock:"`). At most
    /// 128 bytes, without braces, whitespace or control characters.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The lease of locks taken without a fixed lease (default 30 s, at least 30 ms). The
    /// watchdog renews them every `lease / 3`; a holder that cannot renew for a whole lease
    /// loses the lock.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How long a free lock keeps its hash, and with it its fencing counter (default 1 h, at
    /// least 1 s); then it expires, so per-request names do not pile up. A counter that is gone
    /// is seeded again from the server clock in microseconds, so tokens keep growing as long as
    /// the Redis server's clock never steps back by more than the time the counter was gone.
    pub fn fence_ttl(mut self, ttl: Duration) -> Self {
        self.fence_ttl = ttl;
        self
    }

    /// Requires `n` replicas to confirm every acquisition within `timeout`.
    ///
    /// After an acquisition script succeeds, the client sends `WAIT n timeout` on the same
    /// connection; if fewer than `n` replicas confirm, it gives the acquisition back and returns
    /// [`LockError::NotReplicated`]. With Redis's asynchronous replication this closes one
    /// window: the primary crashing right after granting a lock and a replica that never
    /// received it being promoted (the lock would silently vanish and a second client could
    /// take it). It does not make locks safe across every failover: a replica that confirmed
    /// can still lose the write if it restarts without persistence before it is promoted,
    /// renewals and releases are not acknowledged (a promoted replica may hold an older lease,
    /// so the lock can expire sooner than the holder believes), and Sentinel or Cluster may
    /// promote a replica that was not among the `n`. Fencing tokens remain the way to make a
    /// late writer harmless. Without this option (the default) a failover can lose locks.
    ///
    /// Applies to every acquisition: lock, multi-lock, read-write lock, semaphore, fair lock.
    /// `n` must be 1..=16 and `timeout` 1 ms..=1 h; checked by [`build`](Self::build).
    pub fn min_replicas(mut self, n: u32, timeout: Duration) -> Self {
        self.min_replicas = Some((n, timeout));
        self
    }

    /// With [`LockClient::builder_sentinel`]: the connection settings of the primary
    /// (password, database) as a URL whose host and port are ignored and replaced by the
    /// address the sentinels name, e.g. `redis://:secret@primary/2`. Default: no password,
    /// database 0.
    pub fn sentinel_primary_url(mut self, url: impl Into<String>) -> Self {
        if let Deployment::Sentinel { primary_url, .. } = &mut self.deployment {
            *primary_url = Some(url.into());
        }
        self
    }

    /// Uses an existing bb8 pool for commands (the URL is still used for the pub/sub
    /// connection), so an application can share its pool. Standalone servers only.
    pub fn pool(mut self, pool: Pool<RedisConnectionManager>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The size of the pool the client builds for itself (default 16).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// How long to try to get a connection before giving up with
    /// [`LockError::Unavailable`] (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long to wait for Redis to answer one command (default 1 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Connects, loads the scripts, and starts the client's background tasks (watchdog,
    /// pub/sub, background releases) on the current tokio runtime.
    pub async fn build(mut self) -> Result<LockClient, LockError> {
        validate_prefix(&self.prefix)?;
        if self.watchdog_lease < MIN_WATCHDOG_LEASE || self.watchdog_lease > MAX_LEASE {
            return Err(LockError::InvalidOption {
                option: "watchdog_lease",
                reason: format!(
                    "{:?} is outside {MIN_WATCHDOG_LEASE:?}..={MAX_LEASE:?}",
                    self.watchdog_lease
                ),
            });
        }
        if self.fence_ttl < Duration::from_secs(1) || self.fence_ttl > MAX_LEASE {
            return Err(LockError::InvalidOption {
                option: "fence_ttl",
                reason: format!("{:?} is outside 1s..={MAX_LEASE:?}", self.fence_ttl),
            });
        }
        if self.pool_size == 0 || self.pool_size > 1024 {
            return Err(LockError::InvalidOption {
                option: "pool_size",
                reason: format!("{} is outside 1..=1024", self.pool_size),
            });
        }
        check_timeout("connect_timeout", self.connect_timeout)?;
        check_timeout("response_timeout", self.response_timeout)?;
        if let Some((n, timeout)) = self.min_replicas {
            if !(1..=16).contains(&n) {
                return Err(LockError::InvalidOption {
                    option: "min_replicas",
                    reason: format!("{n} replicas is outside 1..=16"),
                });
            }
            check_timeout("min_replicas", timeout)?;
        }
        if self.pool.is_some() && !matches!(self.deployment, Deployment::Standalone { .. }) {
            return Err(LockError::InvalidOption {
                option: "pool",
                reason: "an existing pool can only be used with a standalone server".to_owned(),
            });
        }
        let (backend, source) = self.connect().await?;
        let sharded = backend.is_sharded();
        backend.load_scripts(&scripts::all(sharded)).await?;

        let (jobs, rx) = mpsc::unbounded_channel();
        let waiters = Waiters::start(source, self.connect_timeout);
        let inner = Arc::new(Inner {
            backend,
            publish: Publishing::get(sharded),
            config: Config {
                prefix: self.prefix,
                watchdog_lease: self.watchdog_lease,
                fence_ttl: self.fence_ttl,
                min_replicas: self.min_replicas,
            },
            client_id: uuid::Uuid::new_v4().simple().to_string(),
            holds: Mutex::new(HashMap::new()),
            waiters,
            jobs,
        });
        tokio::spawn(run_jobs(rx));
        tokio::spawn(watchdog::run(Arc::downgrade(&inner), self.watchdog_lease));
        Ok(LockClient { inner })
    }
}

impl LockClientBuilder {
    /// Builds the backend of the deployment, and says where the pub/sub connection goes.
    async fn connect(&mut self) -> Result<(Backend, Source), LockError> {
        // URLs may carry a password: only the reason is reported.
        let invalid = |option, e: redis::RedisError| LockError::InvalidOption {
            option,
            reason: e.to_string(),
        };
        let (connect_timeout, response_timeout) = (self.connect_timeout, self.response_timeout);
        match &self.deployment {
            Deployment::Standalone { url } => {
                let client = redis::Client::open(url.as_str()).map_err(|e| invalid("url", e))?;
                let pool = match self.pool.take() {
                    Some(pool) => pool,
                    None => Standalone::default_pool(&client, self.pool_size, connect_timeout)?,
                };
                let source = Source::Server(Box::new(client.clone()));
                let backend = Standalone::new(pool, client, response_timeout, connect_timeout);
                Ok((Backend::Standalone(Box::new(backend)), source))
            }
            Deployment::Cluster { urls } => {
                if urls.is_empty() {
                    return Err(LockError::InvalidOption {
                        option: "urls",
                        reason: "no cluster node given".to_owned(),
                    });
                }
                let client = Cluster::client(urls, connect_timeout, response_timeout)
                    .map_err(|e| invalid("urls", e))?;
                // Acknowledged acquisitions get their own connection, whose response timeout
                // covers `WAIT`.
                let acks = match self.min_replicas {
                    Some((_, wait)) => Some(
                        Cluster::client(urls, connect_timeout, response_timeout + wait)
                            .map_err(|e| invalid("urls", e))?,
                    ),
                    None => None,
                };
                let backend =
                    Cluster::connect(&client, acks.as_ref(), connect_timeout, response_timeout)
                        .await?;
                Ok((Backend::Cluster(backend), Source::Cluster(urls.clone())))
            }
            Deployment::Sentinel {
                urls,
                service,
                primary_url,
            } => {
                if urls.is_empty() {
                    return Err(LockError::InvalidOption {
                        option: "sentinels",
                        reason: "no sentinel given".to_owned(),
                    });
                }
                if service.is_empty() {
                    return Err(LockError::InvalidOption {
                        option: "service",
                        reason: "the Sentinel service name is empty".to_owned(),
                    });
                }
                let sentinels = urls
                    .iter()
                    .map(|url| redis::Client::open(url.as_str()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| invalid("sentinels", e))?;
                let primary = redis::IntoConnectionInfo::into_connection_info(
                    primary_url.as_deref().unwrap_or("redis://primary/"),
                )
                .map_err(|e| invalid("sentinel_primary_url", e))?;
                let discovery = sentinel::Discovery::new(sentinel::Settings {
                    sentinels,
                    service: service.clone(),
                    primary,
                    pool_size: self.pool_size,
                    connect_timeout,
                    response_timeout,
                });
                discovery.spawn_watcher();
                let backend = Sentinel::new(discovery.clone());
                Ok((Backend::Sentinel(backend), Source::Sentinel(discovery)))
            }
        }
    }
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL stays out: it may carry a password.
        f.debug_struct("LockClientBuilder")
            .field("prefix", &self.prefix)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("fence_ttl", &self.fence_ttl)
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .finish_non_exhaustive()
    }
}

/// A handle to distributed locks on one Redis deployment.
///
/// Cheap to clone (an `Arc` inside) and usable from many tasks. Each client has a random id;
/// the locks it takes are owned by `<client id>:<holder id>`, where the holder id is new for
/// every acquisition unless a [`reentrant`](crate::reentrant) scope shares one.
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
    pub(crate) inner: Arc<Inner>,
}

impl LockClient {
    /// Connects with the default configuration.
    pub async fn connect(url: &str) -> Result<LockClient, LockError> {
        Self::builder(url).build().await
    }

    /// Starts configuring a client for the Redis server at `url`
    /// (`redis://[:password@]host:port[/db]`).
    pub fn builder(url: &str) -> LockClientBuilder {
        Self::builder_for(Deployment::Standalone {
            url: url.to_owned(),
        })
    }

    /// Starts configuring a client for a Redis Cluster (7.0 or later), given some of its nodes
    /// (`redis://host:port`); the rest are discovered.
    ///
    /// Each lock lives in the slot of its name (its keys share the hash tag `{name}`), so
    /// every operation on one lock is one script on one node; waiters listen through sharded
    /// pub/sub (`SSUBSCRIBE`) on that node; the watchdog renews each slot's locks with one
    /// script per slot. A multi-lock over names in different slots takes them one by one in a
    /// stable order, with rollback (see [`multi`](crate::multi)). A failover of a primary may
    /// lose the locks it held
    /// unless [`min_replicas`](LockClientBuilder::min_replicas) is set (see there for what that
    /// does and does not cover).
    ///
    /// ```no_run
    /// use lock_core::{LockClient, LockError};
    ///
    /// # async fn f() -> Result<(), LockError> {
    /// let client = LockClient::builder_cluster([
    ///     "redis://10.0.0.1:7000",
    ///     "redis://10.0.0.2:7000",
    ///     "redis://10.0.0.3:7000",
    /// ])
    /// .build()
    /// .await?;
    /// let guard = client.lock("order:42").await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder_cluster<I, S>(urls: I) -> LockClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::builder_for(Deployment::Cluster {
            urls: urls.into_iter().map(Into::into).collect(),
        })
    }

    /// Starts configuring a client for the primary that Redis Sentinel manages as `service`,
    /// given the sentinels' URLs (`redis://host:26379`).
    ///
    /// The client asks the sentinels for the primary, checks it with `ROLE`, and follows a
    /// failover: when the primary stops answering or says it became a replica, the client asks
    /// again and moves its connections, pub/sub included. While no sentinel names a reachable
    /// primary, operations fail with [`LockError::NoPrimary`]. Locks the old primary granted
    /// may be lost in a failover unless [`min_replicas`](LockClientBuilder::min_replicas) is
    /// set.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lock_core::{LockClient, LockError};
    ///
    /// # async fn f() -> Result<(), LockError> {
    /// let client = LockClient::builder_sentinel(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "locks",
    /// )
    /// .min_replicas(1, Duration::from_millis(50))
    /// .build()
    /// .await?;
    /// let guard = client.lock("payment:7").await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder_sentinel<I, S>(sentinels: I, service: &str) -> LockClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::builder_for(Deployment::Sentinel {
            urls: sentinels.into_iter().map(Into::into).collect(),
            service: service.to_owned(),
            primary_url: None,
        })
    }

    fn builder_for(deployment: Deployment) -> LockClientBuilder {
        LockClientBuilder {
            deployment,
            min_replicas: None,
            prefix: DEFAULT_KEY_PREFIX.to_owned(),
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            fence_ttl: DEFAULT_FENCE_TTL,
            pool: None,
            pool_size: DEFAULT_POOL_SIZE,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
        }
    }

    /// Takes the lock `name`, waiting for it as long as needed; see [`LockRequest`] for the
    /// wait and lease options. The lock is released when the guard is unlocked or dropped.
    pub fn lock(&self, name: impl Into<String>) -> LockRequest {
        LockRequest::new(self, name.into())
    }

    /// Tries to take the lock `name` once, without waiting: `Ok(None)` when it is held by
    /// someone else.
    pub fn try_lock(&self, name: impl Into<String>) -> TryLockRequest {
        TryLockRequest::new(self, name.into())
    }

    /// Whether anyone holds the lock `name` right now.
    pub async fn is_locked(&self, name: &str) -> Result<bool, LockError> {
        Ok(self.lock_info(name).await?.held)
    }

    /// What Redis knows about the lock `name` right now, for operators and tests.
    pub async fn lock_info(&self, name: &str) -> Result<LockInfo, LockError> {
        let keys = LockKeys::new(&self.inner.config.prefix, name)?;
        let (pttl, value): (i64, Option<String>) = self
            .inner
            .backend
            .invoke(&scripts::INSPECT.key(&keys.hash))
            .await?;
        let mut fields = value.as_deref().unwrap_or("").split('|');
        let owner = fields.next().unwrap_or("");
        let count = fields.next().and_then(|c| c.parse().ok()).unwrap_or(0);
        let token = fields.next().and_then(|t| t.parse().ok());
        let held = !owner.is_empty();
        let info = LockInfo {
            held,
            ttl: held
                .then(|| u64::try_from(pttl).ok().map(Duration::from_millis))
                .flatten(),
            hold_count: if held { count } else { 0 },
            fencing_token: if held { token } else { None },
        };
        Ok(info)
    }

    /// Deletes the lock `name` whoever holds it, and wakes its waiters. Returns whether there
    /// was a lock. An escape hatch for operators: the holder is not told until its next
    /// renewal, unlock or extend finds the lock gone.
    pub async fn force_unlock(&self, name: &str) -> Result<bool, LockError> {
        let keys = LockKeys::new(&self.inner.config.prefix, name)?;
        let deleted: i64 = self
            .inner
            .backend
            .invoke(
                self.inner
                    .publish
                    .force_unlock
                    .key(&keys.hash)
                    .arg(&keys.channel)
                    .arg(crate::mutex::millis(self.inner.config.fence_ttl)),
            )
            .await?;
        Ok(deleted == 1)
    }

    /// The watchdog lease of this client.
    pub fn watchdog_lease(&self) -> Duration {
        self.inner.config.watchdog_lease
    }

    /// The key prefix of this client.
    pub fn key_prefix(&self) -> &str {
        &self.inner.config.prefix
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("prefix", &self.inner.config.prefix)
            .field("watchdog_lease", &self.inner.config.watchdog_lease)
            .finish_non_exhaustive()
    }
}

/// A lock's state as Redis sees it. Made by [`LockClient::lock_info`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// Whether anyone holds the lock.
    pub held: bool,
    /// The remaining lease, if held with one.
    pub ttl: Option<Duration>,
    /// The holder's hold count (re-entries), 0 when free.
    pub hold_count: u32,
    /// The holder's fencing token, if held.
    pub fencing_token: Option<u64>,
}

/// The state shared by a client's handles, guards and background tasks.
pub(crate) struct Inner {
    pub(crate) backend: Backend,
    /// The scripts that publish, in the topology's flavour.
    pub(crate) publish: &'static Publishing,
    pub(crate) config: Config,
    client_id: String,
    /// Every hold of this client by (lock hash key, owner id).
    holds: Mutex<HashMap<(String, String), Weak<Hold>>>,
    pub(crate) waiters: Waiters,
    jobs: mpsc::UnboundedSender<Job>,
}

impl Inner {
    /// The owner id for an acquisition made by the current task.
    pub(crate) fn owner_for_current_task(&self) -> String {
        let holder = scope::current_holder().unwrap_or_else(scope::next_holder);
        format!("{}:{holder}", self.client_id)
    }

    /// The hold of `owner` on `keys`, created if there is none.
    pub(crate) fn hold(self: &Arc<Self>, keys: &LockKeys, owner: &str) -> Arc<Hold> {
        self.hold_of(Kind::Lock, keys, owner)
    }

    /// The hold of `owner` on `keys` (of `kind`), created if there is none.
    pub(crate) fn hold_of(self: &Arc<Self>, kind: Kind, keys: &LockKeys, owner: &str) -> Arc<Hold> {
        let mut holds = lock(&self.holds);
        let id = (keys.hash.clone(), owner.to_owned());
        if let Some(hold) = holds.get(&id).and_then(Weak::upgrade) {
            return hold;
        }
        let hold = Arc::new(Hold::new(
            kind,
            keys.clone(),
            owner.to_owned(),
            Arc::downgrade(self),
        ));
        holds.insert(id, Arc::downgrade(&hold));
        hold
    }

    /// A new hold of `n` permits of the semaphore `keys`, registered for the watchdog.
    pub(crate) fn permit_hold(self: &Arc<Self>, keys: &LockKeys, owner: &str, n: u32) -> Arc<Hold> {
        let hold = Arc::new(Hold::new(
            Kind::Permits(n),
            keys.clone(),
            owner.to_owned(),
            Arc::downgrade(self),
        ));
        lock(&self.holds).insert((keys.hash.clone(), owner.to_owned()), Arc::downgrade(&hold));
        hold
    }

    /// A new owner id that no reentrant scope shares.
    pub(crate) fn fresh_owner(&self) -> String {
        format!("{}:{}", self.client_id, scope::next_holder())
    }

    /// Called when a hold is dropped.
    pub(crate) fn forget_hold(&self, hash: &str, owner: &str) {
        let mut holds = lock(&self.holds);
        let id = (hash.to_owned(), owner.to_owned());
        if holds.get(&id).is_some_and(|w| w.strong_count() == 0) {
            holds.remove(&id);
        }
    }

    /// The holds the watchdog must renew, with their generations.
    pub(crate) fn watched_holds(&self) -> Vec<(Arc<Hold>, u64)> {
        let candidates: Vec<Arc<Hold>> = {
            let holds = lock(&self.holds);
            holds.values().filter_map(Weak::upgrade).collect()
        };
        // Filtered (and the rest dropped) outside the registry lock: dropping the last
        // reference to a hold takes that lock.
        candidates
            .into_iter()
            .filter_map(|hold| {
                let st = hold.state();
                let watched = st.lease == Lease::Watchdog && st.status == Status::Held;
                let generation = st.generation;
                drop(st);
                watched.then_some((hold, generation))
            })
            .collect()
    }

    /// Releases one hold of `generation` on the client's runtime (from a guard's `Drop`).
    pub(crate) fn release_in_background(self: &Arc<Self>, hold: Arc<Hold>, generation: u64) {
        let _ = self.jobs.send(Job::Release {
            inner: self.clone(),
            hold,
            generation,
        });
    }

    /// Runs a best-effort cleanup script on the client's runtime.
    pub(crate) fn script_in_background(
        self: &Arc<Self>,
        invocation: redis::ScriptInvocation<'static>,
        what: &'static str,
    ) {
        let _ = self.jobs.send(Job::Script {
            inner: self.clone(),
            invocation,
            what,
        });
    }

    /// Undoes an interrupted acquisition on the client's runtime, keeping `op` locked until
    /// it is done so the owner's next command sees the right hold count.
    pub(crate) fn compensate_in_background(
        self: &Arc<Self>,
        hold: Arc<Hold>,
        expected: u32,
        op: OwnedMutexGuard<()>,
    ) {
        let _ = self.jobs.send(Job::Compensate {
            inner: self.clone(),
            hold,
            expected,
            op,
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

enum Job {
    Release {
        inner: Arc<Inner>,
        hold: Arc<Hold>,
        generation: u64,
    },
    Compensate {
        inner: Arc<Inner>,
        hold: Arc<Hold>,
        expected: u32,
        op: OwnedMutexGuard<()>,
    },
    /// A script to run once, whose answer nobody needs (a best-effort cleanup).
    Script {
        inner: Arc<Inner>,
        invocation: redis::ScriptInvocation<'static>,
        what: &'static str,
    },
}

/// Runs background releases. Ends when every sender (the client and its guards) is gone.
async fn run_jobs(mut jobs: mpsc::UnboundedReceiver<Job>) {
    while let Some(job) = jobs.recv().await {
        tokio::spawn(async move {
            match job {
                Job::Release {
                    inner,
                    hold,
                    generation,
                } => {
                    if let Err(e) = hold.release_one(&inner, generation).await {
                        tracing::warn!(lock = %hold.keys.name, error = %e,
                            "background release failed; the lease will expire the lock");
                    }
                }
                Job::Compensate {
                    inner,
                    hold,
                    expected,
                    op,
                } => hold.compensate(&inner, expected, op).await,
                Job::Script {
                    inner,
                    invocation,
                    what,
                } => {
                    if let Err(e) = inner.backend.invoke::<redis::Value>(&invocation).await {
                        tracing::warn!(error = %e, "background {what} failed");
                    }
                }
            }
        });
    }
}
