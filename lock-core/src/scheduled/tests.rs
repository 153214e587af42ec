//! The runner on the in-memory server and tokio's paused clock: days of hourly periods in
//! milliseconds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::LockClient;
use crate::testing::MemoryServer;

const HOUR: u64 = 3600;
/// The in-memory server's clock starts here (2026-01-01T00:00:00Z).
const EPOCH: u64 = 1_767_225_600;

fn hourly() -> Schedule {
    Schedule::every(Duration::from_secs(HOUR)).unwrap()
}

/// The server's clock, in seconds.
fn server_now(server: &MemoryServer) -> u64 {
    match server.command(&redis::cmd("TIME")) {
        redis::Value::Array(parts) => {
            let secs: u64 = redis::from_redis_value(parts[0].clone()).unwrap();
            secs
        }
        other => panic!("TIME answered {other:?}"),
    }
}

/// One run as the body saw it: the hour of its period (from the server's epoch), the
/// instance, and the hour the server's clock was in when the body ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ran {
    hour: u64,
    instance: usize,
    server_hour: u64,
}

/// Starts the hourly job on `client` as instance `i`, reporting each run on `tx`.
fn start(
    client: &LockClient,
    server: &MemoryServer,
    i: usize,
    builder: impl FnOnce(JobBuilder) -> JobBuilder,
    tx: mpsc::UnboundedSender<Ran>,
) -> JobHandle {
    let server = server.clone();
    builder(client.job("hourly", hourly()))
        .start(move |run| {
            let (tx, server) = (tx.clone(), server.clone());
            async move {
                let now = server_now(&server);
                tx.send(Ran {
                    hour: (run.period_secs() - EPOCH) / HOUR,
                    instance: i,
                    server_hour: (now - EPOCH) / HOUR,
                })
                .map_err(|_| "test ended")?;
                Ok::<_, &str>(())
            }
        })
        .unwrap()
}

