//! A [`Hold`] lost: marked so (once per loss, with its reason), and why.

use tokio::time::Instant;

use super::base::Hold;
use super::state::Status;
use crate::metrics::{self, LossReason};

impl Hold {
    /// Marks the hold of `generation` lost, wakes `lost()` futures and says so in the log
    /// (one `warn` per loss of a lock whose guard still lives). `cause` is what Redis or the
    /// clock said; a "gone" from Redis after the lease had already run out here counts as
    /// [`LossReason::Expired`].
    pub(crate) fn mark_lost(&self, generation: u64, why: &'static str, cause: LossReason) {
        let mut st = self.state();
        if st.generation != generation {
            return;
        }
        // Given back after the state's lock: the next local waiter may start at once.
        let place = st.queue_place.take();
        if st.counted() {
            let was_held = st.status == Status::Held;
            st.status = Status::Lost;
            st.lost_reason = Some(why);
            self.clear_risk(&mut st);
            let reason = if cause == LossReason::Deleted && Instant::now() >= st.valid_until {
                LossReason::Expired
            } else {
                cause
            };
            let (granted_at, token) = (st.granted_at, st.token);
            drop(st);
            metrics::hold_ended(self.labels, granted_at);
            if was_held {
                metrics::lost(self.labels, reason);
                tracing::warn!(
                    lock = %self.name(),
                    kind = self.kind.label(),
                    fencing_token = self.kind.fenced().then_some(token),
                    reason = reason.as_str(),
                    held_for = ?granted_at.elapsed(),
                    why,
                    "distributed lock lost"
                );
            }
        } else {
            drop(st);
        }
        drop(place);
        self.changed();
    }

    /// Marks the hold's current generation lost (see [`mark_lost`](Self::mark_lost)): for news
    /// that is about whatever the owner holds now (a re-entry told the hold is gone).
    pub(crate) fn mark_current_lost(&self, why: &'static str, cause: LossReason) {
        let generation = self.state().generation;
        self.mark_lost(generation, why, cause);
    }

    /// Why the hold of `generation` was lost; `None` while it is not (or was released).
    pub(crate) fn lost_reason(&self, generation: u64) -> Option<&'static str> {
        let st = self.state();
        (st.generation == generation && st.status == Status::Lost)
            .then_some(st.lost_reason)
            .flatten()
    }
}
