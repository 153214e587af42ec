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
//!
//! The rooms:
//! - this file: the registry of channels and their waiters ([`Waiters`], [`Subscription`]),
//!   which the waiters and the task share, and what either task needs of it ([`Task`]);
//! - `pubsub`: the task for one node (`SUBSCRIBE`): a standalone server, or the primary the
//!   sentinels name, followed when it moves;
//! - `sharded`: the task for a Cluster (`SSUBSCRIBE` through a RESP3 cluster connection);
//! - `memory`: the task for an in-memory server (its bus, in this process);
//! - `waiter`: [`Waiter`], one waiting request's deadline and subscription.
//!
//! The backend says where the connection goes ([`PubSubSource`]).

#[cfg(feature = "testing")]
mod memory;
mod pubsub;
mod sharded;
mod waiter;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

pub(crate) use self::waiter::Waiter;
use crate::backend::{PubSubSource, refusal};
use crate::error::is_connection_error;
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
        let task = Task::new(Arc::downgrade(&shared), rx, connect_timeout);
        match source {
            PubSubSource::Node(node) => {
                tokio::spawn(pubsub::Worker::new(task, node).run());
            }
            PubSubSource::Cluster(seeds) => {
                tokio::spawn(sharded::run(task, seeds.builder()));
            }
            #[cfg(feature = "testing")]
            PubSubSource::Memory(link) => {
                tokio::spawn(memory::run(task, link));
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
    /// The channel's state while someone waits on it.
    fn wanted(&self, channel: &str) -> Option<Arc<ChannelState>> {
        lock(&self.channels).get(channel).map(|c| c.state.clone())
    }

    /// Every channel someone waits on.
    fn all(&self) -> Vec<(String, Arc<ChannelState>)> {
        lock(&self.channels)
            .iter()
            .map(|(k, c)| (k.clone(), c.state.clone()))
            .collect()
    }
}

impl ChannelState {
    /// Wakes the channel's waiters: a message came, or one may have been missed.
    fn wake(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// The subscription is gone with its connection (or its node): it is pending until sent
    /// again, and the waiters look again, since messages may have been missed.
    fn lost(&self) {
        self.subscribed.send_replace(Sub::Pending);
        self.wake();
    }
}

/// The first wait before another connection attempt; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// What either pub/sub task has: the registry it serves (weakly, so the task ends with the
/// client), the commands in the order they were sent, and its connection attempts' timing.
struct Task {
    shared: Weak<Shared>,
    commands: mpsc::UnboundedReceiver<Command>,
    connect_timeout: Duration,
    /// The wait before the next connection attempt.
    backoff: Duration,
    /// Whether a refused subscription was reported (once per client).
    warned: bool,
}

/// What a task does after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Go on with this connection.
    Go,
    /// The connection is lost, or must move: connect again.
    Reconnect,
    /// The client is gone: the task ends.
    Stop,
}

impl Task {
    fn new(
        shared: Weak<Shared>,
        commands: mpsc::UnboundedReceiver<Command>,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            shared,
            commands,
            connect_timeout,
            backoff: FIRST_BACKOFF,
            warned: false,
        }
    }

    /// The registry, while the client lives.
    fn shared(&self) -> Option<Arc<Shared>> {
        self.shared.upgrade()
    }

    /// `request` (a command on the connection), bounded by the connect timeout.
    fn bounded<F: Future>(&self, request: F) -> tokio::time::Timeout<F> {
        tokio::time::timeout(self.connect_timeout, request)
    }

    /// Records what Redis said to a (re)subscription to `channel`. Returns false when the
    /// connection failed; a refusal (an ACL without `SUBSCRIBE` or the channel) leaves the
    /// connection up and the channel's waiters looking again on their own, and is reported
    /// once.
    fn record<E>(
        &mut self,
        result: Result<redis::RedisResult<()>, E>,
        channel: &str,
        state: &ChannelState,
    ) -> bool {
        match result {
            Ok(Ok(())) => {
                state.subscribed.send_replace(Sub::Confirmed);
                true
            }
            Ok(Err(e)) if !is_connection_error(&e) => {
                state.subscribed.send_replace(Sub::Refused);
                if !std::mem::replace(&mut self.warned, true) {
                    let error = refusal(&e).map_or_else(|| e.to_string(), |r| r.to_string());
                    tracing::error!(%error, channel,
                        "Redis refused a lock subscription; waiters look again every 200 ms instead of being woken");
                }
                true
            }
            _ => false,
        }
    }

    /// Waits the backoff (then doubles it, up to 2 s) before another connection attempt,
    /// draining commands meanwhile so the queue does not grow while the connection is down
    /// (they are replayed from the wanted set on reconnect). Returns false once the client is
    /// gone.
    async fn back_off(&mut self) -> bool {
        let sleep = tokio::time::sleep(self.backoff);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => break,
                cmd = self.commands.recv() => if cmd.is_none() { return false },
            }
        }
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        true
    }

    /// A connection is up and subscribed: the next failure backs off from the start.
    fn connected(&mut self) {
        self.backoff = FIRST_BACKOFF;
    }
}
