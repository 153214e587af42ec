//! Latency samples and what the server did (`INFO commandstats`).

use std::collections::BTreeMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::monitor::Counts;

/// Latencies of a run and the wall time it took.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    /// Latencies in nanoseconds, sorted.
    sorted: Vec<u64>,
    /// How many items the run completed (may differ from the number of latencies: the first
    /// critical section of a hand-off run has no hand-off before it).
    items: usize,
    wall: Duration,
}

impl Sample {
    pub(crate) fn new(latencies: Vec<Duration>, wall: Duration) -> Self {
        let ns = latencies.iter().map(|d| d.as_nanos() as u64).collect();
        let items = latencies.len();
        Self::from_ns(ns, items, wall)
    }

    pub(crate) fn from_ns(mut ns: Vec<u64>, items: usize, wall: Duration) -> Self {
        ns.sort_unstable();
        Self {
            sorted: ns,
            items,
            wall,
        }
    }

    /// Several runs' samples as one: every latency, every item, the wall times added.
    pub(crate) fn pooled(samples: &[&Sample]) -> Self {
        let ns = samples
            .iter()
            .flat_map(|s| s.sorted.iter().copied())
            .collect();
        let items = samples.iter().map(|s| s.items).sum();
        let wall = samples.iter().map(|s| s.wall).sum();
        Self::from_ns(ns, items, wall)
    }

    /// Completed items per second of wall time.
    pub(crate) fn rate(&self) -> f64 {
        let s = self.wall.as_secs_f64();
        if s > 0.0 { self.items as f64 / s } else { 0.0 }
    }

    pub(crate) fn items(&self) -> usize {
        self.items
    }

    pub(crate) fn len(&self) -> usize {
        self.sorted.len()
    }

    /// The p-th percentile latency in microseconds (nearest rank).
    pub(crate) fn percentile(&self, p: f64) -> f64 {
        if self.sorted.is_empty() {
            return f64::NAN;
        }
        let idx = ((p / 100.0) * (self.sorted.len() - 1) as f64).round() as usize;
        self.sorted[idx] as f64 / 1e3
    }

    /// Mean latency in microseconds.
    pub(crate) fn mean(&self) -> f64 {
        if self.sorted.is_empty() {
            return f64::NAN;
        }
        self.sorted.iter().sum::<u64>() as f64 / self.sorted.len() as f64 / 1e3
    }

    /// `(latency µs, fraction of samples <= it)` at up to `points` points, for a CDF plot.
    pub(crate) fn cdf(&self, points: usize) -> Vec<(f64, f64)> {
        let n = self.sorted.len();
        if n == 0 {
            return Vec::new();
        }
        let step = (n / points.max(1)).max(1);
        let mut out: Vec<(f64, f64)> = (0..n)
            .step_by(step)
            .map(|i| (self.sorted[i] as f64 / 1e3, (i + 1) as f64 / n as f64))
            .collect();
        out.push((self.sorted[n - 1] as f64 / 1e3, 1.0));
        out
    }

    /// The latencies in microseconds, sorted, for the JSON file.
    pub(crate) fn raw_us(&self) -> Vec<f64> {
        self.sorted
            .iter()
            .map(|&ns| (ns as f64 / 10.0).round() / 100.0)
            .collect()
    }

    pub(crate) fn summary(&self) -> serde_json::Value {
        serde_json::json!({
            "items": self.items,
            "wall_s": self.wall.as_secs_f64(),
            "per_s": self.rate(),
            "samples": self.len(),
            "mean_us": self.mean(),
            "p50_us": self.percentile(50.0),
            "p90_us": self.percentile(90.0),
            "p99_us": self.percentile(99.0),
            "max_us": self.percentile(100.0),
        })
    }
}

/// The median of the finite values of `xs` (the mean of the middle two for an even count);
/// NaN if there is none.
pub(crate) fn median(xs: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = xs.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The smallest and largest finite values of `xs`; `None` if there is none.
pub(crate) fn range(xs: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    xs.into_iter()
        .filter(|x| x.is_finite())
        .fold(None, |acc, x| match acc {
            None => Some((x, x)),
            Some((lo, hi)) => Some((lo.min(x), hi.max(x))),
        })
}

/// A snapshot of `INFO commandstats`: command -> (calls, µs).
#[derive(Clone, Debug, Default)]
pub(crate) struct CmdStats(BTreeMap<String, (u64, u64)>);

impl CmdStats {
    pub(crate) async fn read(con: &mut MultiplexedConnection) -> Self {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(con)
            .await
            .expect("INFO commandstats");
        let mut map = BTreeMap::new();
        for line in info.lines() {
            let Some(rest) = line.strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            map.insert(name.to_owned(), (field("calls="), field("usec=")));
        }
        Self(map)
    }

    /// What happened between `before` and this snapshot.
    pub(crate) fn since(&self, before: &CmdStats) -> CmdDelta {
        let mut map = BTreeMap::new();
        for (name, &(calls, usec)) in &self.0 {
            let (c0, u0) = before.0.get(name).copied().unwrap_or((0, 0));
            if calls > c0 {
                map.insert(name.clone(), (calls - c0, usec.saturating_sub(u0)));
            }
        }
        CmdDelta(map)
    }
}

/// Commands run between two snapshots.
#[derive(Clone, Debug, Default)]
pub(crate) struct CmdDelta(BTreeMap<String, (u64, u64)>);

/// Whether a command is one a client sends over the network rather than one a Lua script
/// calls, for commands the `MONITOR` counting pass did not see (see [`crate::monitor`]).
fn is_request(cmd: &str) -> bool {
    matches!(
        cmd,
        "eval"
            | "evalsha"
            | "eval_ro"
            | "evalsha_ro"
            | "fcall"
            | "fcall_ro"
            | "subscribe"
            | "unsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "ping"
            | "hello"
            | "select"
    ) || cmd.starts_with("client|")
        || cmd.starts_with("script|")
}

impl CmdDelta {
    /// Server time spent on client requests, in µs. `INFO commandstats` times a script
    /// including the commands it calls and times those commands again, so each command's time
    /// counts only for the share of its calls that clients sent, as the counting pass saw.
    pub(crate) fn server_usec(&self, learned: &Counts) -> f64 {
        self.0
            .iter()
            .map(|(c, &(_, usec))| {
                let share = learned
                    .share(c)
                    .unwrap_or(if is_request(c) { 1.0 } else { 0.0 });
                usec as f64 * share
            })
            .sum()
    }

    /// Adds another run's commands to these (W6 times each variant in several rounds).
    pub(crate) fn add(&mut self, other: &CmdDelta) {
        for (name, &(calls, usec)) in &other.0 {
            let e = self.0.entry(name.clone()).or_default();
            e.0 += calls;
            e.1 += usec;
        }
    }

    /// Calls of the named commands.
    pub(crate) fn calls(&self, names: &[&str]) -> u64 {
        names
            .iter()
            .filter_map(|n| self.0.get(*n))
            .map(|&(calls, _)| calls)
            .sum()
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        let mut obj = serde_json::Map::new();
        for (name, &(calls, usec)) in &self.0 {
            if name == "info" {
                continue;
            }
            obj.insert(
                name.clone(),
                serde_json::json!({"calls": calls, "usec": usec}),
            );
        }
        serde_json::Value::Object(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range() {
        assert_eq!(median([3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median([4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median([f64::NAN]).is_nan());
        assert_eq!(median([f64::NAN, 5.0]), 5.0);
        assert_eq!(range([3.0, 1.0, 2.0]), Some((1.0, 3.0)));
    }
}
