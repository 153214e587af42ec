//! Metrics: what lock-core reports through the [`metrics`](https://docs.rs/metrics) facade
//! (0.24) when its `metrics` cargo feature is on.
//!
//! The feature is off by default, and then every recording call compiles to nothing. With it
//! on, lock-core records into whatever recorder the application installed (a Prometheus
//! exporter such as `metrics-exporter-prometheus`, an OpenTelemetry bridge, ...); without an
//! installed recorder the calls do nothing. The metrics are described (unit and help text) once,
//! when the first client is built: install the recorder before. The names follow the Prometheus and OpenTelemetry conventions: units in
//! the name, `_total` for counters, seconds for durations.
//!
//! ```toml
//! [dependencies]
//! lock-core = { version = "0.1", features = ["metrics"] }
//! ```
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `lock_acquisitions_total` | counter | `kind`, `outcome` | acquisition requests, by how they ended |
//! | `lock_acquire_duration_seconds` | histogram | `kind`, `outcome` | from the request's start to its result |
//! | `lock_wait_duration_seconds` | histogram | `kind` | time spent waiting for a release, only for requests that waited |
//! | `lock_hold_duration_seconds` | histogram | `kind` | from the grant to the release or the loss |
//! | `lock_waiter_wakeups_total` | counter | `kind` | times a waiting request woke up to try again (a release message, the holder's lease running out, a reconnect) |
//! | `lock_attempts_retried_total` | counter | `kind` | attempts after a request's first (contention) |
//! | `lock_renewals_total` | counter | `outcome` | holds the watchdog renewed (`ok`), could not renew (`failed`: Redis said the lock was gone, or the call failed or timed out) or renewed after the hold had already run out locally (`late`) |
//! | `lock_renewal_batch_size` | histogram | | holds per renewal call of the watchdog |
//! | `lock_batch_size` | histogram | | mutex acquisitions and releases per batched call (requests that queued behind calls in flight) |
//! | `lock_lost_total` | counter | `kind`, `reason` | held locks lost while a guard still lived |
//! | `lock_release_retries_total` | counter | | releases sent again after their answer was lost |
//! | `lock_pubsub_reconnects_total` | counter | | reconnections of the waiters' pub/sub connection |
//! | `lock_held` | gauge | `kind` | holds this process currently has (granted, not yet released or lost) |
//! | `lock_rate_limit_decisions_total` | counter | `kind` (`rate_limit`), `outcome` | rate-limit requests ([`RateLimit::check`](crate::RateLimit::check), `check_n`; lock-tower's `RateLimitLayer`), by how they ended: `allowed`, `limited`, `unavailable` (Redis could not be reached or did not answer), `invalid` (any other error) |
//! | `lock_job_runs_total` | counter | `job`, `outcome` | runs of a scheduled job ([`scheduled`](crate::scheduled)) on this instance: `done`, `failed` (every attempt failed), `lost` (the job's lock was lost: not done) |
//! | `lock_job_run_duration_seconds` | histogram | `job` | a job's run, every attempt included, for runs that ended `done` or `failed` |
//! | `lock_job_attempts_failed_total` | counter | `job` | attempts of a job's body that returned an error or panicked |
//! | `lock_job_missed_periods_total` | counter | `job` | periods a job's record showed had passed without a run (counted by the instance that found them) |
//! | `lock_job_skipped_periods_total` | counter | `job` | of those, the periods the job's missed-run policy did not run |
//! | `lock_at_risk` | gauge | `kind` | held locks whose last renewal failed while their lease still ran ([`LeaseState::AtRisk`](crate::LeaseState::AtRisk)): up when a renewal fails, down when a later one succeeds or the hold ends (lost, released) |
//!
//! Label values:
//!
//! - `kind`: `mutex`, `fair`, `read`, `write`, `semaphore`, `multi`, `rate_limit` (only on
//!   `lock_rate_limit_decisions_total`). `multi` appears only on the
//!   request metrics (acquisitions, their durations, wake-ups, retries); each name a multi-lock
//!   holds counts as a `mutex` hold in `lock_held`, `lock_hold_duration_seconds` and
//!   `lock_lost_total`. A [`RedLock`](crate::RedLock) is seen through its per-node clients: each
//!   node's fixed-lease `mutex`.
//! - `outcome` of an acquisition: `acquired`; `busy` (a single try found the lock held);
//!   `timeout` (a wait ended without the lock); `unavailable` (Redis could not be reached or
//!   did not answer: [`LockError::is_unavailable`](crate::LockError::is_unavailable));
//!   `lost` (the grant came back after its lease had run out and was given back, or a
//!   re-entry found the hold gone); `invalid` (any other error: a bad name or option, a size
//!   mismatch, a cross-slot multi-lock, a refused permission, an unexpected reply). A request
//!   whose caller goes away before its result is not counted.
//! - `reason` of a loss: `deleted` (Redis said the owner no longer holds the lock while its
//!   lease should still run: a force-unlock, a `DEL`/`FLUSHALL`, an eviction, a failover to a
//!   replica without it — found by a renewal, an extension, a re-entry or a release);
//!   `expired` (a fixed lease ran out while a guard still lived, or Redis said the lock was
//!   gone after its lease had already run out); `unreachable` (no renewal was confirmed within a
//!   watchdog lease: Redis down, paused, too slow or cut off).
//! - `family`: only with [`LockClientBuilder::metric_label`](crate::LockClientBuilder::metric_label),
//!   the label that function gives the lock's name (on every metric with a `kind`). Lock names
//!   themselves never become labels: they are unbounded.
//!
//! The same names are the constants of this module.
//!
//! # Prometheus: histograms, not summaries
//!
//! A recorder does not know which buckets suit a histogram, and some fall back on something
//! else: `metrics-exporter-prometheus` renders every histogram it has no buckets for as a
//! *summary* (quantiles per process, which cannot be added up across instances). Give it
//! [`HISTOGRAMS`], each histogram's name with its bucket bounds ([`DURATION_BUCKETS`] for
//! the durations, [`SIZE_BUCKETS`] for the batch sizes), before installing it:
//!
//! ```
//! use lock_core::metrics::HISTOGRAMS;
//! use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
//!
//! let mut builder = PrometheusBuilder::new();
//! for &(name, buckets) in HISTOGRAMS {
//!     builder = builder.set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)?;
//! }
//! let recorder = builder.build_recorder();
//! let handle = recorder.handle(); // handle.render() is the text for GET /metrics
//! // In a service: metrics::set_global_recorder(recorder)?, before the first LockClient.
//! // Here, what one hold of 4 ms looks like:
//! metrics::with_local_recorder(&recorder, || {
//!     metrics::histogram!(lock_core::metrics::HOLD_DURATION, "kind" => "mutex").record(0.004);
//! });
//! let text = handle.render();
//! assert!(text.contains(r#"lock_hold_duration_seconds_bucket{kind="mutex",le="0.005"} 1"#));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;
use tokio::time::Instant;

