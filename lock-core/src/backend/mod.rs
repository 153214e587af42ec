//! How commands reach Redis: one trait, [`Topology`], with one implementation per deployment
//! shape, so the lock logic above it is written once.
//!
//! - [`Standalone`]: one server, through a bb8 pool of multiplexed connections (the default).
//! - [`Sentinel`]: the primary that a group of sentinels names, followed across failovers.
//! - [`Cluster`]: a Redis Cluster through the redis crate's cluster connection (slots,
//!   `MOVED`/`ASK` and topology refreshes handled there).

use std::future::Future;
use std::time::Duration;

use redis::cluster_routing::Slot;
use redis::{FromRedisValue, Script, ScriptInvocation, Value};

use crate::error::LockError;

pub(crate) mod cluster;
pub(crate) mod sentinel;
pub(crate) mod standalone;

pub(crate) use cluster::Cluster;
pub(crate) use sentinel::Sentinel;
pub(crate) use standalone::Standalone;

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
        invocation: &ScriptInvocation<'_>,
    ) -> impl Future<Output = Result<Value, LockError>> + Send;

    /// Runs a script whose first key is `key`, then `WAIT replicas timeout` on the same
    /// connection to the same node, and returns the reply with the number of replicas that confirmed every write made on
    /// that connection so far.
    fn invoke_acked(
        &self,
        invocation: &ScriptInvocation<'_>,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<(Value, u32), LockError>> + Send;

    /// Loads scripts up front (which also proves the deployment answers).
    fn load_scripts(
        &self,
        scripts: &[&'static Script],
    ) -> impl Future<Output = Result<(), LockError>> + Send;

    /// The slot of a key where keys live in slots (Cluster); None where all keys live together.
    fn slot(&self, key: &str) -> Option<Slot>;

    /// How long the backend tries to get a connection.
    fn connect_timeout(&self) -> Duration;
}

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The deployment a client talks to.
pub(crate) enum Backend {
    Standalone(Box<Standalone>),
    Sentinel(Sentinel),
    Cluster(Cluster),
}

macro_rules! each {
    ($self:ident, $b:ident => $e:expr) => {
        match $self {
            Backend::Standalone($b) => $e,
            Backend::Sentinel($b) => $e,
            Backend::Cluster($b) => $e,
        }
    };
}

impl Topology for Backend {
    // Boxed: the topologies' futures nest deeply, and callers' futures (a
    // `#[distributed_lock]` function's, say) embed this one; erasing its type here keeps
    // their layouts within the compiler's query depth.
    async fn invoke_value(&self, invocation: &ScriptInvocation<'_>) -> Result<Value, LockError> {
        let boxed: BoxFuture<'_, _> =
            Box::pin(async move { each!(self, b => b.invoke_value(invocation).await) });
        boxed.await
    }

    async fn invoke_acked(
        &self,
        invocation: &ScriptInvocation<'_>,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(Value, u32), LockError> {
        let boxed: BoxFuture<'_, _> = Box::pin(async move {
            each!(self, b => b.invoke_acked(invocation, key, replicas, timeout).await)
        });
        boxed.await
    }

    async fn load_scripts(&self, scripts: &[&'static Script]) -> Result<(), LockError> {
        each!(self, b => b.load_scripts(scripts).await)
    }

    fn slot(&self, key: &str) -> Option<Slot> {
        each!(self, b => b.slot(key))
    }

    fn connect_timeout(&self) -> Duration {
        each!(self, b => b.connect_timeout())
    }
}

impl Backend {
    /// Runs a script and converts its reply.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, LockError> {
        convert(self.invoke_value(invocation).await?)
    }

    /// True when keys live in slots (a Cluster): messages go through sharded pub/sub.
    pub(crate) fn is_sharded(&self) -> bool {
        matches!(self, Backend::Cluster(_))
    }
}

/// Converts a script's reply.
pub(crate) fn convert<T: FromRedisValue>(value: Value) -> Result<T, LockError> {
    T::from_redis_value(value).map_err(|e| LockError::UnexpectedReply(e.to_string()))
}

/// Maps a Redis error: a timeout is a [`LockError::ResponseTimeout`].
pub(crate) fn map_error(e: redis::RedisError, response_timeout: Duration) -> LockError {
    if e.is_timeout() {
        LockError::ResponseTimeout(response_timeout)
    } else {
        LockError::Redis(e)
    }
}

/// The `WAIT` command for [`Topology::invoke_acked`].
pub(crate) fn wait_cmd(replicas: u32, timeout: Duration) -> redis::Cmd {
    let mut cmd = redis::cmd("WAIT");
    cmd.arg(replicas).arg(
        u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1),
    );
    cmd
}

/// Reads `WAIT`'s reply (a count of replicas).
pub(crate) fn acks(value: Value) -> Result<u32, LockError> {
    let n: i64 = convert(value)?;
    Ok(u32::try_from(n.max(0)).unwrap_or(u32::MAX))
}
