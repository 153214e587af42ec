//! An acquisition's news for a [`Hold`]: the count it starts from, the grant, and the local
//! queue place a grant keeps.

use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::base::Hold;
use super::state::{Lease, Status};
use crate::error::LockError;
use crate::metrics;
use crate::util::validity;

impl Hold {
    /// The hold count an acquisition starts from (call with the owner's turn). A hold that was
    /// lost while guards of it still live cannot be re-entered.
    pub(crate) fn expected_count(&self) -> Result<u32, LockError> {
        let mut st = self.state();
        match st.status {
            Status::Held | Status::Releasing => Ok(st.count),
            Status::Lost if self.guards() > 0 => Err(LockError::Lost {
                name: self.name().to_owned(),
            }),
            Status::Idle | Status::Lost => {
                st.count = 0;
                Ok(0)
            }
        }
    }

    /// Records a successful acquisition sent at `sent_at`; returns the hold's generation.
    pub(crate) fn acquired(
        &self,
        token: u64,
        sent_at: Instant,
        lease: Lease,
        lease_len: Duration,
    ) -> u64 {
        let mut st = self.state();
        let valid_until = sent_at + validity(lease_len);
        let fresh = !st.counted();
        if fresh {
            st.generation += 1;
            st.valid_until = valid_until;
            st.lease = lease;
            st.count = 1;
            st.lost_reason = None;
            st.granted_at = Instant::now();
            st.at_risk = false;
        } else {
            st.valid_until = st.valid_until.max(valid_until);
            if lease == Lease::Watchdog {
                st.lease = Lease::Watchdog;
            }
            st.count += 1;
        }
        st.status = Status::Held;
        st.token = token;
        let (generation, count) = (st.generation, st.count);
        drop(st);
        if fresh {
            metrics::hold_started(self.labels);
        }
        tracing::debug!(lock = %self.name(), kind = self.kind.label(), token, count,
            "lock acquired");
        generation
    }

    /// Keeps `place`, this process's place at the head of the name's local queue (see the
    /// driver), until the hold of `generation` ends (released for good, or lost). Local
    /// waiters queue behind it, so the next one sends its attempt after the release instead
    /// of one that finds the lock busy and another after the release. Only a watchdog-leased
    /// hold keeps it: the watchdog marks it lost (ending it) when renewals stop, whereas a
    /// fixed lease may run out in Redis while its guard lives, and waiters must then be free
    /// to take the lock. Dropped at once otherwise, or if the hold already ended.
    pub(crate) fn keep_queue_place(&self, generation: u64, place: OwnedSemaphorePermit) {
        let mut st = self.state();
        if st.generation == generation && st.status == Status::Held && st.lease == Lease::Watchdog {
            st.queue_place = Some(place);
        }
    }
}
