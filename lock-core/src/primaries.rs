//! [`Primaries`]: plain connections to each primary of a deployment, for operators and tools
//! such as `lockctl` (made by [`LockClientBuilder::connect_primaries`](crate::LockClientBuilder::connect_primaries)).

use std::fmt;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::backend::primaries::{Found, Keyed, Timeouts};
use crate::backend::{Request, replies};

/// Each primary of a deployment, reached with plain connections, for operators and tools such
/// as `lockctl`: what they send that a lock client does not (`SCAN`, `EXISTS`, `CONFIG GET`,
/// `PSUBSCRIBE` to keyspace notifications).
///
/// Made by [`LockClientBuilder::connect_primaries`](crate::LockClientBuilder::connect_primaries), from the same URLs and options as a
/// [`LockClient`](crate::LockClient): the standalone server, the primary the sentinels name
/// now (a later failover is not followed), or every primary of a Cluster as `CLUSTER SLOTS`
/// names them. Every `rediss://` connection has the builder's TLS options applied. Use
/// [`layout`](crate::layout) to know which keys and channels are lock-core's.
///
/// ```no_run
/// use lock_core::{LockClient, layout, redis};
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let primaries = LockClient::builder_cluster(["redis://10.0.0.1:7000"])
///     .connect_primaries()
///     .await?;
/// for primary in &primaries {
///     let mut connection = primary.connection().await?;
///     let (_cursor, keys): (u64, Vec<String>) = redis::cmd("SCAN")
///         .arg(0)
///         .arg("MATCH")
///         .arg(layout::key_glob("lock:", "order:*"))
///         .query_async(&mut connection)
///         .await?;
///     println!("{}: {keys:?}", primary.address());
/// }
/// # Ok(()) }
/// ```
pub struct Primaries {
    primaries: Vec<Primary>,
    keyed: KeyedConnection,
}

impl Primaries {
    /// Wraps what the backend found.
    pub(crate) fn new(found: Found, timeouts: Timeouts) -> Primaries {
        Primaries {
            primaries: found
                .primaries
                .into_iter()
                .map(|(address, client)| Primary {
                    address,
                    client,
                    timeouts,
                })
                .collect(),
            keyed: KeyedConnection(found.keyed),
        }
    }

    /// Every primary (one for a standalone server or a Sentinel deployment).
    pub fn as_slice(&self) -> &[Primary] {
        &self.primaries
    }

    /// Each primary.
    pub fn iter(&self) -> std::slice::Iter<'_, Primary> {
        self.primaries.iter()
    }

    /// Whether the deployment is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.keyed.0, Keyed::Cluster(_))
    }

    /// A connection that sends each command to the primary of its keys: the one primary, or,
    /// on a Cluster, the primary of the command's slot (following `MOVED` and `ASK`). For
    /// commands on the keys of one lock, which share one slot: `EXISTS` on each of
    /// [`LockKeys::keys`](crate::layout::LockKeys::keys), say. Cheap to clone.
    pub fn keyed_connection(&self) -> KeyedConnection {
        self.keyed.clone()
    }
}

impl<'a> IntoIterator for &'a Primaries {
    type Item = &'a Primary;
    type IntoIter = std::slice::Iter<'a, Primary>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl fmt::Debug for Primaries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Primaries")
            .field("primaries", &self.primaries)
            .field("cluster", &self.is_cluster())
            .finish()
    }
}

/// One primary of a deployment (see [`Primaries`]).
#[derive(Clone)]
pub struct Primary {
    address: String,
    client: redis::Client,
    timeouts: Timeouts,
}

impl Primary {
    /// Its address, `host:port`, for messages: never a password.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Its client: its address, user, password, database and TLS settings, for any kind of
    /// connection (`get_async_pubsub` for subscriptions, say). Its database is the one the
    /// locks are in, and the one keyspace notifications name (`__keyspace@<db>__:`).
    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// A new multiplexed connection to it, with the builder's
    /// [`connect_timeout`](crate::LockClientBuilder::connect_timeout) and
    /// [`response_timeout`](crate::LockClientBuilder::response_timeout). Errors are the redis
    /// crate's.
    pub async fn connection(&self) -> redis::RedisResult<MultiplexedConnection> {
        self.client
            .get_multiplexed_async_connection_with_config(&self.timeouts.config())
            .await
    }
}

impl fmt::Debug for Primary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the client: its connection info holds the password.
        f.debug_struct("Primary")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// A connection that sends each command to the primary of its keys (see
/// [`Primaries::keyed_connection`]). Use it as any redis connection:
/// `cmd.query_async(&mut connection)`.
///
/// It works again by itself after a fault: a command whose connection fails under it (a
/// server restart, a reset) is answered with that error and never sent twice, and the next
/// one connects anew (on a Cluster, the cluster connection reconnects and follows the slot
/// map by itself).
#[derive(Clone)]
pub struct KeyedConnection(Keyed);

impl ConnectionLike for KeyedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.0 {
            Keyed::Node(c) => Box::pin(c.send(Request::User(cmd))),
            Keyed::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.0 {
            Keyed::Node(c) => Box::pin(async move {
                let request = Request::UserPipeline(pipeline, offset, count);
                c.send(request).await.map(replies)
            }),
            Keyed::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.0 {
            Keyed::Node(c) => c.db(),
            Keyed::Cluster(c) => c.get_db(),
        }
    }
}

impl fmt::Debug for KeyedConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let to = match self.0 {
            Keyed::Node(_) => "primary",
            Keyed::Cluster(_) => "cluster",
        };
        f.debug_tuple("KeyedConnection").field(&to).finish()
    }
}
