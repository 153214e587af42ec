//! Keeping a RedLock: what its guard and the guard's renewal task share, one extension or
//! renewal on every node (the lease set again where the lock is held, the lock taken again
//! where it is free, the validity moved only when a majority confirms in time), and the
//! background task that renews a guard without a fixed lease every lease/3, marking it at
//! risk when a round reaches too few nodes and lost when the validity runs out.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use super::nodes::{Inner, redis_source, spawn_node_attempt};
use super::release::release_slots;
use super::track::{Status, Track};
use crate::error::LockError;
use crate::mutex::LockGuard;
use crate::util::Short;

/// What the guard and its renewal task share.
pub(super) struct Shared {
    pub(super) redlock: Arc<Inner>,
    pub(super) track: Arc<Track>,
    /// The node guards, by node index (`None` where the lock is not held). Locked for the
    /// whole of an extension or renewal, which orders them.
    pub(super) nodes: tokio::sync::Mutex<Vec<Option<LockGuard>>>,
}

/// One node's part of an extension.
enum NodeRenewal {
    /// Extended, or taken again where this guard held nothing.
    Confirmed(Option<LockGuard>),
    /// The node says the lock is not ours.
    Gone,
    /// No answer in time, or an error.
    Unknown(Option<LockError>),
}

impl Shared {
    /// Sets the lease to `lease` from now on every node (taking the lock again where this
    /// guard holds nothing), and moves the validity if a majority confirmed it in time.
    pub(super) async fn renew(&self, lease: Duration) -> Result<(), LockError> {
        let lost = || LockError::Lost {
            name: self.track.name.clone(),
        };
        let mut nodes = self.nodes.lock().await;
        if !self.track.check_deadline(Instant::now()) {
            self.settle(&mut nodes);
            return Err(lost());
        }
        let config = &self.redlock.config;
        let start = Instant::now();
        let replies = self.ask_nodes(&nodes, lease).await;
        let now = Instant::now();
        let Tally {
            confirmed,
            gone,
            error,
        } = tally(&mut nodes, replies);
        let quorum = self.redlock.quorum;
        let new_deadline = start + lease - config.drift(lease);
        let lost_because = {
            let mut st = self.track.state();
            if st.status != Status::Held {
                // Released while this ran.
                None
            } else if now >= st.valid_until || (confirmed >= quorum && now >= new_deadline) {
                Some("no majority confirmed it within its validity")
            } else if confirmed >= quorum {
                st.valid_until = new_deadline;
                st.validity = new_deadline - now;
                st.nodes_held = confirmed;
                drop(st);
                self.track.renewal(true);
                return Ok(());
            } else if self.redlock.nodes.len() - gone < quorum {
                Some("a majority of the nodes no longer hold it")
            } else {
                // Nodes that did confirm may now expire sooner than before (a shorter lease):
                // the validity can only shrink.
                st.valid_until = st.valid_until.min(new_deadline);
                return Err(LockError::Unavailable {
                    waited: now - start,
                    source: error.and_then(redis_source),
                });
            }
        };
        if let Some(why) = lost_because {
            self.track.mark_lost(why);
        }
        self.settle(&mut nodes);
        Err(lost())
    }

    /// Asks every node at once, within the node timeout, to set the lease to `lease` (taking
    /// the lock again where this guard holds nothing): one answer per node.
    async fn ask_nodes(&self, nodes: &[Option<LockGuard>], lease: Duration) -> Vec<NodeRenewal> {
        let timeout = self.redlock.config.node_timeout;
        join_all(nodes.iter().enumerate().map(|(i, slot)| {
            let client = &self.redlock.nodes[i];
            let name = &self.track.name;
            async move {
                match slot {
                    Some(guard) => match tokio::time::timeout(timeout, guard.extend(lease)).await {
                        Ok(Ok(())) => NodeRenewal::Confirmed(None),
                        Ok(Err(LockError::Lost { .. })) => NodeRenewal::Gone,
                        Ok(Err(e)) => NodeRenewal::Unknown(Some(e)),
                        Err(_) => NodeRenewal::Unknown(None),
                    },
                    None => match spawn_node_attempt(client, name, lease, timeout).await {
                        Ok(Ok(Ok(Some(guard)))) => NodeRenewal::Confirmed(Some(guard)),
                        Ok(Ok(Ok(None))) => NodeRenewal::Gone,
                        Ok(Ok(Err(e))) => NodeRenewal::Unknown(Some(e)),
                        Ok(Err(_)) | Err(_) => NodeRenewal::Unknown(None),
                    },
                }
            }
        }))
        .await
    }

    /// Releases the node guards of a lost or dropped lock (an unlock collects them itself).
    fn settle(&self, nodes: &mut [Option<LockGuard>]) {
        if matches!(self.track.state().status, Status::Lost | Status::Dropped) {
            release_slots(nodes);
        }
    }
}

/// What the nodes' answers to an extension came to.
struct Tally {
    /// Nodes that extended it or took it again.
    confirmed: usize,
    /// Nodes that said it is not ours.
    gone: usize,
    /// The first error of a node that did not answer in time or failed.
    error: Option<LockError>,
}

/// Counts the nodes' answers, keeping the guards of nodes that took the lock again and
/// dropping those of nodes that no longer hold it.
fn tally(nodes: &mut [Option<LockGuard>], replies: Vec<NodeRenewal>) -> Tally {
    let mut tally = Tally {
        confirmed: 0,
        gone: 0,
        error: None,
    };
    for (slot, reply) in nodes.iter_mut().zip(replies) {
        match reply {
            NodeRenewal::Confirmed(taken) => {
                tally.confirmed += 1;
                if taken.is_some() {
                    *slot = taken;
                }
            }
            NodeRenewal::Gone => {
                tally.gone += 1;
                // Dropping it releases it in the background, in case it is ours after all
                // (an extension that timed out may have landed).
                *slot = None;
            }
            NodeRenewal::Unknown(e) => {
                if tally.error.is_none() {
                    tally.error = e;
                }
            }
        }
    }
    tally
}

/// The renewal task of a guard without a fixed lease: extends on all nodes every lease/3;
/// after a failed round (too few answers) it tries again after a retry delay, until the
/// validity runs out.
pub(super) async fn renew_in_background(weak: Weak<Shared>, track: Arc<Track>, lease: Duration) {
    let period = lease / 3;
    let mut next = Instant::now() + period;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            () = track.ended() => break,
        }
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let started = Instant::now();
        match shared.renew(lease).await {
            Ok(()) => next = started + period,
            Err(LockError::Lost { .. }) => break,
            Err(e) => {
                tracing::debug!(lock = %Short(&track.name), error = %e, "RedLock renewal failed");
                track.renewal(false);
                let valid_until = track.state().valid_until;
                next = (Instant::now() + shared.redlock.config.retry_delay())
                    .min(started + period)
                    .min(valid_until);
            }
        }
    }
    if let Some(shared) = weak.upgrade()
        && let Ok(mut nodes) = shared.nodes.try_lock()
    {
        shared.settle(&mut nodes);
    }
}
