//! Connecting to a deployment: a lock-core [`LockClient`] (every read and force-unlock of a
//! lock goes through it), and plain connections to each primary for what lock-core does not
//! do: `SCAN`, `EXISTS`, `CONFIG GET` and subscriptions.
//!
//! A standalone server is one URL; a Cluster is detected from `INFO cluster` (or `--cluster`,
//! or several URLs) and its primaries are read from `CLUSTER SLOTS`; with `--sentinel-master`
//! the URLs are sentinels and the primary is the one they name.

use std::time::Duration;

use lock_core::redis::aio::{MultiplexedConnection, PubSub};
use lock_core::redis::cluster::ClusterClientBuilder;
use lock_core::redis::cluster_async::ClusterConnection;
use lock_core::redis::{
    self, AsyncConnectionConfig, ClientTlsConfig, ConnectionAddr, ConnectionInfo,
    IntoConnectionInfo, TlsCertificates, TlsMode, Value,
};
use lock_core::{LockClient, LockClientBuilder};

use crate::cli::ConnectionArgs;
use crate::exit::{Cause, Failure, redact};

/// The kind of deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deployment {
    /// One server.
    Standalone,
    /// A Redis Cluster: every primary is scanned and watched.
    Cluster,
    /// A primary that Redis Sentinel names.
    Sentinel,
}

/// One primary, reached with a plain connection.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// `host:port`, for messages.
    pub(crate) label: String,
    /// Its client (address, user, password, database, TLS).
    pub(crate) client: redis::Client,
}

/// A connected deployment.
pub(crate) struct Target {
    /// The lock-core client.
    pub(crate) client: LockClient,
    /// What was connected to.
    pub(crate) deployment: Deployment,
    /// Every primary.
    pub(crate) nodes: Vec<Node>,
    /// The database the locks are in (keyspace channels name it).
    pub(crate) db: i64,
    /// The key prefix.
    pub(crate) prefix: String,
    /// The connect and response timeout.
    pub(crate) timeout: Duration,
    /// What the URLs were, without passwords, for messages.
    pub(crate) label: String,
    /// For commands on the keys of one lock.
    keyed: Keyed,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("deployment", &self.deployment)
            .field("label", &self.label)
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

/// A connection for commands on the keys of one lock (one slot).
#[derive(Clone)]
enum Keyed {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
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

    fn certificates(&self) -> Option<TlsCertificates> {
        if self.ca.is_none() && self.identity.is_none() {
            return None;
        }
        Some(TlsCertificates {
            client_tls: self.identity.as_ref().map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.ca.clone(),
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

    /// A plain client for `info`, with these options when it is `rediss://`.
    fn client(&self, info: ConnectionInfo) -> Result<redis::Client, redis::RedisError> {
        let ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            ..
        } = info.addr().clone()
        else {
            return redis::Client::open(info);
        };
        let info = info.set_addr(ConnectionAddr::TcpTls {
            host,
            port,
            insecure: insecure || self.insecure,
            tls_params: None,
        });
        match self.certificates() {
            Some(certs) => redis::Client::build_with_tls(info, certs),
            None => redis::Client::open(info),
        }
    }
}

/// Parses a URL; a bad one is a usage error that does not repeat the URL (it may hold a
/// password).
fn parse(url: &str) -> Result<ConnectionInfo, Failure> {
    url.into_connection_info()
        .map_err(|e| Failure::Usage(format!("bad URL {}: {e}", redact(url))))
}

/// `host:port` of an address.
fn label(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        other => other.to_string(),
    }
}

/// `info` with its host and port replaced, keeping its scheme.
fn with_address(info: &ConnectionInfo, host: String, port: u16) -> ConnectionInfo {
    let addr = match info.addr() {
        ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: None,
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    info.clone().set_addr(addr)
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
        let urls = &args.url;
        let infos = urls
            .iter()
            .map(|u| parse(u))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(first) = infos.first().cloned() else {
            return Err(Failure::Usage("no --url given".to_owned()));
        };
        let label = urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",");
        let settings = Settings {
            prefix,
            fence_ttl,
            timeout: args.timeout,
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
        let mut client = settings.build(args, deployment).await?;
        if deployment == Deployment::Standalone {
            // The client checked the server answers; is it a Cluster node?
            let node = settings.node(first.clone())?;
            if is_cluster_node(&node, args.timeout).await? {
                deployment = Deployment::Cluster;
                client = settings.build(args, deployment).await?;
            }
        }
        let (nodes, keyed) = match deployment {
            Deployment::Standalone => {
                let node = settings.node(first.clone())?;
                let keyed = Keyed::Node(connection(&node, args.timeout).await?);
                (vec![node], keyed)
            }
            Deployment::Sentinel => {
                let master = args.sentinel_master.as_deref().unwrap_or_default();
                let template = parse(&args.sentinel_primary_url)?;
                let node = settings.sentinel_primary(&infos, master, &template).await?;
                let keyed = Keyed::Node(connection(&node, args.timeout).await?);
                (vec![node], keyed)
            }
            Deployment::Cluster => {
                let nodes = settings.cluster_primaries(&infos).await?;
                let keyed = Keyed::Cluster(settings.cluster_connection(&infos).await?);
                (nodes, keyed)
            }
        };
        let db = match deployment {
            Deployment::Cluster => 0,
            Deployment::Standalone => first.redis_settings().db(),
            Deployment::Sentinel => parse(&args.sentinel_primary_url)?.redis_settings().db(),
        };
        Ok(Target {
            client,
            deployment,
            nodes,
            db,
            prefix: prefix.to_owned(),
            timeout: args.timeout,
            label,
            keyed,
        })
    }

    /// Which of `keys` (all of one lock: one slot) exist.
    pub(crate) async fn exists(&self, keys: &[String]) -> Result<Vec<bool>, Failure> {
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.exists(key);
        }
        let reply = match self.keyed.clone() {
            Keyed::Node(mut c) => pipe.query_async::<Vec<bool>>(&mut c).await,
            Keyed::Cluster(mut c) => pipe.query_async::<Vec<bool>>(&mut c).await,
        };
        reply.map_err(|e| Failure::from_redis(e, &self.label))
    }

