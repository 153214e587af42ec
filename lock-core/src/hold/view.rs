//! What a [`Hold`] says now, of one generation: valid, held, for how long, with which
//! token, how its lease stands, when it runs out.

use std::time::Duration;

use tokio::time::Instant;

use super::base::Hold;
use super::state::Status;
use crate::lease::LeaseState;

impl Hold {
    /// Of this generation, held or being given back, and within its validity: the lock is
    /// still the owner's as far as this process knows.
    pub(crate) fn valid(&self, generation: u64) -> bool {
        let st = self.state();
        st.generation == generation && st.counted() && Instant::now() < st.valid_until
    }

    /// Held, of this generation, and within its validity.
    pub(crate) fn is_held(&self, generation: u64) -> bool {
        let st = self.state();
        st.generation == generation && st.status == Status::Held && Instant::now() < st.valid_until
    }

    /// How much longer it is ours unless a renewal extends it; zero once it is not held.
    pub(crate) fn remaining(&self, generation: u64) -> Duration {
        let st = self.state();
        if st.generation != generation || st.status != Status::Held {
            return Duration::ZERO;
        }
        st.valid_until.saturating_duration_since(Instant::now())
    }

    /// The fencing token, for kinds that have one.
    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.kind.fenced().then(|| self.state().token)
    }

    /// How the lease of `generation` stands now (see [`LeaseState`]).
    pub(crate) fn lease_state(&self, generation: u64) -> LeaseState {
        let st = self.state();
        if st.generation != generation
            || st.status != Status::Held
            || Instant::now() >= st.valid_until
        {
            LeaseState::Ended
        } else if st.at_risk {
            LeaseState::AtRisk
        } else {
            LeaseState::Held
        }
    }

    /// When the hold of `generation` runs out unless a renewal moves it; None once it is not
    /// held.
    pub(crate) fn deadline(&self, generation: u64) -> Option<Instant> {
        let st = self.state();
        (st.generation == generation && st.status == Status::Held).then_some(st.valid_until)
    }
}
