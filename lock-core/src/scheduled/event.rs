//! [`JobEvent`]: what a job's runner did, as [`JobHandle::events`](super::JobHandle::events)
//! tells it.

use std::time::{Duration, SystemTime};

/// What a job's runner on this instance did. Periods are named by their start, on the
/// server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobEvent {
    /// This instance started a run of `period` (its first attempt), holding the job's lock
    /// with fencing token `token`.
    Started {
        /// The period's start.
        period: SystemTime,
        /// The run's fencing token.
        token: u64,
    },
    /// The run of `period` ended with `Ok`, and its record was written.
    Done {
        /// The period's start.
        period: SystemTime,
        /// The run's fencing token.
        token: u64,
        /// From its first attempt's start to its end.
        duration: Duration,
    },
    /// Every attempt of the run of `period` failed, and its record (which says so) was
    /// written.
    Failed {
        /// The period's start.
        period: SystemTime,
        /// The run's fencing token.
        token: u64,
        /// The last attempt's error.
        error: String,
    },
    /// An attempt of the run of `period` returned an error or panicked; another follows
    /// unless `last`.
    AttemptFailed {
        /// The period's start.
        period: SystemTime,
        /// Which attempt (1 = the first).
        attempt: u32,
        /// The error's text (`panicked: ...` for a panic).
        error: String,
        /// Whether it was the last attempt: then the record says the run failed.
        last: bool,
    },
    /// The job's lock was lost while `period` ran (or a newer holder's record refused its
    /// record): the body was stopped and the run is not reported done.
    Lost {
        /// The period's start.
        period: SystemTime,
    },
    /// The record said `count` periods passed without a run; `skipped` of them are not run
    /// (by the [`Missed`](super::Missed) policy).
    Missed {
        /// How many periods passed without a run.
        count: u64,
        /// How many of them will not run.
        skipped: u64,
    },
    /// Redis could not be reached or refused a call (the error's text); the runner tries
    /// again after a second.
    Unavailable {
        /// The error's text.
        error: String,
    },
    /// The runner stopped (its handle was stopped or dropped, or the client shut down).
    Stopped,
}
