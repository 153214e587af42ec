//! Whether a RedLock is held, and until when, as its guard, the guard's renewal task and its
//! [`HeldLock`](crate::HeldLock) views all see it: the hold's status (held, lost, unlocked,
//! dropped), its validity deadline, whether the last renewal left it at risk, the `lost()`
//! future that checks the deadline itself, and the view a [`HeldLock`](crate::HeldLock) reads.
//! No Redis I/O: the renewal and the guard above it report to it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::held_lock::{Lost, View};
use crate::lease::LeaseState;
use crate::util::Short;

/// Where the hold stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    Held,
    /// No majority could be confirmed within the validity, or the validity passed.
    Lost,
    /// [`RedLockGuard::unlock`](super::RedLockGuard::unlock) is releasing it; it collects the
    /// node guards itself.
    Unlocked,
    /// The guard was dropped; whoever holds the node guards next releases them.
    Dropped,
}

/// The hold's state, behind the [`Track`]'s mutex.
pub(super) struct TrackState {
    pub(super) status: Status,
    /// The lock is ours until this instant unless a renewal moves it.
    pub(super) valid_until: Instant,
    /// The validity time of the last acquisition or renewal.
    pub(super) validity: Duration,
    /// Nodes that granted or confirmed it last time.
    pub(super) nodes_held: usize,
    /// The last renewal reached too few nodes while the validity still ran.
    pub(super) at_risk: bool,
}

/// Whether the lock is held, and until when: what `lost()` futures and lease watches need.
pub(super) struct Track {
    pub(super) name: String,
    state: Mutex<TrackState>,
    /// Bumped by every change of the lease's state (at risk, renewed again, lost, released).
    changes: watch::Sender<u64>,
}

impl Track {
    /// The track of a lock `name` just taken on `nodes_held` nodes, valid until `valid_until`
    /// (`validity` from now).
    pub(super) fn new(
        name: String,
        valid_until: Instant,
        validity: Duration,
        nodes_held: usize,
    ) -> Self {
        Self {
            name,
            state: Mutex::new(TrackState {
                status: Status::Held,
                valid_until,
                validity,
                nodes_held,
                at_risk: false,
            }),
            changes: watch::Sender::new(0),
        }
    }

    pub(super) fn state(&self) -> MutexGuard<'_, TrackState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub(super) fn is_held(&self) -> bool {
        let st = self.state();
        st.status == Status::Held && Instant::now() < st.valid_until
    }

    pub(super) fn lease_state(&self) -> LeaseState {
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
    pub(super) fn deadline(&self) -> Option<Instant> {
        let st = self.state();
        (st.status == Status::Held).then_some(st.valid_until)
    }

    /// A renewal or extension reached a majority (`true`), or a renewal of the background
    /// task reached too few nodes while the validity still runs (`false`): the lease is
    /// safe, or at risk until a renewal reaches a majority again.
    pub(super) fn renewal(&self, confirmed: bool) {
        let mut st = self.state();
        if st.status != Status::Held || st.at_risk != confirmed {
            return;
        }
        st.at_risk = !confirmed;
        let remaining = st.valid_until.saturating_duration_since(Instant::now());
        drop(st);
        if confirmed {
            tracing::info!(lock = %Short(&self.name), ?remaining,
                "RedLock renewed on a majority again; no longer at risk");
        } else {
            tracing::warn!(lock = %Short(&self.name), ?remaining,
                "RedLock renewal reached too few nodes; at risk until one reaches a majority");
        }
        self.changed();
    }

    /// Resolves once the lock is not held (lost, released, dropped).
    pub(super) async fn ended(&self) {
        let mut changes = self.changes.subscribe();
        while self.state().status == Status::Held {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    pub(super) fn mark_lost(&self, why: &'static str) {
        let mut st = self.state();
        if st.status == Status::Held {
            st.status = Status::Lost;
            st.at_risk = false;
            drop(st);
            tracing::warn!(lock = %Short(&self.name), reason = why, "RedLock lost");
        }
        self.changed();
    }

    /// Marks the lock lost if its validity has passed; returns whether it is held.
    pub(super) fn check_deadline(&self, now: Instant) -> bool {
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
    pub(super) fn finish(&self, status: Status) -> bool {
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

/// A future that resolves once the lock is not held, checking the validity deadline itself.
pub(super) fn lost_future(track: Arc<Track>) -> impl Future<Output = ()> + Send + 'static {
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

/// A [`HeldLock`](crate::HeldLock)'s view of a RedLock.
pub(super) struct TrackView {
    pub(super) track: Arc<Track>,
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
