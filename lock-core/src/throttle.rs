//! [`Throttle`]: at most one log line per period for one message, with how many lines were
//! left out since the last one, so a warning that repeats on every request during an outage
//! says so once per period instead of flooding the log.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::util::lock;

/// The period of the client's throttled warnings: one line per message per 10 s.
pub(crate) const WARN_PERIOD: Duration = Duration::from_secs(10);

/// One message's throttle.
pub(crate) struct Throttle {
    period: Duration,
    state: Mutex<State>,
}

struct State {
    /// When the last line went out.
    last: Option<Instant>,
    /// Lines left out since.
    suppressed: u64,
}

impl Throttle {
    pub(crate) const fn new(period: Duration) -> Self {
        Throttle {
            period,
            state: Mutex::new(State {
                last: None,
                suppressed: 0,
            }),
        }
    }

    /// Whether a line may go out now: `Some(left out since the last line)` (log it with
    /// that count), or `None` (counted, not logged).
    pub(crate) fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut state = lock(&self.state);
        let due = state
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= self.period);
        if !due {
            state.suppressed = state.suppressed.saturating_add(1);
            return None;
        }
        state.last = Some(now);
        Some(std::mem::take(&mut state.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_with_the_count_left_out() {
        let throttle = Throttle::new(Duration::from_secs(10));
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        assert_eq!(throttle.admit_at(at(0)), Some(0), "the first line goes out");
        assert_eq!(throttle.admit_at(at(1)), None);
        assert_eq!(throttle.admit_at(at(9)), None);
        assert_eq!(throttle.admit_at(at(10)), Some(2), "two left out since");
        assert_eq!(throttle.admit_at(at(19)), None);
        assert_eq!(throttle.admit_at(at(40)), Some(1));
        assert_eq!(throttle.admit_at(at(60)), Some(0));
    }
}
