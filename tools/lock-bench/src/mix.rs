//! W7: a realistic mix. `tasks` tasks each loop: draw a name from `names` names with a
//! Zipf(`s`) distribution, take it (waiting), hold it for `hold`, release it; until `sections`
//! sections have been started or `duration` has passed, whichever comes first. The cold names
//! are fresh acquisitions, the hot ones have waiters queued behind a holder: the mix the
//! flash-sale app sees.
//!
//! Mutual exclusion is checked in process: each name has an "inside" count, raised when an
//! acquire returns and lowered before the release starts; finding it already raised is a
//! violation (two holders of one name at once).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;

use crate::contender::Locker;
use crate::handoff::hold_for;
use crate::measure::{Cost, Frame};
use crate::monitor::{Counts, Watch};
use crate::stats::Sample;

/// Bound on one acquisition.
const WAIT: Duration = Duration::from_secs(30);
/// Bound on the tasks finishing once the run's time is up (their last sections and waits).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// A Zipf distribution over `0..n` (index 0 the most frequent): P(k) ∝ 1 / (k + 1)^s, drawn
/// by a binary search in the precomputed cumulative distribution.
#[derive(Debug)]
pub(crate) struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub(crate) fn new(n: usize, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n.max(1));
        let mut sum = 0.0;
        for k in 1..=n.max(1) {
            sum += (k as f64).powf(-s);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        // No draw may fall past the end through rounding.
        if let Some(last) = cdf.last_mut() {
            *last = 1.0;
        }
        Zipf { cdf }
    }

    /// The number of values.
    pub(crate) fn len(&self) -> usize {
        self.cdf.len()
    }

    /// The probability of index `i`.
    #[cfg(test)]
    pub(crate) fn probability(&self, i: usize) -> f64 {
        match i {
            0 => self.cdf[0],
            _ if i < self.cdf.len() => self.cdf[i] - self.cdf[i - 1],
            _ => 0.0,
        }
    }

    /// One draw: the first index whose cumulative probability exceeds a uniform [0, 1).
    pub(crate) fn sample(&self, rng: &mut impl Rng) -> usize {
        let u: f64 = rng.random();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

/// The shape of a W7 run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mix {
    pub(crate) tasks: usize,
    pub(crate) names: usize,
    /// Zipf exponent.
    pub(crate) s: f64,
    /// At most this many sections.
    pub(crate) sections: u64,
    /// At most this long (no section starts after it).
    pub(crate) duration: Duration,
    pub(crate) hold: Duration,
    /// Task t draws with `StdRng::seed_from_u64(seed + t)`: every contender sees the same names.
    pub(crate) seed: u64,
}

/// The result of a W7 run.
#[derive(Debug)]
pub(crate) struct MixRun {
    /// Acquire latencies; items are the sections completed, wall the time from the start to
    /// the last task finishing.
    pub(crate) acquire: Sample,
    /// Mean time from an acquire returning to its release starting, µs.
    pub(crate) mean_hold_us: f64,
    /// Times an acquire returned a name another task of this run was inside.
    pub(crate) violations: u64,
    /// Whether the run stopped on its time limit rather than its section count.
    pub(crate) hit_time_limit: bool,
    /// How many of the names were taken at least once.
    pub(crate) distinct_names: usize,
    /// `INFO commandstats` over the run, and the client's CPU time over it.
    pub(crate) cost: Cost,
    /// What `MONITOR` saw during the run, if watched.
    pub(crate) counts: Option<Counts>,
}

/// What the tasks share.
struct Shared {
    /// Sections started (reserved) so far; a task stops when it would exceed the count.
    started: AtomicU64,
    /// Set on the first error, so the others stop too.
    stop: AtomicBool,
    /// Per name: tasks inside it right now (0 or 1 when exclusion holds).
    inside: Vec<AtomicU32>,
    /// Per name: taken at least once.
    seen: Vec<AtomicBool>,
    violations: AtomicU64,
}

/// One task's share of a run.
struct TaskRun {
    lat: Vec<Duration>,
    hold: Duration,
    end: Instant,
}

