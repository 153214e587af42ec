//! The registry of channels and their waiters, which the waiters, their subscriptions and
//! the pub/sub tasks share.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Semaphore, mpsc, watch};

use crate::util::lock;

pub(super) struct Shared {
    pub(super) channels: Mutex<HashMap<String, Channel>>,
    pub(super) commands: mpsc::UnboundedSender<Command>,
}

pub(super) struct Channel {
    pub(super) refs: usize,
    pub(super) state: Arc<ChannelState>,
}

pub(super) struct ChannelState {
    /// Bumped on every message on the channel and on every reconnect.
    pub(super) version: watch::Sender<u64>,
    /// Whether Redis has confirmed (or refused) the subscription.
    pub(super) subscribed: watch::Sender<Sub>,
    /// The local queue: one permit, so one local waiter at a time contends in Redis.
    pub(super) queue: Arc<Semaphore>,
}

/// Where a channel's subscription stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sub {
    /// Sent, or to be sent again after a reconnect.
    Pending,
    /// Confirmed by Redis: messages arrive.
    Confirmed,
    /// Refused by Redis (an ACL without the command or the channel): waiters look again
    /// on their own, and the next connection tries again.
    Refused,
}

pub(super) enum Command {
    Subscribe(String),
    Unsubscribe(String),
}

impl Shared {
    /// The channel's state while someone waits on it.
    pub(super) fn wanted(&self, channel: &str) -> Option<Arc<ChannelState>> {
        lock(&self.channels).get(channel).map(|c| c.state.clone())
    }

    /// Every channel someone waits on.
    pub(super) fn all(&self) -> Vec<(String, Arc<ChannelState>)> {
        lock(&self.channels)
            .iter()
            .map(|(k, c)| (k.clone(), c.state.clone()))
            .collect()
    }
}

impl ChannelState {
    /// Wakes the channel's waiters: a message came, or one may have been missed.
    pub(super) fn wake(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// The subscription is gone with its connection (or its node): it is pending until sent
    /// again, and the waiters look again, since messages may have been missed.
    pub(super) fn lost(&self) {
        self.subscribed.send_replace(Sub::Pending);
        self.wake();
    }
}
