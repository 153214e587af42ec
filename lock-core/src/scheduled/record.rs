//! [`JobRecord`]: what a job keeps in Redis about its last run, in the record
//! ([`crate::record`]) of its lock, so a restarted fleet knows what it missed and `lockctl jobs`
//! can show it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::period::rfc3339;

/// What starts the lock name of every job: the job `nightly` runs under the lock
/// `job:nightly`, and its record is that lock's record, the key `P{job:nightly}:record`.
pub const LOCK_PREFIX: &str = "job:";

/// The lock name of the job `job`: `job:{job}`.
pub fn lock_name(job: &str) -> String {
    format!("{LOCK_PREFIX}{job}")
}

/// The longest an error's text kept in a record: 200 bytes (the rest is cut).
pub const MAX_ERROR_LEN: usize = 200;

/// How a job's run ended, as its record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The body returned `Ok`.
    Done,
    /// Every attempt failed (returned an error or panicked): the last error's text.
    Failed(String),
}

/// A job's record: the last period run (done, or failed after its attempts), by which
/// instance, how it ended and how long it took, the schedule and the next period's start.
///
/// Stored as text, one `key=value` per line (`v=1`, `period`, `outcome`, `error`,
/// `instance`, `ms`, `finished`, `schedule`, `next`; times in seconds since the Unix
/// epoch), fenced by the run's token (see [`crate::record`]), kept for 30 days after its last
/// write ([`crate::record::MAX_TTL`]): a fleet stopped longer than that starts again from the
/// current period, as a new job does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    pub(crate) period: u64,
    pub(crate) outcome: RunOutcome,
    pub(crate) instance: String,
    pub(crate) duration: Duration,
    pub(crate) finished: u64,
    pub(crate) schedule: String,
    pub(crate) next: Option<u64>,
}

impl JobRecord {
    /// The start of the last period run.
    pub fn period(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.period)
    }

    /// The last period's start in RFC 3339, UTC (`2026-11-24T12:00:00Z`).
    pub fn period_name(&self) -> String {
        rfc3339(self.period)
    }

    /// How the last run ended.
    pub fn outcome(&self) -> &RunOutcome {
        &self.outcome
    }

    /// The instance that ran it (the job's [`instance`](super::JobBuilder::instance)).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// How long the run took, every attempt included (milliseconds kept).
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// When it ended, on the server's clock.
    pub fn finished(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.finished)
    }

    /// The job's schedule, as written by the runner (`every 3600s`, `cron 0 12 * * *`).
    pub fn schedule(&self) -> &str {
        &self.schedule
    }

    /// The start of the period after the last one run, if the schedule has one.
    pub fn next(&self) -> Option<SystemTime> {
        self.next.map(|s| UNIX_EPOCH + Duration::from_secs(s))
    }

    /// The record as stored (the value of the lock's record).
    pub fn encode(&self) -> Vec<u8> {
        let (outcome, error) = match &self.outcome {
            RunOutcome::Done => ("done", String::new()),
            RunOutcome::Failed(error) => ("failed", one_line(error)),
        };
        let mut text = format!(
            "v=1\nperiod={}\noutcome={outcome}\nerror={error}\ninstance={}\nms={}\nfinished={}\nschedule={}\n",
            self.period,
            one_line(&self.instance),
            self.duration.as_millis(),
            self.finished,
            one_line(&self.schedule),
        );
        if let Some(next) = self.next {
            text.push_str(&format!("next={next}\n"));
        }
        text.into_bytes()
    }

    /// A stored record read back; None if it is not one (another program's value, a newer
    /// version's).
    pub fn decode(stored: &[u8]) -> Option<JobRecord> {
        let text = std::str::from_utf8(stored).ok()?;
        let field = |key: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
        };
        if field("v")? != "1" {
            return None;
        }
        let outcome = match field("outcome")? {
            "done" => RunOutcome::Done,
            "failed" => RunOutcome::Failed(field("error").unwrap_or_default().to_owned()),
            _ => return None,
        };
        Some(JobRecord {
            period: field("period")?.parse().ok()?,
            outcome,
            instance: field("instance")?.to_owned(),
            duration: Duration::from_millis(field("ms")?.parse().ok()?),
            finished: field("finished")?.parse().ok()?,
            schedule: field("schedule")?.to_owned(),
            next: match field("next") {
                Some(next) => Some(next.parse().ok()?),
                None => None,
            },
        })
    }
}

/// `text` on one line and at most [`MAX_ERROR_LEN`] bytes (cut at a character boundary).
fn one_line(text: &str) -> String {
    let mut line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.len() > MAX_ERROR_LEN {
        let mut end = MAX_ERROR_LEN;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_other_values_are_not_records() {
        let record = JobRecord {
            period: 1_795_521_600,
            outcome: RunOutcome::Failed("boom\nline two".into()),
            instance: "host-a".into(),
            duration: Duration::from_millis(1234),
            finished: 1_795_521_602,
            schedule: "every 3600s".into(),
            next: Some(1_795_525_200),
        };
        let read = JobRecord::decode(&record.encode()).unwrap();
        assert_eq!(read.outcome(), &RunOutcome::Failed("boom line two".into()));
        assert_eq!(read.period_name(), "2026-11-24T12:00:00Z");
        assert_eq!(
            JobRecord {
                outcome: RunOutcome::Failed("boom\nline two".into()),
                ..read
            },
            record
        );
        for bad in [
            &b""[..],
            b"sent",
            b"v=2\nperiod=1",
            b"v=1\nperiod=x\n",
            b"\xff",
        ] {
            assert_eq!(JobRecord::decode(bad), None, "{bad:?}");
        }
        assert_eq!(one_line(&"é".repeat(150)).len(), MAX_ERROR_LEN);
    }
}
