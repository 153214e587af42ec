//! Waiting for a release: one pub/sub connection per client, shared by every waiter.
//!
//! Each channel with at least one waiter is subscribed once (reference counted) and
//! unsubscribed when its last waiter leaves. A message bumps the channel's version, which wakes
//! the channel's waiters; a reconnect bumps every version, since messages may have been missed
//! while the connection was down. Waiters for one name in one process also queue locally
//! ([`Subscription::queue`]), so only one of them at a time contends in Redis.
//!
//! All SUBSCRIBE and UNSUBSCRIBE commands go through one task, in order, and each is checked
//! against the current waiter count when it runs, so a channel that is left and re-entered
//! quickly ends up subscribed, and one that is left ends up unsubscribed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::backend::{PubSubNode, PubSubSource, refusal};
use crate::error::{LockError, is_connection_error};
use crate::metrics;
use crate::util::lock;

/// The waiters of one client.
pub(crate) struct Waiters {
    shared: Arc<Shared>,
}

struct Shared {
    channels: Mutex<HashMap<String, Channel>>,
    commands: mpsc::UnboundedSender<Command>,
}

struct Channel {
    refs: usize,
    state: Arc<ChannelState>,
}

struct ChannelState {
    /// Bumped on every message on the channel and on every reconnect.
    version: watch::Sender<u64>,
    /// Whether Redis has confirmed (or refused) the subscription.
    subscribed: watch::Sender<Sub>,
    /// The local queue: one permit, so one local waiter at a time contends in Redis.
    queue: Arc<Semaphore>,
}

/// Where a channel's subscription stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sub {
    /// Sent, or to be sent again after a reconnect.
    Pending,
    /// Confirmed by Redis: messages arrive.
    Confirmed,
    /// Refused by Redis (an ACL without the command or the channel): waiters look again
    /// on their own, and the next connection tries again.
    Refused,
}

enum Command {
    Subscribe(String),
    Unsubscribe(String),
}

impl Waiters {
    /// Starts the pub/sub task. It ends when the `Waiters` is dropped.
    pub(crate) fn start(source: PubSubSource, connect_timeout: Duration) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
            commands: tx,
        });
        let shared_weak = Arc::downgrade(&shared);
        match source {
            PubSubSource::Cluster(seeds) => {
                tokio::spawn(run_sharded(
                    shared_weak,
                    rx,
                    seeds.builder(),
                    connect_timeout,
                ));
            }
            PubSubSource::Node(node) => {
                tokio::spawn(run(shared_weak, rx, node, connect_timeout));
            }
        }
        Self { shared }
    }

    /// Whether a local waiter is contending for the name whose releases `channel` announces
    /// (it holds the channel's turn).
    pub(crate) fn is_contended(&self, channel: &str) -> bool {
        lock(&self.shared.channels)
            .get(channel)
            .is_some_and(|c| c.state.queue.available_permits() == 0)
    }

    /// Registers interest in `channel`. The subscription is sent in the background; await
    /// [`Subscription::subscribed`] before relying on messages.
    pub(crate) fn subscribe(&self, channel: &str) -> Subscription {
        let mut channels = lock(&self.shared.channels);
        let entry = channels.entry(channel.to_owned()).or_insert_with(|| {
            let _ = self
                .shared
                .commands
                .send(Command::Subscribe(channel.to_owned()));
            Channel {
                refs: 0,
                state: Arc::new(ChannelState {
                    version: watch::Sender::new(0),
                    subscribed: watch::Sender::new(Sub::Pending),
                    queue: Arc::new(Semaphore::new(1)),
                }),
            }
        });
        entry.refs += 1;
        let state = entry.state.clone();
        drop(channels);
        Subscription {
            shared: self.shared.clone(),
            channel: channel.to_owned(),
            version: state.version.subscribe(),
            state,
        }
    }
}

/// One waiter's interest in a channel; dropping it gives the interest back.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    state: Arc<ChannelState>,
    version: watch::Receiver<u64>,
}

