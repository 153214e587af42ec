//! The constructors of a [`LockClient`] that start a [`LockClientBuilder`], next to the
//! builder they start.
use super::settings::{Deployment, LockClientBuilder};
use crate::client::LockClient;
use crate::error::LockError;

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