    /// A plain connection to `node`, with the timeouts.
    pub(crate) async fn connection(&self, node: &Node) -> Result<MultiplexedConnection, Failure> {
        connection(node, self.timeout).await
    }

    /// A subscriber connection to `node`.
    pub(crate) async fn pubsub(&self, node: &Node) -> Result<PubSub, Failure> {
        match tokio::time::timeout(self.timeout, node.client.get_async_pubsub()).await {
            Ok(Ok(pubsub)) => Ok(pubsub),
            Ok(Err(e)) => Err(Failure::from_redis(e, &node.label)),
            Err(_) => Err(Failure::timed_out(&node.label, "connecting")),
        }
    }
}

/// A plain connection to `node` with `timeout` to connect and for each answer.
async fn connection(node: &Node, timeout: Duration) -> Result<MultiplexedConnection, Failure> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    node.client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| Failure::from_redis(e, &node.label))
}

/// Whether `node` has cluster mode on. A server that refuses `INFO` is taken for a
/// standalone one.
async fn is_cluster_node(node: &Node, timeout: Duration) -> Result<bool, Failure> {
    let mut conn = connection(node, timeout).await?;
    let info: Result<String, _> = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut conn)
        .await;
    match info {
        Ok(text) => Ok(text.lines().any(|l| l.trim() == "cluster_enabled:1")),
        Err(e) => match crate::exit::cause(&e) {
            Some(_) => Err(Failure::from_redis(e, &node.label)),
            None => Ok(false),
        },
    }
}

/// What every connection of a [`Target`] shares.
struct Settings<'a> {
    prefix: &'a str,
    fence_ttl: Option<Duration>,
    timeout: Duration,
    tls: &'a Tls,
    label: &'a str,
}

