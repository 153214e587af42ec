//! [`Waiters`]: one client's waiters: the pub/sub task started for its deployment, and a
//! subscription per waiting request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::AbortHandle;

#[cfg(feature = "testing")]
use super::memory;
use super::registry::{Channel, ChannelState, Command, Shared, Sub};
use super::subscription::Subscription;
use super::task::Task;
use super::{pubsub, sharded};
use crate::backend::PubSubSource;
use crate::util::lock;

/// The waiters of one client.
pub(crate) struct Waiters {
    shared: Arc<Shared>,
    /// The pub/sub task.
    task: AbortHandle,
}

impl Waiters {
    /// Starts the pub/sub task. It ends when the `Waiters` is dropped, or is stopped.
    pub(crate) fn start(source: PubSubSource, connect_timeout: Duration) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
            commands: tx,
        });
        let task = Task::new(Arc::downgrade(&shared), rx, connect_timeout);
        let task = match source {
            PubSubSource::Node(node) => tokio::spawn(pubsub::Worker::new(task, node).run()),
            PubSubSource::Cluster(seeds) => tokio::spawn(sharded::run(task, seeds.builder())),
            #[cfg(feature = "testing")]
            PubSubSource::Memory(link) => tokio::spawn(memory::run(task, link)),
        };
        Self {
            shared,
            task: task.abort_handle(),
        }
    }

    /// Stops the pub/sub task (the client's shutdown): waiters then poll.
    pub(crate) fn stop(&self) {
        self.task.abort();
    }

    /// Whether any channel has a subscription or a local queue here: when none has, no local
    /// waiter contends for any name (checked before a channel's name is built).
    pub(crate) fn any_channel(&self) -> bool {
        !lock(&self.shared.channels).is_empty()
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