/// Counter `{kind, outcome}`: acquisition requests, by how they ended.
pub const ACQUISITIONS: &str = "lock_acquisitions_total";
/// Histogram `{kind, outcome}`, seconds: from a request's start to its result.
pub const ACQUIRE_DURATION: &str = "lock_acquire_duration_seconds";
/// Histogram `{kind}`, seconds: time spent waiting for a release (requests that waited).
pub const WAIT_DURATION: &str = "lock_wait_duration_seconds";
/// Histogram `{kind}`, seconds: from the grant to the release or the loss.
pub const HOLD_DURATION: &str = "lock_hold_duration_seconds";
/// Counter `{kind}`: times a waiting request woke up to try again.
pub const WAITER_WAKEUPS: &str = "lock_waiter_wakeups_total";
/// Counter `{kind}`: attempts after a request's first.
pub const ATTEMPTS_RETRIED: &str = "lock_attempts_retried_total";
/// Counter `{outcome}` (`ok`, `failed`, `late`): holds the watchdog tried to renew.
pub const RENEWALS: &str = "lock_renewals_total";
/// Histogram: holds per renewal call of the watchdog.
pub const RENEWAL_BATCH_SIZE: &str = "lock_renewal_batch_size";
/// Histogram: requests per batched call (mutex acquisitions and releases that queued).
pub const BATCH_SIZE: &str = "lock_batch_size";
/// Counter `{kind, reason}` (`expired`, `deleted`, `unreachable`): held locks lost.
pub const LOST: &str = "lock_lost_total";
/// Counter: releases sent again after their answer was lost.
pub const RELEASE_RETRIES: &str = "lock_release_retries_total";
/// Counter: reconnections of the waiters' pub/sub connection.
pub const PUBSUB_RECONNECTS: &str = "lock_pubsub_reconnects_total";
/// Gauge `{kind}`: holds this process currently has.
pub const HELD: &str = "lock_held";
/// Counter `{kind, outcome}`: rate-limit decisions, by how they ended.
pub const RATE_LIMIT_DECISIONS: &str = "lock_rate_limit_decisions_total";
/// Gauge `{kind}`: held locks whose last renewal failed while their lease still ran.
pub const AT_RISK: &str = "lock_at_risk";
/// Counter `{job, outcome}` (`done`, `failed`, `lost`): runs of a scheduled job.
pub const JOB_RUNS: &str = "lock_job_runs_total";
/// Histogram `{job}`, seconds: a job's run, every attempt included.
pub const JOB_RUN_DURATION: &str = "lock_job_run_duration_seconds";
/// Counter `{job}`: attempts of a job's body that returned an error or panicked.
pub const JOB_ATTEMPTS_FAILED: &str = "lock_job_attempts_failed_total";
/// Counter `{job}`: periods that passed without a run of the job.
pub const JOB_MISSED: &str = "lock_job_missed_periods_total";
/// Counter `{job}`: missed periods the job's policy did not run.
pub const JOB_SKIPPED: &str = "lock_job_skipped_periods_total";

