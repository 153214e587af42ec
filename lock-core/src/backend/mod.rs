//! How commands reach Redis: one trait, [`Topology`], with one implementation per deployment
//! shape, so the lock logic above it is written once.
//!
//! - [`Standalone`]: one server, through a bb8 pool of multiplexed connections (the default).
//! - [`Sentinel`]: the primary that a group of sentinels names, followed across failovers.
//! - [`Cluster`]: a Redis Cluster through the redis crate's cluster connection (slots,
//!   `MOVED`/`ASK` and topology refreshes handled there).
//! - `Memory`: a server kept in this process, on tokio's clock, for tests (`in_memory`, the
//!   link to a `memory` server; only with the `testing` feature).
//!
//! Each also says where the client's pub/sub connection goes ([`PubSubSource`]), so the waiters
//! need nothing else of it. This file holds the [`Backend`] enum that dispatches to them;
//! what they share is below it: `topology` (the trait, the pub/sub source), `invocation`,
//! `request`, `calls` (the crate's plain commands), `errors` (Redis's errors read), `seeds`.

use std::time::Duration;

use redis::cluster_routing::Slot;
use redis::{RedisResult, Value};

use crate::error::LockError;
use crate::wire::script::{Mode, Scripts};

mod calls;
mod cluster;
mod deadline;
mod errors;
mod heal;
#[cfg(feature = "testing")]
mod in_memory;
mod invocation;
#[cfg(feature = "testing")]
pub(crate) mod memory;
pub(crate) mod primaries;
mod probe;
mod request;
mod seeds;
mod sentinel;
mod standalone;
pub(crate) mod tls;
mod topology;

pub(crate) use crate::wire::convert;
pub(crate) use cluster::Cluster;
pub(crate) use errors::refusal;
#[cfg(feature = "testing")]
pub(crate) use in_memory::Memory;
pub(crate) use invocation::Invocation;
pub(crate) use request::{Request, replies};
pub(crate) use seeds::Seeds;
pub(crate) use sentinel::{Discovery, Sentinel, Settings as SentinelSettings};
pub(crate) use standalone::Standalone;
use topology::{BoxFuture, Topology};
pub(crate) use topology::{PubSubNode, PubSubSource};

/// The deployment a client talks to.
pub(crate) enum Backend {
    Standalone(Box<Standalone>),
    Sentinel(Sentinel),
    Cluster(Cluster),
    #[cfg(feature = "testing")]
    Memory(Memory),
}

macro_rules! each {
    ($self:ident, $b:ident => $e:expr) => {
        match $self {
            Backend::Standalone($b) => $e,
            Backend::Sentinel($b) => $e,
            Backend::Cluster($b) => $e,
            #[cfg(feature = "testing")]
            Backend::Memory($b) => $e,
        }
    };
}

// Inherent methods, so the floors above call them without importing the trait.
impl Backend {
    /// Runs a script (EVALSHA, EVAL on NOSCRIPT) and returns its raw reply.
    // Boxed: the topologies' futures nest deeply, and callers' futures (a
    // `#[distributed_lock]` function's, say) embed this one; erasing its type here keeps
    // their layouts within the compiler's query depth. Each topology's future is boxed on its
    // own, so a call allocates what its topology needs, not the largest of them.
    pub(crate) async fn invoke_value(
        &self,
        invocation: &Invocation<'_>,
    ) -> Result<Value, LockError> {
        let boxed: BoxFuture<'_, _> = each!(self, b => Box::pin(b.invoke_value(invocation)));
        boxed.await
    }

    /// Runs a script whose first key is `key`, then `WAIT replicas timeout` on the same
    /// connection; returns the reply and how many replicas confirmed.
    pub(crate) async fn invoke_acked(
        &self,
        invocation: &Invocation<'_>,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(Value, u32), LockError> {
        let boxed: BoxFuture<'_, _> = Box::pin(async move {
            each!(self, b => b.invoke_acked(invocation, key, replicas, timeout).await)
        });
        boxed.await
    }

    /// Loads the Lua code up front (which also proves the deployment answers): the function
    /// library where the server takes it, else the scripts. Returns how calls will reach it.
    pub(crate) async fn load_scripts(&self, scripts: &'static Scripts) -> Result<Mode, LockError> {
        each!(self, b => b.load_scripts(scripts).await)
    }

    /// The primary's `maxmemory-policy`, or why it could not be read (an ACL or a managed
    /// service refusing `CONFIG`, no answer).
    pub(crate) async fn max_memory_policy(&self) -> Result<String, LockError> {
        let value = each!(self, b => b.max_memory_policy().await)?;
        let config: std::collections::HashMap<String, String> = convert(value)?;
        config
            .into_iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("maxmemory-policy"))
            .map(|(_, policy)| policy)
            .ok_or_else(|| LockError::UnexpectedReply("CONFIG GET maxmemory-policy: empty".into()))
    }

    /// Runs one of the crate's plain single-key commands (no script) where its key lives;
    /// sent once more after a connection failure (see [`Request::Command`]).
    pub(crate) async fn command(&self, cmd: &redis::Cmd) -> Result<Value, LockError> {
        let boxed: BoxFuture<'_, _> =
            Box::pin(async move { each!(self, b => b.command(cmd).await) });
        boxed.await
    }

    /// Sends an application's command or pipeline where its keys live; never twice.
    pub(crate) async fn user(&self, request: Request<'_>) -> RedisResult<Value> {
        let boxed: BoxFuture<'_, _> =
            Box::pin(async move { each!(self, b => b.user(request).await) });
        boxed.await
    }

    /// Runs one keyless command on every primary, one reply each; healed and sent once more after a connection failure.
    pub(crate) async fn each_primary(&self, cmd: &redis::Cmd) -> Result<Vec<Value>, LockError> {
        let boxed: BoxFuture<'_, _> =
            Box::pin(async move { each!(self, b => b.each_primary(cmd).await) });
        boxed.await
    }

    /// The database commands go to: the one the URL names on a standalone server, 0
    /// elsewhere (a Sentinel primary's URL may name another; see [`Request::User`]).
    pub(crate) fn db(&self) -> i64 {
        match self {
            Backend::Standalone(b) => b.redis_client().get_connection_info().redis_settings().db(),
            _ => 0,
        }
    }

    /// The slot of a key on a Cluster; None where all keys live together.
    pub(crate) fn slot(&self, key: &str) -> Option<Slot> {
        each!(self, b => b.slot(key))
    }

    /// How long the backend tries to get a connection.
    pub(crate) fn connect_timeout(&self) -> Duration {
        each!(self, b => b.connect_timeout())
    }

    /// Starts what the deployment runs in the background once the client is built: under
    /// Sentinel, the task that listens for `+switch-master`.
    pub(crate) fn start(&self) {
        if let Backend::Sentinel(sentinel) = self {
            sentinel.spawn_watcher();
        }
    }

    /// True when keys live in slots (a Cluster): messages go through sharded pub/sub.
    pub(crate) fn is_sharded(&self) -> bool {
        matches!(self, Backend::Cluster(_))
    }

    /// Where the client's pub/sub connection goes.
    pub(crate) fn pubsub_source(&self) -> PubSubSource {
        each!(self, b => b.pubsub_source())
    }

    /// The in-memory backend, if this is one.
    #[cfg(feature = "testing")]
    pub(crate) fn memory(&self) -> Option<&Memory> {
        match self {
            Backend::Memory(memory) => Some(memory),
            _ => None,
        }
    }
}
