//! A primary managed by Redis Sentinel: the sentinels name it, and the client follows it when
//! they fail over to a replica.
//!
//! The client asks the sentinels (in order, first answer wins) for the service's primary,
//! checks with `ROLE` that the named node really is a primary, and talks to it as to a
//! standalone server. When a command fails in a way that says the primary may have changed (the
//! connection fails or times out, or the node answers `READONLY` because it was turned into a
//! replica) it asks again; if they now name another node, a command that was not applied (no
//! connection, `READONLY`, `MASTERDOWN`) or is safe to repeat (after a broken connection) is
//! sent there once more within the call's [`Deadline`], and the pub/sub connection moves
//! too. A command that timed out is not sent again (it may have been applied, and its time is
//! spent): the sentinels are asked in the background, for the next one.

use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::cluster_routing::Slot;
use redis::{ConnectionAddr, ConnectionInfo, Value};
use tokio::sync::watch;

use tokio::time::Instant;

use super::deadline::Deadline;
use super::errors::refusal;
use super::invocation::Invocation;
use super::request::Request;
use super::standalone::Standalone;
use super::topology::{BoxFuture, Primary, PubSubNode, PubSubSource, Topology};
use crate::error::{LockError, is_connection_error};
use crate::wire::script::{Mode, Scripts};

/// The builder option that holds the primary's password.
const PRIMARY_URL: &str = "sentinel_primary_url";

/// How to reach the sentinels and what to build for a primary.
pub(crate) struct Settings {
    pub(crate) sentinels: Vec<redis::Client>,
    pub(crate) service: String,
    /// The primary's connection settings (password, database); its address is replaced by the
    /// one the sentinels name.
    pub(crate) primary: ConnectionInfo,
    pub(crate) pool_size: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
}

/// The primary the client talks to, and how it finds the next one.
pub(crate) struct Discovery {
    settings: Settings,
    current: Mutex<Option<Current>>,
    /// Serialises lookups: a burst of failures asks the sentinels once.
    looking: tokio::sync::Mutex<()>,
    /// The generation of the current primary, for the pub/sub task.
    changes: watch::Sender<u64>,
}

#[derive(Clone)]
struct Current {
    generation: u64,
    addr: (String, u16),
    node: Arc<Standalone>,
}

