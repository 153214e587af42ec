//! [`Engine::shut_down`], which gives back every hold of the client, stops its background
//! tasks (the watchdog, the pub/sub task) and refuses every later call with
//! [`LockError::ShutDown`]; and the checks of the client's life (`open`, `not_closed`) that
//! calls make.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::task::AbortHandle;

use super::Engine;
use super::life::{CLOSED, CLOSING, OPEN};
use crate::error::LockError;
use crate::hold::{Hold, Status};
use crate::util::lock;

/// Holds given back at once during a shutdown.
const CONCURRENT_RELEASES: usize = 32;

impl Engine {
    /// [`LockError::ShutDown`] once a shutdown has begun: what an acquisition checks when it
    /// has its hold's turn.
    pub(crate) fn open(&self) -> Result<(), LockError> {
        match self.life.state.load(Ordering::Acquire) {
            OPEN => Ok(()),
            _ => Err(LockError::ShutDown),
        }
    }

    /// [`LockError::ShutDown`] once a shutdown is done: what every call to the server checks
    /// (the shutdown's own releases go out while it runs).
    pub(crate) fn not_closed(&self) -> Result<(), LockError> {
        match self.life.state.load(Ordering::Acquire) {
            CLOSED => Err(LockError::ShutDown),
            _ => Ok(()),
        }
    }

    /// A background task of the client, stopped by the shutdown.
    pub(crate) fn add_task(&self, task: AbortHandle) {
        lock(&self.life.tasks).push(task);
    }

    /// The bound of a shutdown: the client's connect timeout plus its response timeout.
    pub(crate) fn shutdown_bound(&self) -> Duration {
        self.connect_timeout()
            .saturating_add(self.config().response_timeout)
    }

    /// Shuts the client down (see `LockClient::shutdown`): returns how many holds were given
    /// back. Only the first call does anything.
    pub(crate) async fn shut_down(self: &Arc<Self>) -> usize {
        if self
            .life
            .state
            .compare_exchange(OPEN, CLOSING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return 0;
        }
        for task in lock(&self.life.tasks).drain(..) {
            task.abort();
        }
        self.waiters().stop();
        let holds = self.every_hold();
        let engine = self;
        let releases = futures_util::stream::iter(holds)
            .map(|hold| async move { engine.give_back_all(hold).await })
            .buffer_unordered(CONCURRENT_RELEASES)
            .fold(0, |n, given| async move { n + usize::from(given) });
        let released = match tokio::time::timeout(self.shutdown_bound(), releases).await {
            Ok(released) => released,
            Err(_) => {
                tracing::warn!(bound = ?self.shutdown_bound(),
                    "shutdown: some locks were not given back in time; their leases will expire them");
                0
            }
        };
        self.life.state.store(CLOSED, Ordering::Release);
        tracing::debug!(released, "lock client shut down");
        released
    }

    /// Gives back every count of `hold` this client has: whether it had any and all went.
    async fn give_back_all(self: &Arc<Self>, hold: Arc<Hold>) -> bool {
        // An acquisition that had the turn before the shutdown began is answered first.
        drop(hold.command_turn().await);
        let mut given = false;
        loop {
            let now = hold.snapshot();
            let holding = matches!(now.status, Status::Held | Status::Releasing);
            if now.count == 0 || !holding {
                return given;
            }
            match self.release(&hold, now.generation, None).await {
                Ok(_) => given = true,
                Err(e) => {
                    tracing::warn!(lock = %hold.name(), error = %e,
                        "shutdown: could not give the lock back; its lease will expire it");
                    return false;
                }
            }
        }
    }
}
