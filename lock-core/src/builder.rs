//! [`LockClientBuilder`]: connecting a [`LockClient`] to a standalone server, a Sentinel-managed
//! primary or a Cluster, with its options and their defaults.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bb8::Pool;
use bb8_redis::RedisConnectionManager;

use crate::backend::primaries::{self, Timeouts};
use crate::backend::tls::{self, TlsOptions};
use crate::backend::{Backend, Cluster, Discovery, Seeds, Sentinel, SentinelSettings, Standalone};
#[cfg(feature = "testing")]
use crate::backend::{Memory, memory::Server};
use crate::capabilities::MutexProtocol;
use crate::client::LockClient;
use crate::connect_retry::{self, ConnectRetry};
use crate::description;
use crate::engine::{Config, Engine, Speech};
use crate::error::LockError;
use crate::eviction::EvictionRisk;
use crate::metrics::{self, Labeler};
use crate::name::validate_prefix;
use crate::primaries::Primaries;
use crate::util::{MAX_LEASE, check_range};
use crate::waiters::Waiters;
use crate::watchdog;

pub(crate) const DEFAULT_KEY_PREFIX: &str = "lock:";
const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);
const DEFAULT_FENCE_TTL: Duration = Duration::from_secs(3600);
const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(30);
const DEFAULT_POOL_SIZE: u32 = 16;
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

fn check_timeout(option: &'static str, d: Duration) -> Result<(), LockError> {
    check_range(
        option,
        d,
        Duration::from_millis(1),
        Duration::from_secs(3600),
    )
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
    /// A server in this process (`lock_core::testing`).
    #[cfg(feature = "testing")]
    Memory(Arc<Server>),
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
    tls: TlsOptions,
    metric_label: Option<Labeler>,
    owner_description: Option<String>,
    mutex_protocol: MutexProtocol,
    connect_retry: Option<Duration>,
}

impl LockClientBuilder {
    /// A builder for a client of the in-memory `server` (see `lock_core::testing`).
    #[cfg(feature = "testing")]
    pub(crate) fn memory(server: Arc<Server>) -> LockClientBuilder {
        LockClientBuilder::new(Deployment::Memory(server))
    }

