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
//! need nothing else of it; the four modules are private to this one.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_routing::Slot;
use redis::{FromRedisValue, RedisResult, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{ConnectError, LockError};
use crate::wire::Wire;
pub(crate) use crate::wire::convert;
use crate::wire::script::{Call, Mode, Scripts};

mod cluster;
#[cfg(feature = "testing")]
mod in_memory;
#[cfg(feature = "testing")]
pub(crate) mod memory;
pub(crate) mod primaries;
mod probe;
mod request;
mod sentinel;
mod standalone;
pub(crate) mod tls;

pub(crate) use cluster::{Cluster, Seeds};
#[cfg(feature = "testing")]
pub(crate) use in_memory::Memory;
pub(crate) use request::{Request, replies};
pub(crate) use sentinel::{Discovery, Sentinel, Settings as SentinelSettings};
pub(crate) use standalone::Standalone;

/// What the lock logic needs from a deployment.
///
/// Every script of this crate is safe to repeat (a repeat of an applied command is recognised
/// and not applied twice), so an implementation may send a script again after a connection
/// failure; it must never report [`LockError::Unavailable`] or [`LockError::NoPrimary`] for a
/// command that may have been sent.
trait Topology: Send + Sync {
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

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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
    Primary(Arc<Discovery>),
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

/// A command on its way: for a script call, the code it calls and how.
pub(crate) struct Invocation<'a> {
    pub(crate) command: Wire<'a>,
    pub(crate) scripts: &'static Scripts,
    pub(crate) mode: Mode,
    /// How many times it was sent (a backend sends it again after a connection failure).
    pub(crate) sends: std::sync::atomic::AtomicU32,
}

impl Invocation<'_> {
    /// Whether it was sent more than once: a reply may then answer a repeat of a command the
    /// server already applied.
    pub(crate) fn resent(&self) -> bool {
        self.sends.load(std::sync::atomic::Ordering::Relaxed) > 1
    }

    /// Sends the command on `con`. When the server does not have the code a script call
    /// runs (a restart without persistence, a `SCRIPT FLUSH` or `FUNCTION FLUSH`), loads it
    /// on that connection and sends the call once more.
    pub(crate) async fn invoke_async<T: FromRedisValue>(
        &self,
        con: &mut (impl ConnectionLike + Send),
    ) -> RedisResult<T> {
        self.sends
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let call = match self.command {
            Wire::Script(call) => call,
            Wire::Native(native) => return native.pipeline().query_async(con).await,
        };
        let cmd = call.cmd(self.scripts, self.mode);
        match cmd.query_async(con).await {
            // Boxed: the common path's future then holds a pointer, not the reload's state.
            Err(e) if self.code_missing(&e) => {
                Box::pin(self.reload_and_resend(con, call, &cmd)).await
            }
            result => result,
        }
    }

    /// Whether `e` says the server does not have the code this call runs.
    fn code_missing(&self, e: &redis::RedisError) -> bool {
        match self.mode {
            Mode::Script => e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript),
            Mode::Function => function_missing(e),
        }
    }

    /// Loads the code on `con` and sends `cmd` (of `call`) once more.
    async fn reload_and_resend<T: FromRedisValue>(
        &self,
        con: &mut (impl ConnectionLike + Send),
        call: &Call,
        cmd: &redis::Cmd,
    ) -> RedisResult<T> {
        match self.mode {
            Mode::Script => {
                self.scripts.script(call.op()).load_async(con).await?;
            }
            Mode::Function => load_library(con, self.scripts).await?,
        }
        cmd.query_async(con).await
    }
}

/// Whether `e` says the function library is not loaded.
fn function_missing(e: &redis::RedisError) -> bool {
    e.to_string().contains("Function not found")
}

/// `FUNCTION LOAD REPLACE` of the library (on a Cluster, every primary).
pub(crate) async fn load_library(
    con: &mut (impl ConnectionLike + Send),
    scripts: &Scripts,
) -> RedisResult<()> {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD").arg("REPLACE").arg(scripts.library());
    cmd.query_async::<Value>(con).await.map(|_| ())
}

