//! The in-memory backend, for tests: a server kept in this process ([`Server`]: strings with
//! TTLs, hashes, sorted sets, pub/sub) whose time is tokio's clock, so `tokio::time::pause()`
//! and `advance()` drive expiry, renewals and losses without sleeping.
//!
//! It speaks what the engine sends a Redis server: the native mutex protocol's commands
//! (`commands`), and every operation of the Lua code, each run by its Rust twin (`script`,
//! `prelude`, `mutex`, `fair`, `rwlock`, `semaphore`) with the semantics and reply shapes of
//! its `.lua` file. There is no Lua interpreter. A call runs under the server's one lock, so
//! it is atomic as a script or a `MULTI`/`EXEC` is.
//!
//! Tests set faults on the server or on one client's [`Link`]: unreachable (calls fail with
//! [`LockError::Unavailable`] and are not applied; the client's pub/sub subscriptions drop),
//! and replies delayed on tokio's clock (applied at once, answered later; a delay of the
//! response timeout or more answers [`LockError::ResponseTimeout`]).

mod commands;
mod fair;
mod fenced;
#[cfg(test)]
mod fuzz;
mod keyspace;
mod mutex;
mod prelude;
mod record;
mod rwlock;
mod script;
mod semaphore;
mod server;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::Value;
use redis::cluster_routing::Slot;

pub(crate) use self::server::{Changes, Link, Server, Subscription};
use super::{Invocation, PubSubSource, Request, Topology};
use crate::error::LockError;
use crate::wire::Wire;
use crate::wire::script::{Mode, Scripts};

impl Server {
    /// Runs the Lua operation of `call` as its Rust twin does (for the conformance suite).
    pub(crate) fn run_script(&self, call: &crate::wire::script::Call) -> Value {
        self.call(|ctx| script::run(ctx, call))
    }

    /// Runs one plain command (for the conformance suite).
    pub(crate) fn run_command(&self, cmd: &redis::Cmd) -> Value {
        self.call(|ctx| commands::command(ctx, cmd))
    }

    /// Every key with its type, value and `PTTL` (see `Keyspace::dump`).
    pub(crate) fn dump(&self) -> Vec<(String, &'static str, Vec<Vec<u8>>, i64)> {
        self.call(|ctx| ctx.ks.dump())
    }
}

/// One client's backend: its link to an in-memory server.
pub(crate) struct Memory {
    link: Arc<Link>,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl Memory {
    pub(crate) fn new(
        server: Arc<Server>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Self {
        Self {
            link: Link::new(server),
            connect_timeout,
            response_timeout,
        }
    }

    /// This client's link to its server.
    pub(crate) fn link(&self) -> &Arc<Link> {
        &self.link
    }

    /// Runs `call` on the server, as the faults allow: not at all while unreachable, and
    /// answered after the reply delay. An error reply (alone, or in a pipeline) fails the call,
    /// as the redis crate reads a reply.
    async fn call(
        &self,
        call: impl FnOnce(&mut server::Ctx<'_>) -> Value,
    ) -> Result<Value, LockError> {
        match self.reply(call).await? {
            Value::Array(replies) => Value::Array(replies)
                .extract_error()
                .map_err(LockError::Redis),
            Value::ServerError(error) => Err(LockError::Redis(error.into())),
            reply => Ok(reply),
        }
    }

    /// [`Memory::call`]'s reply as the server gave it, error replies included.
    async fn reply(
        &self,
        call: impl FnOnce(&mut server::Ctx<'_>) -> Value,
    ) -> Result<Value, LockError> {
        if !self.link.reachable() {
            let refused = std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "the in-memory server is unreachable (a test's fault)",
            );
            return Err(LockError::Unavailable {
                waited: self.connect_timeout,
                source: Some(refused.into()),
            });
        }
        let reply = self.link.server().call(call);
        let delay = self.link.server().faults().delay;
        if delay >= self.response_timeout {
            tokio::time::sleep(self.response_timeout).await;
            return Err(LockError::ResponseTimeout(self.response_timeout));
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok(reply)
    }
}

/// What the server answers to `request`: a pipeline's replies one per command (a
/// transaction's as `EXEC`'s one array), each error in its place.
fn run(ctx: &mut server::Ctx<'_>, request: Request<'_>) -> Value {
    match request {
        Request::User(cmd) | Request::Command(cmd) => commands::command(ctx, cmd),
        Request::UserPipeline(pipe, offset, _) => match commands::pipeline(ctx, pipe) {
            exec if offset > 0 => Value::Array(vec![exec]),
            replies => replies,
        },
        Request::Call(invocation) => match invocation.command {
            Wire::Script(call) => script::run(ctx, call),
            Wire::Native(native) => commands::pipeline(ctx, native.pipeline()),
        },
    }
}

impl Topology for Memory {
    async fn invoke_value(&self, invocation: &Invocation<'_>) -> Result<Value, LockError> {
        self.call(|ctx| {
            // Counted once it reaches the server, as a connection's send is.
            invocation.sends.fetch_add(1, Ordering::Relaxed);
            run(ctx, Request::Call(invocation))
        })
        .await
    }

    async fn invoke_acked(
        &self,
        _invocation: &Invocation<'_>,
        _key: &str,
        _replicas: u32,
        _timeout: Duration,
    ) -> Result<(Value, u32), LockError> {
        Err(LockError::Unsupported {
            feature: "min_replicas",
            missing: "the WAIT command",
            detail: Some("the in-memory server has no replicas".to_owned()),
        })
    }

    async fn load_scripts(&self, _scripts: &'static Scripts) -> Result<Mode, LockError> {
        // Every operation is built in; this only proves the server answers.
        self.call(|_| Value::Okay).await.map(|_| Mode::Function)
    }

    async fn max_memory_policy(&self) -> Result<Value, LockError> {
        self.command(&super::policy_cmd()).await
    }

    async fn command(&self, cmd: &redis::Cmd) -> Result<Value, LockError> {
        self.call(|ctx| commands::command(ctx, cmd)).await
    }

    /// As [`run`] answers it, errors in a pipeline's replies left in their places, as a
    /// connection gives them.
    async fn user(&self, request: Request<'_>) -> redis::RedisResult<Value> {
        let reply = self.reply(|ctx| run(ctx, request));
        match reply.await.map_err(LockError::into_redis)? {
            Value::ServerError(error) => Err(error.into()),
            reply => Ok(reply),
        }
    }

    async fn each_primary(&self, cmd: &redis::Cmd) -> Result<Vec<Value>, LockError> {
        Ok(vec![self.command(cmd).await?])
    }

    fn slot(&self, _key: &str) -> Option<Slot> {
        None
    }

    fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    fn pubsub_source(&self) -> PubSubSource {
        PubSubSource::Memory(self.link.clone())
    }
}
