//! [`Subscription`]: one waiter's interest in a channel.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, watch};

use super::registry::{ChannelState, Command, Shared, Sub};
use crate::util::lock;

/// One waiter's interest in a channel; dropping it gives the interest back.
pub(crate) struct Subscription {
    pub(super) shared: Arc<Shared>,
    pub(super) channel: String,
    pub(super) state: Arc<ChannelState>,
    pub(super) version: watch::Receiver<u64>,
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
