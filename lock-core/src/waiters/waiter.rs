//! [`Waiter`]: one waiting request of any primitive, as the acquisition driver sees it: its
//! deadline, its subscription, and how long it sleeps between attempts.

use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;

use super::hub::Waiters;
use super::subscription::Subscription;
use crate::error::LockError;

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
