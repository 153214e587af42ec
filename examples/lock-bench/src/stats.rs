//! Latency samples and server-side cost.

use std::time::Duration;

pub(crate) struct Sample {
    sorted: Vec<Duration>,
    wall: Duration,
}

impl Sample {
    pub(crate) fn new(mut latencies: Vec<Duration>, wall: Duration) -> Self {
        latencies.sort_unstable();
        Self {
            sorted: latencies,
            wall,
        }
    }

    /// Completed items per second of wall time.
    pub(crate) fn rate(&self) -> f64 {
        self.sorted.len() as f64 / self.wall.as_secs_f64()
    }

    /// The p-th percentile latency in microseconds.
    pub(crate) fn percentile(&self, p: f64) -> f64 {
        if self.sorted.is_empty() {
            return 0.0;
        }
        let idx = ((p / 100.0) * (self.sorted.len() - 1) as f64).round() as usize;
        self.sorted[idx].as_secs_f64() * 1e6
    }
}

/// Total microseconds the server spent in commands so far (`INFO commandstats`).
pub(crate) async fn commandstats_usec(con: &mut redis::aio::MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info"))
        .filter_map(|l| l.split("usec=").nth(1))
        .filter_map(|rest| rest.split(',').next())
        .filter_map(|n| n.parse::<f64>().ok())
        .sum()
}
