//! A Redis Cluster, through the redis crate's async cluster connection.
//!
//! Every key and channel of one lock carries the lock's name as its hash tag (`P{N}`,
//! `P{N}:released`, …), so one lock lives in one slot and each script touches one node. The
//! cluster connection routes a script by its first key, follows `MOVED` and `ASK`, refreshes the
//! slot map when the topology changes and reconnects to nodes that went away.

use std::time::Duration;

use tokio::time::Instant;

use redis::Value;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr,
};

use super::calls::{acks, load_code, policy_cmd, wait_cmd};
use super::errors::{connect_error, map_error};
use super::invocation::Invocation;
use super::request::Request;
use super::seeds::Seeds;
use super::topology::{PubSubSource, Topology};
use crate::error::LockError;
use crate::wire::Wire;
use crate::wire::script::{Mode, Scripts};
use redirect::{Next, Node, Pinned};

mod redirect;

/// A Redis Cluster: one cluster connection for commands, the seeds for the pub/sub connection.
pub(crate) struct Cluster {
    connection: ClusterConnection,
    /// For acquisitions followed by `WAIT` (see [`Cluster::connect`]).
    acks: Option<ClusterConnection>,
    response_timeout: Duration,
    connect_timeout: Duration,
    /// For the pub/sub connection.
    seeds: Seeds,
}

/// Opens a cluster connection, bounded by the connect timeout.
async fn open(
    client: &ClusterClient,
    seeds: &Seeds,
    timeout: Duration,
) -> Result<ClusterConnection, LockError> {
    let started = Instant::now();
    let error = match tokio::time::timeout(timeout, client.get_async_connection()).await {
        Ok(Ok(connection)) => return Ok(connection),
        Ok(Err(e)) => connect_error(started, seeds.addresses(), Some(e)),
        Err(_) => connect_error(started, seeds.addresses(), None),
    };
    Err(error.auth_in("urls"))
}

/// How many times the cluster connection re-sends a command after a redirect or a failure.
const RETRIES: u32 = 3;

/// The cluster connection's own response timeout: twice a call's bound ([`Cluster::limit`]),
/// so a call always ends at its bound first. Were it shorter, the redis crate would send a
/// timed-out request again (its retry method for a timeout is "retry at once"), and a rate
/// decision could be applied twice.
fn inner_timeout(connect_timeout: Duration, response_timeout: Duration) -> Duration {
    (connect_timeout + response_timeout) * 2
}

/// How many times a native call's transaction goes again after a moved or migrating slot.
const REDIRECTS: u32 = 5;

