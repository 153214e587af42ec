//! The measuring frame every timed run of a row sits in: the server's `INFO commandstats`
//! and this process's CPU time (user + system, every thread) and, with the `allocs` feature,
//! its heap allocations, read before and after it.

use std::future::Future;

use redis::aio::MultiplexedConnection;

use crate::allocs;
use crate::monitor::{self, Counts};
use crate::stats::{CmdDelta, CmdStats};
use crate::sys::cpu_us;

/// A timed run under way: what was read at its start.
pub(crate) struct Frame {
    before: CmdStats,
    cpu0_us: f64,
    allocs0: Option<u64>,
}

/// What a timed run cost: the server's commands over it and the client's CPU.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cost {
    /// `INFO commandstats` over the run.
    pub(crate) delta: CmdDelta,
    /// This process's CPU time over the run, µs.
    pub(crate) cpu_us: f64,
    /// This process's heap allocations over the run, where counted (the `allocs` feature).
    pub(crate) allocs: Option<u64>,
}

impl Frame {
    /// Reads the server's command stats, then this process's CPU time and allocations.
    pub(crate) async fn start(admin: &mut MultiplexedConnection) -> Frame {
        let before = CmdStats::read(admin).await;
        Frame {
            before,
            cpu0_us: cpu_us(),
            allocs0: allocs::count(),
        }
    }

    /// Reads this process's CPU time and allocations, then the server's command stats, and
    /// returns the differences.
    pub(crate) async fn stop(self, admin: &mut MultiplexedConnection) -> Cost {
        let cpu_us = cpu_us() - self.cpu0_us;
        let allocs = allocs::count()
            .zip(self.allocs0)
            .map(|(now, then)| now - then);
        let delta = CmdStats::read(admin).await.since(&self.before);
        Cost {
            delta,
            cpu_us,
            allocs,
        }
    }
}

impl Cost {
    /// Adds another run's cost (W6's rounds).
    pub(crate) fn add(&mut self, other: &Cost) {
        self.delta.add(&other.delta);
        self.cpu_us += other.cpu_us;
        self.allocs = match (self.allocs, other.allocs) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
    }
}

/// A row's timed run of `items` items and its counting pass of `count_items` more, per item.
pub(crate) struct Counted<T> {
    /// What the timed run returned.
    pub(crate) out: T,
    pub(crate) cost: Cost,
    /// The counting pass's requests under `MONITOR`.
    pub(crate) counts: Counts,
    /// Server µs per item of the timed run.
    pub(crate) server_us: f64,
    /// This process's CPU µs per item of the timed run.
    pub(crate) client_us: f64,
    /// This process's heap allocations per item of the timed run, where counted.
    pub(crate) allocs: Option<f64>,
    /// Requests per item of the counting pass.
    pub(crate) requests: f64,
}

/// Runs `timed` (`items` items) in the measuring frame, then `count` (`count_items` items)
/// under `MONITOR` on `url`, and works out the per-item figures (W1, W2, R1, R2).
pub(crate) async fn timed_and_counted<T>(
    admin: &mut MultiplexedConnection,
    url: &str,
    items: usize,
    count_items: usize,
    timed: impl Future<Output = Result<T, String>>,
    count: impl Future<Output = Result<(), String>>,
) -> Result<Counted<T>, String> {
    let frame = Frame::start(admin).await;
    let out = timed.await?;
    let cost = frame.stop(admin).await;
    let watch = monitor::Watch::start(url).await?;
    count.await?;
    let counts = watch.stop(admin, None, None, &[]).await?;
    Ok(Counted {
        server_us: cost.delta.server_usec(&counts) / items as f64,
        client_us: cost.cpu_us / items as f64,
        allocs: cost.allocs.map(|n| n as f64 / items as f64),
        requests: counts.requests() as f64 / count_items as f64,
        out,
        cost,
        counts,
    })
}
