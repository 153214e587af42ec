//! Finding each primary of a deployment and a plain client for it, with the builder's TLS
//! options applied (the public face is [`Primaries`](crate::Primaries)): the server itself, the
//! primary the sentinels name (through [`sentinel::Discovery`], checked with `ROLE`), or every
//! primary of a Cluster (`CLUSTER SLOTS`, through the same cluster client as the lock client's).
//! Nothing here loads code or writes.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisResult, Value};

use super::cluster::Cluster;
pub(crate) use super::errors::address;
use super::errors::{connect_error, map_error};
use super::request::Request;
use super::seeds::Seeds;
use super::sentinel::Discovery;
use super::tls::TlsOptions;
use super::topology::Primary;
use crate::error::{LockError, is_connection_error};
use crate::wire::convert;

/// The primaries found, and a connection that sends a command to the primary of its key.
pub(crate) struct Found {
    /// Each primary: `host:port` and its client.
    pub(crate) primaries: Vec<(String, redis::Client)>,
    pub(crate) keyed: Keyed,
}

/// A connection for commands on one lock's keys (one slot).
#[derive(Clone)]
pub(crate) enum Keyed {
    /// The only primary, connected to again after its connection broke.
    Node(Arc<Reconnecting>),
    /// A Cluster connection: it follows the slot map.
    Cluster(ClusterConnection),
}

/// The connect and response timeouts of every connection made here.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) response: Duration,
}

impl Timeouts {
    /// The configuration of a plain connection.
    pub(crate) fn config(self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect))
            .set_response_timeout(Some(self.response))
    }
}

/// A plain connection to `client`; a failure is said as the lock client says it
/// ([`LockError::Tls`], [`LockError::Unavailable`] with its cause, ...).
async fn connect(
    client: &redis::Client,
    timeouts: Timeouts,
) -> Result<MultiplexedConnection, LockError> {
    let config = timeouts.config();
    let started = Instant::now();
    let connecting = client.get_multiplexed_async_connection_with_config(&config);
    match tokio::time::timeout(timeouts.connect, connecting).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(e)) => Err(connect_error(
            started,
            address(client.get_connection_info()),
            Some(e),
        )),
        Err(_) => Err(connect_error(
            started,
            address(client.get_connection_info()),
            None,
        )),
    }
}

/// The one server at `client`.
pub(crate) async fn standalone(
    client: redis::Client,
    timeouts: Timeouts,
) -> Result<Found, LockError> {
    let keyed = Keyed::Node(Arc::new(Reconnecting {
        current: tokio::sync::Mutex::new((0, Some(connect(&client, timeouts).await?))),
        client: client.clone(),
        timeouts,
    }));
    let label = address(client.get_connection_info());
    Ok(Found {
        primaries: vec![(label, client)],
        keyed,
    })
}

/// The primary the sentinels of `discovery` name now (a failover later is not followed).
pub(crate) async fn sentinel(
    discovery: Arc<Discovery>,
    timeouts: Timeouts,
) -> Result<Found, LockError> {
    // The current primary's client: the one the pub/sub connection would use.
    let (_, client) = Primary::pubsub_client(discovery.as_ref()).await?;
    standalone(client, timeouts).await
}