impl Cluster {
    /// The client for commands (RESP2) built from the seed nodes.
    pub(crate) fn client(
        seeds: &Seeds,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<ClusterClient, redis::RedisError> {
        seeds
            .builder()?
            .connection_timeout(connect_timeout)
            .response_timeout(inner_timeout(connect_timeout, response_timeout))
            .retries(RETRIES)
            .min_retry_wait(10)
            .max_retry_wait(200)
            .build()
    }

    /// Connects to the cluster (learning its slot map from the seed nodes); `seeds` are kept
    /// for the pub/sub connection.
    ///
    /// With `acks` (a client built with a response timeout that covers `WAIT`, when the lock
    /// client has `min_replicas`), a second cluster connection carries the acquisitions that
    /// are followed by `WAIT`: `WAIT` blocks the node connection it runs on, and on this one it
    /// delays only other acknowledged acquisitions, never a renewal or a release.
    pub(crate) async fn connect(
        seeds: Seeds,
        client: &ClusterClient,
        acks: Option<&ClusterClient>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Self, LockError> {
        let connection = open(client, &seeds, connect_timeout).await?;
        let acks = match acks {
            Some(client) => Some(open(client, &seeds, connect_timeout).await?),
            None => None,
        };
        let cluster = Self {
            connection,
            acks,
            response_timeout,
            connect_timeout,
            seeds,
        };
        Ok(cluster)
    }

    /// The longest a command may take, its redirects, reconnections and retries after a
    /// broken connection included: the response timeout plus the connect timeout (the
    /// cluster connection may have to open a connection inside any call, and does not say
    /// so). The cluster connection's own response timeout is longer
    /// ([`inner_timeout`]), so it never sends a timed-out request again: this bound ends it
    /// first.
    fn limit(&self) -> Duration {
        self.response_timeout + self.connect_timeout
    }

    /// Sends a native call; a transaction a node aborts because the slot is elsewhere
    /// ([`redirect::next`]: nothing of it was applied) goes again, up to [`REDIRECTS`] times,
    /// within the one bound of the call ([`Cluster::bounded`]):
    ///
    /// - to the node a `MOVED` names, at once (by its address: the connection's slot map may
    ///   still name the old owner, a failover's demoted primary say), and a read of the key
    ///   through the slot map (in the background) meets the `MOVED` too, which has the redis
    ///   crate learn the slot map again;
    /// - after a pause (40 ms, doubling: 1.24 s over 5 tries) when the slot is being migrated
    ///   (`ASK`, `TRYAGAIN`), to the same node, or when the node a `MOVED` names cannot be
    ///   read, through the slot map once it is learnt again.
    ///
    /// The first send counts as the invocation's one send; the others repeat a transaction that
    /// was not applied, so a reply never answers a repeat ([`Invocation::resent`] stays false
    /// for them). An error that is not such an abort (an I/O error or a timeout after `EXEC`,
    /// which may have been applied) ends the call with that error.
    ///
    /// Answers the reply and the node a `MOVED` sent the last try to (None: the slot map's).
    async fn native(
        &self,
        invocation: &Invocation<'_>,
        native: &crate::wire::native::Call,
        connection: &ClusterConnection,
    ) -> Result<(Value, Option<Node>), redis::RedisError> {
        let mut connection = connection.clone();
        let mut result = invocation.invoke_async(&mut connection).await;
        let mut target = None;
        let mut refreshing = false;
        for tries in 1..=REDIRECTS {
            let Some(next) = result.as_ref().err().and_then(redirect::next) else {
                break;
            };
            if !refreshing && matches!(next, Next::To(_) | Next::Pause { moved: true }) {
                refreshing = true;
                self.refresh(&connection, native.key());
            }
            match next {
                Next::To(node) => target = Some(node),
                Next::Pause { moved } => {
                    if moved {
                        target = None;
                    }
                    tokio::time::sleep(Duration::from_millis(20 << tries)).await;
                }
            }
            let pipeline = native.pipeline();
            result = match &target {
                Some(node) => {
                    let mut pinned = Pinned::new(connection.clone(), node.clone());
                    pipeline.query_async(&mut pinned).await
                }
                None => pipeline.query_async(&mut connection).await,
            };
        }
        result.map(|value| (value, target))
    }

    /// Sends `invocation` on `connection`: a native call through [`Cluster::native`], anything
    /// else as it is (the redis crate redirects it); answers the reply and the node a `MOVED`
    /// sent a native call to.
    async fn send(
        &self,
        invocation: &Invocation<'_>,
        connection: &ClusterConnection,
    ) -> Result<(Value, Option<Node>), LockError> {
        match invocation.command {
            Wire::Native(native) => {
                self.bounded(self.native(invocation, native, connection))
                    .await
            }
            Wire::Script(_) => {
                let mut connection = connection.clone();
                let value = self
                    .bounded(invocation.invoke_async(&mut connection))
                    .await?;
                Ok((value, None))
            }
        }
    }

    /// Reads `key` through `connection`'s slot map in the background (bounded by [`Cluster::limit`]),
    /// for its `MOVED`: the redis crate follows it and learns the slot map again. Nothing
    /// without a Tokio runtime.
    fn refresh(&self, connection: &ClusterConnection, key: &str) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut connection = connection.clone();
        let mut read = redis::cmd("PTTL");
        read.arg(key);
        let limit = self.limit();
        runtime.spawn(async move {
            let _ = tokio::time::timeout(limit, read.query_async::<Value>(&mut connection)).await;
        });
    }

    async fn bounded<T>(
        &self,
        request: impl Future<Output = Result<T, redis::RedisError>>,
    ) -> Result<T, LockError> {
        let started = Instant::now();
        match tokio::time::timeout(self.limit(), request).await {
            Ok(result) => result.map_err(|e| map_error(e, started.elapsed()).auth_in("urls")),
            Err(_) => Err(LockError::ResponseTimeout(started.elapsed())),
        }
    }
}

impl Topology for Cluster {
    /// A native call's `MULTI`/`EXEC` that meets a moved or migrating slot is aborted whole,
    /// nothing applied, and the redis crate does not follow `MOVED` (or wait out `ASK` and
    /// `TRYAGAIN`) for a transaction: lock-core does (see [`Cluster::native`]). Other commands,
    /// script calls and plain pipelines included, the redis crate redirects itself.
    async fn invoke_value(&self, invocation: &Invocation<'_>) -> Result<Value, LockError> {
        Ok(self.send(invocation, &self.connection).await?.0)
    }