    fn new(deployment: Deployment) -> LockClientBuilder {
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
            tls: TlsOptions::default(),
            metric_label: None,
            owner_description: None,
            mutex_protocol: MutexProtocol::Auto,
            connect_retry: None,
        }
    }

    /// How the mutex is kept in Redis (default [`MutexProtocol::Auto`]: the server's native
    /// compare-and-set commands where every primary has them, Valkey 9.0 or later, else this
    /// crate's scripts). [`MutexProtocol::Native`] makes [`build`](Self::build) fail with
    /// [`LockError::Unsupported`] on a server without them. Every client of a deployment
    /// must speak the same protocol: see [`MutexProtocol`].
    pub fn mutex_protocol(mut self, protocol: MutexProtocol) -> Self {
        self.mutex_protocol = protocol;
        self
    }

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

    /// How long a free lock keeps its key (the lock string), and with it its fencing counter
    /// (default 1 h, at least 1 s); then it expires, so per-request names do not pile up. A counter that is gone
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

    /// Makes [`build`](Self::build) wait for a Redis that is not up yet: when connecting
    /// fails in a way time can fix, it tries again, with growing pauses (100 ms, doubling up
    /// to 2 s, each ±20 %), until it connects or `max_wait` has passed since `build()`
    /// started. Default: no retry, `build()` fails at once. `max_wait` must be 1 ms to 24 h;
    /// checked by `build()`.
    ///
    /// Tried again: Redis unreachable or not answering ([`LockError::is_unavailable`]: a
    /// refused connection, a name that does not resolve yet, no answer in time, no primary
    /// known to the sentinels yet) and a server still loading its data (`LOADING`). Returned
    /// at once, since waiting cannot fix them: a bad option, a missing or refused password
    /// ([`LockError::AuthRequired`]), a refused permission or certificate, a server that
    /// lacks a feature. After `max_wait` the last failure is returned, and a
    /// [`LockError::Unavailable`] then says how long it tried in all and its last cause
    /// (`no Redis connection within 30.1s: Connection refused (os error 111)`). The last try
    /// may end up to the connect timeout after `max_wait`. Each failed try is logged at
    /// `info`.
    ///
    /// For a service that starts before its Redis (on Kubernetes the pods of a deployment
    /// start in no particular order): it comes up once Redis does, and a Redis that never
    /// comes still fails the start, with the cause, so the orchestrator restarts it.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lock_core::{LockClient, LockError};
    ///
    /// # async fn f() -> Result<(), LockError> {
    /// let client = LockClient::builder("redis://redis:6379")
    ///     .connect_retry(Duration::from_secs(60))
    ///     .build()
    ///     .await?;
    /// # drop(client);
    /// # Ok(()) }
    /// ```
    ///
    /// A service that must serve without its locks until Redis is there (answering its
    /// locked routes with "try later") builds the client in a task of its own instead, and
    /// looks for it per request:
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use lock_core::LockClient;
    /// use tokio::sync::OnceCell;
    ///
    /// # async fn f() {
    /// let locks: Arc<OnceCell<LockClient>> = Arc::default();
    /// tokio::spawn({
    ///     let locks = locks.clone();
    ///     async move {
    ///         let built = LockClient::builder("redis://redis:6379")
    ///             .connect_retry(Duration::from_secs(24 * 3600))
    ///             .build()
    ///             .await;
    ///         match built {
    ///             Ok(client) => drop(locks.set(client)),
    ///             Err(e) => tracing::error!(error = %e, "no lock client"),
    ///         }
    ///     }
    /// });
    /// // In a request handler:
    /// match locks.get() {
    ///     Some(client) => { /* client.lock(..) */ }
    ///     None => { /* 503: the lock service is not up yet */ }
    /// }
    /// # }
    /// ```
    pub fn connect_retry(mut self, max_wait: Duration) -> Self {
        self.connect_retry = Some(max_wait);
        self
    }

    /// How long to wait for Redis to answer one command (default 1 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Trusts the CA certificates in `pem` (PEM text: one or more `-----BEGIN CERTIFICATE-----`
    /// blocks) instead of the system's trust store, for every `rediss://` connection of the
    /// client: a private CA that signed the Redis servers' certificates, say. Calling it again
    /// adds more certificates.
    ///
    /// Default: the platform's trust store, read through rustls-native-certs (the
    /// distribution's CA bundle on Linux, the keychain on macOS, the system store on
    /// Windows). Checked by [`build`](Self::build): a PEM without a usable certificate is
    /// [`LockError::InvalidOption`] with option `"tls_root_certificate"`, and so is a
    /// certificate given while no URL of the client is `rediss://` (it would talk in plain
    /// text) or to a lock-core built without its `tls` feature.
    ///
    /// ```no_run
    /// use lock_core::LockClient;
    ///
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = LockClient::builder("rediss://redis.internal:6380")
    ///     .tls_root_certificate(std::fs::read("/etc/redis/tls/ca.crt")?)
    ///     .build()
    ///     .await?;
    /// # drop(client);
    /// # Ok(()) }
    /// ```
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        let pem = pem.into();
        match &mut self.tls.roots {
            Some(roots) => {
                roots.push(b'\n');
                roots.extend_from_slice(&pem);
            }
            None => self.tls.roots = Some(pem),
        }
        self
    }

    /// Presents a client certificate on every `rediss://` connection (mutual TLS, for a
    /// server started with `tls-auth-clients yes`): `cert_pem` is the certificate, followed by
    /// any intermediate certificates, and `key_pem` its private key (PKCS#8, PKCS#1 or SEC1),
    /// both PEM. Default: none.
    ///
    /// Checked by [`build`](Self::build): a certificate or key that does not parse, or a key
    /// that does not fit the certificate, is [`LockError::InvalidOption`] with option
    /// `"tls_client_identity"` (as is giving one while no URL is `rediss://`). A server that
    /// requires a certificate and gets none answers the handshake with an alert:
    /// [`LockError::Tls`] from `build()`.
    ///
    /// ```no_run
    /// use lock_core::LockClient;
    ///
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = LockClient::builder("rediss://redis.internal:6380")
    ///     .tls_root_certificate(std::fs::read("/etc/redis/tls/ca.crt")?)
    ///     .tls_client_identity(
    ///         std::fs::read("/etc/locks/tls/client.crt")?,
    ///         std::fs::read("/etc/locks/tls/client.key")?,
    ///     )
    ///     .build()
    ///     .await?;
    /// # drop(client);
    /// # Ok(()) }
    /// ```
    pub fn tls_client_identity(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// **For development only: turns TLS verification off.** Every `rediss://` connection then
    /// accepts any certificate for any name, so anyone on the network path can read and change
    /// the traffic, passwords included. Meant for a local server with a throwaway self-signed
    /// certificate; give the CA with [`tls_root_certificate`](Self::tls_root_certificate)
    /// instead wherever it matters. The redis crate's URL form `rediss://host:port/#insecure`
    /// does the same for that one URL. Default: off (certificates and names are verified).
    pub fn danger_accept_invalid_certificates(mut self) -> Self {
        self.tls.insecure = true;
        self
    }

    /// Adds a `family` label to this client's metrics (with the `metrics` feature; without
    /// it this does nothing): `label` maps a lock's name to a label value, or to `None` for
    /// no `family` label. Lock names themselves are never labels (they are unbounded); the
    /// values are `&'static str`, so the set of them stays bounded. A multi-lock's request
    /// metrics get the label of its names joined by `+`. Default: none.
    ///
    /// It is called once per acquisition request and once per new hold, on the caller's task:
    /// keep it cheap (a prefix match).
    ///
    /// ```no_run
    /// use lock_core::{LockClient, LockError};
    ///
    /// # async fn f() -> Result<(), LockError> {
    /// let client = LockClient::builder("redis://127.0.0.1:6379")
    ///     .metric_label(|name| {
    ///         if name.starts_with("order:") {
    ///             Some("order:*")
    ///         } else if name.starts_with("stock:") {
    ///             Some("stock:*")
    ///         } else {
    ///             None
    ///         }
    ///     })
    ///     .build()
    ///     .await?;
    /// # drop(client);
    /// # Ok(()) }
    /// ```
    pub fn metric_label(
        mut self,
        label: impl Fn(&str) -> Option<&'static str> + Send + Sync + 'static,
    ) -> Self {
        self.metric_label = Some(std::sync::Arc::new(label));
        self
    }

    /// Describes this client to operators: who holds a lock, beyond the random client id in
    /// its owner id. Default: none (nothing is written).
    ///
    /// At most 128 bytes (at least 1), without control characters; checked by
    /// [`build`](Self::build), which returns [`LockError::InvalidOption`] with option
    /// `"owner_description"` otherwise. Something like
    /// `format!("{service}@{host} pid {pid}")`.
    ///
    /// When set, the client writes it to Redis under a key of its own, `<prefix>client:<client
    /// id>` (the prefix's ACL key pattern covers it; `SET` and `GET` only), once at `build()`
    /// and then once per watchdog period (`watchdog_lease / 3`) from the watchdog's task, with
    /// a time to live of 3 watchdog leases. Acquisitions never touch it: no extra bytes per
    /// lock, no extra call. A failed write is logged at debug level and tried again the next
    /// period; it is never an error. Once the client and its guards are all dropped (or its
    /// process dies), nothing refreshes the key and it expires within 3 watchdog leases;
    /// nothing deletes it. On a Cluster the key lives in its own slot.
    ///
    /// Anyone with the same prefix reads it with [`LockClient::owner_description`] given an
    /// owner id from `info()`; `lockctl status` and `lockctl list` show it.
    ///
    /// ```no_run
    /// use lock_core::{LockClient, LockError};
    ///
    /// # async fn f() -> Result<(), LockError> {
    /// let host = std::env::var("HOSTNAME").unwrap_or_default();
    /// let client = LockClient::builder("redis://127.0.0.1:6379")
    ///     .owner_description(format!("billing@{host} pid {}", std::process::id()))
    ///     .build()
    ///     .await?;
    /// # drop(client);
    /// # Ok(()) }
    /// ```
    pub fn owner_description(mut self, description: impl Into<String>) -> Self {
        self.owner_description = Some(description.into());
        self
    }

    /// Connects, loads the scripts, and starts the client's background tasks (watchdog,
    /// pub/sub, background releases) on the current tokio runtime. Every option is checked
    /// first: a bad one is [`LockError::InvalidOption`] naming it, before anything connects.
    pub async fn build(mut self) -> Result<LockClient, LockError> {
        validate_prefix(&self.prefix)?;
        if let Some(description) = &self.owner_description {
            description::validate(description)?;
        }
        check_range(
            "watchdog_lease",
            self.watchdog_lease,
            MIN_WATCHDOG_LEASE,
            MAX_LEASE,
        )?;
        check_range(
            "fence_ttl",
            self.fence_ttl,
            Duration::from_secs(1),
            MAX_LEASE,
        )?;
        if self.pool_size == 0 || self.pool_size > 1024 {
            return Err(LockError::InvalidOption {
                option: "pool_size",
                reason: format!("{} is outside 1..=1024", self.pool_size),
            });
        }
        check_timeout("connect_timeout", self.connect_timeout)?;
        check_timeout("response_timeout", self.response_timeout)?;
        if let Some(max_wait) = self.connect_retry {
            check_range(
                "connect_retry",
                max_wait,
                Duration::from_millis(1),
                connect_retry::MAX_WAIT,
            )?;
        }
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
        metrics::describe();
        let (backend, speech) = self.connect_retrying().await?;
        backend.start();
        let eviction = eviction_risk(&backend).await;
        let waiters = Waiters::start(backend.pubsub_source(), self.connect_timeout);
        let engine = Engine::start(
            backend,
            speech,
            Config {
                prefix: self.prefix,
                watchdog_lease: self.watchdog_lease,
                response_timeout: self.response_timeout,
                fence_ttl: self.fence_ttl,
                min_replicas: self.min_replicas,
                metric_label: self.metric_label,
                eviction,
                owner_description: self.owner_description,
            },
            waiters,
        );
        description::refresh(&engine, self.response_timeout).await;
        tokio::spawn(watchdog::run(Arc::downgrade(&engine), self.watchdog_lease));
        Ok(LockClient::from_engine(engine))
    }
}

