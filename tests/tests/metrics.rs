//! lock-core's metrics (the `metrics` feature, on for this suite) against a real redis-server:
//! every acquisition outcome, the held gauge, hold and wait durations, losses by reason,
//! renewal failures and the at-risk gauge.
//!
//! One `DebuggingRecorder` is installed for the whole test binary. Each test's client maps every
//! lock name to a `family` label of its own ([`LockClientBuilder::metric_label`]), so tests
//! running at once never read each other's per-lock metrics; the client-wide ones (renewals)
//! are compared as deltas of counters that only grow.

use std::collections::HashMap;
use std::future::IntoFuture;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use lock_core::metrics as names;
use lock_core::{LockClient, LockError};
use lock_tests::{RedisServer, unique_name};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// Everything recorded so far, summed over snapshots (a snapshot drains the recorder).
#[derive(Default)]
struct Recorded {
    values: HashMap<String, f64>,
    histograms: HashMap<String, Vec<f64>>,
    /// Names seen with a description.
    described: std::collections::HashSet<String>,
}

fn snapshotter() -> &'static (Snapshotter, Mutex<Recorded>) {
    static RECORDER: OnceLock<(Snapshotter, Mutex<Recorded>)> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        (snapshotter, Mutex::new(Recorded::default()))
    })
}

/// `name{k=v,...}` with the labels sorted.
fn id(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

/// Takes a snapshot into the accumulated record and runs `read` on it.
fn read<T>(read: impl FnOnce(&Recorded) -> T) -> T {
    let (snapshotter, recorded) = snapshotter();
    let mut recorded = recorded.lock().unwrap_or_else(|e| e.into_inner());
    for (key, _, description, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if description.is_some() {
            recorded.described.insert(key.name().to_owned());
        }
        let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
        let id = id(key.name(), &labels);
        match value {
            // A snapshot also resets counters and gauges to 0; lock-core only adds to them
            // (the held gauge goes up and down by one), so their sums are their values.
            DebugValue::Counter(n) => *recorded.values.entry(id).or_default() += n as f64,
            DebugValue::Gauge(g) => *recorded.values.entry(id).or_default() += g.0,
            DebugValue::Histogram(values) => recorded
                .histograms
                .entry(id)
                .or_default()
                .extend(values.into_iter().map(|v| v.0)),
        }
    }
    read(&recorded)
}

/// A counter's or gauge's value (0 when never recorded).
fn value(name: &str, labels: &[(&str, &str)]) -> f64 {
    read(|r| r.values.get(&id(name, labels)).copied().unwrap_or(0.0))
}

/// A histogram's values so far.
fn observed(name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    read(|r| {
        r.histograms
            .get(&id(name, labels))
            .cloned()
            .unwrap_or_default()
    })
}

/// A client whose every lock is in the metric family `family`.
async fn client(server: &RedisServer, family: &'static str, lease: Duration) -> LockClient {
    snapshotter();
    LockClient::builder(&server.url())
        .watchdog_lease(lease)
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_millis(500))
        .metric_label(move |_| Some(family))
        .build()
        .await
        .unwrap()
}

/// A family label of its own for one test.
fn family(test: &str) -> &'static str {
    Box::leak(unique_name(test).into_boxed_str())
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn acquired_busy_and_the_held_gauge() {
    let server = RedisServer::start();
    let f = family("acquired");
    let (a, b) = (
        client(&server, f, 30 * SECOND).await,
        client(&server, f, 30 * SECOND).await,
    );
    let acquisitions = |outcome| {
        value(
            names::ACQUISITIONS,
            &[("kind", "mutex"), ("outcome", outcome), ("family", f)],
        )
    };
    let held = || value(names::HELD, &[("kind", "mutex"), ("family", f)]);

    let guard = a.lock("order:1").await.unwrap();
    assert_eq!(acquisitions("acquired"), 1.0);
    assert_eq!(held(), 1.0);

    assert!(b.try_lock("order:1").await.unwrap().is_none());
    assert_eq!(acquisitions("busy"), 1.0);
    assert_eq!(acquisitions("timeout"), 0.0);
    let busy_took = observed(
        names::ACQUIRE_DURATION,
        &[("kind", "mutex"), ("outcome", "busy"), ("family", f)],
    );
    assert_eq!(busy_took.len(), 1, "{busy_took:?}");

    // A re-entry is not a second hold.
    lock_core::reentrant(async {
        let outer = a.lock("order:2").await.unwrap();
        let inner = a.lock("order:2").await.unwrap();
        assert_eq!(held(), 2.0);
        inner.unlock().await.unwrap();
        outer.unlock().await.unwrap();
    })
    .await;
    assert_eq!(held(), 1.0);

    guard.unlock().await.unwrap();
    assert_eq!(held(), 0.0, "the gauge is back to 0 after the release");
    let holds = observed(names::HOLD_DURATION, &[("kind", "mutex"), ("family", f)]);
    assert_eq!(holds.len(), 2, "one per hold: {holds:?}");

    // Other kinds carry their own label; a multi-lock's names are mutex holds.
    let permit = a.semaphore("exports", 2).acquire(1).await.unwrap();
    assert_eq!(
        value(names::HELD, &[("kind", "semaphore"), ("family", f)]),
        1.0
    );
    permit.unlock().await.unwrap();
    assert_eq!(
        value(names::HELD, &[("kind", "semaphore"), ("family", f)]),
        0.0
    );
    let both = a.multi_lock(["m:1", "m:2"]).lock().await.unwrap();
    assert_eq!(
        value(
            names::ACQUISITIONS,
            &[("kind", "multi"), ("outcome", "acquired"), ("family", f)]
        ),
        1.0
    );
    assert_eq!(held(), 2.0);
    both.unlock().await.unwrap();
    assert_eq!(held(), 0.0);
}

