//! [`Schedule`]: when a job's periods start, on the server's clock, in whole seconds since the
//! Unix epoch.

use std::fmt;
use std::time::Duration;

use crate::error::LockError;
use crate::period::Period;

/// How many periods [`Schedule::missed_between`] counts one by one before it stops counting
/// (a cron schedule's periods are not all the same length): 100 000.
const MAX_COUNTED: u64 = 100_000;

/// When a job's periods start: a fixed [`Period`] aligned to the Unix epoch
/// ([`Schedule::every`]) or, with the `cron` feature, a cron expression
/// (`Schedule::cron`). A period lasts from its start to the next one's start; the job runs
/// once per period. Both are read on the server's clock (Redis `TIME`), in UTC.
#[derive(Clone, PartialEq, Eq)]
pub struct Schedule {
    kind: Kind,
}

#[derive(Clone, PartialEq, Eq)]
enum Kind {
    Every(Period),
    #[cfg(feature = "cron")]
    Cron(Box<super::cron::CronSchedule>),
}

impl Schedule {
    /// Periods of `length`, aligned to the Unix epoch as [`Period::every`] aligns them (an
    /// hour's start at every whole hour, UTC): whole seconds from 1 s to 366 days, anything
    /// else is [`LockError::InvalidOption`].
    pub fn every(length: Duration) -> Result<Schedule, LockError> {
        Ok(Schedule::from(Period::every(length)?))
    }

    /// The schedule of a cron expression in UTC, parsed by the `croner` crate (feature
    /// `cron`): five fields (`minute hour day-of-month month day-of-week`), or six with
    /// seconds first; `@hourly`, `@daily` and the other nicknames. A period starts at each
    /// time the expression matches. An expression that does not parse is
    /// [`LockError::InvalidOption`] (option `"cron"`), with the parser's reason.
    #[cfg(feature = "cron")]
    pub fn cron(expression: &str) -> Result<Schedule, LockError> {
        Ok(Schedule {
            kind: Kind::Cron(Box::new(super::cron::CronSchedule::parse(expression)?)),
        })
    }

    /// The start of the period that second `now` falls in (the latest start at or before
    /// it); None if the schedule has no start at or before `now`.
    pub(crate) fn period_at(&self, now: u64) -> Option<u64> {
        match &self.kind {
            Kind::Every(period) => {
                let length = period.length().as_secs();
                Some(now / length * length)
            }
            #[cfg(feature = "cron")]
            Kind::Cron(cron) => cron.at_or_before(now),
        }
    }

    /// The first start after second `after`; None if there is none (a cron expression that
    /// never matches again).
    pub(crate) fn next_after(&self, after: u64) -> Option<u64> {
        match &self.kind {
            Kind::Every(period) => {
                let length = period.length().as_secs();
                (after / length).checked_add(1)?.checked_mul(length)
            }
            #[cfg(feature = "cron")]
            Kind::Cron(cron) => cron.after(after),
        }
    }

    /// The periods that started after `last` and before `current`: how many (counted up to
    /// 100 000), and the latest `keep` of them, oldest first.
    pub(crate) fn missed_between(&self, last: u64, current: u64, keep: usize) -> (u64, Vec<u64>) {
        let mut count = 0;
        let mut latest = std::collections::VecDeque::with_capacity(keep.min(1024));
        #[allow(irrefutable_let_patterns)] // without the `cron` feature
        if let Kind::Every(period) = &self.kind {
            // Equal periods: counted, not walked.
            let length = period.length().as_secs();
            if current > last {
                count = ((current - last) / length).saturating_sub(1);
            }
            let first = current.saturating_sub(length * (count.min(keep as u64)));
            let latest = (first..current).step_by(length as usize).collect();
            return (count, latest);
        }
        let mut start = last;
        while let Some(next) = self.next_after(start).filter(|&next| next < current) {
            count += 1;
            if keep > 0 {
                if latest.len() == keep {
                    latest.pop_front();
                }
                latest.push_back(next);
            }
            if count == MAX_COUNTED {
                // Still the latest `keep` of them: those just before `current`.
                return (count, self.latest_before(current, keep));
            }
            start = next;
        }
        (count, latest.into())
    }

    /// The latest `keep` starts before `current` (walked back from `current`'s period).
    fn latest_before(&self, current: u64, keep: usize) -> Vec<u64> {
        let mut starts = Vec::with_capacity(keep);
        let mut before = current;
        while starts.len() < keep {
            match before.checked_sub(1).and_then(|t| self.period_at(t)) {
                Some(start) => {
                    starts.push(start);
                    before = start;
                }
                None => break,
            }
        }
        starts.reverse();
        starts
    }

    /// How the schedule is written in a job's record (`every 3600s`, `cron 0 12 * * *`).
    pub(crate) fn describe(&self) -> String {
        self.to_string()
    }
}

impl From<Period> for Schedule {
    fn from(period: Period) -> Schedule {
        Schedule {
            kind: Kind::Every(period),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Every(period) => write!(f, "every {}s", period.length().as_secs()),
            #[cfg(feature = "cron")]
            Kind::Cron(cron) => write!(f, "cron {cron}"),
        }
    }
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schedule({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_periods_start_on_multiples_of_their_length() {
        let hourly = Schedule::every(Duration::from_secs(3600)).unwrap();
        assert_eq!(hourly.period_at(7_199), Some(3600));
        assert_eq!(hourly.period_at(7_200), Some(7200));
        assert_eq!(hourly.next_after(3600), Some(7200));
        assert_eq!(hourly.next_after(3599), Some(3600));
        assert_eq!(hourly.to_string(), "every 3600s");
    }

    #[test]
    fn missed_periods_are_those_strictly_between() {
        let s = Schedule::every(Duration::from_secs(10)).unwrap();
        assert_eq!(s.missed_between(100, 110, 5), (0, vec![]));
        assert_eq!(
            s.missed_between(100, 160, 5),
            (5, vec![110, 120, 130, 140, 150])
        );
        assert_eq!(s.missed_between(100, 160, 2), (5, vec![140, 150]));
        assert_eq!(s.missed_between(100, 160, 0), (5, vec![]));
        assert_eq!(s.missed_between(160, 160, 3), (0, vec![]));
        assert_eq!(s.missed_between(170, 160, 3), (0, vec![]));
    }
}