/// Bucket bounds, in seconds, for [`JOB_RUN_DURATION`]: 10 ms to an hour.
pub const JOB_DURATION_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// Bucket bounds, in seconds, for the duration histograms ([`ACQUIRE_DURATION`],
/// [`WAIT_DURATION`], [`HOLD_DURATION`]): 100 µs to 10 s, about three per decade (1, 2.5, 5).
/// An uncontended acquisition takes a round trip (well under a millisecond on a LAN); waits
/// and holds run up to seconds. Longer ones land in the `+Inf` bucket.
pub const DURATION_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Bucket bounds for the batch-size histograms ([`BATCH_SIZE`], [`RENEWAL_BATCH_SIZE`]):
/// powers of two from 1 to 4,096 requests or holds per call.
pub const SIZE_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

/// Every histogram lock-core records, with the bucket bounds that suit it: give them to a
/// recorder that needs buckets (see [Prometheus](self#prometheus-histograms-not-summaries)).
pub const HISTOGRAMS: &[(&str, &[f64])] = &[
    (ACQUIRE_DURATION, DURATION_BUCKETS),
    (WAIT_DURATION, DURATION_BUCKETS),
    (HOLD_DURATION, DURATION_BUCKETS),
    (RENEWAL_BATCH_SIZE, SIZE_BUCKETS),
    (BATCH_SIZE, SIZE_BUCKETS),
    (JOB_RUN_DURATION, JOB_DURATION_BUCKETS),
];

/// The function of [`LockClientBuilder::metric_label`](crate::LockClientBuilder::metric_label).
pub(crate) type Labeler = Arc<dyn Fn(&str) -> Option<&'static str> + Send + Sync>;

/// The labels of one lock: its kind, and its family when the client maps names to one.
/// Without the feature it is empty, so a hold pays no memory for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Labels {
    #[cfg(feature = "metrics")]
    kind: &'static str,
    #[cfg(feature = "metrics")]
    family: Option<&'static str>,
}

