//! A standalone Redis server: a bb8 pool of multiplexed connections for commands, and a
//! `redis::Client` for the dedicated pub/sub connection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bb8::{Pool, PooledConnection, RunError};
use bb8_redis::RedisConnectionManager;
use redis::cluster_routing::Slot;
use redis::{Value, aio::MultiplexedConnection};
use tokio::time::Instant;

use super::calls::{acks, load_code, policy_cmd, wait_cmd};
use super::errors::{connect_error, map_error, refusal};
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
    /// Serialises [`Standalone::heal`].
    healing: tokio::sync::Mutex<()>,
    /// Completed heals, so a failure seen before the last heal does not start another.
    heals: AtomicU64,
}

impl Standalone {
    pub(crate) fn new(
        (pool, last_error): (Pool<RedisConnectionManager>, LastError),
        client: redis::Client,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            pool,
            last_error,
            client,
            response_timeout,
            connect_timeout,
            healing: tokio::sync::Mutex::new(()),
            heals: AtomicU64::new(0),
        }
    }

    /// Builds the default pool: no PING on every checkout (a broken connection is replaced
    /// when a command on it fails instead, see [`Standalone::invoke`]); its connection errors
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

    /// A handle on a pooled multiplexed connection. The pool slot is given back at once: the
    /// handle shares the connection, so concurrent commands from many tasks are pipelined on
    /// the pool's connections instead of each holding one exclusively for a round trip.
    async fn connection(&self) -> Result<MultiplexedConnection, LockError> {
        let pooled = self.slot_exclusively().await?;
        let mut conn = (*pooled).clone();
        conn.set_response_timeout(self.response_timeout);
        Ok(conn)
    }

    /// A pool slot, kept from other tasks until dropped.
    async fn slot_exclusively(
        &self,
    ) -> Result<PooledConnection<'_, RedisConnectionManager>, LockError> {
        let started = Instant::now();
        match self.pool.get().await {
            Ok(pooled) => Ok(pooled),
            Err(RunError::User(e)) => Err(connect_error(started, self.address(), Some(e))),
            Err(RunError::TimedOut) => Err(connect_error(
                started,
                self.address(),
                self.last_error.take(),
            )),
        }
    }

    async fn fresh_connection(&self) -> Result<MultiplexedConnection, LockError> {
        let started = Instant::now();
        match tokio::time::timeout(self.connect_timeout, self.pool.dedicated_connection()).await {
            Ok(Ok(mut conn)) => {
                conn.set_response_timeout(self.response_timeout);
                Ok(conn)
            }
            Ok(Err(e)) => Err(connect_error(started, self.address(), Some(e))),
            Err(_) => Err(connect_error(started, self.address(), None)),
        }
    }

    /// Replaces the pool's broken connections (after a server restart, a reset, a timeout).
    /// One task heals at a time; a task that saw a failure before the last heal finished just
    /// uses its result.
    async fn heal(&self, failed_at: u64) {
        let _healing = self.healing.lock().await;
        if self.heals.load(Ordering::Acquire) != failed_at {
            return;
        }
        let mut slots = Vec::new();
        for _ in 0..self.pool.state().connections {
            match tokio::time::timeout(self.connect_timeout, self.pool.get()).await {
                Ok(Ok(slot)) => slots.push(slot),
                _ => break,
            }
        }
        let ping = redis::cmd("PING");
        for slot in &mut slots {
            let pong = ping.query_async::<String>(&mut **slot);
            if !matches!(
                tokio::time::timeout(self.response_timeout, pong).await,
                Ok(Ok(_))
            ) {
                match self.fresh_connection().await {
                    Ok(fresh) => **slot = fresh,
                    Err(_) => break,
                }
            }
        }
        self.heals.fetch_add(1, Ordering::AcqRel);
    }

    /// Sends `request` on a pooled connection. When the connection fails mid-request (a
    /// server restart, a reset, a timeout), the pool's broken connections are replaced and a
    /// [repeatable](Request::repeatable) request is sent once more; any other is answered with
    /// the failure (it may have been applied), and the next request finds a healed pool.
    ///
    /// The outer error: no connection could be had, nothing was sent. The inner result: the
    /// server's answer, or the failure of the (last) send.
    pub(crate) async fn send(
        &self,
        request: Request<'_>,
    ) -> Result<redis::RedisResult<Value>, LockError> {
        let heals = self.heals.load(Ordering::Acquire);
        let mut conn = self.connection().await?;
        match request.send(&mut conn).await {
            // Boxed: the common path's future then holds a pointer, not the retry's state.
            Err(e) if is_connection_error(&e) => {
                Ok(Box::pin(self.heal_and_resend(heals, request, e)).await)
            }
            reply => Ok(reply),
        }
    }

    /// [`Standalone::send`] for the crate's own requests, its errors said as the crate says
    /// them.
    async fn send_own(&self, request: Request<'_>) -> Result<Value, LockError> {
        self.send(request).await?.map_err(|e| self.map_error(e))
    }

    /// After `e`, a connection error on a pooled connection: heals the pool and, if `request`
    /// is repeatable, sends it once more.
    async fn heal_and_resend(
        &self,
        heals: u64,
        request: Request<'_>,
        e: redis::RedisError,
    ) -> redis::RedisResult<Value> {
        tracing::debug!(error = %e, repeat = request.repeatable(), "Redis connection failed; healing the pool");
        self.heal(heals).await;
        if !request.repeatable() {
            return Err(e);
        }
        // If no connection can be had, report the first failure: the command may have been
        // applied, which `Unavailable` would deny.
        let Ok(mut conn) = self.connection().await else {
            return Err(e);
        };
        request.send(&mut conn).await
    }

    /// One try of [`Topology::invoke_acked`]: the script's reply and `WAIT`'s.
    async fn acked_once(
        &self,
        invocation: &Invocation<'_>,
        replicas: u32,
        timeout: Duration,
    ) -> Result<redis::RedisResult<(Value, Value)>, LockError> {
        let pooled = self.slot_exclusively().await?;
        let mut conn = (*pooled).clone();
        conn.set_response_timeout(self.response_timeout + timeout);
        Ok(async {
            let value = invocation.invoke_async(&mut conn).await?;
            let acked = wait_cmd(replicas, timeout).query_async(&mut conn).await?;
            Ok((value, acked))
        }
        .await)
    }

    fn map_error(&self, e: redis::RedisError) -> LockError {
        map_error(e, self.response_timeout)
    }
}