/// Loads the code on `con`: the function library, or, where the server refuses it (Redis
/// older than 7.0, an ACL user without `FUNCTION LOAD`), every script. Returns the mode
/// calls will use.
pub(crate) async fn load_code(
    con: &mut (impl ConnectionLike + Send),
    scripts: &'static Scripts,
) -> RedisResult<Mode> {
    match load_library(con, scripts).await {
        Ok(()) => Ok(Mode::Function),
        Err(e) if is_connection_error_kind(&e) => Err(e),
        Err(refused) => {
            tracing::info!(error = %refused, "Redis functions unavailable; using scripts (EVALSHA)");
            for script in scripts.scripts() {
                if let Err(e) = script.load_async(con).await {
                    // Neither works: the preferred way's refusal says what to grant.
                    return Err(if is_connection_error_kind(&e) {
                        e
                    } else {
                        refused
                    });
                }
            }
            Ok(Mode::Script)
        }
    }
}

fn is_connection_error_kind(e: &redis::RedisError) -> bool {
    crate::error::is_connection_error(e)
}

/// Maps a Redis error: a timeout is a [`LockError::ResponseTimeout`], a refused permission a
/// [`LockError::NoPermission`], a server that wants a password [`LockError::AuthRequired`].
pub(crate) fn map_error(e: redis::RedisError, response_timeout: Duration) -> LockError {
    if e.is_timeout() {
        LockError::ResponseTimeout(response_timeout)
    } else if let Some(refused) = auth_required(&e).or_else(|| no_permission(&e)) {
        refused
    } else if let Some(missing) = unsupported(&e) {
        missing
    } else {
        LockError::Redis(e)
    }
}

/// The error for a connection that could not be had, tried for since `started`: a failed TLS
/// handshake is [`LockError::Tls`], a refused or missing password
/// [`LockError::AuthRequired`] and a refused permission [`LockError::NoPermission`] (waiting
/// longer would not help); anything else is [`LockError::Unavailable`], with the time it
/// really took (a refused connection fails in milliseconds, not after the connect timeout).
///
/// `address` is where it tried (`host:port`, or the seeds of a Cluster: never a password);
/// the error names it. With no error seen (the connect timeout ran out first) the cause is a
/// timed-out I/O error, so the address is still said.
pub(crate) fn connect_error(
    started: Instant,
    address: String,
    source: Option<redis::RedisError>,
) -> LockError {
    let waited = started.elapsed();
    let source = source.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no connection within the connect timeout",
        )
        .into()
    });
    refusal(&source).unwrap_or(LockError::Unavailable {
        waited,
        source: Some(ConnectError::new(address, source)),
    })
}

/// A TLS, authentication or ACL refusal in `e`, which no retry can fix.
pub(crate) fn refusal(e: &redis::RedisError) -> Option<LockError> {
    if let Some(reason) = tls::failure(e) {
        return Some(LockError::Tls {
            reason,
            source: e.clone(),
        });
    }
    auth_required(e).or_else(|| no_permission(e))
}

/// A server that wants credentials the client did not give (`NOAUTH Authentication
/// required`, or the "unauthenticated bulk length" with which a server without them closes
/// the connection on a long command), or that refused the ones it gave (`WRONGPASS
/// invalid username-password pair`; the redis crate's `AuthenticationFailed` when `AUTH`
/// fails while connecting). Said of the `url` option: a backend whose credentials come from
/// elsewhere says so with [`LockError::auth_in`].
fn auth_required(e: &redis::RedisError) -> Option<LockError> {
    // A pipeline's error carries its commands' errors in its text only.
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    let refused = if e.kind() == redis::ErrorKind::AuthenticationFailed
        || e.code() == Some("WRONGPASS")
        || lower.contains("wrongpass")
        || lower.contains("invalid username-password pair")
    {
        true
    } else if e.code() == Some("NOAUTH")
        || lower.contains("noauth")
        || lower.contains("authentication required")
        || lower.contains("unauthenticated")
    {
        false
    } else {
        return None;
    };
    Some(LockError::AuthRequired {
        option: "url",
        refused,
        detail: text.trim().to_owned(),
    })
}

