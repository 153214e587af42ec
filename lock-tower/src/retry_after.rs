//! How long a rejected client should wait: the estimate of a busy answer (the layer's recent
//! hold times, bounded), and the whole seconds that `Retry-After` and the body's
//! `retry_after_ms` both say.

use std::time::Duration;

/// The `Retry-After` of a busy answer before any of the layer's requests has released a lock:
/// the layer's wait, at least this.
pub(crate) const FIRST_BUSY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The `Retry-After` of a busy answer: how long the layer's requests have held their locks
/// lately (`recent_hold`, a moving average) or, before any has released one, the layer's
/// `wait` and at least [`FIRST_BUSY_RETRY_AFTER`]; never longer than the holder's remaining
/// lease (when it has one) nor than `cap`.
pub(crate) fn busy_retry_after(
    holder_ttl: Option<Duration>,
    recent_hold: Option<Duration>,
    wait: Duration,
    cap: Duration,
) -> Duration {
    let estimate = recent_hold.unwrap_or_else(|| wait.max(FIRST_BUSY_RETRY_AFTER));
    holder_ttl
        .map_or(estimate, |ttl| ttl.min(estimate))
        .min(cap)
}

/// Whole seconds for `Retry-After`: rounded up, at least 1.
pub(crate) fn retry_after_secs(d: Duration) -> u64 {
    whole_seconds(d).max(1)
}

/// `d` in whole seconds, rounded up (what every seconds header of the layers says).
pub(crate) fn whole_seconds(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_up() {
        assert_eq!(whole_seconds(Duration::ZERO), 0);
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn busy_retry_after_is_the_recent_hold_or_at_first_the_wait_bounded() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let cap = s(5);
        // History: the recent holds, below the holder's lease and the cap.
        assert_eq!(
            busy_retry_after(Some(s(30)), Some(ms(200)), s(0), cap),
            ms(200)
        );
        assert_eq!(
            busy_retry_after(Some(ms(80)), Some(ms(200)), s(0), cap),
            ms(80)
        );
        assert_eq!(busy_retry_after(None, Some(s(60)), s(0), cap), cap);
        // No history yet: the wait, at least a second, not the 30 s watchdog lease.
        assert_eq!(busy_retry_after(Some(s(30)), None, s(0), cap), s(1));
        assert_eq!(busy_retry_after(Some(s(30)), None, ms(200), cap), s(1));
        assert_eq!(busy_retry_after(Some(s(30)), None, ms(2500), cap), ms(2500));
        assert_eq!(busy_retry_after(None, None, s(0), cap), s(1));
        assert_eq!(busy_retry_after(Some(ms(300)), None, s(0), cap), ms(300));
        assert_eq!(busy_retry_after(Some(s(30)), None, s(60), cap), cap);
        assert_eq!(busy_retry_after(Some(s(30)), None, s(0), ms(300)), ms(300));
    }
}
