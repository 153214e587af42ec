//! [`Deadline`]: how long one call may take, whatever happens inside it.
//!
//! A call's bound is its response timeout, counted from when its caller asked (a request
//! queued behind a batch in flight has been waiting since then), plus the time it spent
//! getting a connection, which is at most the connect timeout over the whole call. A warm
//! pool hands a connection over at once, so a call on a frozen server gives up at its
//! response timeout; one that must open a connection, or wait for the pool to be healed
//! after a broken one, may take up to the connect timeout more. Heals, reconnections and
//! resends inside the call all come out of the same bound.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{ConnectError, LockError};

/// One call's bound (see the module docs).
#[derive(Debug)]
pub(crate) struct Deadline {
    /// When the caller asked.
    asked: Instant,
    /// The response timeout.
    response: Duration,
    /// The connect timeout: the most a call spends getting connections.
    connect: Duration,
    /// Time spent getting connections so far, in microseconds.
    connecting: AtomicU64,
}

impl Deadline {
    /// A call asked at `asked`, with these timeouts.
    pub(crate) fn new(asked: Instant, response: Duration, connect: Duration) -> Self {
        Self {
            asked,
            response,
            connect,
            connecting: AtomicU64::new(0),
        }
    }

    /// Time spent getting connections, at most the connect timeout.
    fn connecting(&self) -> Duration {
        Duration::from_micros(self.connecting.load(Ordering::Relaxed)).min(self.connect)
    }

    /// When the call must have its answer: asked + response timeout + the time spent getting
    /// connections.
    pub(crate) fn at(&self) -> Instant {
        self.asked + self.response + self.connecting()
    }

    /// How long the call has waited since its caller asked.
    pub(crate) fn waited(&self) -> Duration {
        self.asked.elapsed()
    }

    /// Whether no time is left for a reply.
    pub(crate) fn passed(&self) -> bool {
        Instant::now() >= self.at()
    }

    /// Runs `connect` (getting a connection: from the pool, a new one, or the pool's heal),
    /// bounded by what is left of the connect timeout; the time it takes extends the
    /// deadline. `None` when that time ran out.
    pub(crate) async fn connecting_with<T>(&self, connect: impl Future<Output = T>) -> Option<T> {
        let left = self.connect.saturating_sub(self.connecting());
        let started = Instant::now();
        let result = tokio::time::timeout(left, connect).await.ok();
        let spent = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.connecting.fetch_add(spent, Ordering::Relaxed);
        result
    }

    /// Runs `reply` (a request on a connection in hand) until the deadline. `None` when it
    /// passed first.
    pub(crate) async fn reply<T>(&self, reply: impl Future<Output = T>) -> Option<T> {
        tokio::time::timeout_at(self.at(), reply).await.ok()
    }

    /// The error of a call whose deadline passed: how long it really waited.
    pub(crate) fn timed_out(&self) -> LockError {
        LockError::ResponseTimeout(self.waited())
    }

    /// The error of a call whose deadline passed before it was sent (it queued behind
    /// requests to `address` that got no answer): nothing was applied.
    pub(crate) fn unsent(&self, address: String) -> LockError {
        let cause = std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no answer within the response timeout to the requests sent before it",
        );
        LockError::Unavailable {
            waited: self.waited(),
            source: Some(ConnectError::new(address, cause.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn the_bound_is_the_response_timeout_plus_the_time_spent_connecting() {
        let asked = Instant::now();
        let deadline = Deadline::new(asked, SECOND, 2 * SECOND);
        assert_eq!(
            deadline.at(),
            asked + SECOND,
            "a warm pool: the response timeout"
        );

        // A connection that took 300 ms moves the deadline by 300 ms.
        let got = deadline
            .connecting_with(tokio::time::sleep(Duration::from_millis(300)))
            .await;
        assert!(got.is_some());
        assert_eq!(deadline.at(), asked + Duration::from_millis(1_300));

        // Connecting is bounded by what is left of the connect timeout (1.7 s), and never
        // moves the deadline past response + connect.
        let got = deadline
            .connecting_with(tokio::time::sleep(10 * SECOND))
            .await;
        assert!(got.is_none(), "cut at the connect timeout");
        assert_eq!(deadline.at(), asked + 3 * SECOND);
        assert_eq!(deadline.waited(), 2 * SECOND, "300 ms + the 1.7 s left");

        // Nothing is left for connecting; the reply gets what remains of the bound.
        assert_eq!(deadline.connecting(), 2 * SECOND);
        let reply = deadline.reply(tokio::time::sleep(10 * SECOND)).await;
        assert!(reply.is_none());
        assert_eq!(deadline.waited(), 3 * SECOND);
        assert!(deadline.passed());
        assert!(matches!(
            deadline.timed_out(),
            LockError::ResponseTimeout(waited) if waited == 3 * SECOND
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_queued_has_only_what_is_left() {
        let asked = Instant::now();
        tokio::time::sleep(Duration::from_millis(900)).await; // queued behind a batch
        let deadline = Deadline::new(asked, SECOND, 2 * SECOND);
        let reply = deadline.reply(tokio::time::sleep(SECOND)).await;
        assert!(reply.is_none());
        assert_eq!(deadline.waited(), SECOND, "asked + 1 s, not sent + 1 s");
    }
}