impl Labels {
    /// The labels of a lock of `kind` named `name`, under the client's `labeler`. Without the
    /// feature the labeler is never called.
    #[inline]
    pub(crate) fn new(kind: &'static str, labeler: Option<&Labeler>, name: &str) -> Self {
        #[cfg(feature = "metrics")]
        {
            Labels {
                kind,
                family: labeler.and_then(|f| f(name)),
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = (kind, labeler, name);
            Labels {}
        }
    }

    #[cfg(feature = "metrics")]
    fn with(self, extra: Option<(&'static str, &'static str)>) -> Vec<::metrics::Label> {
        let mut labels = Vec::with_capacity(3);
        labels.push(::metrics::Label::from_static_parts("kind", self.kind));
        if let Some((key, value)) = extra {
            labels.push(::metrics::Label::from_static_parts(key, value));
        }
        if let Some(family) = self.family {
            labels.push(::metrics::Label::from_static_parts("family", family));
        }
        labels
    }
}

/// How an acquisition request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    Busy,
    Timeout,
    Unavailable,
    Lost,
    Invalid,
}

impl Outcome {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Busy => "busy",
            Outcome::Timeout => "timeout",
            Outcome::Unavailable => "unavailable",
            Outcome::Lost => "lost",
            Outcome::Invalid => "invalid",
        }
    }
}

/// Why a held lock was lost (the `reason` label; see the module docs for the mapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LossReason {
    Expired,
    Deleted,
    Unreachable,
}

impl LossReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LossReason::Expired => "expired",
            LossReason::Deleted => "deleted",
            LossReason::Unreachable => "unreachable",
        }
    }
}

/// How the watchdog's renewal of one hold went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewalOutcome {
    Ok,
    Failed,
    Late,
}

/// Every metric's name, unit and help text, for [`describe`].
#[cfg(feature = "metrics")]
const DESCRIPTIONS: [(&str, Shape, ::metrics::Unit, &str); 20] = {
    use ::metrics::Unit::{Count, Seconds};
    use Shape::{Counter, Gauge, Histogram};
    [
        (
            ACQUISITIONS,
            Counter,
            Count,
            "Lock acquisition requests, by kind and outcome",
        ),
        (
            ACQUIRE_DURATION,
            Histogram,
            Seconds,
            "Time from an acquisition request's start to its result",
        ),
        (
            WAIT_DURATION,
            Histogram,
            Seconds,
            "Time acquisition requests spent waiting for a release",
        ),
        (
            HOLD_DURATION,
            Histogram,
            Seconds,
            "Time from a lock's grant to its release or loss",
        ),
        (
            WAITER_WAKEUPS,
            Counter,
            Count,
            "Times a waiting request woke up to try again",
        ),
        (
            ATTEMPTS_RETRIED,
            Counter,
            Count,
            "Acquisition attempts after a request's first",
        ),
        (
            RENEWALS,
            Counter,
            Count,
            "Holds the watchdog renewed (ok), could not renew (failed) or renewed too late (late)",
        ),
        (
            RENEWAL_BATCH_SIZE,
            Histogram,
            Count,
            "Holds per renewal call of the watchdog",
        ),
        (BATCH_SIZE, Histogram, Count, "Requests per batched call"),
        (
            LOST,
            Counter,
            Count,
            "Held locks lost while a guard still lived, by reason",
        ),
        (
            RELEASE_RETRIES,
            Counter,
            Count,
            "Releases sent again after their answer was lost",
        ),
        (
            PUBSUB_RECONNECTS,
            Counter,
            Count,
            "Reconnections of the waiters' pub/sub connection",
        ),
        (
            RATE_LIMIT_DECISIONS,
            Counter,
            Count,
            "Rate-limit requests, by outcome (allowed, limited, unavailable, invalid)",
        ),
        (
            JOB_RUNS,
            Counter,
            Count,
            "Runs of a scheduled job, by outcome",
        ),
        (
            JOB_RUN_DURATION,
            Histogram,
            Seconds,
            "A scheduled job's run, every attempt included",
        ),
        (
            JOB_ATTEMPTS_FAILED,
            Counter,
            Count,
            "Attempts of a scheduled job's body that failed or panicked",
        ),
        (
            JOB_MISSED,
            Counter,
            Count,
            "Periods of a scheduled job that passed without a run",
        ),
        (
            JOB_SKIPPED,
            Counter,
            Count,
            "Missed periods of a scheduled job its policy did not run",
        ),
        (HELD, Gauge, Count, "Holds this process currently has"),
        (
            AT_RISK,
            Gauge,
            Count,
            "Held locks whose last renewal failed while their lease still ran",
        ),
    ]
};