impl Discovery {
    pub(crate) fn new(settings: Settings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            current: Mutex::new(None),
            looking: tokio::sync::Mutex::new(()),
            changes: watch::Sender::new(0),
        })
    }

    fn snapshot(&self) -> Option<Current> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The current primary, looked up first if none is known.
    async fn current(&self) -> Result<(u64, Arc<Standalone>), LockError> {
        if let Some(c) = self.snapshot() {
            return Ok((c.generation, c.node));
        }
        self.refresh(0).await
    }

    /// Asks the sentinels again, unless someone already did since `seen` (a generation).
    /// Returns the primary to use, which may be the same one.
    async fn refresh(&self, seen: u64) -> Result<(u64, Arc<Standalone>), LockError> {
        let _looking = self.looking.lock().await;
        if let Some(c) = self.snapshot()
            && c.generation != seen
        {
            return Ok((c.generation, c.node));
        }
        let addr = self.ask_sentinels().await?;
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = current.as_ref()
            && c.addr == addr
        {
            return Ok((c.generation, c.node.clone()));
        }
        let generation = current.as_ref().map_or(1, |c| c.generation + 1);
        let client = self.primary_client(&addr).map_err(LockError::Redis)?;
        let pool = Standalone::default_pool(
            &client,
            self.settings.pool_size,
            self.settings.connect_timeout,
        )?;
        let node = Arc::new(Standalone::new(
            pool,
            client,
            self.settings.response_timeout,
            self.settings.connect_timeout,
        ));
        tracing::info!(service = %self.settings.service, host = %addr.0, port = addr.1,
            "following the Sentinel primary");
        *current = Some(Current {
            generation,
            addr,
            node: node.clone(),
        });
        drop(current);
        self.changes.send_replace(generation);
        Ok((generation, node))
    }

    /// A client for the node at `addr`, with the primary's connection settings (TLS with its
    /// certificates when `sentinel_primary_url` is `rediss://`).
    fn primary_client(&self, addr: &(String, u16)) -> Result<redis::Client, redis::RedisError> {
        let (host, port) = (addr.0.clone(), addr.1);
        let at = match self.settings.primary.addr().clone() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        redis::Client::open(self.settings.primary.clone().set_addr(at))
    }

    /// The first sentinel's answer that names a node which confirms it is a primary.
    async fn ask_sentinels(&self) -> Result<(String, u16), LockError> {
        let s = &self.settings;
        // The last error, with the option of the URL whose credentials it concerns.
        let mut last_error = None;
        for sentinel in &s.sentinels {
            match self.ask(sentinel).await {
                Ok(Some(addr)) => match self.is_primary(&addr).await {
                    Ok(true) => return Ok(addr),
                    Ok(false) => {
                        tracing::debug!(host = %addr.0, port = addr.1,
                            "the node a sentinel named is not a primary (yet)");
                    }
                    Err(e) => last_error = Some((e, PRIMARY_URL)),
                },
                Ok(None) => {}
                Err(e) => last_error = Some((e, "sentinels")),
            }
        }
        // A TLS, password or ACL refusal is said as such: no failover will fix it.
        if let Some((e, option)) = &last_error
            && let Some(refused) = refusal(e)
        {
            return Err(refused.auth_in(option));
        }
        Err(LockError::NoPrimary {
            service: s.service.clone(),
            source: last_error.map(|(e, _)| e),
        })
    }

    async fn ask(
        &self,
        sentinel: &redis::Client,
    ) -> Result<Option<(String, u16)>, redis::RedisError> {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.settings.service);
        let reply: Option<(String, u16)> = self.query(sentinel, &cmd).await?;
        Ok(reply)
    }

    async fn is_primary(&self, addr: &(String, u16)) -> Result<bool, redis::RedisError> {
        let client = self.primary_client(addr)?;
        let role: Vec<Value> = self.query(&client, &redis::cmd("ROLE")).await?;
        let role = match role.into_iter().next() {
            Some(v) => redis::from_redis_value::<String>(v).unwrap_or_default(),
            None => String::new(),
        };
        Ok(role == "master")
    }

    /// One command on a short-lived connection, bounded by the timeouts.
    async fn query<T: redis::FromRedisValue>(
        &self,
        client: &redis::Client,
        cmd: &redis::Cmd,
    ) -> Result<T, redis::RedisError> {
        let timed_out =
            || redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        let s = &self.settings;
        let mut conn =
            tokio::time::timeout(s.connect_timeout, client.get_multiplexed_async_connection())
                .await
                .map_err(|_| timed_out())??;
        tokio::time::timeout(s.response_timeout, cmd.query_async(&mut conn))
            .await
            .map_err(|_| timed_out())?
    }

    /// Asks the sentinels now, whatever is known.
    async fn check(&self) {
        let seen = self.snapshot().map_or(0, |c| c.generation);
        if let Err(e) = self.refresh(seen).await {
            tracing::debug!(error = %e, "no primary known yet");
        }
    }

    /// Starts the task that listens to the sentinels' `+switch-master` events, so the client
    /// follows a failover at once even while it sends no command (and even when the old
    /// primary lives on as a replica, which would keep its connections working). It ends
    /// when the discovery is dropped.
    pub(crate) fn spawn_watcher(self: &Arc<Self>) {
        tokio::spawn(watch_sentinels(Arc::downgrade(self)));
    }
}

/// How often the watcher checks that its client still exists while no event comes.
const WATCHER_CHECK: Duration = Duration::from_secs(5);

impl Primary for Discovery {
    /// The client of the current primary for the pub/sub connection, looked up if needed,
    /// with its generation.
    fn pubsub_client(&self) -> BoxFuture<'_, Result<(u64, redis::Client), LockError>> {
        Box::pin(async move {
            let (generation, node) = self.current().await?;
            Ok((generation, node.redis_client().clone()))
        })
    }

    /// Reports that the pub/sub connection to the primary of `generation` failed.
    fn pubsub_failed(&self, generation: u64) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let _ = self.refresh(generation).await;
        })
    }

    /// Changes of primary.
    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

