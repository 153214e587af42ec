//! [`Missed`]: what a job does about periods that passed without a run, and the plan it makes
//! from its record when it gets its lock.

use super::schedule::Schedule;

/// The most missed periods [`Missed::Each`] runs after one gap: 1 000.
pub const MAX_CATCH_UP: u32 = 1000;

/// What a job does about the periods that passed while nobody could run them (Redis down,
/// every instance stopped, a run that overran them): the periods after the last one its record
/// says was run, before the current one. Default: [`Missed::Skip`].
///
/// Whichever it is, the missed periods are counted (metric `lock_job_missed_periods_total`,
/// event [`JobEvent::Missed`](super::JobEvent::Missed)) and a warning is logged; those not
/// run are counted again as skipped (`lock_job_skipped_periods_total`). The current period
/// always runs (once), after the missed ones that run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Missed {
    /// Run none of them: only the current period runs.
    #[default]
    Skip,
    /// Run the latest missed period once (the others are skipped), then the current one.
    Latest,
    /// Run each missed period, oldest first, up to `up_to` of them (the latest ones; the
    /// older are skipped), then the current one. `up_to` is at most [`MAX_CATCH_UP`] (a larger
    /// value counts as that).
    Each {
        /// How many missed periods at most.
        up_to: u32,
    },
}

impl Missed {
    /// How many of the missed periods it runs at most.
    fn runs(self) -> usize {
        match self {
            Missed::Skip => 0,
            Missed::Latest => 1,
            Missed::Each { up_to } => up_to.min(MAX_CATCH_UP) as usize,
        }
    }
}

/// What a run under the job's lock does: the periods to run, oldest first (the current one
/// last), and how many were missed and skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) run: Vec<u64>,
    pub(crate) missed: u64,
    pub(crate) skipped: u64,
}

impl Plan {
    /// The plan for the period starting at `current`, when the record says the last period
    /// run started at `last` (None: the job never ran, or its record expired: nothing was
    /// missed). A current period the record already has is not run again.
    pub(crate) fn make(
        schedule: &Schedule,
        missed: Missed,
        last: Option<u64>,
        current: u64,
    ) -> Plan {
        let Some(last) = last else {
            return Plan {
                run: vec![current],
                missed: 0,
                skipped: 0,
            };
        };
        if last >= current {
            return Plan {
                run: vec![],
                missed: 0,
                skipped: 0,
            };
        }
        let (count, mut run) = schedule.missed_between(last, current, missed.runs());
        let skipped = count - run.len() as u64;
        run.push(current);
        Plan {
            run,
            missed: count,
            skipped,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn plan(missed: Missed, last: Option<u64>, current: u64) -> (Vec<u64>, u64, u64) {
        let s = Schedule::every(Duration::from_secs(10)).unwrap();
        let p = Plan::make(&s, missed, last, current);
        (p.run, p.missed, p.skipped)
    }

    #[test]
    fn each_policy_runs_what_it_says_after_a_gap_of_five() {
        assert_eq!(plan(Missed::Skip, Some(100), 160), (vec![160], 5, 5));
        assert_eq!(plan(Missed::Latest, Some(100), 160), (vec![150, 160], 5, 4));
        assert_eq!(
            plan(Missed::Each { up_to: 3 }, Some(100), 160),
            (vec![130, 140, 150, 160], 5, 2)
        );
        assert_eq!(
            plan(Missed::Each { up_to: 9 }, Some(100), 160),
            (vec![110, 120, 130, 140, 150, 160], 5, 0)
        );
    }

    #[test]
    fn no_gap_no_record_and_a_done_period() {
        for missed in [Missed::Skip, Missed::Latest, Missed::Each { up_to: 5 }] {
            assert_eq!(plan(missed, Some(150), 160), (vec![160], 0, 0));
            assert_eq!(plan(missed, None, 160), (vec![160], 0, 0));
            assert_eq!(plan(missed, Some(160), 160), (vec![], 0, 0));
        }
    }
}
