//! [`RunContext`]: what a job's body gets for one run: its period, its fencing token, a
//! cancellation signal.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::held_lock::HeldLock;
use crate::period::rfc3339;

/// One run of a job, as its body sees it. Cheap to clone.
#[derive(Clone)]
pub struct RunContext {
    pub(crate) job: Arc<str>,
    pub(crate) period: u64,
    pub(crate) token: u64,
    pub(crate) attempt: u32,
    pub(crate) held: HeldLock,
    pub(crate) stop: watch::Receiver<bool>,
}

impl RunContext {
    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The start of the period this run is for, on the server's clock.
    pub fn period(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.period)
    }

    /// The period's start in whole seconds since the Unix epoch: a key for what the run
    /// writes.
    pub fn period_secs(&self) -> u64 {
        self.period
    }

    /// The period's start in RFC 3339, UTC (`2026-11-24T12:00:00Z`).
    pub fn period_name(&self) -> String {
        rfc3339(self.period)
    }

    /// The fencing token of the job's lock for this run: give it to every write the run makes
    /// ([`fenced`](crate::fenced)), so a run that lost the lock (a frozen process) cannot
    /// overwrite a newer run's work.
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// Which attempt this is (1 = the first; see [`JobBuilder::retries`](super::JobBuilder::retries)).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Whether the run should stop: its handle was asked to stop, or the job's lock is no
    /// longer held.
    pub fn is_cancelled(&self) -> bool {
        *self.stop.borrow() || !self.held.is_held()
    }

    /// Resolves when the run should stop (see [`is_cancelled`](Self::is_cancelled)). A body
    /// that does not look needs not: a lost lock drops it at its next `.await`, and a stop
    /// waits for it up to the [stop grace](super::JobBuilder::stop_grace).
    pub async fn cancelled(&self) {
        let mut stop = self.stop.clone();
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => {}
            _ = self.held.lost() => {}
        }
    }
}

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("job", &self.job)
            .field("period", &self.period_name())
            .field("token", &self.token)
            .field("attempt", &self.attempt)
            .finish()
    }
}