/// Every primary of the Cluster whose seeds are `seeds` (parsed again from `urls` as the
/// template of each primary's address: user, password, TLS).
pub(crate) async fn cluster(
    urls: &[String],
    seeds: &Seeds,
    tls: &TlsOptions,
    timeouts: Timeouts,
) -> Result<Found, LockError> {
    let invalid = |e: redis::RedisError| LockError::InvalidOption {
        option: "urls",
        reason: e.to_string(),
    };
    let client = Cluster::client(seeds, timeouts.connect, timeouts.response).map_err(invalid)?;
    let started = Instant::now();
    let mut connection =
        match tokio::time::timeout(timeouts.connect, client.get_async_connection()).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(e)) => {
                return Err(connect_error(started, seeds.addresses(), Some(e)).auth_in("urls"));
            }
            Err(_) => return Err(connect_error(started, seeds.addresses(), None)),
        };
    let mut slots = redis::cmd("CLUSTER");
    slots.arg("SLOTS");
    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary);
    let reply = match tokio::time::timeout(
        timeouts.response * 2,
        connection.route_command(slots, route),
    )
    .await
    {
        Ok(reply) => reply.map_err(|e| map_error(e, timeouts.response))?,
        Err(_) => return Err(LockError::ResponseTimeout(timeouts.response * 2)),
    };
    let template = crate::url::parse(urls.first().map_or("", String::as_str), "urls")?;
    let mut primaries: Vec<(String, redis::Client)> = Vec::new();
    for (host, port) in primary_addresses(reply)? {
        // A node that does not know its own address says "" or "?": it is the seed's host.
        let host = match (host.as_str(), template.addr()) {
            (
                "" | "?",
                ConnectionAddr::Tcp(seed, _) | ConnectionAddr::TcpTls { host: seed, .. },
            ) => seed.clone(),
            _ => host,
        };
        let info = tls.apply(with_address(&template, host, port), "urls")?;
        let label = address(&info);
        if !primaries.iter().any(|(known, _)| *known == label) {
            primaries.push((label, redis::Client::open(info).map_err(invalid)?));
        }
    }
    if primaries.is_empty() {
        return Err(LockError::UnexpectedReply(
            "CLUSTER SLOTS named no primary".to_owned(),
        ));
    }
    Ok(Found {
        primaries,
        keyed: Keyed::Cluster(connection),
    })
}

/// A connection to one node that is opened again after it broke: a request whose connection
/// fails under it is answered with that failure (never sent twice: it may have been applied),
/// and the next one connects anew.
pub(crate) struct Reconnecting {
    client: redis::Client,
    timeouts: Timeouts,
    /// The connection, numbered, so a failure on an old one does not drop a newer one.
    current: tokio::sync::Mutex<(u64, Option<MultiplexedConnection>)>,
}

impl Reconnecting {
    /// Sends `request` on the current connection (connecting first if there is none).
    pub(crate) async fn send(&self, request: Request<'_>) -> RedisResult<Value> {
        let (number, mut conn) = {
            let mut current = self.current.lock().await;
            if current.1.is_none() {
                let fresh = connect(&self.client, self.timeouts).await;
                current.1 = Some(fresh.map_err(LockError::into_redis)?);
                current.0 += 1;
            }
            (current.0, current.1.clone())
        };
        let Some(conn) = conn.as_mut() else {
            return Err(LockError::NoClient.into_redis());
        };
        let reply = request.send(conn).await;
        if reply.as_ref().is_err_and(is_connection_error) {
            let mut current = self.current.lock().await;
            if current.0 == number {
                current.1 = None;
            }
        }
        reply
    }

    /// The database its connections use.
    pub(crate) fn db(&self) -> i64 {
        self.client.get_connection_info().redis_settings().db()
    }
}

/// `info` with its host and port replaced, keeping its scheme, login and database.
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

/// The primaries' addresses in a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, …],
/// replica…], …]`.
fn primary_addresses(reply: Value) -> Result<Vec<(String, u16)>, LockError> {
    let ranges: Vec<Vec<Value>> = convert(reply)?;
    Ok(ranges
        .into_iter()
        .filter_map(|range| {
            let primary: Vec<Value> = convert(range.into_iter().nth(2)?).ok()?;
            let mut fields = primary.into_iter();
            let host: String = convert(fields.next()?).ok()?;
            let port: u16 = convert(fields.next()?).ok()?;
            Some((host, port))
        })
        .collect())
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
            primary_addresses(reply).unwrap(),
            [("127.0.0.1".to_owned(), 7000), (String::new(), 7002)]
        );
        assert!(primary_addresses(Value::Nil).unwrap().is_empty());
        assert!(primary_addresses(Value::Int(1)).is_err());
    }

    #[test]
    fn an_address_is_replaced_keeping_the_scheme_and_login() {
        let template = crate::url::parse("rediss://user:pw@primary/3", "url").unwrap();
        let info = with_address(&template, "10.0.0.1".to_owned(), 6380);
        assert_eq!(address(&info), "10.0.0.1:6380");
        assert!(crate::backend::tls::is_tls(&info));
        assert_eq!(info.redis_settings().password(), Some("pw"));
        assert_eq!(info.redis_settings().db(), 3);
    }
}