/// Reads the server's `maxmemory-policy` and says once if it can evict lock keys. Never fails:
/// a refused or unanswered `CONFIG GET` is [`EvictionRisk::Unknown`].
async fn eviction_risk(backend: &Backend) -> EvictionRisk {
    let risk = match backend.max_memory_policy().await {
        Ok(policy) => EvictionRisk::of(Some(&policy)),
        Err(error) => {
            tracing::info!(%error, "could not read maxmemory-policy (CONFIG GET); \
                eviction risk unknown: make sure the server uses noeviction");
            EvictionRisk::Unknown
        }
    };
    if let EvictionRisk::Evicts { policy } = &risk {
        tracing::warn!(
            policy = %policy,
            "Redis maxmemory-policy can evict lock keys: under memory pressure locks may be \
             silently lost (use maxmemory-policy noeviction for the lock server)"
        );
    }
    risk
}

impl LockClientBuilder {
    /// Connects and settles how to speak to the server, tried again as
    /// [`connect_retry`](Self::connect_retry) says.
    async fn connect_retrying(&mut self) -> Result<(Backend, Speech), LockError> {
        // `build` refused a pool for any deployment but a standalone server.
        let given_pool = self.pool.take();
        let mut retry = self.connect_retry.map(ConnectRetry::new);
        loop {
            let error = match self.connect(given_pool.clone()).await {
                Ok(backend) => {
                    let needs_wait = self.min_replicas.is_some();
                    match Speech::negotiate(&backend, self.mutex_protocol, needs_wait).await {
                        Ok(speech) => return Ok((backend, speech)),
                        Err(e) => e,
                    }
                }
                Err(e) => e,
            };
            let Some(retry) = retry.as_mut() else {
                return Err(error);
            };
            match retry.pause_after(&error) {
                Some(pause) => tokio::time::sleep(pause).await,
                None => return Err(retry.give_up(error)),
            }
        }
    }

