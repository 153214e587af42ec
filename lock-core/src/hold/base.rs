//! [`Hold`] itself: what it holds, its state behind a lock, the signal of its changes, its
//! live guards, and the gauges it leaves when it goes away.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use tokio::sync::{Semaphore, watch};

use super::state::{Snapshot, State};
use crate::kind::HoldKind;
use crate::metrics::{self, Labels};
use crate::name::Keys;
use crate::util::lock;

/// One owner's hold on one lock.
pub(crate) struct Hold {
    pub(crate) kind: HoldKind,
    /// The labels of its metrics.
    pub(crate) labels: Labels,
    pub(crate) keys: Keys,
    /// The owner is `<client id>:<holder>`.
    pub(crate) holder: u64,
    pub(super) state: Mutex<State>,
    /// Serialises this owner's commands on this lock, so each carries the right hold count.
    pub(super) commands: Semaphore,
    /// Live guards.
    pub(super) guards: AtomicUsize,
    /// Bumped by every change of the hold's [`LeaseState`](crate::lease::LeaseState) (at
    /// risk, recovered, lost, released): what `lost()` futures and lease watches wait on.
    /// Made by the first of them: a watch channel's shared state is about 350 bytes, more
    /// than the rest of the hold, and most holds are never watched.
    ///
    /// Why no change is missed: a watcher subscribes, then reads the state (under `state`'s
    /// lock); a change writes the state (under the same lock), then looks for the sender. If
    /// the watcher's read came after the change's write, it sees the change; if before, the
    /// watcher's subscription, made before its read, happened before the change looked, which
    /// then finds the sender and bumps it.
    changes: OnceLock<watch::Sender<u64>>,
}

impl Hold {
    pub(crate) fn new(kind: HoldKind, keys: Keys, holder: u64, labels: Labels) -> Self {
        Self {
            kind,
            labels,
            keys,
            holder,
            state: Mutex::new(State::idle()),
            commands: Semaphore::new(1),
            guards: AtomicUsize::new(0),
            changes: OnceLock::new(),
        }
    }

    /// Tells `lost()` futures and lease watches that the state changed.
    pub(super) fn changed(&self) {
        if let Some(changes) = self.changes.get() {
            changes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// A receiver of the hold's changes, with the current one seen. Read the state after
    /// this, not before: a change made before the receiver existed is not signalled.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changes
            .get_or_init(|| watch::Sender::new(0))
            .subscribe()
    }

    /// The lock's name.
    pub(crate) fn name(&self) -> &str {
        self.keys.name()
    }

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// What the hold is now, copied out (its lock is not kept).
    pub(crate) fn snapshot(&self) -> Snapshot {
        self.state().snapshot()
    }

    /// Ends an at-risk episode without a renewal (the hold is lost or released).
    pub(super) fn clear_risk(&self, st: &mut State) {
        if std::mem::take(&mut st.at_risk) {
            metrics::at_risk_ended(self.labels);
        }
    }

    /// The number of live guards of this hold.
    pub(crate) fn guards(&self) -> usize {
        self.guards.load(Ordering::Acquire)
    }

    pub(crate) fn guard_added(&self) {
        self.guards.fetch_add(1, Ordering::AcqRel);
    }
}

impl Drop for Hold {
    // A hold that goes away still counted (its release never ran: the runtime is gone) leaves
    // the gauge, so `lock_held` never leaks.
    fn drop(&mut self) {
        let st = match self.state.get_mut() {
            Ok(st) => st,
            Err(poisoned) => poisoned.into_inner(),
        };
        if st.counted() {
            metrics::hold_ended(self.labels, st.granted_at);
        }
        if st.at_risk {
            metrics::at_risk_ended(self.labels);
        }
    }
}
