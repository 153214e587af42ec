//! Giving a RedLock's node guards back: those of an attempt that did not get the lock (waiting
//! at most a bound), all of a guard's at once when it is dropped or the lock is lost (each
//! node guard then releases itself in the background), and those of
//! [`RedLockGuard::unlock`](super::RedLockGuard::unlock), where the nodes' answers say whether
//! a majority still had it.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::error::LockError;
use crate::mutex::LockGuard;

/// Releases `guards` on their nodes, waiting at most `bound` (the releases go on in the
/// background after that).
pub(super) async fn release_all(guards: Vec<LockGuard>, bound: Duration) {
    if guards.is_empty() {
        return;
    }
    let releases: Vec<_> = guards
        .into_iter()
        .map(|g| tokio::spawn(g.unlock()))
        .collect();
    let _ = tokio::time::timeout(bound, join_all(releases)).await;
}

/// Drops every node guard, which releases each in the background; the slots stay, one per
/// node.
pub(super) fn release_slots(nodes: &mut [Option<LockGuard>]) {
    for slot in nodes {
        *slot = None;
    }
}

/// Releases `guards` on their nodes at once and says whether the lock was still held until
/// now: `was_held` (the guard was not lost and its validity ran) and a majority (`quorum`)
/// of the nodes still had it. When too few nodes answer to tell, the first error is
/// returned (or [`LockError::Unavailable`], waited since `started`).
pub(super) async fn release_nodes(
    guards: Vec<LockGuard>,
    quorum: usize,
    was_held: bool,
    started: Instant,
) -> Result<bool, LockError> {
    let releases: Vec<_> = guards
        .into_iter()
        .map(|g| tokio::spawn(g.unlock()))
        .collect();
    let (mut held, mut unknown, mut error) = (0, 0, None);
    for result in join_all(releases).await {
        match result {
            Ok(Ok(true)) => held += 1,
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                unknown += 1;
                error.get_or_insert(e);
            }
            Err(_) => unknown += 1,
        }
    }
    if !was_held {
        Ok(false)
    } else if held >= quorum {
        Ok(true)
    } else if held + unknown >= quorum {
        Err(error.unwrap_or(LockError::Unavailable {
            waited: started.elapsed(),
            source: None,
        }))
    } else {
        Ok(false)
    }
}