/// What kind of metric a name is, for [`describe`].
#[cfg(feature = "metrics")]
#[derive(Clone, Copy)]
enum Shape {
    Counter,
    Gauge,
    Histogram,
}

/// Describes every metric (unit and help text) to the installed recorder, once per process
/// (at the first client's build; install the recorder before it).
pub(crate) fn describe() {
    #[cfg(feature = "metrics")]
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    #[cfg(feature = "metrics")]
    DESCRIBED.call_once(|| {
        use ::metrics::{describe_counter, describe_gauge, describe_histogram};
        for (name, shape, unit, help) in DESCRIPTIONS {
            match shape {
                Shape::Counter => describe_counter!(name, unit, help),
                Shape::Gauge => describe_gauge!(name, unit, help),
                Shape::Histogram => describe_histogram!(name, unit, help),
            }
        }
    });
}

/// An acquisition request that started at `started` ended now with `outcome`. (The clock is
/// read here, so without the feature nothing reads it.)
#[inline]
pub(crate) fn acquisition(labels: Labels, outcome: Outcome, started: Instant) {
    #[cfg(feature = "metrics")]
    {
        let with = labels.with(Some(("outcome", outcome.as_str())));
        ::metrics::counter!(ACQUISITIONS, with.clone()).increment(1);
        ::metrics::histogram!(ACQUIRE_DURATION, with).record(started.elapsed().as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, outcome, started);
}

/// A rate-limit request ended with `outcome` (`allowed`, `limited`, `unavailable`,
/// `invalid`).
#[inline]
pub(crate) fn rate_limit_decision(labels: Labels, outcome: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(
        RATE_LIMIT_DECISIONS,
        labels.with(Some(("outcome", outcome)))
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, outcome);
}

/// A request that started waiting at `since` stopped waiting now.
#[inline]
pub(crate) fn waited(labels: Labels, since: Instant) {
    #[cfg(feature = "metrics")]
    ::metrics::histogram!(WAIT_DURATION, labels.with(None)).record(
        Instant::now()
            .saturating_duration_since(since)
            .as_secs_f64(),
    );
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, since);
}

/// A waiting request woke up to try again.
#[inline]
pub(crate) fn wakeup(labels: Labels) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(WAITER_WAKEUPS, labels.with(None)).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = labels;
}

/// An attempt after a request's first.
#[inline]
pub(crate) fn retried(labels: Labels) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(ATTEMPTS_RETRIED, labels.with(None)).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = labels;
}

/// A hold was granted (a fresh acquisition, not a re-entry).
#[inline]
pub(crate) fn hold_started(labels: Labels) {
    #[cfg(feature = "metrics")]
    ::metrics::gauge!(HELD, labels.with(None)).increment(1.0);
    #[cfg(not(feature = "metrics"))]
    let _ = labels;
}