/// The runs up to and including the first of `hour`.
async fn until_hour(rx: &mut mpsc::UnboundedReceiver<Ran>, hour: u64) -> Vec<Ran> {
    let mut runs = vec![];
    let limit = Duration::from_secs((hour + 2) * HOUR);
    tokio::time::timeout(limit, async {
        while let Some(ran) = rx.recv().await {
            runs.push(ran);
            if ran.hour >= hour {
                break;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no run of hour {hour}: {runs:?}"));
    runs
}

/// Each period once, in order, each in its own period on the server's clock.
fn assert_once_each(runs: &[Ran], hours: std::ops::RangeInclusive<u64>) {
    let mut count: BTreeMap<u64, u32> = BTreeMap::new();
    for ran in runs {
        *count.entry(ran.hour).or_default() += 1;
        assert_eq!(ran.hour, ran.server_hour, "ran in another period: {ran:?}");
    }
    let expected: BTreeMap<u64, u32> = hours.map(|h| (h, 1)).collect();
    assert_eq!(count, expected, "{runs:?}");
}

#[tokio::test(start_paused = true)]
async fn a_day_of_hourly_periods_runs_each_once_across_three_instances() {
    let server = MemoryServer::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut handles = vec![];
    for i in 0..3 {
        let client = server.client().await.unwrap();
        handles.push(start(&client, &server, i, |b| b, tx.clone()));
    }
    let runs = until_hour(&mut rx, 24).await;
    for handle in handles {
        assert!(handle.stop().await);
    }
    assert!(rx.try_recv().is_err(), "a run after the day's last");
    assert_once_each(&runs, 0..=24);
    // The record says so, for lockctl.
    let client = server.client().await.unwrap();
    let stored = client.records().get("job:hourly").await.unwrap().unwrap();
    let record = JobRecord::decode(stored.value()).unwrap();
    assert_eq!(record.period_name(), "2026-01-02T00:00:00Z");
    assert_eq!(record.outcome(), &RunOutcome::Done);
    assert_eq!(record.schedule(), "every 3600s");
    assert_eq!(
        record.next(),
        Some(std::time::UNIX_EPOCH + Duration::from_secs(EPOCH + 25 * HOUR))
    );
}

#[tokio::test(start_paused = true)]
async fn instances_whose_clocks_are_thirty_seconds_off_run_each_period_once_in_it() {
    let server = MemoryServer::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut handles = vec![];
    for (i, skew_ms) in [30_000, -30_000, 0].into_iter().enumerate() {
        let client = server.client().await.unwrap();
        let skewed = move |b: JobBuilder| b.local_clock_skew_ms(skew_ms);
        handles.push(start(&client, &server, i, skewed, tx.clone()));
    }
    let runs = until_hour(&mut rx, 24).await;
    for handle in handles {
        handle.stop().await;
    }
    assert_once_each(&runs, 0..=24);
}

/// Runs hours 0..=2, takes the server away from 2:30 to 8:30 (hours 3 to 7 start while it is
/// away), and returns the hours run after it came back, through hour 9, and the `Missed`
/// event.
async fn after_an_outage(missed: Missed) -> (Vec<u64>, Option<JobEvent>) {
    let server = MemoryServer::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut handles = vec![];
    for i in 0..2 {
        let client = server.client().await.unwrap();
        handles.push(start(&client, &server, i, |b| b.missed(missed), tx.clone()));
    }
    let mut events = handles[0].events();
    let before = until_hour(&mut rx, 2).await;
    assert_once_each(&before, 0..=2);
    tokio::time::sleep(Duration::from_secs(HOUR / 2)).await;
    server.set_reachable(false);
    tokio::time::sleep(Duration::from_secs(6 * HOUR)).await;
    server.set_reachable(true);
    assert!(rx.try_recv().is_err(), "a run while the server was away");
    let after = until_hour(&mut rx, 9).await;
    for handle in handles {
        handle.stop().await;
    }
    let mut missed_event = None;
    while let Ok(event) = events.try_recv() {
        if let JobEvent::Missed { .. } = event {
            missed_event = Some(event);
        }
    }
    (after.iter().map(|r| r.hour).collect(), missed_event)
}

#[tokio::test(start_paused = true)]
async fn after_five_missed_periods_each_policy_runs_what_it_says() {
    let missed = |skipped| Some(JobEvent::Missed { count: 5, skipped });
    // Only instance 0's events are read: whichever instance got the lock first after the
    // outage saw the gap, so the event is checked when it was instance 0.
    let (runs, event) = after_an_outage(Missed::Skip).await;
    assert_eq!(runs, [8, 9]);
    assert!(event.is_none() || event == missed(5), "{event:?}");
    let (runs, event) = after_an_outage(Missed::Latest).await;
    assert_eq!(runs, [7, 8, 9]);
    assert!(event.is_none() || event == missed(4), "{event:?}");
    let (runs, event) = after_an_outage(Missed::Each { up_to: 3 }).await;
    assert_eq!(runs, [5, 6, 7, 8, 9]);
    assert!(event.is_none() || event == missed(2), "{event:?}");
    let (runs, event) = after_an_outage(Missed::Each { up_to: 10 }).await;
    assert_eq!(runs, [3, 4, 5, 6, 7, 8, 9]);
    assert!(event.is_none() || event == missed(0), "{event:?}");
}

#[tokio::test(start_paused = true)]
async fn a_failing_body_is_retried_with_backoff_then_recorded_failed() {
    let server = MemoryServer::new();
    let client = server.client().await.unwrap();
    let attempts = Arc::new(AtomicU32::new(0));
    let counted = attempts.clone();
    let job = client
        .job("flaky", hourly())
        .retries(3)
        .start(move |run| {
            let counted = counted.clone();
            async move {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                assert_eq!(run.attempt(), n);
                match n {
                    1 => Err("first".to_owned()),
                    2 => panic!("second"),
                    _ => Ok(()),
                }
            }
        })
        .unwrap();
    let mut events = job.events();
    let mut seen = vec![];
    loop {
        let event = events.recv().await.unwrap();
        seen.push(event.clone());
        if let JobEvent::Done { .. } = event {
            break;
        }
    }
    let failures: Vec<_> = seen
        .iter()
        .filter_map(|e| match e {
            JobEvent::AttemptFailed {
                attempt,
                error,
                last,
                ..
            } => Some((*attempt, error.clone(), *last)),
            _ => None,
        })
        .collect();
    assert_eq!(
        failures,
        [
            (1, "first".to_owned(), false),
            (2, "panicked: second".to_owned(), false)
        ]
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 3);

    // A body that always fails: three attempts in all, then the record says failed, and the
    // period is not run again; the next one is.
    let always = Arc::new(AtomicU32::new(0));
    let counted = always.clone();
    let failing = client
        .job("failing", hourly())
        .start(move |_run| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>("no") }
        })
        .unwrap();
    let mut events = failing.events();
    loop {
        if let JobEvent::Failed { error, .. } = events.recv().await.unwrap() {
            assert_eq!(error, "no");
            break;
        }
    }
    assert_eq!(always.load(Ordering::SeqCst), 3);
    let stored = client.records().get("job:failing").await.unwrap().unwrap();
    let record = JobRecord::decode(stored.value()).unwrap();
    assert_eq!(record.outcome(), &RunOutcome::Failed("no".into()));
    tokio::time::sleep(Duration::from_secs(HOUR / 2)).await;
    assert_eq!(
        always.load(Ordering::SeqCst),
        3,
        "the failed period ran again"
    );
    tokio::time::sleep(Duration::from_secs(HOUR)).await;
    assert_eq!(
        always.load(Ordering::SeqCst),
        6,
        "the next period did not run"
    );
    job.stop().await;
    failing.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_run_whose_lock_is_lost_is_dropped_and_another_instance_runs_the_period() {
    let server = MemoryServer::new();
    let (a, b) = (
        server.client().await.unwrap(),
        server.client().await.unwrap(),
    );
    let dropped = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = mpsc::unbounded_channel::<(&str, u64)>();
    // a's body takes 10 minutes; b's returns at once.
    let (flag, tx_a) = (dropped.clone(), tx.clone());
    let job_a = a
        .job("report", hourly())
        .start(move |run| {
            let (flag, tx) = (flag.clone(), tx_a.clone());
            async move {
                let _drop = SetOnDrop(flag);
                tokio::time::sleep(Duration::from_secs(600)).await;
                tx.send(("a", run.fencing_token())).unwrap();
                Ok::<_, String>(())
            }
        })
        .unwrap();
    let mut a_events = job_a.events();
    let started = loop {
        if let JobEvent::Started { token, .. } = a_events.recv().await.unwrap() {
            break token;
        }
    };
    // a runs hour 0; b waits for the lock.
    let job_b = b
        .job("report", hourly())
        .start(move |run| {
            let tx = tx.clone();
            async move {
                tx.send(("b", run.fencing_token())).unwrap();
                Ok::<_, String>(())
            }
        })
        .unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    server.set_client_reachable(&a, false);
    loop {
        if let JobEvent::Lost { .. } = a_events.recv().await.unwrap() {
            break;
        }
    }
    assert!(
        dropped.load(Ordering::SeqCst),
        "the body ran on without the lock"
    );
    let (who, token) = rx.recv().await.unwrap();
    assert_eq!(who, "b");
    assert!(token > started);
    let stored = b.records().get("job:report").await.unwrap().unwrap();
    let record = JobRecord::decode(stored.value()).unwrap();
    assert_eq!(
        (record.period_name().as_str(), record.outcome()),
        ("2026-01-01T00:00:00Z", &RunOutcome::Done)
    );
    assert_eq!(stored.token(), token);
    job_a.stop().await;
    job_b.stop().await;
    assert!(rx.try_recv().is_err());
}

struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn stopping_lets_the_running_body_finish_records_it_and_gives_the_lock_back() {
    let server = MemoryServer::new();
    let client = server.client().await.unwrap();
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    let job = client
        .job("slow", hourly())
        .start(move |run| {
            let flag = flag.clone();
            async move {
                // Told to stop, it still finishes its work.
                run.cancelled().await;
                assert!(run.is_cancelled());
                tokio::time::sleep(Duration::from_secs(5)).await;
                flag.store(true, Ordering::SeqCst);
                Ok::<_, String>(())
            }
        })
        .unwrap();
    let mut events = job.events();
    while !matches!(events.recv().await.unwrap(), JobEvent::Started { .. }) {}
    assert!(job.stop().await);
    assert!(finished.load(Ordering::SeqCst));
    let stored = client.records().get("job:slow").await.unwrap().unwrap();
    assert_eq!(
        JobRecord::decode(stored.value()).unwrap().outcome(),
        &RunOutcome::Done
    );
    assert!(client.try_lock("job:slow").await.unwrap().is_some());

    // A body that ignores the stop is dropped after the grace.
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let stuck = client
        .job("stuck", hourly())
        .stop_grace(Duration::from_secs(3))
        .start(move |_run| {
            let flag = flag.clone();
            async move {
                let _drop = SetOnDrop(flag);
                std::future::pending::<()>().await;
                Ok::<_, String>(())
            }
        })
        .unwrap();
    let mut events = stuck.events();
    while !matches!(events.recv().await.unwrap(), JobEvent::Started { .. }) {}
    assert!(!stuck.stop().await);
    assert!(dropped.load(Ordering::SeqCst));
    // Its hold is given back in the background.
    let free = client.lock("job:stuck").wait(Duration::from_secs(5)).await;
    assert!(free.is_ok(), "{free:?}");
}

#[tokio::test(start_paused = true)]
async fn an_overrun_never_overlaps_and_the_periods_it_covered_are_missed() {
    let server = MemoryServer::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let running = Arc::new(AtomicU32::new(0));
    let mut handles = vec![];
    for i in 0..2 {
        let client = server.client().await.unwrap();
        let (tx, running, server) = (tx.clone(), running.clone(), server.clone());
        handles.push(
            client
                .job("long", hourly())
                .start(move |run| {
                    let (tx, running, server) = (tx.clone(), running.clone(), server.clone());
                    async move {
                        assert_eq!(running.fetch_add(1, Ordering::SeqCst), 0, "overlap");
                        let hour = (run.period_secs() - EPOCH) / HOUR;
                        // Hour 0 takes 90 minutes, hour 1 two and a half hours.
                        let minutes = [90, 150, 1][hour.min(2) as usize];
                        tokio::time::sleep(Duration::from_secs(minutes * 60)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        let started = server_now(&server) - minutes * 60;
                        tx.send((hour, i, (started - EPOCH) / 60)).unwrap();
                        Ok::<_, String>(())
                    }
                })
                .unwrap(),
        );
    }
    let mut runs = vec![];
    while runs.len() < 3 {
        runs.push(rx.recv().await.unwrap());
    }
    for handle in handles {
        handle.stop().await;
    }
    let hours_and_starts: Vec<(u64, u64)> = runs.iter().map(|&(h, _, m)| (h, m)).collect();
    // Hour 1 starts late, when hour 0 ends (1:30); hours 2 and 3 start and end during it
    // (1:30 to 4:00): missed, and skipped (the default policy); hour 4 starts when it ends.
    assert_eq!(hours_and_starts, [(0, 0), (1, 90), (4, 240)]);
}

#[tokio::test(start_paused = true)]
async fn bad_names_and_options_are_typed_errors() {
    let client = LockClient::in_memory().await.unwrap();
    let body = |_run: RunContext| async { Ok::<_, String>(()) };
    let too_long = "x".repeat(100_000);
    assert!(matches!(
        client.job(too_long, hourly()).start(body),
        Err(crate::LockError::InvalidName { .. })
    ));
    assert!(matches!(
        client.job("j", hourly()).retries(101).start(body),
        Err(crate::LockError::InvalidOption {
            option: "retries",
            ..
        })
    ));
    assert!(matches!(
        client
            .job("j", hourly())
            .backoff(Duration::ZERO)
            .start(body),
        Err(crate::LockError::InvalidOption {
            option: "backoff",
            ..
        })
    ));
}

#[cfg(feature = "cron")]
#[tokio::test(start_paused = true)]
async fn a_cron_schedule_runs_each_match_once_across_midnight() {
    let server = MemoryServer::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let schedule = Schedule::cron("*/20 23,0 * * *").unwrap();
    assert_eq!(schedule.to_string(), "cron */20 23,0 * * *");
    let mut handles = vec![];
    for i in 0..2 {
        let client = server.client().await.unwrap();
        let (tx, server, schedule) = (tx.clone(), server.clone(), schedule.clone());
        handles.push(
            client
                .job("cron", schedule.clone())
                .start(move |run| {
                    let (tx, server, schedule) = (tx.clone(), server.clone(), schedule.clone());
                    async move {
                        let now = server_now(&server);
                        // Run in its own period: at or after its start, before the next.
                        assert!(run.period_secs() <= now, "{run:?}");
                        assert!(now < schedule.next_after(run.period_secs()).unwrap());
                        tx.send((run.period_name(), i)).unwrap();
                        Ok::<_, String>(())
                    }
                })
                .unwrap(),
        );
    }
    let mut runs = vec![];
    let day = Duration::from_secs(26 * HOUR);
    tokio::time::timeout(day, async {
        while let Some((name, _)) = rx.recv().await {
            let last = name == "2026-01-02T00:40:00Z";
            runs.push(name);
            if last {
                break;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not through the second midnight: {runs:?}"));
    for handle in handles {
        handle.stop().await;
    }
    assert!(rx.try_recv().is_err());
    assert_eq!(
        runs,
        [
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:20:00Z",
            "2026-01-01T00:40:00Z",
            "2026-01-01T23:00:00Z",
            "2026-01-01T23:20:00Z",
            "2026-01-01T23:40:00Z",
            "2026-01-02T00:00:00Z",
            "2026-01-02T00:20:00Z",
            "2026-01-02T00:40:00Z",
        ]
    );
}
