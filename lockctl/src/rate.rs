//! A name's rate limit (lock-core's `rate_limit`: `P{name}:rate`), as `status` shows it: read
//! with `RateLimit::inspect`, which answers with the quota the state was written with, so
//! lockctl needs no quota of its own and computes nothing itself.
//!
//! `list` and `watch` leave rate limits out: they are not locks (nobody holds them), and a
//! busy limit's key is rewritten on every permit taken.

use std::time::Duration;

use lock_core::{LockError, RateDecision};
use serde::Serialize;

use crate::connect::Target;
use crate::exit::Failure;

/// The state of a name's rate limit, as `status` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RateState {
    /// How many permits may be taken at once.
    pub(crate) burst: u64,
    /// The emission interval in microseconds: one permit comes back every this.
    pub(crate) interval_us: u64,
    /// Permits that could be taken now.
    pub(crate) remaining: u64,
    /// Milliseconds until one permit is free (0: one is).
    pub(crate) retry_after_ms: u64,
    /// Milliseconds until a full burst is free again (when the key expires).
    pub(crate) full_after_ms: u64,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl RateState {
    fn new(d: &RateDecision) -> RateState {
        RateState {
            burst: d.burst(),
            interval_us: u64::try_from(d.interval().as_micros()).unwrap_or(u64::MAX),
            remaining: d.remaining(),
            retry_after_ms: millis(d.retry_after()),
            full_after_ms: millis(d.reset_after()),
        }
    }

    /// One line for people: `burst 20, one permit every 100ms (10/s), 3 remaining now, full
    /// again in 1.7s`.
    pub(crate) fn describe(&self) -> String {
        let interval = Duration::from_micros(self.interval_us);
        let per_second = if self.interval_us == 0 {
            f64::INFINITY
        } else {
            1e6 / self.interval_us as f64
        };
        let next = if self.remaining == 0 {
            format!(
                " (next in {:?})",
                Duration::from_millis(self.retry_after_ms)
            )
        } else {
            String::new()
        };
        format!(
            "burst {}, one permit every {interval:?} ({per_second:.3}/s), {} remaining now{next}, \
             full again in {:?}",
            self.burst,
            self.remaining,
            Duration::from_millis(self.full_after_ms)
        )
    }
}

/// The rate limit under `name`, if it has a state (a limit nobody used lately has none: a
/// full burst is free). A server without scripting has none to show either.
pub(crate) async fn read(target: &Target, name: &str) -> Result<Option<RateState>, Failure> {
    match target.client.rate_limit(name).info().await {
        Ok(decision) => Ok(decision.as_ref().map(RateState::new)),
        Err(LockError::Unsupported { .. }) => Ok(None),
        Err(e) => Err(Failure::from_lock(e, &target.label)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_the_state() {
        let state = RateState {
            burst: 20,
            interval_us: 100_000,
            remaining: 0,
            retry_after_ms: 40,
            full_after_ms: 1_700,
        };
        assert_eq!(
            state.describe(),
            "burst 20, one permit every 100ms (10.000/s), 0 remaining now (next in 40ms), full \
             again in 1.7s"
        );
    }
}
