//! The nodes of a RedLock and its options, as the handle and its guards share them, and one
//! attempt on one node.

use std::time::Duration;

use rand::Rng;

use crate::client::LockClient;
use crate::error::LockError;
use crate::mutex::LockGuard;

/// The part of the drift allowance that does not depend on the lease: 2 ms, for the
/// granularity of Redis expiry.
pub(super) const DRIFT_MARGIN: Duration = Duration::from_millis(2);

#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) node_timeout: Duration,
    pub(super) retry_min: Duration,
    pub(super) retry_max: Duration,
    pub(super) drift_factor: f64,
    pub(super) watchdog_lease: Duration,
}

impl Config {
    /// The clock drift set aside from a lease.
    pub(super) fn drift(&self, lease: Duration) -> Duration {
        lease.mul_f64(self.drift_factor) + DRIFT_MARGIN
    }

    /// A random delay before the next attempt.
    pub(super) fn retry_delay(&self) -> Duration {
        let (lo, hi) = (nanos(self.retry_min), nanos(self.retry_max));
        Duration::from_nanos(rand::rng().random_range(lo..=hi))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub(super) struct Inner {
    pub(super) nodes: Vec<LockClient>,
    pub(super) quorum: usize,
    pub(super) config: Config,
}

/// The Redis error inside a node's error (with the node's address when it said it), if
/// there is one.
pub(super) fn redis_source(e: LockError) -> Option<crate::error::ConnectError> {
    match e {
        LockError::Redis(e) => Some(e.into()),
        LockError::Unavailable { source, .. } => source,
        _ => None,
    }
}

/// Takes `name` on one node with a fixed `lease`, in a task of its own: outside any
/// [`reentrant`](crate::reentrant) scope of the caller (each RedLock acquisition is a holder
/// of its own), and still finished if the caller goes away, in which case the guard nobody
/// collects is dropped and so released. A node slower than `timeout` counts as failed; its
/// request is dropped, which makes lock-core undo the acquisition when the answer comes.
pub(super) type NodeAttempt = tokio::task::JoinHandle<
    Result<Result<Option<LockGuard>, LockError>, tokio::time::error::Elapsed>,
>;

pub(super) fn spawn_node_attempt(
    client: &LockClient,
    name: &str,
    lease: Duration,
    timeout: Duration,
) -> NodeAttempt {
    let request = client.try_lock(name).lease(lease);
    tokio::spawn(async move { tokio::time::timeout(timeout, request).await })
}