    /// The script and `WAIT` go to the primary of the script's slot on the acknowledgement
    /// connection, so `WAIT` covers the script's write (a native call's transaction that a
    /// `MOVED` sent to another node ([`Cluster::native`]) has its `WAIT` sent there too). It
    /// blocks that node connection for up to `timeout`: other acknowledged acquisitions to the
    /// same node queue behind it (and may time out), renewals and releases (on the other
    /// connection) do not.
    async fn invoke_acked(
        &self,
        invocation: &Invocation<'_>,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(Value, u32), LockError> {
        let mut connection = self.acks.as_ref().unwrap_or(&self.connection).clone();
        let (value, node) = self.send(invocation, &connection).await?;
        let route = RoutingInfo::SingleNode(match node {
            Some(node) => node.route(),
            None => SingleNodeRoutingInfo::SpecificNode(Route::with_slot(
                Slot::for_key(key),
                SlotAddr::Master,
            )),
        });
        let acked = match tokio::time::timeout(
            self.limit() + timeout,
            connection.route_command(wait_cmd(replicas, timeout), route),
        )
        .await
        {
            Ok(result) => {
                result.map_err(|e| map_error(e, self.response_timeout).auth_in("urls"))?
            }
            Err(_) => return Err(LockError::ResponseTimeout(self.limit() + timeout)),
        };
        Ok((value, acks(acked)?))
    }

    /// Loads the code on every primary (the cluster connection routes `FUNCTION LOAD` and
    /// `SCRIPT LOAD` to all of them).
    async fn load_scripts(&self, scripts: &'static Scripts) -> Result<Mode, LockError> {
        let mut connection = self.connection.clone();
        self.bounded(load_code(&mut connection, scripts)).await
    }

    async fn max_memory_policy(&self) -> Result<Value, LockError> {
        let mut connection = self.connection.clone();
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary);
        self.bounded(connection.route_command(policy_cmd(), route))
            .await
    }

    async fn each_primary(&self, cmd: &redis::Cmd) -> Result<Vec<Value>, LockError> {
        let mut connection = self.connection.clone();
        let route = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        // Without a response policy the replies come as a map: node address → reply.
        match self
            .bounded(connection.route_command(cmd.clone(), route))
            .await?
        {
            Value::Map(replies) => Ok(replies.into_iter().map(|(_, reply)| reply).collect()),
            other => Ok(vec![other]),
        }
    }

    /// The cluster connection routes the command by its key, to the primary of its slot.
    async fn command(&self, cmd: &redis::Cmd) -> Result<Value, LockError> {
        let mut connection = self.connection.clone();
        self.bounded(cmd.query_async(&mut connection)).await
    }

    /// The cluster connection routes it by its keys and reconnects by itself; bounded as
    /// every command is.
    async fn user(&self, request: Request<'_>) -> redis::RedisResult<Value> {
        let mut connection = self.connection.clone();
        let started = Instant::now();
        match tokio::time::timeout(self.limit(), request.send(&mut connection)).await {
            Ok(reply) => reply,
            Err(_) => Err(LockError::ResponseTimeout(started.elapsed()).into_redis()),
        }
    }

    fn slot(&self, key: &str) -> Option<Slot> {
        Some(Slot::for_key(key))
    }

    fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    fn pubsub_source(&self) -> PubSubSource {
        PubSubSource::Cluster(self.seeds.clone())
    }
}
