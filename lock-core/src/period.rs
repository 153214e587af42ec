//! [`Period`]: lock names that name a period of a schedule, for jobs that must run once per
//! period on one of several instances.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::LockError;

/// A schedule of equal periods aligned to the Unix epoch (periods of a minute start at every
/// whole minute, UTC; of a day at midnight UTC), whose [`name`](Period::name) makes a lock
/// name per period: `"lottery:2026-11-24T12:00:00Z"`.
///
/// Every instance that fires a job in the same period computes the same name, so with
/// [`try_lock`](crate::LockClient::try_lock) and
/// [`hold_at_least`](crate::LockRequest::hold_at_least) (or the macro's
/// `on_busy = "skip", hold_at_least = ...`) exactly one of them runs it. A period you number
/// yourself (a batch id, a date from your scheduler) needs no `Period`: put it in the name.
///
/// **Clocks.** The name comes from the instance's own clock (`SystemTime::now()`), so two
/// instances agree on the period only if their clocks differ by less than their distance to
/// the period's boundaries. Fire the job well inside the period, not on its boundary: at least
/// the worst clock skew between your hosts after the start (NTP keeps it to milliseconds; a
/// second is a safe margin), e.g. by sleeping [`until_next`](Period::until_next) plus a
/// margin. An instance whose clock is off by more than that near a boundary names the
/// neighbouring period, and may run it again once that period's lock has expired: keep the
/// lock (with `hold_at_least`) for most of the period.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use lock_core::Period;
///
/// let minutes = Period::every(Duration::from_secs(60))?;
/// let noon = UNIX_EPOCH + Duration::from_secs(1_795_521_600 + 25); // 12:00:25 UTC
/// assert_eq!(minutes.name_at("lottery", noon), "lottery:2026-11-24T12:00:00Z");
/// # Ok::<(), lock_core::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Period {
    seconds: u64,
}

impl Period {
    /// The shortest period: one second.
    pub const MIN: Duration = Duration::from_secs(1);
    /// The longest period: 366 days.
    pub const MAX: Duration = Duration::from_secs(366 * 24 * 3600);

    /// Periods of `length`: whole seconds from [`MIN`](Self::MIN) (1 s) to
    /// [`MAX`](Self::MAX) (366 days); anything else is [`LockError::InvalidOption`].
    pub fn every(length: Duration) -> Result<Period, LockError> {
        let invalid = |reason: String| LockError::InvalidOption {
            option: "period",
            reason,
        };
        if length.subsec_nanos() != 0 {
            return Err(invalid(format!(
                "{length:?} is not a whole number of seconds"
            )));
        }
        if !(Self::MIN..=Self::MAX).contains(&length) {
            return Err(invalid(format!("{length:?} is outside 1 s..=366 days")));
        }
        Ok(Period {
            seconds: length.as_secs(),
        })
    }

    /// The length of each period.
    pub fn length(&self) -> Duration {
        Duration::from_secs(self.seconds)
    }

    /// The number of the period `time` falls in (periods since the Unix epoch; 0 for a time
    /// before it).
    pub fn index_at(&self, time: SystemTime) -> u64 {
        unix_seconds(time) / self.seconds
    }

    /// When the period `time` falls in started.
    pub fn start_at(&self, time: SystemTime) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.index_at(time) * self.seconds)
    }

    /// `"{prefix}:{start}"` for the current period, its start in RFC 3339 UTC
    /// (`"lottery:2026-11-24T12:00:00Z"`).
    pub fn name(&self, prefix: &str) -> String {
        self.name_at(prefix, SystemTime::now())
    }

    /// `"{prefix}:{start}"` for the period `time` falls in.
    pub fn name_at(&self, prefix: &str, time: SystemTime) -> String {
        format!("{prefix}:{}", rfc3339(unix_seconds(self.start_at(time))))
    }

    /// How long until the next period starts.
    pub fn until_next(&self) -> Duration {
        let now = SystemTime::now();
        let next = self.start_at(now) + self.length();
        next.duration_since(now).unwrap_or_default()
    }
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the Unix epoch (the civil-from-days algorithm
/// of Howard Hinnant's date library).
pub(crate) fn rfc3339(seconds: u64) -> String {
    let days = seconds / 86_400;
    let secs = seconds % 86_400;
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn names_the_period_start_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_521_600), "2026-11-24T12:00:00Z");
        assert_eq!(rfc3339(4_102_444_799), "2099-12-31T23:59:59Z");
        let minutes = Period::every(Duration::from_secs(60)).unwrap();
        assert_eq!(
            minutes.name_at("job", at(1_795_521_659)),
            "job:2026-11-24T12:00:00Z"
        );
        assert_eq!(
            minutes.name_at("job", at(1_795_521_660)),
            "job:2026-11-24T12:01:00Z"
        );
        let days = Period::every(Duration::from_secs(86_400)).unwrap();
        assert_eq!(
            days.name_at("d", at(1_795_521_600)),
            "d:2026-11-24T00:00:00Z"
        );
        assert_eq!(days.index_at(at(86_399)), 0);
        assert_eq!(days.index_at(at(86_400)), 1);
    }

    #[test]
    fn every_instant_of_a_period_has_its_name_and_the_next_starts_after() {
        let p = Period::every(Duration::from_secs(7)).unwrap();
        for s in 0..100 {
            let start = p.start_at(at(s));
            assert!(start <= at(s) && at(s) < start + p.length());
            assert_eq!(p.name_at("x", at(s)), p.name_at("x", start));
        }
        assert!(p.until_next() <= p.length());
    }

    #[test]
    fn refuses_zero_fractional_and_absurd_lengths() {
        for bad in [
            Duration::ZERO,
            Duration::from_millis(500),
            Duration::from_millis(1500),
            Period::MAX + Duration::from_secs(1),
            Duration::MAX,
        ] {
            assert!(
                matches!(
                    Period::every(bad),
                    Err(LockError::InvalidOption {
                        option: "period",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
        assert!(Period::every(Period::MIN).is_ok());
        assert!(Period::every(Period::MAX).is_ok());
    }
}
