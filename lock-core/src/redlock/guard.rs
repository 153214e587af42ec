//! [`RedLockGuard`]: a RedLock held on a majority, its validity, renewal and release.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::watch;
use tokio::time::Instant;

use super::nodes::{Inner, redis_source, spawn_node_attempt};
use crate::error::LockError;
use crate::guard::Guard;
use crate::guard::sealed::Sealed;
use crate::held_lock::{AtRisk, HeldLock, LeaseWatch, Lost, View};
use crate::lease::LeaseState;
use crate::mutex::LockGuard;
use crate::util::{check_lease, shorten};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Held,
    /// No majority could be confirmed within the validity, or the validity passed.
    Lost,
    /// [`RedLockGuard::unlock`] is releasing it; it collects the node guards itself.
    Unlocked,
    /// The guard was dropped; whoever holds the node guards next releases them.
    Dropped,
}

struct TrackState {
    status: Status,
    /// The lock is ours until this instant unless a renewal moves it.
    valid_until: Instant,
    /// The validity time of the last acquisition or renewal.
    validity: Duration,
    /// Nodes that granted or confirmed it last time.
    nodes_held: usize,
    /// The last renewal reached too few nodes while the validity still ran.
    at_risk: bool,
}

/// Whether the lock is held, and until when: what `lost()` futures and lease watches need.
struct Track {
    name: String,
    state: Mutex<TrackState>,
    /// Bumped by every change of the lease's state (at risk, renewed again, lost, released).
    changes: watch::Sender<u64>,
}

impl Track {
    fn state(&self) -> MutexGuard<'_, TrackState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn is_held(&self) -> bool {
        let st = self.state();
        st.status == Status::Held && Instant::now() < st.valid_until
    }

    fn lease_state(&self) -> LeaseState {
        let st = self.state();
        if st.status != Status::Held || Instant::now() >= st.valid_until {
            LeaseState::Ended
        } else if st.at_risk {
            LeaseState::AtRisk
        } else {
            LeaseState::Held
        }
    }

    /// When the validity ends unless a renewal moves it; None once it is not held.
    fn deadline(&self) -> Option<Instant> {
        let st = self.state();
        (st.status == Status::Held).then_some(st.valid_until)
    }

    /// A renewal or extension reached a majority (`true`), or a renewal of the background
    /// task reached too few nodes while the validity still runs (`false`): the lease is
    /// safe, or at risk until a renewal reaches a majority again.
    fn renewal(&self, confirmed: bool) {
        let mut st = self.state();
        if st.status != Status::Held || st.at_risk != confirmed {
            return;
        }
        st.at_risk = !confirmed;
        let remaining = st.valid_until.saturating_duration_since(Instant::now());
        drop(st);
        if confirmed {
            tracing::info!(lock = %shorten(&self.name), ?remaining,
                "RedLock renewed on a majority again; no longer at risk");
        } else {
            tracing::warn!(lock = %shorten(&self.name), ?remaining,
                "RedLock renewal reached too few nodes; at risk until one reaches a majority");
        }
        self.changed();
    }

    /// Resolves once the lock is not held (lost, released, dropped).
    async fn ended(&self) {
        let mut changes = self.changes.subscribe();
        while self.state().status == Status::Held {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    fn mark_lost(&self, why: &'static str) {
        let mut st = self.state();
        if st.status == Status::Held {
            st.status = Status::Lost;
            st.at_risk = false;
            drop(st);
            tracing::warn!(lock = %shorten(&self.name), reason = why, "RedLock lost");
        }
        self.changed();
    }

    /// Marks the lock lost if its validity has passed; returns whether it is held.
    fn check_deadline(&self, now: Instant) -> bool {
        let (status, due) = {
            let st = self.state();
            (st.status, now >= st.valid_until)
        };
        if status == Status::Held && due {
            self.mark_lost("no majority confirmed it within its validity");
            return false;
        }
        status == Status::Held
    }

    /// Ends the hold as `status` (unless it has ended already); returns whether it was still
    /// held until now.
    fn finish(&self, status: Status) -> bool {
        let mut st = self.state();
        let held = st.status == Status::Held && Instant::now() < st.valid_until;
        if matches!(st.status, Status::Held | Status::Lost) {
            st.status = status;
            st.at_risk = false;
        }
        drop(st);
        self.changed();
        held
    }
}

fn lost_future(track: Arc<Track>) -> impl Future<Output = ()> + Send + 'static {
    let mut changes = track.changes.subscribe();
    async move {
        loop {
            changes.borrow_and_update();
            let Some(deadline) = track.deadline() else {
                return;
            };
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep_until(deadline) => {
                    track.check_deadline(Instant::now());
                }
            }
        }
    }
}

/// What the guard and its renewal task share.
struct Shared {
    redlock: Arc<Inner>,
    track: Arc<Track>,
    /// The node guards, by node index (`None` where the lock is not held). Locked for the
    /// whole of an extension or renewal, which orders them.
    nodes: tokio::sync::Mutex<Vec<Option<LockGuard>>>,
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
    async fn renew(&self, lease: Duration) -> Result<(), LockError> {
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

/// Drops every node guard, which releases each in the background; the slots stay, one per
/// node.
fn release_slots(nodes: &mut [Option<LockGuard>]) {
    for slot in nodes {
        *slot = None;
    }
}

/// The renewal task of a guard without a fixed lease: extends on all nodes every lease/3;
/// after a failed round (too few answers) it tries again after a retry delay, until the
/// validity runs out.
async fn renew_in_background(weak: Weak<Shared>, track: Arc<Track>, lease: Duration) {
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
                tracing::debug!(lock = %shorten(&track.name), error = %e, "RedLock renewal failed");
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
        let track = Arc::new(Track {
            name,
            state: Mutex::new(TrackState {
                status: Status::Held,
                valid_until,
                validity,
                nodes_held: nodes.iter().flatten().count(),
                at_risk: false,
            }),
            changes: watch::Sender::new(0),
        });
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
        let quorum = self.shared.redlock.quorum;
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

/// A [`HeldLock`]'s view of a RedLock.
struct TrackView {
    track: Arc<Track>,
}

impl View for TrackView {
    fn name(&self) -> &str {
        &self.track.name
    }

    fn is_held(&self) -> bool {
        self.track.is_held()
    }

    fn lost(&self) -> Lost {
        Lost::new(lost_future(self.track.clone()))
    }

    fn lease_state(&self) -> LeaseState {
        self.track.lease_state()
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.track.changes.subscribe()
    }

    fn deadline(&self) -> Option<Instant> {
        self.track.deadline()
    }

    fn expire_due(&self) {
        self.track.check_deadline(Instant::now());
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
