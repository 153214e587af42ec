//! [`RedLockGuard`]: a RedLock held on a majority, and what it tells about the hold (its
//! validity, node tokens, lease state, lost signal). Its renewal is in `renewal`, the state it
//! reads in `track`, and giving the node guards back in `release`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::nodes::Inner;
use super::release::{release_nodes, release_slots};
use super::renewal::{Shared, renew_in_background};
use super::track::{Status, Track, TrackView, lost_future};
use crate::error::LockError;
use crate::guard::Guard;
use crate::guard::sealed::Sealed;
use crate::held_lock::{AtRisk, HeldLock, LeaseWatch, Lost};
use crate::lease::LeaseState;
use crate::mutex::LockGuard;
use crate::util::check_lease;

/// Proof that this process holds a [`RedLock`](super::RedLock) on a majority of its nodes.
///
/// * [`is_held`](RedLockGuard::is_held), [`remaining`](RedLockGuard::remaining) and
///   [`lost`](RedLockGuard::lost): whether the lock is still ours by the validity rule, and a
///   future that resolves when it is not.
/// * [`extend`](RedLockGuard::extend): a new lease on a majority.
/// * [`unlock`](RedLockGuard::unlock) releases it on every node and reports whether a
///   majority still had it. Dropping the guard releases it too, in the background (it never
///   blocks and never panics; if the runtime is gone, the leases expire it).
/// * No fencing token: nothing a RedLock can number is sure to increase from one holder to
///   the next. [`node_tokens`](RedLockGuard::node_tokens) are each node's fencing tokens (for
///   a resource that can compare per node), [`max_node_token`](RedLockGuard::max_node_token)
///   their largest; read their caveats before relying on them.
#[must_use = "dropping the guard releases the lock"]
pub struct RedLockGuard {
    shared: Arc<Shared>,
    tokens: Vec<Option<u64>>,
    done: bool,
}

impl RedLockGuard {
    /// A guard for node guards `nodes` (granted by a quorum), valid until `valid_until`;
    /// `watchdog` is the lease to renew, if any.
    pub(super) fn new(
        redlock: Arc<Inner>,
        name: String,
        nodes: Vec<Option<LockGuard>>,
        valid_until: Instant,
        validity: Duration,
        watchdog: Option<Duration>,
    ) -> Self {
        let tokens = nodes
            .iter()
            .map(|g| g.as_ref().map(LockGuard::fencing_token))
            .collect();
        let track = Arc::new(Track::new(
            name,
            valid_until,
            validity,
            nodes.iter().flatten().count(),
        ));
        let shared = Arc::new(Shared {
            redlock,
            track: track.clone(),
            nodes: tokio::sync::Mutex::new(nodes),
        });
        if let Some(lease) = watchdog {
            tokio::spawn(renew_in_background(Arc::downgrade(&shared), track, lease));
        }
        Self {
            shared,
            tokens,
            done: false,
        }
    }

    fn track(&self) -> &Track {
        &self.shared.track
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.track().name
    }

    /// The largest of the fencing tokens the nodes issued for this acquisition. **Not a
    /// fencing token**: it is not guaranteed to increase from one holder to the next, which
    /// is why a RedLock guard has no `fencing_token()` and
    /// [`Guard::fencing_token`] is `None` for it.
    ///
    /// Each node's token for a name strictly increases on that node (see
    /// [`LockGuard::fencing_token`]), but the nodes count independently, so their tokens
    /// differ: a node seeds a name's counter from its own clock (in microseconds) whenever the
    /// key does not exist (first use, a lease that ran out, a free lock whose counter expired
    /// after the client's `fence_ttl`, a restart without persistence), and a node counts only
    /// the acquisitions it granted. Any two majorities share a node, and on that node the
    /// later holder's token is higher; but the *maximum* goes backwards whenever the node that
    /// gave the earlier holder its maximum is not among the nodes the later holder got, and
    /// the later holder's nodes are behind it: for example holder A gets nodes 1, 2, 3 and its
    /// maximum comes from node 1, whose clock runs a second ahead; holder B then gets nodes 3,
    /// 4, 5 (node 1 is slow or down), whose tokens are all lower than node 1's. It also goes
    /// backwards if a node's clock steps back by more than the time the name's key was gone.
    /// So a resource that refuses a value lower than the highest it has seen may refuse a
    /// legitimate later holder, and, if tokens were reset, accept a stale one. Use it for logs
    /// and diagnostics.
    pub fn max_node_token(&self) -> u64 {
        self.tokens.iter().flatten().copied().max().unwrap_or(0)
    }

    /// The fencing token each node issued for this acquisition, by node index (`None` for a
    /// node that did not grant it); nodes taken again later by renewals are not included.
    /// Each strictly increases per name *on its node*. What is guaranteed: have the resource
    /// keep the whole vector; a write is later than the one stored if on some node that both
    /// hold its token is higher, and stale if it is lower on any such node (given that node
    /// kept its counter). No RedLock token gives the linearizable ordering of a consensus
    /// system; for correctness-critical writes, fence with a counter from the resource itself
    /// (a database sequence or a conditional write).
    pub fn node_tokens(&self) -> &[Option<u64>] {
        &self.tokens
    }

    /// How many nodes granted or confirmed the lock at the last acquisition, extension or
    /// renewal.
    pub fn held_nodes(&self) -> usize {
        self.track().state().nodes_held
    }

    /// True while the lock is ours: not released, not lost, and before the end of its
    /// validity (`start + lease − drift` of the last acquisition or renewal a majority
    /// confirmed, measured on a monotonic clock).
    pub fn is_held(&self) -> bool {
        !self.done && self.track().is_held()
    }

