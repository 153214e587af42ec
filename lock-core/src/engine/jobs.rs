//! The background job runner: work started where nothing can await it (a guard's `Drop`, an
//! acquisition whose caller went away). Sending never blocks and needs no runtime, so `Drop`
//! can always do it; the runner spawns each job on the client's runtime and ends when every
//! sender (the engine, and so the client and its guards) is gone.

use std::pin::Pin;

use tokio::sync::mpsc;

type Job = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

pub(super) struct Sender(mpsc::UnboundedSender<Job>);

impl Sender {
    /// Queues `job`. If the runtime is gone the job is dropped: leases then expire the locks.
    pub(super) fn send(&self, job: Job) {
        let _ = self.0.send(job);
    }
}

/// Starts the runner on the current runtime.
pub(super) fn start() -> Sender {
    let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
    tokio::spawn(async move {
        while let Some(job) = rx.recv().await {
            tokio::spawn(job);
        }
    });
    Sender(tx)
}
