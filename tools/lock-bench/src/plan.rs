//! How much of each scenario a run does (`--quick`: a quarter; X1: 3 s a row instead of 10).

use std::time::Duration;

use crate::mix;

/// How much of each scenario to run.
pub(crate) struct Plan {
    pub(crate) w1_cycles: usize,
    pub(crate) w2_cycles: usize,
    pub(crate) w2_tasks: usize,
    pub(crate) w3_tasks: usize,
    pub(crate) w3_sections: u64,
    pub(crate) w3x_procs: usize,
    pub(crate) w3_hold: Duration,
    pub(crate) w4_trials: usize,
    pub(crate) w4_hold: Duration,
    pub(crate) w5_locks: usize,
    pub(crate) w5_lease: Duration,
    pub(crate) w5_periods: u32,
    pub(crate) w6_requests: usize,
    pub(crate) w6_concurrency: usize,
    pub(crate) w7: mix::Mix,
    /// X1's client processes (`--x1-procs`).
    pub(crate) x1_procs: usize,
    /// X1's tasks per process.
    pub(crate) x1_tasks: usize,
    /// X1's window per row.
    pub(crate) x1_duration: Duration,
}

impl Plan {
    pub(crate) fn new(quick: bool) -> Self {
        let q = if quick { 4 } else { 1 };
        Plan {
            w1_cycles: 20_000 / q,
            w2_cycles: 100_000 / q,
            w2_tasks: 64,
            w3_tasks: 16,
            w3_sections: 2_000 / q as u64,
            w3x_procs: 4,
            w3_hold: Duration::from_millis(1),
            w4_trials: if quick { 10 } else { 20 },
            w4_hold: Duration::from_millis(100),
            w5_locks: 100_000 / q,
            // A period is lease / 3. 100,000 locks on a 3 s lease are 100,000 key renewals a
            // second, which saturate a single Redis core on this kind of machine (all three
            // contenders lost locks that way); 9 s keeps the full run near the quick one's rate.
            w5_lease: Duration::from_secs(if quick { 3 } else { 9 }),
            w5_periods: 3,
            w6_requests: if quick { 2_000 } else { 10_000 },
            w6_concurrency: 32,
            w7: mix::Mix {
                tasks: 64,
                names: 10_000,
                s: 1.0,
                sections: 200_000 / q as u64,
                duration: Duration::from_secs(30) / q as u32,
                hold: Duration::from_millis(1),
                seed: 7,
            },
            x1_procs: 4,
            x1_tasks: 16,
            x1_duration: Duration::from_secs(if quick { 3 } else { 10 }),
        }
    }
}
