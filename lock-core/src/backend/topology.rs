//! [`Topology`]: what the lock logic needs from a deployment, one implementation per shape,
//! and where a client's pub/sub connection goes ([`PubSubSource`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::cluster_routing::Slot;
use redis::{RedisResult, Value};
use tokio::sync::watch;

use super::invocation::Invocation;
#[cfg(feature = "testing")]
use super::memory;
use super::request::Request;
use super::seeds::Seeds;
use crate::error::LockError;
use crate::wire::script::{Mode, Scripts};

/// What the lock logic needs from a deployment.
///
/// Every script of this crate is safe to repeat (a repeat of an applied command is recognised
/// and not applied twice), so an implementation may send a script again after a connection
/// failure; it must never report [`LockError::Unavailable`] or [`LockError::NoPrimary`] for a
/// command that may have been sent.
pub(crate) trait Topology: Send + Sync {
    /// Runs a script (EVALSHA, EVAL on NOSCRIPT) and returns its raw reply.
    fn invoke_value(
        &self,
        invocation: &Invocation<'_>,
    ) -> impl Future<Output = Result<Value, LockError>> + Send;

    /// Runs a script whose first key is `key`, then `WAIT replicas timeout` on the same
    /// connection to the same node, and returns the reply with the number of replicas that confirmed every write made on
    /// that connection so far.
    fn invoke_acked(
        &self,
        invocation: &Invocation<'_>,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<(Value, u32), LockError>> + Send;

    /// Loads scripts up front (which also proves the deployment answers).
    fn load_scripts(
        &self,
        scripts: &'static Scripts,
    ) -> impl Future<Output = Result<Mode, LockError>> + Send;

    /// The primary's `maxmemory-policy` (`CONFIG GET`; on a Cluster, one primary's).
    fn max_memory_policy(&self) -> impl Future<Output = Result<Value, LockError>> + Send;

    /// Runs one of the crate's plain single-key commands (no script) where that key lives: the
    /// server, the current primary, or on a Cluster the primary of the key's slot. Safe to
    /// repeat: after a connection failure it goes once more on a healed connection.
    fn command(&self, cmd: &redis::Cmd) -> impl Future<Output = Result<Value, LockError>> + Send;

    /// Sends an application's command or pipeline ([`Request::User`],
    /// [`Request::UserPipeline`]) where its keys live, never twice; a connection that failed
    /// under it is healed for the next one. Errors are the redis crate's.
    fn user(&self, request: Request<'_>) -> impl Future<Output = RedisResult<Value>> + Send;

    /// Runs one keyless command on every primary (the server, the current primary, each
    /// primary of a Cluster), one reply each. Healed and sent once more after a connection failure, as `command`.
    fn each_primary(
        &self,
        cmd: &redis::Cmd,
    ) -> impl Future<Output = Result<Vec<Value>, LockError>> + Send;

    /// The slot of a key where keys live in slots (Cluster); None where all keys live together.
    fn slot(&self, key: &str) -> Option<Slot>;

    /// How long the backend tries to get a connection.
    fn connect_timeout(&self) -> Duration;

    /// Where the client's pub/sub connection goes.
    fn pubsub_source(&self) -> PubSubSource;
}

pub(crate) type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The primary the sentinels name, as the pub/sub task follows it (`sentinel::Discovery`).
pub(crate) trait Primary: Send + Sync {
    /// The primary's client, with its generation; looked up first if none is known.
    fn pubsub_client(&self) -> BoxFuture<'_, Result<(u64, redis::Client), LockError>>;

    /// Connecting to the primary of `generation` failed: the sentinels are asked again.
    fn pubsub_failed(&self, generation: u64) -> BoxFuture<'_, ()>;

    /// Changes of primary.
    fn changes(&self) -> watch::Receiver<u64>;
}

/// Where a client's pub/sub connection goes, as its backend hands it out.
pub(crate) enum PubSubSource {
    /// One node, where channels are subscribed with `SUBSCRIBE`.
    Node(PubSubNode),
    /// A Redis Cluster (its seed nodes): `SSUBSCRIBE` on the node that owns each channel's
    /// slot, through a RESP3 cluster connection ([`Seeds::builder`]) that follows slot moves
    /// and failovers.
    Cluster(Seeds),
    /// An in-memory server's bus, through this client's link to it.
    #[cfg(feature = "testing")]
    Memory(Arc<memory::Link>),
}

/// The one node a plain pub/sub connection goes to.
pub(crate) enum PubSubNode {
    /// A standalone server.
    Server(Box<redis::Client>),
    /// The primary the sentinels name, which moves when they fail over.
    Primary(Arc<dyn Primary>),
}

impl PubSubNode {
    /// The node's client, with the generation of the primary it is (0 for a server); a
    /// Sentinel primary is looked up first if none is known.
    pub(crate) async fn client(&self) -> Result<(u64, redis::Client), LockError> {
        match self {
            PubSubNode::Server(client) => Ok((0, (**client).clone())),
            PubSubNode::Primary(discovery) => discovery.pubsub_client().await,
        }
    }

    /// Reports that connecting to the node of `generation` failed: under Sentinel, the
    /// sentinels are asked again.
    pub(crate) async fn failed(&self, generation: u64) {
        if let PubSubNode::Primary(discovery) = self {
            discovery.pubsub_failed(generation).await;
        }
    }

    /// Changes of primary under Sentinel; None for a server, which never moves.
    pub(crate) fn changes(&self) -> Option<watch::Receiver<u64>> {
        match self {
            PubSubNode::Server(_) => None,
            PubSubNode::Primary(discovery) => Some(discovery.changes()),
        }
    }
}