async fn watch_sentinels(discovery: Weak<Discovery>) {
    let mut backoff = Duration::from_millis(100);
    let mut next = 0usize;
    let mut warned = false;
    loop {
        let (sentinel, service, connect_timeout) = {
            let Some(d) = discovery.upgrade() else { return };
            let s = &d.settings;
            let Some(sentinel) = s.sentinels.get(next % s.sentinels.len().max(1)) else {
                return;
            };
            (sentinel.clone(), s.service.clone(), s.connect_timeout)
        };
        next = next.wrapping_add(1);
        let subscribed = async {
            let mut pubsub = sentinel.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let pubsub = match tokio::time::timeout(connect_timeout, subscribed).await {
            Ok(Ok(pubsub)) => pubsub,
            failed => {
                if let Ok(Err(e)) = &failed
                    && let Some(refused) = refusal(e)
                    && !std::mem::replace(&mut warned, true)
                {
                    tracing::warn!(error = %refused,
                        "cannot listen to the sentinels' +switch-master events");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        // A switch may have happened while nobody listened.
        match discovery.upgrade() {
            Some(d) => d.check().await,
            None => return,
        }
        let (_sink, mut stream) = pubsub.split();
        loop {
            tokio::select! {
                msg = stream.next() => {
                    let Some(msg) = msg else { break };
                    // "<service> <old ip> <old port> <new ip> <new port>"
                    let payload: String = msg.get_payload().unwrap_or_default();
                    if payload.split(' ').next() == Some(service.as_str()) {
                        let Some(d) = discovery.upgrade() else { return };
                        tracing::info!(%payload, "Sentinel switched the primary");
                        d.check().await;
                    }
                }
                () = tokio::time::sleep(WATCHER_CHECK) => {
                    if discovery.strong_count() == 0 {
                        return;
                    }
                }
            }
        }
    }
}

/// The backend: every command goes to the current primary.
pub(crate) struct Sentinel {
    discovery: Arc<Discovery>,
}

impl Sentinel {
    pub(crate) fn new(discovery: Arc<Discovery>) -> Self {
        Self { discovery }
    }

    /// Starts the task that follows the sentinels' `+switch-master` events.
    pub(crate) fn spawn_watcher(&self) {
        self.discovery.spawn_watcher();
    }

    /// Runs `f` on the current primary within one deadline (counted from `asked`); when it
    /// fails in a way that says the primary may have moved, asks the sentinels and, if they
    /// name another node, runs it there once more when that is safe: the first try was not
    /// applied, or it is `repeat_safe` and its connection broke. After a timeout, or once the
    /// deadline has passed, the sentinels are asked in the background and the error returned.
    async fn on_primary<T, F, Fut>(
        &self,
        (asked, patience): (Instant, Duration),
        repeat_safe: bool,
        f: F,
    ) -> Result<T, LockError>
    where
        F: Fn(Arc<Standalone>, Arc<Deadline>) -> Fut + Send + Sync,
        Fut: Future<Output = Result<T, LockError>> + Send,
        T: Send,
    {
        let (generation, node) = self.discovery.current().await?;
        let deadline = Arc::new(node.patient_deadline(asked, patience));
        let result = match f(node, deadline.clone()).await {
            Err(e) if primary_may_have_moved(&e) => {
                // A timeout may have been applied, and a call whose time is spent cannot use
                // the sentinels' answer: they are asked for the next call.
                if matches!(e, LockError::ResponseTimeout(_)) || deadline.passed() {
                    self.refresh_in_background(generation);
                    return Err(e.auth_in(PRIMARY_URL));
                }
                let again = !may_be_applied(&e) || repeat_safe;
                let refreshed = deadline
                    .connecting_with(self.discovery.refresh(generation))
                    .await;
                match refreshed {
                    Some(Ok((now, node))) if now != generation && again => f(node, deadline).await,
                    _ => Err(e),
                }
            }
            other => other,
        };
        // The primary's password comes from `sentinel_primary_url`, not from its address.
        result.map_err(|e| e.auth_in(PRIMARY_URL))
    }

    /// Asks the sentinels again in the background (after a timeout: the call that saw it has
    /// no time left to wait for them).
    fn refresh_in_background(&self, seen: u64) {
        let discovery = self.discovery.clone();
        tokio::spawn(async move {
            let _ = discovery.refresh(seen).await;
        });
    }
}

/// Failures after which the sentinels are asked again.
fn primary_may_have_moved(e: &LockError) -> bool {
    match e {
        LockError::Unavailable { .. } | LockError::ResponseTimeout(_) => true,
        LockError::Redis(e) => is_connection_error(e) || refused_as_not_primary(e),
        _ => false,
    }
}

/// A node that is no longer the primary refuses a write: nothing was applied.
fn refused_as_not_primary(e: &redis::RedisError) -> bool {
    matches!(e.code(), Some("READONLY" | "MASTERDOWN"))
}

/// Whether a command that failed with `e` may have been applied (its connection broke after
/// it was sent), rather than never sent or refused.
fn may_be_applied(e: &LockError) -> bool {
    match e {
        LockError::Redis(e) => !refused_as_not_primary(e),
        other => !other.never_sent(),
    }
}

impl Topology for Sentinel {
    async fn invoke_value(&self, invocation: &Invocation<'_>) -> Result<Value, LockError> {
        let safe = invocation.repeat_safe();
        let when = (invocation.asked, invocation.patience);
        self.on_primary(when, safe, |node, deadline| async move {
            node.invoke_within(invocation, &deadline).await
        })
        .await
    }

    async fn invoke_acked(
        &self,
        invocation: &Invocation<'_>,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(Value, u32), LockError> {
        let _ = key;
        let safe = invocation.repeat_safe();
        let when = (invocation.asked, Duration::ZERO);
        self.on_primary(when, safe, |node, _| async move {
            let deadline = node.acked_deadline(invocation.asked, timeout);
            node.acked_within(invocation, replicas, timeout, &deadline)
                .await
        })
        .await
    }

    async fn load_scripts(&self, scripts: &'static Scripts) -> Result<Mode, LockError> {
        self.on_primary(
            (Instant::now(), Duration::ZERO),
            true,
            |node, _| async move { node.load_scripts(scripts).await },
        )
        .await
    }

    async fn max_memory_policy(&self) -> Result<Value, LockError> {
        self.command(&super::calls::policy_cmd()).await
    }

    async fn command(&self, cmd: &redis::Cmd) -> Result<Value, LockError> {
        self.on_primary(
            (Instant::now(), Duration::ZERO),
            true,
            |node, deadline| async move { node.command_within(cmd, &deadline).await },
        )
        .await
    }

    /// On the current primary. A request no connection could be had for, or one the node
    /// refused because it is no longer the primary (`READONLY`, `MASTERDOWN`: not applied), goes
    /// to the node the sentinels name now; one whose connection failed under it only makes
    /// them be asked again (it may have been applied), for the next request.
    async fn user(&self, request: Request<'_>) -> redis::RedisResult<Value> {
        let (generation, node) = self
            .discovery
            .current()
            .await
            .map_err(LockError::into_redis)?;
        let deadline = node.deadline(Instant::now());
        let reply = node.send(request, &deadline).await;
        let again = match &reply {
            Err(_) => true,
            Ok(Err(e)) if refused_as_not_primary(e) => true,
            Ok(Err(e)) if e.is_timeout() => {
                self.refresh_in_background(generation);
                false
            }
            Ok(Err(e)) if is_connection_error(e) => {
                let _ = deadline
                    .connecting_with(self.discovery.refresh(generation))
                    .await;
                false
            }
            Ok(_) => false,
        };
        if !again {
            return reply.unwrap_or_else(|e| Err(e.into_redis()));
        }
        match deadline
            .connecting_with(self.discovery.refresh(generation))
            .await
        {
            Some(Ok((now, node))) if now != generation => node
                .send(request, &deadline)
                .await
                .unwrap_or_else(|e| Err(e.into_redis())),
            _ => reply.unwrap_or_else(|e| Err(e.into_redis())),
        }
    }

    async fn each_primary(&self, cmd: &redis::Cmd) -> Result<Vec<Value>, LockError> {
        Ok(vec![self.command(cmd).await?])
    }

    fn slot(&self, _key: &str) -> Option<Slot> {
        None
    }

    fn connect_timeout(&self) -> Duration {
        self.discovery.settings.connect_timeout
    }

    /// `SUBSCRIBE` on the current primary, moving with it.
    fn pubsub_source(&self) -> PubSubSource {
        PubSubSource::Node(PubSubNode::Primary(self.discovery.clone()))
    }
}
