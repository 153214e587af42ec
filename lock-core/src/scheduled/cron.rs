//! A cron expression as a job's schedule, parsed and evaluated by the `croner` crate, in UTC
//! (feature `cron`).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use croner::Cron;

use crate::error::LockError;

/// A parsed cron expression and the text it was parsed from.
#[derive(Clone)]
pub(crate) struct CronSchedule {
    expression: String,
    cron: Cron,
}

impl CronSchedule {
    /// Parses `expression`; [`LockError::InvalidOption`] (`"cron"`) with croner's reason if
    /// it does not parse.
    pub(crate) fn parse(expression: &str) -> Result<CronSchedule, LockError> {
        let cron = Cron::from_str(expression.trim()).map_err(|e| LockError::InvalidOption {
            option: "cron",
            reason: format!("{expression:?}: {e}"),
        })?;
        Ok(CronSchedule {
            expression: expression.trim().to_owned(),
            cron,
        })
    }

    /// The latest time at or before second `now` the expression matches.
    pub(crate) fn at_or_before(&self, now: u64) -> Option<u64> {
        let now = time(now)?;
        let found = self.cron.find_previous_occurrence(&now, true).ok()?;
        u64::try_from(found.timestamp()).ok()
    }

    /// The first time after second `after` the expression matches.
    pub(crate) fn after(&self, after: u64) -> Option<u64> {
        let after = time(after)?;
        let found = self.cron.find_next_occurrence(&after, false).ok()?;
        u64::try_from(found.timestamp()).ok()
    }
}

fn time(secs: u64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(i64::try_from(secs).ok()?, 0)
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression
    }
}

impl Eq for CronSchedule {}

impl fmt::Display for CronSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.expression)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-24T00:00:00Z.
    const DAY: u64 = 1_795_478_400;

    #[test]
    fn noon_every_day_across_midnight() {
        let noon = CronSchedule::parse("0 12 * * *").unwrap();
        assert_eq!(noon.at_or_before(DAY + 12 * 3600), Some(DAY + 12 * 3600));
        assert_eq!(
            noon.at_or_before(DAY + 12 * 3600 - 1),
            Some(DAY - 12 * 3600)
        );
        assert_eq!(noon.after(DAY + 12 * 3600), Some(DAY + 36 * 3600));
        assert_eq!(noon.to_string(), "0 12 * * *");
    }

    #[test]
    fn what_does_not_parse_is_an_invalid_option() {
        for bad in ["", "61 * * * *", "* * *", "0 25 * * *", "every hour"] {
            assert!(
                matches!(
                    CronSchedule::parse(bad),
                    Err(LockError::InvalidOption { option: "cron", .. })
                ),
                "{bad:?}"
            );
        }
    }
}
