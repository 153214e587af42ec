//! [`Task`]: what every pub/sub task has (the registry it serves, the commands in order,
//! its connection attempts' timing), and what it does after an event ([`Next`]).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use super::registry::{ChannelState, Command, Shared, Sub};
use crate::backend::refusal;
use crate::error::is_connection_error;

/// The first wait before another connection attempt; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// What either pub/sub task has: the registry it serves (weakly, so the task ends with the
/// client), the commands in the order they were sent, and its connection attempts' timing.
pub(super) struct Task {
    shared: Weak<Shared>,
    pub(super) commands: mpsc::UnboundedReceiver<Command>,
    pub(super) connect_timeout: Duration,
    /// The wait before the next connection attempt.
    backoff: Duration,
    /// Whether a refused subscription was reported (once per client).
    warned: bool,
}

/// What a task does after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Go on with this connection.
    Go,
    /// The connection is lost, or must move: connect again.
    Reconnect,
    /// The client is gone: the task ends.
    Stop,
}

impl Task {
    pub(super) fn new(
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
    pub(super) fn shared(&self) -> Option<Arc<Shared>> {
        self.shared.upgrade()
    }

    /// `request` (a command on the connection), bounded by the connect timeout.
    pub(super) fn bounded<F: Future>(&self, request: F) -> tokio::time::Timeout<F> {
        tokio::time::timeout(self.connect_timeout, request)
    }

    /// Records what Redis said to a (re)subscription to `channel`. Returns false when the
    /// connection failed; a refusal (an ACL without `SUBSCRIBE` or the channel) leaves the
    /// connection up and the channel's waiters looking again on their own, and is reported
    /// once.
    pub(super) fn record<E>(
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
    pub(super) async fn back_off(&mut self) -> bool {
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
    pub(super) fn connected(&mut self) {
        self.backoff = FIRST_BACKOFF;
    }
}
