//! A [`Hold`] given back: what a release answered ([`Released`]), what a failed one does next
//! ([`Retry`]), and the last guard gone.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::base::Hold;
use super::state::Status;
use crate::metrics::{self, LossReason};

/// The answer of a release script, as the hold sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Given back (freed, decremented, or a repeat of an applied release).
    Yes,
    /// The owner did not hold it any more.
    NotHeld,
}

/// What a release that failed should do next.
pub(crate) enum Retry {
    /// Send it again.
    Again,
    /// Stop: the hold moved on (another release or acquisition changed it).
    Stop,
    /// Stop: the lease ran out meanwhile, the lock is gone whatever happened.
    Expired,
}

impl Hold {
    /// The hold count and token a release of `generation` starts from; None when there is
    /// nothing to give back.
    pub(crate) fn to_release(&self, generation: u64) -> Option<(u32, u64)> {
        let st = self.state();
        (st.count > 0 && st.generation == generation).then_some((st.count, st.token))
    }

    /// Applies a release's answer about `generation`.
    pub(crate) fn released(&self, generation: u64, answer: Released) {
        match answer {
            Released::Yes => {
                let mut st = self.state();
                st.count = st.count.saturating_sub(1);
                if st.count == 0 {
                    let counted = st.counted();
                    st.status = Status::Idle;
                    self.clear_risk(&mut st);
                    let granted_at = st.granted_at;
                    let place = st.queue_place.take();
                    drop(st);
                    drop(place);
                    if counted {
                        metrics::hold_ended(self.labels, granted_at);
                        tracing::debug!(lock = %self.name(), kind = self.kind.label(),
                            held_for = ?granted_at.elapsed(), "lock released");
                    }
                    self.changed();
                }
            }
            Released::NotHeld => {
                self.mark_lost(
                    generation,
                    "released after the lock was gone",
                    LossReason::Deleted,
                );
                self.state().count = 0;
            }
        }
    }

    /// After a failed release of `count` holds of `generation`: whether to try again.
    pub(crate) fn retry(&self, generation: u64, count: u32) -> Retry {
        let st = self.state();
        if st.generation != generation || st.count != count {
            return Retry::Stop;
        }
        if Instant::now() >= st.valid_until {
            drop(st);
            self.mark_lost(
                generation,
                "the lease ran out while a release was retried",
                LossReason::Unreachable,
            );
            self.state().count = 0;
            return Retry::Expired;
        }
        Retry::Again
    }

    /// A grant that no guard will own (it came too late to be trusted) is being given back:
    /// it is not renewed from now on.
    pub(crate) fn release_unguarded(&self) {
        self.stop_renewing();
    }

    /// Returns true when this was the last guard: renewal stops at once.
    pub(crate) fn guard_removed(&self) -> bool {
        if self.guards.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.stop_renewing();
            true
        } else {
            false
        }
    }

    /// A held hold is being given back: not renewed from now on, and no longer held (nor at
    /// risk) for its views.
    fn stop_renewing(&self) {
        let mut st = self.state();
        if st.status == Status::Held {
            st.status = Status::Releasing;
            self.clear_risk(&mut st);
            drop(st);
            self.changed();
        }
    }
}