impl Subscription {
    /// Waits (at most `limit`) until Redis has confirmed or refused the subscription. Returns
    /// whether it confirmed; a waiter that goes on without it must not rely on messages.
    pub(crate) async fn subscribed(&self, limit: Duration) -> bool {
        let mut rx = self.state.subscribed.subscribe();
        matches!(
            tokio::time::timeout(limit, rx.wait_for(|s| *s != Sub::Pending)).await,
            Ok(Ok(s)) if *s == Sub::Confirmed
        )
    }

    /// True while Redis has confirmed the subscription.
    pub(crate) fn is_subscribed(&self) -> bool {
        *self.state.subscribed.borrow() == Sub::Confirmed
    }

    /// Takes this process's turn to contend for the lock in Redis (FIFO).
    pub(crate) async fn queue(&self) -> OwnedSemaphorePermit {
        self.state
            .queue
            .clone()
            .acquire_owned()
            .await
            .expect("the queue semaphore is never closed")
    }

    /// Marks every message so far as seen: [`Subscription::changed`] waits for a later one.
    pub(crate) fn mark_seen(&mut self) {
        self.version.borrow_and_update();
    }

    /// Waits for a message (or a reconnect) after the last [`Subscription::mark_seen`].
    pub(crate) async fn changed(&mut self) {
        if self.version.changed().await.is_err() {
            // The sender lives in `state`, which we hold: this cannot happen; never spin.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = lock(&self.shared.channels);
        let Some(entry) = channels.get_mut(&self.channel) else {
            return;
        };
        if !Arc::ptr_eq(&entry.state, &self.state) {
            return;
        }
        entry.refs -= 1;
        if entry.refs == 0 {
            channels.remove(&self.channel);
            let _ = self
                .shared
                .commands
                .send(Command::Unsubscribe(std::mem::take(&mut self.channel)));
        }
    }
}

impl Shared {
    fn wanted(&self, channel: &str) -> Option<Arc<ChannelState>> {
        lock(&self.channels).get(channel).map(|c| c.state.clone())
    }