#[tokio::test]
async fn a_wait_that_ends_without_the_lock_is_a_timeout_and_waited() {
    let server = RedisServer::start();
    let f = family("timeout");
    let (a, b) = (
        client(&server, f, 30 * SECOND).await,
        client(&server, f, 30 * SECOND).await,
    );
    let guard = a.lock("order:1").await.unwrap();
    let wait = Duration::from_millis(200);
    let err = b.lock("order:1").wait(wait).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(
        value(
            names::ACQUISITIONS,
            &[("kind", "mutex"), ("outcome", "timeout"), ("family", f)]
        ),
        1.0
    );
    let waited = observed(names::WAIT_DURATION, &[("kind", "mutex"), ("family", f)]);
    assert_eq!(waited.len(), 1, "{waited:?}");
    assert!(
        waited[0] >= 0.1 && waited[0] < 10.0,
        "waited about the wait: {waited:?}"
    );
    assert!(
        value(names::ATTEMPTS_RETRIED, &[("kind", "mutex"), ("family", f)]) >= 1.0,
        "a waiter tries again once subscribed"
    );
    // A waiter woken by the release (once the first request's subscription is gone, so the
    // next one seen is the waiter's).
    lock_tests::fixtures::eventually("the first subscription ended", || {
        server.pubsub_channels().is_empty()
    })
    .await;
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("order:1").wait(10 * SECOND).await }
    });
    lock_tests::fixtures::eventually("the waiter subscribed", || {
        !server.pubsub_channels().is_empty()
    })
    .await;
    guard.unlock().await.unwrap();
    waiter.await.unwrap().unwrap().unlock().await.unwrap();
    assert!(
        value(names::WAITER_WAKEUPS, &[("kind", "mutex"), ("family", f)]) >= 1.0,
        "the waiter was woken"
    );
    assert_eq!(
        observed(names::WAIT_DURATION, &[("kind", "mutex"), ("family", f)]).len(),
        2,
        "one more request waited"
    );
    // Every histogram recorded so far (acquire, wait and hold times among them) has bucket
    // bounds in `HISTOGRAMS`, so a Prometheus recorder set up from it renders no summary.
    // (The guide's operating chapter has a doc test that renders one with those buckets.)
    let histograms: std::collections::BTreeSet<String> = read(|r| {
        r.histograms
            .keys()
            .filter_map(|id| id.split('{').next())
            .map(str::to_owned)
            .collect()
    });
    assert!(histograms.contains(names::HOLD_DURATION), "{histograms:?}");
    for name in &histograms {
        assert!(
            names::HISTOGRAMS.iter().any(|&(n, _)| n == name),
            "{name} has no buckets in HISTOGRAMS"
        );
    }
}

#[tokio::test]
async fn bad_input_is_invalid_and_an_outage_unavailable() {
    let mut server = RedisServer::start();
    let f = family("invalid");
    let a = client(&server, f, 30 * SECOND).await;
    let err = a.lock("bad name").await.unwrap_err();
    assert!(matches!(err, LockError::InvalidName { .. }), "{err}");
    assert_eq!(
        value(
            names::ACQUISITIONS,
            &[("kind", "mutex"), ("outcome", "invalid"), ("family", f)]
        ),
        1.0
    );
    server.kill();
    let err = a.try_lock("order:1").await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert_eq!(
        value(
            names::ACQUISITIONS,
            &[("kind", "mutex"), ("outcome", "unavailable"), ("family", f)]
        ),
        1.0
    );
}

