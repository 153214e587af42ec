//! The in-memory backend's `Topology` (the `testing` feature): one client's link to an
//! in-memory server (`memory`), with the faults a test sets on the way: unreachable (calls
//! fail with [`LockError::Unavailable`] and are not applied), and replies delayed on tokio's
//! clock (applied at once, answered later; a reply that would come after the call's
//! [`Deadline`], its response timeout counted from when its caller asked, answers
//! [`LockError::ResponseTimeout`] at the deadline).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::Value;
use redis::cluster_routing::Slot;

use tokio::time::Instant;

use super::calls::policy_cmd;
use super::deadline::Deadline;
use super::invocation::Invocation;
use super::memory::{Link, Server};
use super::request::Request;
use super::topology::{PubSubSource, Topology};
use crate::error::LockError;
use crate::wire::Wire;
use crate::wire::script::{Mode, Scripts};

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

    /// The bound of a call whose caller asked at `asked`.
    fn deadline(&self, asked: Instant) -> Deadline {
        Deadline::new(asked, self.response_timeout, self.connect_timeout)
    }

    /// Runs `call` on the server, as the faults allow: not at all while unreachable, and
    /// answered after the reply delay. An error reply (alone, or in a pipeline) fails the call,
    /// as the redis crate reads a reply.
    async fn call(
        &self,
        call: impl FnOnce(&Server) -> Value,
        deadline: &Deadline,
    ) -> Result<Value, LockError> {
        match self.reply(call, deadline).await? {
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
        call: impl FnOnce(&Server) -> Value,
        deadline: &Deadline,
    ) -> Result<Value, LockError> {
        if deadline.passed() {
            return Err(deadline.unsent("the in-memory server".to_owned()));
        }
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
        let reply = call(self.link.server());
        let delay = self.link.server().faults().delay;
        // A reply due at the deadline or later is not had in time.
        if delay >= deadline.at().saturating_duration_since(Instant::now()) {
            tokio::time::sleep_until(deadline.at()).await;
            return Err(deadline.timed_out());
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok(reply)
    }
}

/// What the server answers to `request`: a pipeline's replies one per command (a
/// transaction's as `EXEC`'s one array), each error in its place.
fn run(server: &Server, request: Request<'_>) -> Value {
    match request {
        Request::User(cmd) | Request::Command(cmd) => server.command(cmd),
        Request::UserPipeline(pipe, offset, _) => match server.pipeline(pipe) {
            exec if offset > 0 => Value::Array(vec![exec]),
            replies => replies,
        },
        Request::Call(invocation) => match invocation.command {
            Wire::Script(call) => server.op(call),
            Wire::Native(native) => server.pipeline(native.pipeline()),
        },
    }
}

impl Topology for Memory {
    async fn invoke_value(&self, invocation: &Invocation<'_>) -> Result<Value, LockError> {
        let response = invocation.response(self.response_timeout);
        let deadline = Deadline::new(invocation.asked, response, self.connect_timeout);
        let run = |server: &Server| {
            // Counted once it reaches the server, as a connection's send is.
            invocation.sends.fetch_add(1, Ordering::Relaxed);
            run(server, Request::Call(invocation))
        };
        match invocation.command {
            // A batch's pipeline ignores errors: each stays in its call's place.
            Wire::Native(native) if native.is_batch() => match self.reply(run, &deadline).await? {
                Value::ServerError(error) => Err(LockError::Redis(error.into())),
                reply => Ok(reply),
            },
            _ => self.call(run, &deadline).await,
        }
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
        // Each operation is compiled on its first call; this only proves the server answers.
        self.call(|_| Value::Okay, &self.deadline(Instant::now()))
            .await
            .map(|_| Mode::Function)
    }

    async fn max_memory_policy(&self) -> Result<Value, LockError> {
        self.command(&policy_cmd()).await
    }

    async fn command(&self, cmd: &redis::Cmd) -> Result<Value, LockError> {
        self.call(|server| server.command(cmd), &self.deadline(Instant::now()))
            .await
    }

    /// As [`run`] answers it, errors in a pipeline's replies left in their places, as a
    /// connection gives them.
    async fn user(&self, request: Request<'_>) -> redis::RedisResult<Value> {
        let deadline = self.deadline(Instant::now());
        let reply = self.reply(|server| run(server, request), &deadline);
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