    fn all(&self) -> Vec<(String, Arc<ChannelState>)> {
        lock(&self.channels)
            .iter()
            .map(|(k, c)| (k.clone(), c.state.clone()))
            .collect()
    }
}

/// The pub/sub task: keeps one connection, follows the wanted channel set, routes messages.
async fn run(
    shared: Weak<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    node: PubSubNode,
    connect_timeout: Duration,
) {
    let mut backoff = Duration::from_millis(50);
    // Whether a refused subscription was reported (once per client).
    let mut warned = false;
    let mut changes = node.changes();
    loop {
        if let Some(changes) = changes.as_mut() {
            changes.borrow_and_update();
        }
        let (client, generation) = match node.client().await {
            Ok((generation, client)) => (Ok(client), generation),
            Err(e) => (Err(e.to_string()), 0),
        };
        let connected = match &client {
            Ok(client) => tokio::time::timeout(connect_timeout, client.get_async_pubsub())
                .await
                .map_err(|_| "connect timed out".to_owned())
                .and_then(|r| r.map_err(|e| e.to_string())),
            Err(e) => Err(e.clone()),
        };
        let pubsub = match connected {
            Ok(p) => p,
            Err(reason) => {
                tracing::warn!(%reason, "lock pub/sub connection failed; waiters fall back to lease expiry");
                node.failed(generation).await;
                if !back_off(&mut commands, &mut backoff).await {
                    return;
                }
                continue;
            }
        };
        let (mut sink, mut stream) = pubsub.split();
        let Some(s) = shared.upgrade() else { return };
        // (Re)subscribe everything wanted, then wake everyone: messages may have been missed.
        let mut ok = true;
        for (channel, state) in s.all() {
            let result = tokio::time::timeout(connect_timeout, sink.subscribe(&channel)).await;
            if !record(result, &channel, &state, &mut warned) {
                ok = false;
                break;
            }
        }
        for (_, state) in s.all() {
            state.version.send_modify(|v| *v += 1);
        }
        drop(s);
        if !ok {
            if !back_off(&mut commands, &mut backoff).await {
                return;
            }
            continue;
        }
        backoff = Duration::from_millis(50);

        let disconnected = loop {
            tokio::select! {
                cmd = commands.recv() => {
                    let Some(cmd) = cmd else { return };
                    let Some(s) = shared.upgrade() else { return };
                    let result = match cmd {
                        Command::Subscribe(channel) => match s.wanted(&channel) {
                            Some(state) => {
                                drop(s);
                                let r = tokio::time::timeout(connect_timeout, sink.subscribe(&channel)).await;
                                if record(r, &channel, &state, &mut warned) {
                                    Ok(Ok(()))
                                } else {
                                    Ok(Err(()))
                                }
                            }
                            None => Ok(Ok(())),
                        },
                        Command::Unsubscribe(channel) => {
                            if s.wanted(&channel).is_none() {
                                drop(s);
                                tokio::time::timeout(connect_timeout, sink.unsubscribe(&channel))
                                    .await
                                    .map(|r| r.map_err(drop))
                            } else {
                                Ok(Ok(()))
                            }
                        }
                    };
                    if !matches!(result, Ok(Ok(()))) {
                        break true;
                    }
                }
                msg = stream.next() => {
                    let Some(msg) = msg else { break true };
                    let Some(s) = shared.upgrade() else { return };
                    if let Some(state) = s.wanted(msg.get_channel_name()) {
                        state.version.send_modify(|v| *v += 1);
                    }
                }
                () = primary_changed(&mut changes) => {
                    tracing::info!("the primary changed; moving the lock pub/sub connection");
                    break true;
                }
            }
        };
        if disconnected {
            metrics::pubsub_reconnect();
            tracing::warn!("lock pub/sub connection lost; reconnecting");
            if let Some(s) = shared.upgrade() {
                for (_, state) in s.all() {
                    state.subscribed.send_replace(Sub::Pending);
                    state.version.send_modify(|v| *v += 1);
                }
            }
        }
    }
}

/// Records what Redis said to a (re)subscription to `channel`. Returns false when the
/// connection failed (the caller reconnects); a refusal (an ACL without `SUBSCRIBE` or the
/// channel) leaves the connection up and the channel's waiters looking again on their own, and
/// is reported once.
fn record<E>(
    result: Result<redis::RedisResult<()>, E>,
    channel: &str,
    state: &ChannelState,
    warned: &mut bool,
) -> bool {
    match result {
        Ok(Ok(())) => {
            state.subscribed.send_replace(Sub::Confirmed);
            true
        }
        Ok(Err(e)) if !is_connection_error(&e) => {
            state.subscribed.send_replace(Sub::Refused);
            if !std::mem::replace(warned, true) {
                let error = refusal(&e).map_or_else(|| e.to_string(), |r| r.to_string());
                tracing::error!(%error, channel,
                    "Redis refused a lock subscription; waiters look again every 200 ms instead of being woken");
            }
            true
        }
        _ => false,
    }
}

/// Waits `backoff` (then doubles it, up to 2 s) before another connection attempt, draining
/// commands meanwhile so the queue does not grow while the connection is down (they are
/// replayed from the wanted set on reconnect). Returns false once the client is gone.
async fn back_off(commands: &mut mpsc::UnboundedReceiver<Command>, backoff: &mut Duration) -> bool {
    let sleep = tokio::time::sleep(*backoff);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => break,
            cmd = commands.recv() => if cmd.is_none() { return false },
        }
    }
    *backoff = (*backoff * 2).min(Duration::from_secs(2));
    true
}

