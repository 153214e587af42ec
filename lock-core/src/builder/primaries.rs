//! [`LockClientBuilder::connect_primaries`]: plain connections to each primary of the
//! deployment, for operators' tools, without a client.
use super::prepare::Prepared;
use super::settings::{LockClientBuilder, check_timeout};
use crate::backend::primaries::{self, Timeouts};
use crate::error::LockError;
use crate::primaries::Primaries;

impl LockClientBuilder {
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
    ///
    /// [`LockClient`]: crate::LockClient
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