impl Topology for Standalone {
    /// Runs a script (EVALSHA, EVAL on NOSCRIPT).
    ///
    /// When the connection fails mid-command (reset, timeout) the pool's broken connections
    /// are replaced and the script is sent once more. Every script of this crate is written to
    /// be safe to repeat: a repeat of an applied command is recognised and not applied twice.
    async fn invoke_value(&self, invocation: &Invocation<'_>) -> Result<Value, LockError> {
        self.send_own(Request::Call(invocation)).await
    }

    /// Runs the script and `WAIT` on one pooled connection that no other task is handed
    /// meanwhile, so `WAIT` (which blocks its connection) delays nobody else's commands. When
    /// the connection fails, the pool is healed and both go once more (the script is safe to
    /// repeat).
    async fn invoke_acked(
        &self,
        invocation: &Invocation<'_>,
        _key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(Value, u32), LockError> {
        let heals = self.heals.load(Ordering::Acquire);
        let (value, acked) = match self.acked_once(invocation, replicas, timeout).await? {
            Err(e) if is_connection_error(&e) => {
                tracing::debug!(error = %e, "Redis connection failed; healing the pool");
                self.heal(heals).await;
                self.acked_once(invocation, replicas, timeout).await?
            }
            reply => reply,
        }
        .map_err(|e| self.map_error(e))?;
        Ok((value, acks(acked)?))
    }

    /// Loads the code (which also proves the server answers), bounded by the connect and
    /// response timeouts.
    async fn load_scripts(&self, scripts: &'static Scripts) -> Result<Mode, LockError> {
        let mut conn = self.connection().await?;
        load_code(&mut conn, scripts)
            .await
            .map_err(|e| self.map_error(e))
    }

    async fn max_memory_policy(&self) -> Result<Value, LockError> {
        self.send_own(Request::Command(&policy_cmd())).await
    }

    async fn each_primary(&self, cmd: &redis::Cmd) -> Result<Vec<Value>, LockError> {
        Ok(vec![self.command(cmd).await?])
    }

    async fn command(&self, cmd: &redis::Cmd) -> Result<Value, LockError> {
        self.send_own(Request::Command(cmd)).await
    }

    async fn user(&self, request: Request<'_>) -> redis::RedisResult<Value> {
        self.send(request)
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
