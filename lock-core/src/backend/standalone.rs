//! A standalone Redis server: a bb8 pool of multiplexed connections for commands, and a
//! `redis::Client` for the dedicated pub/sub connection.
//!
//! Every request is bounded by its [`Deadline`]; a broken or timed-out connection is healed in
//! the background ([`Healer`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bb8::{Pool, PooledConnection, RunError};
use bb8_redis::RedisConnectionManager;
use redis::cluster_routing::Slot;
use redis::{Value, aio::MultiplexedConnection};
use tokio::time::Instant;

use super::calls::{acks, load_code, policy_cmd, wait_cmd};
use super::deadline::Deadline;
use super::errors::{connect_error, map_error, refusal};
use super::heal::Healer;
use super::invocation::Invocation;
use super::request::Request;
use super::topology::{PubSubNode, PubSubSource, Topology};
use crate::error::{LockError, is_connection_error};
use crate::util::lock;
use crate::wire::script::{Mode, Scripts};

/// The last error the pool met while connecting, so that "no connection in time" can say why
/// (connection refused, authentication, DNS) instead of only how long it tried.
#[derive(Debug, Clone, Default)]
pub(crate) struct LastError(Arc<Mutex<Option<redis::RedisError>>>);

impl LastError {
    fn take(&self) -> Option<redis::RedisError> {
        lock(&self.0).take()
    }
}

impl bb8::ErrorSink<redis::RedisError> for LastError {
    fn sink(&self, error: redis::RedisError) {
        *lock(&self.0) = Some(error);
    }

    fn boxed_clone(&self) -> Box<dyn bb8::ErrorSink<redis::RedisError>> {
        Box::new(self.clone())
    }
}

pub(crate) struct Standalone {
    pool: Pool<RedisConnectionManager>,
    /// The pool's last connection error (none for a pool the application passed in).
    last_error: LastError,
    client: redis::Client,
    response_timeout: Duration,
    connect_timeout: Duration,
    /// Replaces the pool's broken connections, in the background.
    healer: Healer,
}