    /// Builds the backend of the deployment (its background tasks not started yet: see
    /// [`Backend::start`]).
    async fn connect(
        &self,
        given_pool: Option<Pool<RedisConnectionManager>>,
    ) -> Result<Backend, LockError> {
        let (connect_timeout, response_timeout) = (self.connect_timeout, self.response_timeout);
        match self.prepare()? {
            Prepared::Standalone(client) => {
                Standalone::check_reachable(&client, connect_timeout).await?;
                let pool = match given_pool {
                    Some(pool) => Standalone::given_pool(pool),
                    None => Standalone::default_pool(&client, self.pool_size, connect_timeout)?,
                };
                let backend = Standalone::new(pool, client, response_timeout, connect_timeout);
                Ok(Backend::Standalone(Box::new(backend)))
            }
            Prepared::Cluster { seeds, .. } => {
                let client = Cluster::client(&seeds, connect_timeout, response_timeout)
                    .map_err(|e| invalid("urls", e))?;
                // Acknowledged acquisitions get their own connection, whose response timeout
                // covers `WAIT`.
                let acks = match self.min_replicas {
                    Some((_, wait)) => Some(
                        Cluster::client(&seeds, connect_timeout, response_timeout + wait)
                            .map_err(|e| invalid("urls", e))?,
                    ),
                    None => None,
                };
                let backend = Cluster::connect(
                    seeds,
                    &client,
                    acks.as_ref(),
                    connect_timeout,
                    response_timeout,
                )
                .await?;
                Ok(Backend::Cluster(backend))
            }
            Prepared::Sentinel(discovery) => Ok(Backend::Sentinel(Sentinel::new(discovery))),
            #[cfg(feature = "testing")]
            Prepared::Memory(server) => Ok(Backend::Memory(Memory::new(
                server,
                connect_timeout,
                response_timeout,
            ))),
        }
    }