#[tokio::test]
async fn a_deleted_key_is_a_loss_and_a_failed_renewal() {
    let server = RedisServer::start();
    let f = family("deleted");
    let a = client(&server, f, Duration::from_millis(300)).await;
    let failed_before = value(names::RENEWALS, &[("outcome", "failed")]);
    let guard = a.lock("order:1").await.unwrap();
    server.cmd(&["DEL", "lock:{order:1}"]);
    tokio::time::timeout(10 * SECOND, guard.lost())
        .await
        .expect("the watchdog finds the key gone within a period");
    assert_eq!(
        value(
            names::LOST,
            &[("kind", "mutex"), ("reason", "deleted"), ("family", f)]
        ),
        1.0
    );
    assert_eq!(value(names::HELD, &[("kind", "mutex"), ("family", f)]), 0.0);
    assert!(value(names::RENEWALS, &[("outcome", "failed")]) > failed_before);
    assert!(!observed(names::RENEWAL_BATCH_SIZE, &[]).is_empty());
    drop(guard);
}

#[tokio::test]
async fn a_fixed_lease_that_runs_out_is_expired() {
    let server = RedisServer::start();
    let f = family("expired");
    let a = client(&server, f, 30 * SECOND).await;
    let guard = a
        .lock("order:1")
        .lease(Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::timeout(10 * SECOND, guard.lost())
        .await
        .expect("a fixed lease runs out");
    assert_eq!(
        value(
            names::LOST,
            &[("kind", "mutex"), ("reason", "expired"), ("family", f)]
        ),
        1.0
    );
    assert_eq!(value(names::HELD, &[("kind", "mutex"), ("family", f)]), 0.0);
    drop(guard);
}

#[tokio::test]
async fn renewals_failing_while_the_server_is_down_lose_the_lock_as_unreachable() {
    let mut server = RedisServer::start();
    let f = family("unreachable");
    let a = client(&server, f, Duration::from_millis(300)).await;
    let failed_before = value(names::RENEWALS, &[("outcome", "failed")]);
    let guard = a.lock("order:1").await.unwrap();
    server.kill();
    tokio::time::timeout(10 * SECOND, guard.lost())
        .await
        .expect("no renewal is confirmed within the lease");
    assert_eq!(
        value(
            names::LOST,
            &[("kind", "mutex"), ("reason", "unreachable"), ("family", f)]
        ),
        1.0
    );
    assert_eq!(value(names::HELD, &[("kind", "mutex"), ("family", f)]), 0.0);
    assert_eq!(
        value(names::AT_RISK, &[("kind", "mutex"), ("family", f)]),
        0.0,
        "a lost lock is no longer at risk"
    );
    assert!(
        value(names::RENEWALS, &[("outcome", "failed")]) > failed_before,
        "the renewals failed"
    );
    drop(guard);
}

#[tokio::test]
async fn a_failed_renewal_is_at_risk_in_the_gauge_until_one_succeeds() {
    let mut server = RedisServer::start();
    let f = family("at-risk");
    let a = client(&server, f, 3 * SECOND).await;
    let at_risk = || value(names::AT_RISK, &[("kind", "mutex"), ("family", f)]);
    let guard = a.lock("order:1").await.unwrap();
    let mut watch = guard.watch_lease();
    assert_eq!(at_risk(), 0.0);
    server.pause();
    let changed = tokio::time::timeout(10 * SECOND, watch.changed()).await;
    let state = changed.expect("a renewal fails while the server is stopped");
    assert_eq!(state, lock_core::LeaseState::AtRisk);
    assert_eq!(at_risk(), 1.0);
    server.resume();
    let state = tokio::time::timeout(10 * SECOND, watch.changed())
        .await
        .expect("a renewal succeeds once it answers again");
    assert_eq!(state, lock_core::LeaseState::Held);
    assert_eq!(at_risk(), 0.0);
    assert!(guard.unlock().await.unwrap());
}

#[tokio::test]
async fn the_metrics_are_described() {
    let server = RedisServer::start();
    let f = family("described");
    let a = client(&server, f, 30 * SECOND).await;
    a.lock("order:1").await.unwrap().unlock().await.unwrap();
    for name in [
        names::ACQUISITIONS,
        names::ACQUIRE_DURATION,
        names::HOLD_DURATION,
        names::HELD,
        names::AT_RISK,
        names::RATE_LIMIT_DECISIONS,
    ] {
        assert!(
            read(|r| r.described.contains(name)),
            "{name} has a description"
        );
    }
}

#[tokio::test]
async fn rate_limit_decisions_are_counted_by_outcome() {
    let server = RedisServer::start();
    let f = family("rate");
    let a = client(&server, f, 30 * SECOND).await;
    let decisions = |outcome| {
        value(
            names::RATE_LIMIT_DECISIONS,
            &[("kind", "rate_limit"), ("outcome", outcome), ("family", f)],
        )
    };
    let limit = a.rate_limit("buyer:1").per(60 * SECOND, 2);
    for _ in 0..3 {
        limit.check().await.unwrap();
    }
    assert!(limit.check_n(3).await.is_err());
    assert_eq!(decisions("allowed"), 2.0);
    assert_eq!(decisions("limited"), 1.0);
    assert_eq!(decisions("invalid"), 1.0);
    assert_eq!(decisions("unavailable"), 0.0);
}

#[tokio::test]
async fn requests_that_queue_go_out_as_counted_batches() {
    let server = RedisServer::start();
    let f = family("batch");
    // Batches are the scripts' (the native protocol's calls cost the server little each).
    snapshotter();
    let a = LockClient::builder(&server.url())
        .mutex_protocol(lock_core::MutexProtocol::Scripted)
        .metric_label(move |_| Some(f))
        .build()
        .await
        .unwrap();
    // 64 requests at once: two go out alone, the rest queue behind them and go out together.
    let lock_names: Vec<String> = (0..64).map(|i| format!("order:{i}")).collect();
    let guards =
        futures_util::future::join_all(lock_names.iter().map(|n| a.lock(n.as_str()).into_future()))
            .await;
    assert!(guards.iter().all(Result::is_ok));
    assert_eq!(
        value(names::HELD, &[("kind", "mutex"), ("family", f)]),
        64.0
    );
    assert!(
        observed(names::BATCH_SIZE, &[]).iter().any(|n| *n >= 2.0),
        "a batch of more than one request"
    );
    drop(guards);
    lock_tests::fixtures::eventually("every lock released", || {
        value(names::HELD, &[("kind", "mutex"), ("family", f)]) == 0.0
    })
    .await;
}

#[tokio::test]
async fn a_killed_pubsub_connection_is_a_reconnect() {
    let server = RedisServer::start();
    let f = family("reconnect");
    let (a, b) = (
        client(&server, f, 30 * SECOND).await,
        client(&server, f, 30 * SECOND).await,
    );
    let before = value(names::PUBSUB_RECONNECTS, &[]);
    let guard = a.lock("order:1").await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("order:1").wait(20 * SECOND).await }
    });
    lock_tests::fixtures::eventually("subscribed", || !server.pubsub_channels().is_empty()).await;
    server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    lock_tests::fixtures::eventually("the reconnect counted", || {
        value(names::PUBSUB_RECONNECTS, &[]) > before
    })
    .await;
    guard.unlock().await.unwrap();
    waiter.await.unwrap().unwrap().unlock().await.unwrap();
}