impl Settings<'_> {
    /// lock-core's client for the deployment.
    async fn build(
        &self,
        args: &ConnectionArgs,
        deployment: Deployment,
    ) -> Result<LockClient, Failure> {
        let urls = args.url.iter().cloned();
        let mut builder = match (deployment, &args.sentinel_master) {
            (Deployment::Sentinel, Some(master)) => LockClient::builder_sentinel(urls, master)
                .sentinel_primary_url(args.sentinel_primary_url.clone()),
            (Deployment::Cluster, _) => LockClient::builder_cluster(urls),
            _ => LockClient::builder(args.url.first().map_or("", String::as_str)),
        };
        builder = builder
            .key_prefix(self.prefix)
            .connect_timeout(self.timeout)
            .response_timeout(self.timeout)
            .pool_size(4);
        if let Some(ttl) = self.fence_ttl {
            builder = builder.fence_ttl(ttl);
        }
        self.tls
            .apply(builder)
            .build()
            .await
            .map_err(|e| Failure::from_lock(e, self.label))
    }

    /// The node at `info`.
    fn node(&self, info: ConnectionInfo) -> Result<Node, Failure> {
        let label = label(info.addr());
        let client = self
            .tls
            .client(info)
            .map_err(|e| Failure::Usage(format!("{label}: {e}")))?;
        Ok(Node { label, client })
    }

    /// The primary the sentinels at `sentinels` name for `master`, reached with `template`'s
    /// scheme, user, password and database.
    async fn sentinel_primary(
        &self,
        sentinels: &[ConnectionInfo],
        master: &str,
        template: &ConnectionInfo,
    ) -> Result<Node, Failure> {
        let mut last = None;
        for info in sentinels {
            let sentinel = self.node(info.clone())?;
            let asked = async {
                let mut conn = connection(&sentinel, self.timeout).await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(master)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
                    .map_err(|e| Failure::from_redis(e, &sentinel.label))
            };
            match asked.await {
                Ok(Some((host, port))) => return self.node(with_address(template, host, port)),
                Ok(None) => {
                    last = Some(format!(
                        "sentinel {} knows no master {master:?}",
                        sentinel.label
                    ));
                }
                Err(e) => last = Some(e.to_string()),
            }
        }
        Err(Failure::Connection {
            target: self.label.to_owned(),
            cause: Cause::NoPrimary,
            detail: last.unwrap_or_else(|| "no sentinel given".to_owned()),
        })
    }

    /// Every primary of the Cluster, from the first seed that answers `CLUSTER SLOTS`.
    async fn cluster_primaries(&self, seeds: &[ConnectionInfo]) -> Result<Vec<Node>, Failure> {
        let mut last = None;
        for seed in seeds {
            let node = self.node(seed.clone())?;
            let slots = async {
                let mut conn = connection(&node, self.timeout).await?;
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async::<Value>(&mut conn)
                    .await
                    .map_err(|e| Failure::from_redis(e, &node.label))
            };
            match slots.await {
                Ok(reply) => {
                    let seed_host = match seed.addr() {
                        ConnectionAddr::Tcp(h, _) | ConnectionAddr::TcpTls { host: h, .. } => {
                            h.clone()
                        }
                        _ => String::new(),
                    };
                    let mut nodes: Vec<Node> = Vec::new();
                    for (host, port) in primaries(&reply) {
                        let host = if host.is_empty() || host == "?" {
                            seed_host.clone()
                        } else {
                            host
                        };
                        let node = self.node(with_address(seed, host, port))?;
                        if !nodes.iter().any(|n| n.label == node.label) {
                            nodes.push(node);
                        }
                    }
                    if nodes.is_empty() {
                        return Err(Failure::Refused(format!(
                            "{}: CLUSTER SLOTS named no primary",
                            node.label
                        )));
                    }
                    return Ok(nodes);
                }
                Err(e @ Failure::Connection { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Failure::Usage("no Cluster node given".to_owned())))
    }

    /// A Cluster connection, for commands on one lock's keys (it follows the slot map).
    async fn cluster_connection(
        &self,
        seeds: &[ConnectionInfo],
    ) -> Result<ClusterConnection, Failure> {
        let mut builder = ClusterClientBuilder::new(seeds.to_vec())
            .connection_timeout(self.timeout)
            .response_timeout(self.timeout);
        if let Some(ConnectionAddr::TcpTls { insecure, .. }) = seeds.first().map(|s| s.addr()) {
            if let Some(certs) = self.tls.certificates() {
                builder = builder.certs(certs);
            }
            if *insecure || self.tls.insecure {
                builder = builder.tls(TlsMode::Insecure);
            }
        }
        let client = builder
            .build()
            .map_err(|e| Failure::Usage(format!("{}: {e}", self.label)))?;
        match tokio::time::timeout(self.timeout * 2, client.get_async_connection()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(Failure::from_redis(e, self.label)),
            Err(_) => Err(Failure::timed_out(self.label, "connecting to the Cluster")),
        }
    }
}

/// The primaries' addresses in a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, …],
/// replica…], …]`.
fn primaries(reply: &Value) -> Vec<(String, u16)> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let mut out = Vec::new();
    let Value::Array(ranges) = reply else {
        return out;
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let Some(Value::Array(primary)) = fields.get(2) else {
            continue;
        };
        if let (Some(host), Some(Value::Int(port))) =
            (primary.first().and_then(text), primary.get(1))
            && let Ok(port) = u16::try_from(*port)
        {
            out.push((host, port));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_slots_name_the_primaries() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7000), bulk("id1")]),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7003), bulk("id4")]),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(10922)]),
            Value::Array(vec![
                Value::Int(10923),
                Value::Int(16383),
                Value::Array(vec![bulk(""), Value::Int(7002)]),
            ]),
        ]);
        assert_eq!(
            primaries(&reply),
            [("127.0.0.1".to_owned(), 7000), (String::new(), 7002)]
        );
        assert!(primaries(&Value::Nil).is_empty());
    }

    #[test]
    fn an_address_is_replaced_keeping_the_scheme_and_login() {
        let template = parse("rediss://user:pw@primary/3").unwrap();
        let info = with_address(&template, "10.0.0.1".to_owned(), 6380);
        assert_eq!(label(info.addr()), "10.0.0.1:6380");
        assert!(matches!(info.addr(), ConnectionAddr::TcpTls { .. }));
        assert_eq!(info.redis_settings().password(), Some("pw"));
        assert_eq!(info.redis_settings().db(), 3);
        assert!(parse("not a url").is_err());
    }
}