/// A hold granted at `granted_at` ended now (released, lost, or dropped).
#[inline]
pub(crate) fn hold_ended(labels: Labels, granted_at: Instant) {
    #[cfg(feature = "metrics")]
    {
        let with = labels.with(None);
        ::metrics::gauge!(HELD, with.clone()).decrement(1.0);
        ::metrics::histogram!(HOLD_DURATION, with).record(granted_at.elapsed().as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, granted_at);
}

/// A held lock's renewal failed while its lease still ran: it is at risk.
#[inline]
pub(crate) fn at_risk_started(labels: Labels) {
    #[cfg(feature = "metrics")]
    ::metrics::gauge!(AT_RISK, labels.with(None)).increment(1.0);
    #[cfg(not(feature = "metrics"))]
    let _ = labels;
}

/// A held lock at risk is no longer: renewed, or its hold ended.
#[inline]
pub(crate) fn at_risk_ended(labels: Labels) {
    #[cfg(feature = "metrics")]
    ::metrics::gauge!(AT_RISK, labels.with(None)).decrement(1.0);
    #[cfg(not(feature = "metrics"))]
    let _ = labels;
}

/// A held lock was lost.
#[inline]
pub(crate) fn lost(labels: Labels, reason: LossReason) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(LOST, labels.with(Some(("reason", reason.as_str())))).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, reason);
}

/// The watchdog's renewal of `holds` holds went `how`.
#[inline]
pub(crate) fn renewals(how: RenewalOutcome, holds: usize) {
    #[cfg(feature = "metrics")]
    {
        let outcome = match how {
            RenewalOutcome::Ok => "ok",
            RenewalOutcome::Failed => "failed",
            RenewalOutcome::Late => "late",
        };
        ::metrics::counter!(RENEWALS, "outcome" => outcome).increment(holds as u64);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (how, holds);
}

/// The watchdog sent one renewal call for `holds` holds.
#[inline]
pub(crate) fn renewal_batch(holds: usize) {
    #[cfg(feature = "metrics")]
    ::metrics::histogram!(RENEWAL_BATCH_SIZE).record(holds as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = holds;
}

/// A batched call carried `requests` requests.
#[inline]
pub(crate) fn batch(requests: usize) {
    #[cfg(feature = "metrics")]
    ::metrics::histogram!(BATCH_SIZE).record(requests as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = requests;
}

/// A release was sent again.
#[inline]
pub(crate) fn release_retry() {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(RELEASE_RETRIES).increment(1);
}

/// The pub/sub connection is being made again.
#[inline]
pub(crate) fn pubsub_reconnect() {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(PUBSUB_RECONNECTS).increment(1);
}

/// A run of the scheduled job `job` ended with `outcome` (`done`, `failed`, `lost`), after
/// `took` (not recorded for `lost`).
#[inline]
pub(crate) fn job_run(job: &str, outcome: &'static str, took: std::time::Duration) {
    #[cfg(feature = "metrics")]
    {
        let name = ::metrics::Label::new("job", job.to_owned());
        ::metrics::counter!(
            JOB_RUNS,
            vec![
                name.clone(),
                ::metrics::Label::from_static_parts("outcome", outcome)
            ]
        )
        .increment(1);
        if outcome != "lost" {
            ::metrics::histogram!(JOB_RUN_DURATION, vec![name]).record(took.as_secs_f64());
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (job, outcome, took);
}

/// An attempt of the scheduled job `job` failed.
#[inline]
pub(crate) fn job_attempt_failed(job: &str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(JOB_ATTEMPTS_FAILED, "job" => job.to_owned()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = job;
}

/// The scheduled job `job` found `missed` periods without a run, `skipped` of which it does
/// not run.
#[inline]
pub(crate) fn job_missed(job: &str, missed: u64, skipped: u64) {
    #[cfg(feature = "metrics")]
    {
        ::metrics::counter!(JOB_MISSED, "job" => job.to_owned()).increment(missed);
        ::metrics::counter!(JOB_SKIPPED, "job" => job.to_owned()).increment(skipped);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (job, missed, skipped);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_histogram_has_increasing_positive_buckets() {
        for &(name, buckets) in HISTOGRAMS {
            assert!(!buckets.is_empty(), "{name}");
            assert!(buckets[0] > 0.0, "{name}");
            assert!(buckets.windows(2).all(|w| w[0] < w[1]), "{name}");
        }
        let mut names: Vec<&str> = HISTOGRAMS.iter().map(|&(name, _)| name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), HISTOGRAMS.len());
    }
}