/// A scheduled job's runs by outcome, its failed attempts and its run durations, labelled by
/// the job's name.
#[tokio::test]
async fn a_jobs_runs_and_failed_attempts_are_counted() {
    use lock_core::scheduled::{JobEvent, Schedule};
    let server = RedisServer::start();
    let a = client(&server, family("jobs"), 30 * SECOND).await;
    let job = unique_name("job");
    let attempts = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = attempts.clone();
    let handle = a
        .job(
            job.clone(),
            Schedule::every(Duration::from_secs(3600)).unwrap(),
        )
        .backoff(Duration::from_millis(10))
        .start(move |_run| {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { if n == 0 { Err("first") } else { Ok(()) } }
        })
        .unwrap();
    let mut events = handle.events();
    while !matches!(events.recv().await.unwrap(), JobEvent::Done { .. }) {}
    handle.stop().await;
    assert_eq!(
        value(names::JOB_RUNS, &[("job", &job), ("outcome", "done")]),
        1.0
    );
    assert_eq!(value(names::JOB_ATTEMPTS_FAILED, &[("job", &job)]), 1.0);
    assert_eq!(observed(names::JOB_RUN_DURATION, &[("job", &job)]).len(), 1);
    assert!(read(|r| r.described.contains(names::JOB_RUNS)));
}
