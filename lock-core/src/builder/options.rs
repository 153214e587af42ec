//! The options of a [`LockClientBuilder`], one method each: how locks are kept in Redis,
//! how the client connects, TLS, and what it tells operators. None fails: `build()` checks
//! them all.

use std::time::Duration;

use bb8::Pool;
use bb8_redis::RedisConnectionManager;

use super::settings::{Deployment, LockClientBuilder};
use crate::capabilities::MutexProtocol;

impl LockClientBuilder {
    /// How the mutex is kept in Redis (default [`MutexProtocol::Auto`]: the server's native
    /// compare-and-set commands where every primary has them, Valkey 9.0 or later, else the
    /// native acquisition with a small script for the release where `SET … NX GET` is there,
    /// Redis 7.0 or later, else this crate's scripts). [`MutexProtocol::Native`] and
    /// [`MutexProtocol::Hybrid`] make [`build`](Self::build) fail with
    /// [`LockError::Unsupported`] on a server without what they need. Clients of a deployment
    /// that share names must not mix the scripted protocol with the other two: see
    /// [`MutexProtocol`].
    ///
    /// [`LockError::Unsupported`]: crate::LockError::Unsupported
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
    ///
    /// [`LockError::NotReplicated`]: crate::LockError::NotReplicated
    pub fn min_replicas(mut self, n: u32, timeout: Duration) -> Self {
        self.min_replicas = Some((n, timeout));
        self
    }

    /// With [`LockClient::builder_sentinel`]: the connection settings of the primary
    /// (password, database) as a URL whose host and port are ignored and replaced by the
    /// address the sentinels name, e.g. `redis://:secret@primary/2`. Default: no password,
    /// database 0.
    ///
    /// [`LockClient::builder_sentinel`]: crate::LockClient::builder_sentinel
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
    ///
    /// [`LockError::Unavailable`]: crate::LockError::Unavailable
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
    ///
    /// [`LockError::is_unavailable`]: crate::LockError::is_unavailable
    /// [`LockError::AuthRequired`]: crate::LockError::AuthRequired
    /// [`LockError::Unavailable`]: crate::LockError::Unavailable
    pub fn connect_retry(mut self, max_wait: Duration) -> Self {
        self.connect_retry = Some(max_wait);
        self
    }

    /// How long one call may wait for Redis to answer (default 1 s; 1 ms to 1 h).
    ///
    /// It is the call's whole bound, counted from when the call was asked (a request queued
    /// behind a batch in flight included), whatever happens inside it: a call on a frozen
    /// server gives up at this timeout with [`LockError::ResponseTimeout`], alone or with any
    /// number of others. A call that had to open a connection, or wait for the pool's heal
    /// after a broken one, may take up to the [`connect_timeout`](Self::connect_timeout) more;
    /// on a Cluster every call may (the cluster connection reconnects inside calls). A
    /// timed-out request is never sent again: it may have been applied.
    ///
    /// [`LockError::ResponseTimeout`]: crate::LockError::ResponseTimeout
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
    ///
    /// [`LockError::InvalidOption`]: crate::LockError::InvalidOption
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
    ///
    /// [`LockError::InvalidOption`]: crate::LockError::InvalidOption
    /// [`LockError::Tls`]: crate::LockError::Tls
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
    ///
    /// [`LockError::InvalidOption`]: crate::LockError::InvalidOption
    /// [`LockClient::owner_description`]: crate::LockClient::owner_description
    pub fn owner_description(mut self, description: impl Into<String>) -> Self {
        self.owner_description = Some(description.into());
        self
    }
}
