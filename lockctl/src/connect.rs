//! Connecting to a deployment: a lock-core [`LockClient`] (every read and force-unlock of a
//! lock goes through it), and lock-core's plain connections to each primary ([`Primaries`])
//! for what a lock client does not do: `SCAN`, `EXISTS`, `CONFIG GET` and subscriptions.
//!
//! A standalone server is one URL; a Cluster is detected from `INFO cluster` (or `--cluster`,
//! or several URLs); with `--sentinel-master` the URLs are sentinels. lock-core finds the
//! primaries (a Cluster's from `CLUSTER SLOTS`, the one the sentinels name) and applies the
//! TLS options to every connection, as for its own.

use std::time::Duration;

use lock_core::redis;
use lock_core::redis::aio::{MultiplexedConnection, PubSub};
use lock_core::{LockClient, LockClientBuilder, LockError, Primaries, Primary};

use crate::cli::ConnectionArgs;
use crate::exit::{Failure, redact};

/// The kind of deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deployment {
    /// One server.
    Standalone,
    /// A Redis Cluster: every primary is scanned and watched.
    Cluster,
    /// A primary that Redis Sentinel names.
    Sentinel,
}

/// A connected deployment.
#[derive(Debug)]
pub(crate) struct Target {
    /// The lock-core client.
    pub(crate) client: LockClient,
    /// Every primary, and a connection for commands on the keys of one lock.
    pub(crate) primaries: Primaries,
    /// The database the locks are in (keyspace channels name it).
    pub(crate) db: i64,
    /// The key prefix.
    pub(crate) prefix: String,
    /// The connect and response timeout.
    pub(crate) timeout: Duration,
    /// What the URLs were, without passwords, and where they came from, for messages:
    /// `redis://10.0.0.5:6379 (from REDIS_URL)`.
    pub(crate) label: String,
}

/// The TLS files, read.
#[derive(Debug, Default, Clone)]
struct Tls {
    ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    insecure: bool,
}

impl Tls {
    fn read(args: &ConnectionArgs) -> Result<Tls, Failure> {
        let read = |path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|e| Failure::Usage(format!("cannot read {}: {e}", path.display())))
        };
        Ok(Tls {
            ca: args.tls_ca.as_deref().map(read).transpose()?,
            identity: match (&args.tls_cert, &args.tls_key) {
                (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
                _ => None,
            },
            insecure: args.tls_insecure,
        })
    }

    /// The builder with these options (lock-core checks them: a bad PEM is a usage error).
    fn apply(&self, mut builder: LockClientBuilder) -> LockClientBuilder {
        if let Some(ca) = &self.ca {
            builder = builder.tls_root_certificate(ca.clone());
        }
        if let Some((cert, key)) = &self.identity {
            builder = builder.tls_client_identity(cert.clone(), key.clone());
        }
        if self.insecure {
            builder = builder.danger_accept_invalid_certificates();
        }
        builder
    }
}

/// Checks a URL as lock-core does; a bad one is a usage error that names the accepted
/// schemes and does not repeat the URL's password.
fn parse(url: &str) -> Result<(), Failure> {
    lock_core::validate_url(url).map_err(|e| {
        let reason = match e {
            LockError::InvalidOption { reason, .. } => reason,
            other => other.to_string(),
        };
        Failure::Usage(format!("bad URL {}: {reason}", redact(url)))
    })
}