impl Standalone {
    pub(crate) fn new(
        (pool, last_error): (Pool<RedisConnectionManager>, LastError),
        client: redis::Client,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            healer: Healer::new(pool.clone(), response_timeout, connect_timeout),
            pool,
            last_error,
            client,
            response_timeout,
            connect_timeout,
        }
    }

    /// Builds the default pool: no PING on every checkout (a broken connection is replaced
    /// when a command on it fails instead, see [`Standalone::send`]); its connection errors
    /// are kept for the error that reports them.
    pub(crate) fn default_pool(
        client: &redis::Client,
        size: u32,
        connect_timeout: Duration,
    ) -> Result<(Pool<RedisConnectionManager>, LastError), LockError> {
        let manager = RedisConnectionManager::new(client.get_connection_info().clone())?;
        let last_error = LastError::default();
        let pool = Pool::builder()
            .max_size(size)
            .connection_timeout(connect_timeout)
            .test_on_check_out(false)
            .error_sink(Box::new(last_error.clone()))
            .build_unchecked(manager);
        Ok((pool, last_error))
    }

    /// An application's own pool.
    pub(crate) fn given_pool(
        pool: Pool<RedisConnectionManager>,
    ) -> (Pool<RedisConnectionManager>, LastError) {
        (pool, LastError::default())
    }

    /// Opens one connection and sends `PING` on it (bounded by the connect timeout), and
    /// returns at once when that fails: a refused connection, a name that does not resolve,
    /// a refused password or a server that wants one ([`LockError::AuthRequired`], which only
    /// a command shows: connecting without a password succeeds) is reported with its cause
    /// right away, not after the pool has retried for the whole connect timeout. Any other
    /// answer to `PING` (an ACL without `+ping`, a server still loading its data) is left to
    /// the commands that follow, which say what they need.
    pub(crate) async fn check_reachable(
        client: &redis::Client,
        connect_timeout: Duration,
    ) -> Result<(), LockError> {
        let started = Instant::now();
        let ping = async {
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<Value>(&mut conn).await
        };
        match tokio::time::timeout(connect_timeout, ping).await {
            Ok(Ok(_)) => Ok(()),
            // A refused `PING` (an ACL without `+ping`) is not a refused connection.
            Ok(Err(e))
                if is_connection_error(&e)
                    || refusal(&e)
                        .is_some_and(|r| !matches!(r, LockError::NoPermission { .. })) =>
            {
                Err(connect_error(started, address_of(client), Some(e)))
            }
            Ok(Err(_)) => Ok(()),
            Err(_) => Err(connect_error(started, address_of(client), None)),
        }
    }

    /// The server's `host:port`, for errors.
    fn address(&self) -> String {
        address_of(&self.client)
    }

    pub(crate) fn redis_client(&self) -> &redis::Client {
        &self.client
    }

    /// The bound of a call on this node whose caller asked at `asked`.
    pub(crate) fn deadline(&self, asked: Instant) -> Deadline {
        Deadline::new(asked, self.response_timeout, self.connect_timeout)
    }

    /// The bound of `invocation` on this node (its patience, if longer than the response
    /// timeout).
    pub(crate) fn invocation_deadline(&self, invocation: &Invocation<'_>) -> Deadline {
        let response = invocation.response(self.response_timeout);
        Deadline::new(invocation.asked, response, self.connect_timeout)
    }

    /// The bound of a call asked at `asked` that may wait `patience` for its answer when that
    /// is longer than the response timeout.
    pub(crate) fn patient_deadline(&self, asked: Instant, patience: Duration) -> Deadline {
        let response = self.response_timeout.max(patience);
        Deadline::new(asked, response, self.connect_timeout)
    }

    /// A handle on a pooled multiplexed connection. The pool slot is given back at once: the
    /// handle shares the connection, so concurrent commands from many tasks are pipelined on
    /// the pool's connections instead of each holding one exclusively for a round trip.
    async fn connection(&self, deadline: &Deadline) -> Result<MultiplexedConnection, LockError> {
        let pooled = self.slot_exclusively(deadline).await?;
        let mut conn = (*pooled).clone();
        conn.set_response_timeout(self.response_timeout);
        Ok(conn)
    }

    /// A pool slot, kept from other tasks until dropped; getting it counts as connecting
    /// within `deadline`.
    async fn slot_exclusively(
        &self,
        deadline: &Deadline,
    ) -> Result<PooledConnection<'_, RedisConnectionManager>, LockError> {
        let started = Instant::now();
        match deadline.connecting_with(self.pool.get()).await {
            Some(Ok(pooled)) => Ok(pooled),
            Some(Err(RunError::User(e))) => Err(connect_error(started, self.address(), Some(e))),
            Some(Err(RunError::TimedOut)) | None => Err(connect_error(
                started,
                self.address(),
                self.last_error.take(),
            )),
        }
    }

    /// Sends `request` on a pooled connection, within `deadline`.
    ///
    /// A request that timed out returns its timeout at once (it may have been applied, and
    /// its time is spent); its connection is checked in the background. When the connection
    /// broke mid-request (a server restart, a reset), the request waits for the pool's heal
    /// within what is left of the connect timeout, and a [repeatable](Request::repeatable)
    /// one is sent once more on a healed connection; any other is answered with the failure
    /// (it may have been applied), and the next request finds a healed pool.
    ///
    /// The outer error: no connection could be had, nothing was sent. The inner result: the
    /// server's answer, or the failure of the (last) send.
    pub(crate) async fn send(
        &self,
        request: Request<'_>,
        deadline: &Deadline,
    ) -> Result<redis::RedisResult<Value>, LockError> {
        if deadline.passed() {
            return Err(deadline.unsent(self.address()));
        }
        let heals = self.healer.completed();
        let mut conn = self.connection(deadline).await?;
        match deadline.reply(request.send(&mut conn)).await {
            // Boxed: the common path's future then holds a pointer, not the retry's state.
            Some(Err(e)) if is_connection_error(&e) => {
                Ok(Box::pin(self.after_failure(heals, request, e, deadline)).await)
            }
            Some(reply) => Ok(reply),
            None => {
                self.healer.start(heals);
                Ok(Err(deadline.timed_out().into_redis()))
            }
        }
    }

    /// [`Standalone::send`] for the crate's own requests, its errors said as the crate says
    /// them.
    async fn send_own(
        &self,
        request: Request<'_>,
        deadline: &Deadline,
    ) -> Result<Value, LockError> {
        self.send(request, deadline)
            .await?
            .map_err(|e| map_error(e, deadline.waited()))
    }

    /// After `e`, a connection error on a pooled connection: starts the pool's heal and, for
    /// a broken (not a timed-out) connection, waits for it and sends a repeatable `request`
    /// once more, within `deadline`.
    async fn after_failure(
        &self,
        heals: u64,
        request: Request<'_>,
        e: redis::RedisError,
        deadline: &Deadline,
    ) -> redis::RedisResult<Value> {
        if e.is_timeout() {
            self.healer.start(heals);
            return Err(e);
        }
        tracing::debug!(error = %e, address = %self.address(), repeat = request.repeatable(),
            "Redis connection failed; healing the pool");
        let healed = deadline
            .connecting_with(self.healer.healed_since(heals))
            .await;
        if healed.is_none() || !request.repeatable() {
            return Err(e);
        }
        // If no connection can be had, report the first failure: the command may have been
        // applied, which `Unavailable` would deny.
        let Ok(mut conn) = self.connection(deadline).await else {
            return Err(e);
        };
        match deadline.reply(request.send(&mut conn)).await {
            Some(reply) => reply,
            None => {
                self.healer.start(self.healer.completed());
                Err(deadline.timed_out().into_redis())
            }
        }
    }

    /// A call of the crate's code, within `deadline` (see [`Standalone::send`]).
    pub(crate) async fn invoke_within(
        &self,
        invocation: &Invocation<'_>,
        deadline: &Deadline,
    ) -> Result<Value, LockError> {
        self.send_own(Request::Call(invocation), deadline).await
    }

    /// One of the crate's plain commands, within `deadline`.
    pub(crate) async fn command_within(
        &self,
        cmd: &redis::Cmd,
        deadline: &Deadline,
    ) -> Result<Value, LockError> {
        self.send_own(Request::Command(cmd), deadline).await
    }

    /// One try of [`Topology::invoke_acked`]: the script's reply and `WAIT`'s, on a slot held
    /// for both.
    async fn acked_once(
        &self,
        invocation: &Invocation<'_>,
        replicas: u32,
        timeout: Duration,
        deadline: &Deadline,
    ) -> Result<redis::RedisResult<(Value, Value)>, LockError> {
        let pooled = self.slot_exclusively(deadline).await?;
        let mut conn = (*pooled).clone();
        conn.set_response_timeout(self.response_timeout + timeout);
        let both = async {
            let value = invocation.invoke_async(&mut conn).await?;
            let acked = wait_cmd(replicas, timeout).query_async(&mut conn).await?;
            Ok((value, acked))
        };
        Ok(match deadline.reply(both).await {
            Some(reply) => reply,
            None => Err(deadline.timed_out().into_redis()),
        })
    }

    /// The script and `WAIT`, within `deadline` (whose response timeout covers `WAIT`'s).
    pub(crate) async fn acked_within(
        &self,
        invocation: &Invocation<'_>,
        replicas: u32,
        timeout: Duration,
        deadline: &Deadline,
    ) -> Result<(Value, u32), LockError> {
        let heals = self.healer.completed();
        let reply = match self
            .acked_once(invocation, replicas, timeout, deadline)
            .await?
        {
            Err(e) if is_connection_error(&e) && !e.is_timeout() && invocation.repeat_safe() => {
                tracing::debug!(error = %e, address = %self.address(),
                    "Redis connection failed; healing the pool");
                match deadline
                    .connecting_with(self.healer.healed_since(heals))
                    .await
                {
                    Some(()) => {
                        self.acked_once(invocation, replicas, timeout, deadline)
                            .await?
                    }
                    None => Err(e),
                }
            }
            reply => reply,
        };
        let (value, acked) = reply.map_err(|e| {
            if is_connection_error(&e) {
                self.healer.start(heals);
            }
            map_error(e, deadline.waited())
        })?;
        Ok((value, acks(acked)?))
    }

    /// The bound of an acknowledged call: the response timeout covers `WAIT`'s too.
    pub(crate) fn acked_deadline(&self, asked: Instant, timeout: Duration) -> Deadline {
        Deadline::new(asked, self.response_timeout + timeout, self.connect_timeout)
    }
}

