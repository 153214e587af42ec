//! A [`Hold`]'s lease kept: renewals confirmed or failed (at risk), a validity that passed
//! (expired), and the future that resolves when the hold ends.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::base::Hold;
use super::state::{Lease, Status};
use crate::metrics::{self, LossReason};
use crate::util::validity;

impl Hold {
    /// Records a renewal sent at `sent_at` that Redis confirmed: the lease is exactly
    /// `lease_len` from then on the server (even if an extension had set a longer one), and
    /// a hold at risk is safe again. Returns whether it came late: after the hold's validity
    /// had already passed here.
    pub(crate) fn renewed(&self, generation: u64, sent_at: Instant, lease_len: Duration) -> bool {
        let mut st = self.state();
        let late = Instant::now() >= st.valid_until;
        if st.generation != generation || !st.counted() {
            return late;
        }
        st.valid_until = sent_at + validity(lease_len);
        if std::mem::take(&mut st.at_risk) {
            let remaining = st.valid_until.saturating_duration_since(Instant::now());
            drop(st);
            metrics::at_risk_ended(self.labels);
            tracing::info!(lock = %self.name(), kind = self.kind.label(), ?remaining,
                "lock renewal succeeded again; the lock is no longer at risk");
            self.changed();
        }
        late
    }

    /// Records that a renewal of `generation` failed (`error`: why) while the hold may still
    /// be valid: it is at risk until a renewal is confirmed, lost if none is before its
    /// validity passes. Said once per such episode: one `warn`, and the `lock_at_risk` gauge.
    pub(crate) fn renewal_failed(&self, generation: u64, error: &str) {
        let mut st = self.state();
        let remaining = st.valid_until.saturating_duration_since(Instant::now());
        if st.generation != generation
            || st.status != Status::Held
            || st.lease != Lease::Watchdog
            || st.at_risk
            || remaining.is_zero()
        {
            return;
        }
        st.at_risk = true;
        drop(st);
        metrics::at_risk_started(self.labels);
        tracing::warn!(lock = %self.name(), kind = self.kind.label(), ?remaining, error,
            "lock renewal failed; the lock is at risk until a renewal succeeds, and lost if \
             none does before its lease runs out");
        self.changed();
    }

    /// Marks a held hold lost if its validity has passed; returns whether it did.
    pub(crate) fn expire_if_due(&self, now: Instant) -> bool {
        let (due, generation, lease) = {
            let st = self.state();
            (
                st.status == Status::Held && now >= st.valid_until,
                st.generation,
                st.lease,
            )
        };
        if due {
            match lease {
                Lease::Fixed => self.mark_lost(
                    generation,
                    "the fixed lease ran out while the lock was held",
                    LossReason::Expired,
                ),
                Lease::Watchdog => self.mark_lost(
                    generation,
                    "no renewal succeeded within the lease",
                    LossReason::Unreachable,
                ),
            }
        }
        due
    }

    /// Resolves when the hold of `generation` is known or presumed lost, or released: it
    /// checks the validity deadline itself, so it fires even if the watchdog is starved.
    pub(crate) async fn ended(self: Arc<Self>, generation: u64) {
        let mut changes = self.changes();
        loop {
            changes.borrow_and_update();
            let Some(deadline) = self.deadline(generation) else {
                return;
            };
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                () = tokio::time::sleep_until(deadline) => {
                    self.expire_if_due(Instant::now());
                }
            }
        }
    }
}
