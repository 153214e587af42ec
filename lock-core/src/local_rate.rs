//! [`LocalRateLimits`]: the same GCRA as a [`RateLimit`](crate::RateLimit), decided in this
//! process on tokio's clock instead of on the server: a fallback for while Redis is down.
//!
//! **Approximate.** Each process keeps its own allowance: with `N` instances of a service, up
//! to `N` × the quota gets through while they decide locally, and what was taken on the
//! server before the outage (or locally during it) is not carried across. Use it where an
//! approximate limit beats both refusing everything (`503`) and limiting nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LockError;
use crate::rate_limit::{Quota, RateDecision};
use crate::util::lock;
use crate::wire::rate::Decided;

/// The size at which names whose burst is back are first swept out.
const FIRST_SWEEP: usize = 1024;

/// Rate limits decided in this process: the same GCRA as a [`RateLimit`](crate::RateLimit),
/// on tokio's clock instead of the server's, as a fallback for while Redis is down. One
/// theoretical arrival time per name, kept while the name's burst is not back (names whose
/// burst is back are swept out as the map grows). Cheap to share behind an `Arc`.
///
/// **Approximate.** Each process keeps its own allowance: with `N` instances of a service,
/// up to `N` × the quota gets through while they decide locally, and what was taken on the
/// server before the outage is not known here.
///
/// ```
/// use lock_core::{LocalRateLimits, Quota};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let local = LocalRateLimits::new();
/// let quota = Quota::per_second(1).burst(2);
/// assert!(local.check("buyer:7", quota)?.is_allowed());
/// assert!(local.check("buyer:7", quota)?.is_allowed());
/// let refused = local.check("buyer:7", quota)?;
/// assert!(!refused.is_allowed());
/// assert_eq!(refused.retry_after(), std::time::Duration::from_secs(1));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LocalRateLimits {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Each name's theoretical arrival time.
    tats: HashMap<String, Instant>,
    sweep_at: usize,
}

impl Default for LocalRateLimits {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalRateLimits {
    /// No name has taken anything yet.
    pub fn new() -> Self {
        LocalRateLimits {
            state: Mutex::new(State {
                tats: HashMap::new(),
                sweep_at: FIRST_SWEEP,
            }),
        }
    }

    /// Takes one permit of `name`'s limit with `quota`, if one is free here, as
    /// [`RateLimit::check`](crate::RateLimit::check) does on the server (a limited request
    /// takes nothing). [`LockError::InvalidOption`] for a quota [`Quota::check`] refuses.
    pub fn check(&self, name: &str, quota: Quota) -> Result<RateDecision, LockError> {
        quota.check()?;
        let now = Instant::now();
        let interval = quota.interval();
        let burst = quota.burst_size();
        let window = interval.saturating_mul(burst);
        let mut state = lock(&self.state);
        if state.tats.len() >= state.sweep_at {
            state.tats.retain(|_, tat| *tat > now);
            state.sweep_at = (state.tats.len() * 2).max(FIRST_SWEEP);
        }
        let ahead = state
            .tats
            .get(name)
            .map_or(Duration::ZERO, |tat| tat.saturating_duration_since(now));
        let permits = |ahead: Duration| {
            let free = window.saturating_sub(ahead).as_micros();
            u64::try_from(free / interval.as_micros().max(1)).unwrap_or(u64::MAX)
        };
        let decided = if ahead + interval > window {
            Decided {
                allowed: false,
                remaining: permits(ahead),
                retry_us: micros(ahead + interval - window),
                reset_us: micros(ahead),
                interval_us: micros(interval),
                burst: u64::from(burst),
            }
        } else {
            let ahead = ahead + interval;
            state.tats.insert(name.to_owned(), now + ahead);
            Decided {
                allowed: true,
                remaining: permits(ahead),
                retry_us: 0,
                reset_us: micros(ahead),
                interval_us: micros(interval),
                burst: u64::from(burst),
            }
        };
        Ok(RateDecision::new(decided))
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same answers as the server's script: a burst, then one permit per interval, a
    /// limited request taking nothing, each name on its own.
    #[tokio::test(start_paused = true)]
    async fn a_burst_then_the_rate_each_name_on_its_own() {
        let local = LocalRateLimits::new();
        let quota = Quota::per(Duration::from_millis(500), 1).burst(3);
        for left in [2, 1, 0] {
            let d = local.check("a", quota).unwrap();
            assert!(d.is_allowed());
            assert_eq!(d.remaining(), left);
        }
        for _ in 0..5 {
            let d = local.check("a", quota).unwrap();
            assert!(!d.is_allowed());
            assert_eq!(d.retry_after(), Duration::from_millis(500), "took nothing");
        }
        assert!(local.check("b", quota).unwrap().is_allowed());
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(local.check("a", quota).unwrap().is_allowed());
        assert!(!local.check("a", quota).unwrap().is_allowed());
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(local.check("a", quota).unwrap().remaining(), 2);
        assert!(local.check("a", Quota::per_second(0)).is_err());
    }
}