impl Topology for Standalone {
    /// Runs a script (EVALSHA, EVAL on NOSCRIPT), within the call's deadline (counted from
    /// when its caller asked).
    ///
    /// When the connection breaks mid-command (a reset) the pool is healed and the call
    /// sent once more, if it is safe to repeat (every call of this crate but a rate decision:
    /// a repeat of an applied one is recognised and not applied twice).
    async fn invoke_value(&self, invocation: &Invocation<'_>) -> Result<Value, LockError> {
        self.invoke_within(invocation, &self.invocation_deadline(invocation))
            .await
    }

    /// Runs the script and `WAIT` on one pooled connection that no other task is handed
    /// meanwhile, so `WAIT` (which blocks its connection) delays nobody else's commands. When
    /// the connection breaks, the pool is healed and both go once more (if the script is
    /// safe to repeat).
    async fn invoke_acked(
        &self,
        invocation: &Invocation<'_>,
        _key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(Value, u32), LockError> {
        let deadline = self.acked_deadline(invocation.asked, timeout);
        self.acked_within(invocation, replicas, timeout, &deadline)
            .await
    }

    /// Loads the code (which also proves the server answers), bounded by the connect and
    /// response timeouts.
    async fn load_scripts(&self, scripts: &'static Scripts) -> Result<Mode, LockError> {
        let deadline = self.deadline(Instant::now());
        let mut conn = self.connection(&deadline).await?;
        match deadline.reply(load_code(&mut conn, scripts)).await {
            Some(loaded) => loaded.map_err(|e| map_error(e, deadline.waited())),
            None => Err(deadline.timed_out()),
        }
    }

    async fn max_memory_policy(&self) -> Result<Value, LockError> {
        self.command(&policy_cmd()).await
    }

    async fn each_primary(&self, cmd: &redis::Cmd) -> Result<Vec<Value>, LockError> {
        Ok(vec![self.command(cmd).await?])
    }

    async fn command(&self, cmd: &redis::Cmd) -> Result<Value, LockError> {
        self.command_within(cmd, &self.deadline(Instant::now()))
            .await
    }

    async fn user(&self, request: Request<'_>) -> redis::RedisResult<Value> {
        self.send(request, &self.deadline(Instant::now()))
            .await
            .unwrap_or_else(|e| Err(e.into_redis()))
    }

    fn slot(&self, _key: &str) -> Option<Slot> {
        None
    }

    fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// `SUBSCRIBE` on the server, through a connection of its own.
    fn pubsub_source(&self) -> PubSubSource {
        PubSubSource::Node(PubSubNode::Server(Box::new(self.client.clone())))
    }
}

/// `client`'s `host:port` (never its password), for errors.
fn address_of(client: &redis::Client) -> String {
    super::errors::address(client.get_connection_info())
}