/// Resolves when the Sentinel primary changes; never without Sentinel.
async fn primary_changed(changes: &mut Option<watch::Receiver<u64>>) {
    match changes {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// The pub/sub task on a Cluster: sharded channels (`SSUBSCRIBE`) through one RESP3 cluster
/// connection. The connection routes each subscription to the node owning the channel's slot
/// and subscribes again after reconnects and slot moves; this task also subscribes again
/// itself, and wakes the channel's waiters, whenever a node connection drops or a node
/// unsubscribes a channel (its slot moved), since messages may have been missed meanwhile.
async fn run_sharded(
    shared: Weak<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    builder: redis::RedisResult<redis::cluster::ClusterClientBuilder>,
    connect_timeout: Duration,
) {
    let (push_tx, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
    let client = match builder.and_then(|builder| {
        builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(push_tx)
            .connection_timeout(connect_timeout)
            .response_timeout(connect_timeout)
            .build()
    }) {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(error = %e, "lock pub/sub cannot be configured; waiters fall back to lease expiry");
            return;
        }
    };
    let mut backoff = Duration::from_millis(50);
    // Whether a refused subscription was reported (once per client).
    let mut warned = false;
    let mut connection = loop {
        match tokio::time::timeout(connect_timeout, client.get_async_connection()).await {
            Ok(Ok(c)) => break c,
            other => {
                let reason = match other {
                    Ok(Err(e)) => e.to_string(),
                    _ => "connect timed out".to_owned(),
                };
                tracing::warn!(%reason, "lock pub/sub connection failed; waiters fall back to lease expiry");
                if !back_off(&mut commands, &mut backoff).await {
                    return;
                }
            }
        }
    };
    // Channels to (re)subscribe, retried until Redis confirms: to begin with, every channel
    // wanted while the connection was being made (their commands were drained meanwhile).
    let mut pending: Vec<String> = match shared.upgrade() {
        Some(s) => s.all().into_iter().map(|(channel, _)| channel).collect(),
        None => return,
    };
    let mut retry = tokio::time::interval(Duration::from_millis(250));
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            cmd = commands.recv() => {
                let Some(cmd) = cmd else { return };
                match cmd {
                    Command::Subscribe(channel) => pending.push(channel),
                    Command::Unsubscribe(channel) => {
                        let Some(s) = shared.upgrade() else { return };
                        if s.wanted(&channel).is_none() {
                            drop(s);
                            let _ = tokio::time::timeout(connect_timeout, connection.sunsubscribe(&channel)).await;
                        }
                    }
                }
            }
            push = pushes.recv() => {
                let Some(push) = push else { return };
                let Some(s) = shared.upgrade() else { return };
                match push.kind {
                    PushKind::SMessage => {
                        if let Some(channel) = push.data.first().and_then(channel_name)
                            && let Some(state) = s.wanted(&channel)
                        {
                            state.version.send_modify(|v| *v += 1);
                        }
                    }
                    PushKind::SUnsubscribe => {
                        // A node gave up the channel (its slot moved away): subscribe again,
                        // at the new owner, if someone still waits.
                        if let Some(channel) = push.data.first().and_then(channel_name)
                            && let Some(state) = s.wanted(&channel)
                        {
                            state.subscribed.send_replace(Sub::Pending);
                            state.version.send_modify(|v| *v += 1);
                            pending.push(channel);
                        }
                    }
                    PushKind::Disconnection => {
                        metrics::pubsub_reconnect();
                        tracing::warn!("a lock pub/sub node connection dropped; subscribing again");
                        for (channel, state) in s.all() {
                            state.subscribed.send_replace(Sub::Pending);
                            state.version.send_modify(|v| *v += 1);
                            pending.push(channel);
                        }
                    }
                    _ => {}
                }
            }
            _ = retry.tick(), if !pending.is_empty() => {}
        }
        if pending.is_empty() {
            continue;
        }
        let Some(s) = shared.upgrade() else { return };
        pending.sort();
        pending.dedup();
        let mut failed = Vec::new();
        for channel in std::mem::take(&mut pending) {
            let Some(state) = s.wanted(&channel) else {
                continue;
            };
            let before = *state.subscribed.borrow();
            let result =
                tokio::time::timeout(connect_timeout, connection.ssubscribe(&channel)).await;
            if !record(result, &channel, &state, &mut warned) {
                failed.push(channel);
            } else if before != Sub::Confirmed && *state.subscribed.borrow() == Sub::Confirmed {
                // A release may have come while it was not subscribed.
                state.version.send_modify(|v| *v += 1);
            }
        }
        pending = failed;
    }
}