impl Target {
    /// Connects to the deployment the options name, with lock-core's client under `prefix`
    /// (`fence_ttl`: how long a force-unlocked lock keeps its fencing counter).
    pub(crate) async fn connect(
        args: &ConnectionArgs,
        prefix: &str,
        fence_ttl: Option<Duration>,
    ) -> Result<Target, Failure> {
        let tls = Tls::read(args)?;
        let (urls, origin) = args.urls(|name| std::env::var(name).ok());
        let label = urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",");
        let label = format!("{label} (from {origin})");
        for url in &urls {
            parse(url).map_err(|e| match e {
                Failure::Usage(m) => Failure::Usage(format!("{m} (from {origin})")),
                other => other,
            })?;
        }
        let urls = &urls;
        let settings = Settings {
            args,
            urls,
            prefix,
            fence_ttl,
            tls: &tls,
            label: &label,
        };
        let mut deployment = if args.sentinel_master.is_some() {
            Deployment::Sentinel
        } else if args.cluster || urls.len() > 1 {
            Deployment::Cluster
        } else {
            Deployment::Standalone
        };
        let mut client = settings.build(deployment).await?;
        let mut primaries = settings.primaries(deployment).await?;
        if deployment == Deployment::Standalone {
            // The client checked the server answers; is it a Cluster node?
            if let Some(node) = primaries.iter().next()
                && is_cluster_node(node).await?
            {
                deployment = Deployment::Cluster;
                client = settings.build(deployment).await?;
                primaries = settings.primaries(deployment).await?;
            }
        }
        let db = match primaries.iter().next() {
            Some(node) if !primaries.is_cluster() => {
                node.client().get_connection_info().redis_settings().db()
            }
            _ => 0,
        };
        Ok(Target {
            client,
            primaries,
            db,
            prefix: prefix.to_owned(),
            timeout: args.timeout,
            label,
        })
    }

    /// Which of `keys` (all of one lock: one slot) exist.
    pub(crate) async fn exists(&self, keys: &[String]) -> Result<Vec<bool>, Failure> {
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.exists(key);
        }
        pipe.query_async::<Vec<bool>>(&mut self.primaries.keyed_connection())
            .await
            .map_err(|e| Failure::from_redis(e, &self.label))
    }

    /// A plain connection to `node`, with the timeouts.
    pub(crate) async fn connection(
        &self,
        node: &Primary,
    ) -> Result<MultiplexedConnection, Failure> {
        connection(node).await
    }

    /// A subscriber connection to `node`.
    pub(crate) async fn pubsub(&self, node: &Primary) -> Result<PubSub, Failure> {
        match tokio::time::timeout(self.timeout, node.client().get_async_pubsub()).await {
            Ok(Ok(pubsub)) => Ok(pubsub),
            Ok(Err(e)) => Err(Failure::from_redis(e, node.address())),
            Err(_) => Err(Failure::timed_out(node.address(), "connecting")),
        }
    }
}

/// A plain connection to `node`, with the timeouts.
async fn connection(node: &Primary) -> Result<MultiplexedConnection, Failure> {
    node.connection()
        .await
        .map_err(|e| Failure::from_redis(e, node.address()))
}

/// Whether `node` has cluster mode on. A server that refuses `INFO` is taken for a
/// standalone one.
async fn is_cluster_node(node: &Primary) -> Result<bool, Failure> {
    let mut conn = connection(node).await?;
    let info: Result<String, _> = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut conn)
        .await;
    match info {
        Ok(text) => Ok(text.lines().any(|l| l.trim() == "cluster_enabled:1")),
        Err(e) => match crate::exit::cause(&e) {
            Some(_) => Err(Failure::from_redis(e, node.address())),
            None => Ok(false),
        },
    }
}

/// What every connection of a [`Target`] shares.
struct Settings<'a> {
    args: &'a ConnectionArgs,
    /// The URLs: `--url`'s, a variable's or the default.
    urls: &'a [String],
    prefix: &'a str,
    fence_ttl: Option<Duration>,
    tls: &'a Tls,
    label: &'a str,
}

impl Settings<'_> {
    /// lock-core's builder for the deployment.
    fn builder(&self, deployment: Deployment) -> LockClientBuilder {
        let args = self.args;
        let urls = self.urls.iter().cloned();
        let mut builder = match (deployment, &args.sentinel_master) {
            (Deployment::Sentinel, Some(master)) => LockClient::builder_sentinel(urls, master)
                .sentinel_primary_url(args.sentinel_primary_url.clone()),
            (Deployment::Cluster, _) => LockClient::builder_cluster(urls),
            _ => LockClient::builder(self.urls.first().map_or("", String::as_str)),
        };
        builder = builder
            .key_prefix(self.prefix)
            .connect_timeout(args.timeout)
            .response_timeout(args.timeout)
            .pool_size(4);
        if let Some(ttl) = self.fence_ttl {
            builder = builder.fence_ttl(ttl);
        }
        self.tls.apply(builder)
    }

    /// lock-core's client for the deployment.
    async fn build(&self, deployment: Deployment) -> Result<LockClient, Failure> {
        self.builder(deployment)
            .build()
            .await
            .map_err(|e| Failure::from_lock(e, self.label))
    }

    /// Every primary of the deployment.
    async fn primaries(&self, deployment: Deployment) -> Result<Primaries, Failure> {
        self.builder(deployment)
            .connect_primaries()
            .await
            .map_err(|e| Failure::from_lock(e, self.label))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_url_is_not_repeated() {
        assert!(parse("redis://user:pw@primary/3").is_ok());
        let Err(Failure::Usage(message)) = parse("redis://user:secret@host:notaport") else {
            panic!("not a usage error");
        };
        assert!(!message.contains("secret"), "{message}");
    }
}