    /// The deployment's URLs parsed, with the TLS options checked and applied: what
    /// [`build`](Self::build) and [`connect_primaries`](Self::connect_primaries) connect with.
    fn prepare(&self) -> Result<Prepared<'_>, LockError> {
        match &self.deployment {
            Deployment::Standalone { url } => {
                let info = crate::url::parse(url, "url")?;
                self.tls.check(tls::is_tls(&info))?;
                let client = redis::Client::open(self.tls.apply(info, "url")?)
                    .map_err(|e| invalid("url", e))?;
                Ok(Prepared::Standalone(client))
            }
            Deployment::Cluster { urls } => {
                if urls.is_empty() {
                    return Err(LockError::InvalidOption {
                        option: "urls",
                        reason: "no cluster node given".to_owned(),
                    });
                }
                let seeds = Seeds::new(urls, self.tls.clone())?;
                self.tls.check(seeds.is_tls())?;
                Ok(Prepared::Cluster { urls, seeds })
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
                // TLS to the sentinels and to the primary each follow their own URL's scheme.
                let sentinels = urls
                    .iter()
                    .map(|url| crate::url::parse(url, "sentinels"))
                    .collect::<Result<Vec<_>, _>>()?;
                let primary = crate::url::parse(
                    primary_url.as_deref().unwrap_or("redis://primary/"),
                    "sentinel_primary_url",
                )?;
                self.tls
                    .check(sentinels.iter().any(tls::is_tls) || tls::is_tls(&primary))?;
                let sentinels = sentinels
                    .into_iter()
                    .map(|info| {
                        redis::Client::open(self.tls.apply(info, "sentinels")?)
                            .map_err(|e| invalid("sentinels", e))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let primary = self.tls.apply(primary, "sentinel_primary_url")?;
                Ok(Prepared::Sentinel(Discovery::new(SentinelSettings {
                    sentinels,
                    service: service.clone(),
                    primary,
                    pool_size: self.pool_size,
                    connect_timeout: self.connect_timeout,
                    response_timeout: self.response_timeout,
                })))
            }
            #[cfg(feature = "testing")]
            Deployment::Memory(server) => {
                self.tls.check(false)?;
                Ok(Prepared::Memory(server.clone()))
            }
        }
    }

    /// Connects to each primary of the deployment this builder names, **for operators and
    /// tools such as `lockctl`**, without building a [`LockClient`]. Nothing is loaded or
    /// written: it sends only `SENTINEL GET-MASTER-ADDR-BY-NAME` and `ROLE` behind Sentinel and
    /// `CLUSTER SLOTS` on a Cluster, so a user that may only read is enough. Applications never
    /// need it.
    ///
    /// The primaries are found as a lock client finds them, with the same URLs, TLS options
    /// ([`tls_root_certificate`](Self::tls_root_certificate), ...) and timeouts: the standalone
    /// server; the primary the sentinels name now, checked with `ROLE` (a later failover is not
    /// followed); every primary of a Cluster, from `CLUSTER SLOTS`. The builder is left as it
    /// was, so it can [`build`](Self::build) a client for the same deployment as well.
    ///
    /// Errors are those of [`build`](Self::build) for the same cause: a bad URL or TLS option
    /// ([`LockError::InvalidOption`]), a failed handshake ([`LockError::Tls`]), no connection
    /// ([`LockError::Unavailable`]), no primary known to the sentinels
    /// ([`LockError::NoPrimary`]).
    ///
    /// ```no_run
    /// use lock_core::{LockClient, redis};
    ///
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let builder = LockClient::builder("rediss://redis.internal:6380")
    ///     .tls_root_certificate(std::fs::read("/etc/redis/tls/ca.crt")?);
    /// let primaries = builder.connect_primaries().await?;
    /// for primary in &primaries {
    ///     let mut connection = primary.connection().await?;
    ///     let config: Vec<String> = redis::cmd("CONFIG")
    ///         .arg("GET")
    ///         .arg("notify-keyspace-events")
    ///         .query_async(&mut connection)
    ///         .await?;
    ///     println!("{}: {config:?}", primary.address());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn connect_primaries(&self) -> Result<Primaries, LockError> {
        check_timeout("connect_timeout", self.connect_timeout)?;
        check_timeout("response_timeout", self.response_timeout)?;
        let timeouts = Timeouts {
            connect: self.connect_timeout,
            response: self.response_timeout,
        };
        let found = match self.prepare()? {
            Prepared::Standalone(client) => primaries::standalone(client, timeouts).await?,
            Prepared::Cluster { urls, seeds } => {
                primaries::cluster(urls, &seeds, &self.tls, timeouts).await?
            }
            Prepared::Sentinel(discovery) => primaries::sentinel(discovery, timeouts).await?,
            #[cfg(feature = "testing")]
            Prepared::Memory(_) => {
                return Err(LockError::Unsupported {
                    feature: "connect_primaries",
                    missing: "a Redis server (the in-memory server has no connections)",
                    detail: None,
                });
            }
        };
        Ok(Primaries::new(found, timeouts))
    }
}