fn channel_name(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// How often a waiter looks again while the pub/sub connection is down.
const UNSUBSCRIBED_RECHECK: Duration = Duration::from_millis(200);

/// One waiting request of any primitive: its deadline and its subscription.
pub(crate) struct Waiter {
    deadline: Option<tokio::time::Instant>,
    /// How long to wait when nothing says when to look again (no expiry known).
    fallback: Duration,
    /// The longest wait for Redis to confirm a subscription.
    confirm: Duration,
    sub: Option<Subscription>,
    /// Attempts made so far (see [`Waiter::mark_seen`]).
    attempts: u32,
}

/// How long a waiter waits before trying again after Redis could not be reached.
const RETRY_AFTER_OUTAGE: Duration = Duration::from_millis(250);

impl Waiter {
    pub(crate) fn new(
        deadline: Option<tokio::time::Instant>,
        fallback: Duration,
        confirm: Duration,
    ) -> Self {
        Self {
            deadline,
            fallback,
            confirm,
            sub: None,
            attempts: 0,
        }
    }

    /// Decides what a failed attempt means. The first attempt fails fast; once waiting, a
    /// request rides out a Redis outage (no connection, no answer, no primary) within its
    /// deadline: this waits a moment and returns `Ok` to try again. Any other error, or an
    /// outage that outlasts the deadline, is returned.
    pub(crate) async fn ride_out(&mut self, error: LockError) -> Result<(), LockError> {
        if self.attempts <= 1 || !error.is_unavailable() || self.expired() {
            return Err(error);
        }
        tracing::debug!(%error, "attempt failed while waiting; trying again");
        self.sleep(Some(RETRY_AFTER_OUTAGE)).await;
        Ok(())
    }

    /// True once the deadline has passed.
    pub(crate) fn expired(&self) -> bool {
        self.deadline
            .is_some_and(|d| tokio::time::Instant::now() >= d)
    }

    /// Subscribes to `channel` (giving up a subscription to another one) and waits, within
    /// the deadline, for Redis to confirm it. Returns true when the subscription is new: the
    /// caller then tries again at once, since a release may have come before it.
    pub(crate) async fn subscribe(&mut self, waiters: &Waiters, channel: &str) -> bool {
        if self.sub.as_ref().is_some_and(|s| s.channel == channel) {
            return false;
        }
        self.sub = None;
        let sub = waiters.subscribe(channel);
        let confirm = self.deadline.map_or(self.confirm, |d| {
            self.confirm
                .min(d.saturating_duration_since(tokio::time::Instant::now()))
        });
        sub.subscribed(confirm).await;
        self.sub = Some(sub);
        true
    }

    /// Takes this process's turn to contend for the subscribed name (FIFO), within the
    /// deadline: `None` when the deadline came first, `Some(None)` without a subscription.
    pub(crate) async fn local_turn(&self) -> Option<Option<OwnedSemaphorePermit>> {
        let Some(sub) = self.sub.as_ref() else {
            return Some(None);
        };
        match self.deadline {
            Some(d) => tokio::time::timeout_at(d, sub.queue()).await.ok().map(Some),
            None => Some(Some(sub.queue().await)),
        }
    }

    /// Marks every message so far as seen; call before each attempt. Returns whether this
    /// is the first attempt.
    pub(crate) fn mark_seen(&mut self) -> bool {
        self.attempts += 1;
        if let Some(sub) = self.sub.as_mut() {
            sub.mark_seen();
        }
        self.attempts == 1
    }

    /// Waits for a message on the subscription, for `retry_in` (None: the fallback), or for
    /// the deadline, whichever comes first. Without a confirmed subscription releases go
    /// unseen, so it looks again more often.
    pub(crate) async fn sleep(&mut self, retry_in: Option<Duration>) {
        let now = tokio::time::Instant::now();
        let mut wake = now + retry_in.unwrap_or(self.fallback) + Duration::from_millis(1);
        if !self.sub.as_ref().is_some_and(Subscription::is_subscribed) {
            wake = wake.min(now + UNSUBSCRIBED_RECHECK);
        }
        if let Some(d) = self.deadline {
            wake = wake.min(d);
        }
        match self.sub.as_mut() {
            Some(sub) => {
                tokio::select! {
                    _ = sub.changed() => {}
                    _ = tokio::time::sleep_until(wake) => {}
                }
            }
            None => tokio::time::sleep_until(wake).await,
        }
    }
}
