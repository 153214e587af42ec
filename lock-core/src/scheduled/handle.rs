//! [`JobHandle`]: a started job on this instance; stopping it lets a running body finish
//! (bounded) and gives the job's lock back.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::event::JobEvent;
use crate::util::lock;

/// A job started on this instance by [`JobBuilder::start`](super::JobBuilder::start).
///
/// Dropping it asks the runner to stop, as [`stop`](Self::stop) does, without waiting: a
/// running body is told ([`RunContext::cancelled`](super::RunContext::cancelled)) and
/// finishes, its record is written and the lock given back. The client's
/// [`shutdown`](crate::LockClient::shutdown) stops the runner at once (a running body is
/// dropped at its `.await`, its hold given back by the shutdown): stop the job first to let
/// its body finish.
#[derive(Debug)]
pub struct JobHandle {
    pub(crate) name: String,
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) task: Option<JoinHandle<()>>,
    pub(crate) events: broadcast::Sender<JobEvent>,
    /// The receiver made before the runner started, for the first call to `events`.
    pub(crate) first: Mutex<Option<broadcast::Receiver<JobEvent>>>,
    pub(crate) grace: Duration,
}

impl JobHandle {
    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the runner does from now on; the first call also gets every event since the
    /// start. Up to 1 024 events are kept for a receiver that does not keep up (then it gets
    /// [`RecvError::Lagged`](tokio::sync::broadcast::error::RecvError::Lagged)).
    pub fn events(&self) -> broadcast::Receiver<JobEvent> {
        lock(&self.first)
            .take()
            .unwrap_or_else(|| self.events.subscribe())
    }

    /// Whether the runner has ended.
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops the runner: no new period starts; a running body is told
    /// ([`RunContext::cancelled`](super::RunContext::cancelled)) and may finish within the
    /// job's [stop grace](super::JobBuilder::stop_grace) (default 30 s), then its record is
    /// written and the lock given back. A body still running after the grace is dropped at
    /// its `.await` (its run is not done; the lock is given back in the background). True if
    /// the runner ended within the grace.
    pub async fn stop(mut self) -> bool {
        let _ = self.stop.send(true);
        let Some(mut task) = self.task.take() else {
            return true;
        };
        match tokio::time::timeout(self.grace, &mut task).await {
            Ok(_) => true,
            Err(_) => {
                tracing::warn!(job = %self.name, grace = ?self.grace,
                    "job's body did not finish within its stop grace; dropping it");
                task.abort();
                let _ = task.await;
                false
            }
        }
    }
}

impl Drop for JobHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