async fn worker(
    locker: Locker,
    zipf: Arc<Zipf>,
    shared: Arc<Shared>,
    prefix: Arc<str>,
    mix: Mix,
    seed: u64,
    start: Instant,
) -> Result<TaskRun, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut lat = Vec::new();
    let mut hold = Duration::ZERO;
    let result = async {
        // Bounded: at most `mix.sections` sections in all, none started after `mix.duration`.
        while !shared.stop.load(Ordering::Relaxed)
            && start.elapsed() < mix.duration
            && shared.started.fetch_add(1, Ordering::Relaxed) < mix.sections
        {
            let i = zipf.sample(&mut rng);
            let name = format!("{prefix}:{i}");
            let t0 = Instant::now();
            let held = locker.lock(&name, WAIT).await?;
            let acquired = Instant::now();
            lat.push(acquired - t0);
            if shared.inside[i].fetch_add(1, Ordering::SeqCst) != 0 {
                shared.violations.fetch_add(1, Ordering::SeqCst);
            }
            shared.seen[i].store(true, Ordering::Relaxed);
            hold_for(mix.hold).await;
            shared.inside[i].fetch_sub(1, Ordering::SeqCst);
            hold += acquired.elapsed();
            locker.unlock(held).await?;
        }
        Ok::<(), String>(())
    }
    .await;
    if let Err(e) = result {
        shared.stop.store(true, Ordering::Relaxed);
        return Err(e);
    }
    Ok(TaskRun {
        lat,
        hold,
        end: Instant::now(),
    })
}

/// Runs the mix on names `{prefix}:{index}`; with `monitor` (the server URL), counts the
/// requests with `MONITOR`.
pub(crate) async fn run(
    locker: &Locker,
    admin: &mut MultiplexedConnection,
    monitor: Option<&str>,
    prefix: &str,
    mix: Mix,
) -> Result<MixRun, String> {
    let zipf = Arc::new(Zipf::new(mix.names, mix.s));
    let shared = Arc::new(Shared {
        started: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        inside: (0..zipf.len()).map(|_| AtomicU32::new(0)).collect(),
        seen: (0..zipf.len()).map(|_| AtomicBool::new(false)).collect(),
        violations: AtomicU64::new(0),
    });
    let prefix: Arc<str> = Arc::from(prefix);
    let watching = match monitor {
        Some(url) => Some(Watch::start(url).await?),
        None => None,
    };
    let frame = Frame::start(admin).await;
    let start = Instant::now();
    let handles: Vec<_> = (0..mix.tasks)
        .map(|t| {
            tokio::spawn(worker(
                locker.clone(),
                zipf.clone(),
                shared.clone(),
                prefix.clone(),
                mix,
                mix.seed + t as u64,
                start,
            ))
        })
        .collect();
    let mut runs = Vec::with_capacity(mix.tasks);
    let joined = tokio::time::timeout(mix.duration + DRAIN_TIMEOUT, async {
        let mut err = None;
        for h in handles {
            match h.await {
                Ok(Ok(r)) => runs.push(r),
                Ok(Err(e)) => err = err.or(Some(e)),
                Err(e) => err = err.or(Some(format!("task failed: {e}"))),
            }
        }
        err
    })
    .await;
    let joined = match joined {
        Ok(joined) => joined,
        Err(_) => {
            shared.stop.store(true, Ordering::Relaxed);
            return Err("W7 tasks did not finish in time".into());
        }
    };
    if let Some(e) = joined {
        return Err(e);
    }
    let cost = frame.stop(admin).await;
    let counts = match watching {
        Some(w) => Some(w.stop(admin, None, None, &[]).await?),
        None => None,
    };
    let end = runs.iter().map(|r| r.end).max().unwrap_or(start);
    let hold: Duration = runs.iter().map(|r| r.hold).sum();
    let lat: Vec<Duration> = runs.into_iter().flat_map(|r| r.lat).collect();
    let sections = lat.len();
    Ok(MixRun {
        acquire: Sample::new(lat, end - start),
        mean_hold_us: hold.as_secs_f64() * 1e6 / sections.max(1) as f64,
        violations: shared.violations.load(Ordering::SeqCst),
        hit_time_limit: (sections as u64) < mix.sections,
        distinct_names: shared
            .seen
            .iter()
            .filter(|s| s.load(Ordering::Relaxed))
            .count(),
        cost,
        counts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_draws_follow_the_distribution() {
        let zipf = Zipf::new(10_000, 1.0);
        // H(10,000) ≈ 9.7876: the most frequent name has ~10.2 %, the second half that.
        assert!((zipf.probability(0) - 1.0 / 9.7876).abs() < 1e-4);
        assert!((zipf.probability(1) - zipf.probability(0) / 2.0).abs() < 1e-9);
        let mut rng = StdRng::seed_from_u64(7);
        let n = 200_000;
        let mut counts = vec![0u32; zipf.len()];
        for _ in 0..n {
            counts[zipf.sample(&mut rng)] += 1;
        }
        for i in [0, 1, 9] {
            let expected = zipf.probability(i) * n as f64;
            let got = f64::from(counts[i]);
            assert!(
                (got - expected).abs() < 5.0 * expected.sqrt(),
                "index {i}: {got} draws, expected {expected:.0}"
            );
        }
        assert!(counts.iter().skip(5_000).any(|&c| c > 0));
        assert_eq!(Zipf::new(1, 1.0).sample(&mut rng), 0);
    }
}