/// A command, key or channel the client's ACL user may not use: `NOPERM` for a command the
/// client sent, and the error of a lock script whose `redis.call` was refused (Redis 7.0 says
/// `ERR The user executing the script can't …` without naming the command; 7.2 and later say
/// `ERR ACL failure in script: …` and name it).
fn no_permission(e: &redis::RedisError) -> Option<LockError> {
    let detail = e.detail().unwrap_or_default();
    let in_script = detail.starts_with("The user executing the script can't")
        || detail.starts_with("ACL failure in script");
    if e.code() != Some("NOPERM") && !in_script {
        return None;
    }
    let detail = detail.trim().to_owned();
    let lower = detail.to_ascii_lowercase();
    let missing = if let Some(command) = lower
        .split_once("to run the '")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(command, _)| command)
    {
        format!("+{command}")
    } else if lower.contains("key") {
        "~<key prefix>* (a key pattern covering the client's key prefix)".to_owned()
    } else if lower.contains("channel") {
        "&<key prefix>* (a channel pattern covering the client's key prefix)".to_owned()
    } else if in_script {
        "+<a command a lock script calls> (Redis 7.0 does not say which; its ACL LOG does)"
            .to_owned()
    } else {
        "a permission Redis did not name".to_owned()
    };
    Some(LockError::NoPermission { missing, detail })
}

/// A command or a scripting engine the server does not have (`ERR unknown command
/// 'DELIFEQ'`, `ERR Could not find scripting engine 'lua'`, `ERR Engine 'lua' not found`).
pub(crate) fn unsupported(e: &redis::RedisError) -> Option<LockError> {
    // A pipeline's error carries its commands' errors in its text.
    let detail = e.to_string();
    let lower = detail.to_ascii_lowercase();
    let (feature, missing) = if lower.contains("unknown command 'delifeq'") {
        ("the native mutex protocol", "the DELIFEQ command")
    } else if lower.contains("scripting engine") || lower.contains("engine 'lua' not found") {
        ("this lock", "scripting (EVAL/FCALL)")
    } else {
        return None;
    };
    Some(LockError::Unsupported {
        feature,
        missing,
        detail: Some(detail.trim().to_owned()),
    })
}

/// `CONFIG GET maxmemory-policy`, for [`Topology::max_memory_policy`].
pub(crate) fn policy_cmd() -> redis::Cmd {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    cmd
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::util::arbitrary::{config, value};

    /// Each type a caller of [`convert`] reads a script's reply as.
    fn every_conversion(reply: &Value) -> Vec<Result<(), LockError>> {
        fn one<T: FromRedisValue>(reply: &Value) -> Result<(), LockError> {
            convert::<T>(reply.clone()).map(drop)
        }
        vec![
            one::<i64>(reply),
            one::<u32>(reply),
            one::<String>(reply),
            one::<Option<u32>>(reply),
            one::<Option<String>>(reply),
            one::<Vec<i64>>(reply),
            one::<Vec<Value>>(reply),
            one::<(i64, Option<String>)>(reply),
            one::<(i64, Option<String>, u32, i64)>(reply),
        ]
    }

    proptest! {
        #![proptest_config(config(1000))]

        /// Any reply, to any type read from one: a value or a typed error, never a panic.
        #[test]
        fn any_reply_converts_or_is_an_unexpected_reply(reply in value()) {
            for result in every_conversion(&reply) {
                if let Err(e) = result {
                    prop_assert!(matches!(e, LockError::UnexpectedReply(_)), "{:?}", e);
                }
            }
        }

        /// `WAIT`'s reply: a count within `0..=u32::MAX`, or a typed error.
        #[test]
        fn a_wait_reply_is_a_count_or_an_unexpected_reply(reply in value()) {
            match (acks(reply.clone()), &reply) {
                (Ok(n), Value::Int(k)) => {
                    prop_assert_eq!(i64::from(n), (*k).clamp(0, i64::from(u32::MAX)));
                }
                (Ok(_), _) => {}
                (Err(e), _) => prop_assert!(matches!(e, LockError::UnexpectedReply(_)), "{:?}", e),
            }
        }
    }
}