    /// The validity time the last acquisition, extension or renewal gave: its lease minus the
    /// time it took minus the clock drift allowance. Zero once the lock is not held.
    pub fn validity(&self) -> Duration {
        if !self.is_held() {
            return Duration::ZERO;
        }
        self.track().state().validity
    }

    /// How much longer the lock is ours unless a renewal extends it; zero once it is not held.
    pub fn remaining(&self) -> Duration {
        if !self.is_held() {
            return Duration::ZERO;
        }
        self.track()
            .state()
            .valid_until
            .saturating_duration_since(Instant::now())
    }

    /// Resolves when the lock is known or presumed lost: a renewal or extension found it gone
    /// on so many nodes that no majority is possible, no majority confirmed it before its
    /// validity ended (this future checks the deadline itself), or it was released.
    pub fn lost(&self) -> Lost {
        Lost::new(lost_future(self.shared.track.clone()))
    }

    /// How the lease stands now: held; at risk once a renewal reached too few nodes while
    /// the validity still runs (until a renewal reaches a majority again, or the validity
    /// ends and the lock is lost); ended once lost or released. Only a guard that renews
    /// itself (no fixed lease) is ever at risk.
    pub fn lease_state(&self) -> LeaseState {
        if self.done {
            return LeaseState::Ended;
        }
        self.track().lease_state()
    }

    /// Resolves when the lease is at risk or the lock is not held any more: see
    /// [`Guard::at_risk`].
    pub fn at_risk(&self) -> AtRisk {
        self.held_lock().at_risk()
    }

    /// A watch of every change of [`lease_state`](Self::lease_state).
    pub fn watch_lease(&self) -> LeaseWatch {
        self.held_lock().watch_lease()
    }

    /// A cloneable view (name, lost signal, lease state; no fencing token) that cannot
    /// release it.
    pub fn held_lock(&self) -> HeldLock {
        HeldLock::other(Arc::new(TrackView {
            track: self.shared.track.clone(),
        }))
    }

    /// Sets the lease to `lease` from now on every node, taking the lock again on nodes where
    /// this guard holds nothing and it is free. Succeeds when a majority confirmed it before
    /// the current validity ended; the validity is then `lease − elapsed − drift` from now.
    /// For a guard that renews itself, renewals go on afterwards with the watchdog lease.
    ///
    /// Fails with [`LockError::Lost`] (the guard is then lost) when the lock is gone on too
    /// many nodes for a majority or the validity passed, and with [`LockError::Unavailable`]
    /// when too few nodes answered in time; the guard then keeps its current validity.
    pub async fn extend(&self, lease: Duration) -> Result<(), LockError> {
        check_lease("lease", lease)?;
        if !self.is_held() {
            return Err(LockError::Lost {
                name: self.name().to_owned(),
            });
        }
        self.shared.renew(lease).await
    }

    /// Releases the lock on every node. Returns whether it was still held until now: the
    /// guard was not lost and a majority of the nodes still had it. `Ok(false)` means it had
    /// been lost, expired or taken over, and whatever it protected may have been touched by
    /// someone else meanwhile.
    ///
    /// When too few nodes answer to tell, the first error is returned; the releases that did
    /// not get through are left to the leases.
    pub async fn unlock(mut self) -> Result<bool, LockError> {
        let started = Instant::now();
        self.done = true;
        let was_held = self.shared.track.finish(Status::Unlocked);
        let guards: Vec<LockGuard> = {
            let mut nodes = self.shared.nodes.lock().await;
            nodes.iter_mut().filter_map(Option::take).collect()
        };
        release_nodes(guards, self.shared.redlock.quorum, was_held, started).await
    }
}

impl Drop for RedLockGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        self.shared.track.finish(Status::Dropped);
        // Dropping the node guards releases each in the background. If an extension or a
        // renewal holds them right now, it releases them when it ends.
        if let Ok(mut nodes) = self.shared.nodes.try_lock() {
            release_slots(&mut nodes);
        }
    }
}

impl Sealed for RedLockGuard {}

/// [`Guard::fencing_token`] is `None`: no RedLock token is sure to increase from one holder to
/// the next (see [`RedLockGuard::max_node_token`] and [`RedLockGuard::node_tokens`]).
impl Guard for RedLockGuard {
    fn name(&self) -> &str {
        RedLockGuard::name(self)
    }

    fn fencing_token(&self) -> Option<u64> {
        None
    }

    fn is_held(&self) -> bool {
        RedLockGuard::is_held(self)
    }

    fn remaining(&self) -> Duration {
        RedLockGuard::remaining(self)
    }

    fn lost(&self) -> Lost {
        RedLockGuard::lost(self)
    }

    fn lease_state(&self) -> LeaseState {
        RedLockGuard::lease_state(self)
    }

    fn at_risk(&self) -> AtRisk {
        RedLockGuard::at_risk(self)
    }

    fn watch_lease(&self) -> LeaseWatch {
        RedLockGuard::watch_lease(self)
    }

    fn held_lock(&self) -> HeldLock {
        RedLockGuard::held_lock(self)
    }

    async fn unlock(self) -> Result<bool, LockError> {
        RedLockGuard::unlock(self).await
    }
}

impl fmt::Debug for RedLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The node guards (and their owner ids) stay out.
        f.debug_struct("RedLockGuard")
            .field("name", &self.name())
            .field("max_node_token", &self.max_node_token())
            .field("held", &self.is_held())
            .field("held_nodes", &self.held_nodes())
            .field("quorum", &self.shared.redlock.quorum)
            .finish()
    }
}
