//! The background job runner: work started where nothing can await it (a guard's `Drop`, an
//! acquisition whose caller went away, a run of batches). Each job is spawned straight onto
//! the client's runtime through its handle: sending never blocks and needs no runtime context,
//! so `Drop` can always do it, and a job costs one task. Once that runtime has shut down, a job is dropped unrun (tokio cancels tasks
//! spawned then); leases then expire the locks.

use tokio::runtime::Handle;

pub(super) struct Sender(Handle);

impl Sender {
    /// Spawns `job` on the client's runtime.
    pub(super) fn send(&self, job: impl Future<Output = ()> + Send + 'static) {
        drop(self.0.spawn(job));
    }
}

/// The runner of the current runtime.
pub(super) fn start() -> Sender {
    Sender(Handle::current())
}