/// A deployment, ready to connect to (see [`LockClientBuilder::prepare`]).
enum Prepared<'a> {
    Standalone(redis::Client),
    Cluster {
        urls: &'a [String],
        seeds: Seeds,
    },
    /// How to find the primary (not started).
    Sentinel(Arc<Discovery>),
    #[cfg(feature = "testing")]
    Memory(Arc<Server>),
}

/// A URL the redis crate refuses: only the reason is reported (URLs may carry a password).
fn invalid(option: &'static str, e: redis::RedisError) -> LockError {
    LockError::InvalidOption {
        option,
        reason: e.to_string(),
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
            .field("tls", &self.tls)
            .field("metric_label", &self.metric_label.is_some())
            .field("owner_description", &self.owner_description)
            .field("connect_retry", &self.connect_retry)
            .finish_non_exhaustive()
    }
}

// The constructors live here, next to the builder they start.
impl LockClient {
    /// Connects with the default configuration.
    pub async fn connect(url: &str) -> Result<LockClient, LockError> {
        Self::builder(url).build().await
    }

    /// Starts configuring a client for the Redis server at `url`
    /// (`redis://[:password@]host:port[/db]`).
    pub fn builder(url: &str) -> LockClientBuilder {
        LockClientBuilder::new(Deployment::Standalone {
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
    /// stable order, with rollback (see [`MultiLock`](crate::MultiLock)). A failover of a primary may
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
        LockClientBuilder::new(Deployment::Cluster {
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
        LockClientBuilder::new(Deployment::Sentinel {
            urls: sentinels.into_iter().map(Into::into).collect(),
            service: service.to_owned(),
            primary_url: None,
        })
    }
}
