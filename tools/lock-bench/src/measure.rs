//! The measuring frame every timed run of a row sits in: the server's `INFO commandstats`
//! and this process's CPU time (user + system, every thread), read before and after it.

use redis::aio::MultiplexedConnection;

use crate::stats::{CmdDelta, CmdStats};
use crate::sys::cpu_us;

/// A timed run under way: what was read at its start.
pub(crate) struct Frame {
    before: CmdStats,
    cpu0_us: f64,
}

/// What a timed run cost: the server's commands over it and the client's CPU.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cost {
    /// `INFO commandstats` over the run.
    pub(crate) delta: CmdDelta,
    /// This process's CPU time over the run, µs.
    pub(crate) cpu_us: f64,
}

impl Frame {
    /// Reads the server's command stats, then this process's CPU time.
    pub(crate) async fn start(admin: &mut MultiplexedConnection) -> Frame {
        let before = CmdStats::read(admin).await;
        Frame {
            before,
            cpu0_us: cpu_us(),
        }
    }

    /// Reads this process's CPU time, then the server's command stats, and returns the
    /// differences.
    pub(crate) async fn stop(self, admin: &mut MultiplexedConnection) -> Cost {
        let cpu_us = cpu_us() - self.cpu0_us;
        let delta = CmdStats::read(admin).await.since(&self.before);
        Cost { delta, cpu_us }
    }
}

impl Cost {
    /// Adds another run's cost (W6's rounds).
    pub(crate) fn add(&mut self, other: &Cost) {
        self.delta.add(&other.delta);
        self.cpu_us += other.cpu_us;
    }
}
