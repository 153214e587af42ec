//! W5: hold many watchdog-leased locks for a few renewal periods, in a child process of its
//! own per contender (so its CPU time and memory are measured alone).
//!
//! * ours: `LockClient` with a short `watchdog_lease`; renewal every lease / 3 by its
//!   watchdog.
//! * floor: `SET NX PX lease` and [`crate::floor::Watchdog`]: one compare-and-`PEXPIRE`
//!   script per 256 locks every lease / 3.
//! * rslock: one `LockManager::using` per lock (rslock's own keep-alive: each lock is
//!   extended on its own, one EVALSHA per lock, about 500 ms before its validity ends).
//!
//! A "period" is lease / 3 for every contender.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::contender::{Held, Kind, Locker, Opts, parse_protocol};
use crate::floor::Watchdog;
use crate::measure::{Cost, Frame};
use crate::stats::CmdDelta;
use crate::sys::rss_bytes;

/// Locks per renewal call of lock-core's watchdog (its batch size, 256).
const RENEWAL_BATCH: f64 = 256.0;

/// Concurrent acquisitions while taking the locks.
const ACQUIRE_TASKS: usize = 128;
/// Names checked with `lock_info` / `GET` at the end.
const SAMPLE: usize = 2_000;
/// Bound on taking all the locks.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) struct ChildArgs {
    pub(crate) kind: Kind,
    pub(crate) opts: Opts,
    pub(crate) prefix: String,
    pub(crate) count: usize,
    pub(crate) lease: Duration,
    pub(crate) periods: u32,
}

impl ChildArgs {
    pub(crate) fn to_args(&self) -> Vec<String> {
        vec![
            "__w5-child".into(),
            self.opts.url.clone(),
            self.kind.name().into(),
            self.opts.pool.to_string(),
            self.opts.mutex_protocol.to_string(),
            self.prefix.clone(),
            self.count.to_string(),
            self.lease.as_millis().to_string(),
            self.periods.to_string(),
        ]
    }

    pub(crate) fn parse(args: &[String]) -> Option<ChildArgs> {
        let [url, kind, pool, protocol, prefix, count, lease_ms, periods] = args else {
            return None;
        };
        Some(ChildArgs {
            kind: Kind::parse(kind)?,
            opts: Opts {
                url: url.clone(),
                pool: pool.parse().ok()?,
                rslock_retry: Duration::from_millis(10),
                mutex_protocol: parse_protocol(protocol)?,
            },
            prefix: prefix.clone(),
            count: count.parse().ok()?,
            lease: Duration::from_millis(lease_ms.parse().ok()?),
            periods: periods.parse().ok()?,
        })
    }
}

pub(crate) async fn child_main(args: ChildArgs) {
    let v = match child_run(&args).await {
        Ok(v) => v,
        Err(e) => serde_json::json!({ "error": e }),
    };
    println!("{v}");
    // The locks are left to expire with their short lease: releasing 100,000 of them is not
    // what is measured.
    std::process::exit(0);
}

fn name(prefix: &str, i: usize) -> String {
    format!("{prefix}:{i}")
}

/// Takes the locks in two halves: the RSS growth over the second half is the marginal cost of
/// a lock, without what taking locks at all costs once (task and buffer memory the allocator
/// keeps). Returns them and the RSS between the halves.
async fn take_all(locker: &Locker, args: &ChildArgs) -> Result<(Holding, u64), String> {
    let half = args.count / 2;
    match args.kind {
        Kind::Rslock => {
            let failed = Arc::new(AtomicU64::new(0));
            let (stop, stop_rx) = tokio::sync::watch::channel(false);
            hold_rslock(locker, args, 0..half, &failed, &stop_rx).await?;
            let rss_mid = rss_bytes();
            hold_rslock(locker, args, half..args.count, &failed, &stop_rx).await?;
            let holding = Holding::Rslock {
                failed,
                _stop: stop,
            };
            Ok((holding, rss_mid))
        }
        _ => {
            let mut guards = acquire_all(locker, args, 0..half).await?;
            let rss_mid = rss_bytes();
            guards.extend(acquire_all(locker, args, half..args.count).await?);
            Ok((Holding::Guards(guards), rss_mid))
        }
    }
}

/// The floor's watchdog over its guards (the other contenders renew by themselves).
fn floor_watchdog(locker: &Locker, holding: &Holding, lease: Duration) -> Option<Watchdog> {
    match (locker, holding) {
        (Locker::Floor(f), Holding::Guards(guards)) => {
            let held: Vec<(String, String)> = guards
                .iter()
                .map(|h| match h {
                    Held::Floor(g) => (g.key().to_owned(), g.token().to_owned()),
                    _ => unreachable!(),
                })
                .collect();
            Some(Watchdog::start(f, Arc::new(held), lease))
        }
        _ => None,
    }
}

/// Renewal calls over the measured periods and round trips per period. The native protocol
/// renews with pipelines of `SET … IFEQ`, one command per lock and at most `RENEWAL_BATCH`
/// per pipeline, which the server counts command by command: its round trips are derived from
/// the commands (nothing else sends SET while the locks are held).
fn renewals(delta: &CmdDelta, periods: u32) -> (u64, f64) {
    let scripted = delta.calls(&["evalsha", "eval", "fcall"]);
    let native_sets = delta.calls(&["set"]);
    if scripted == 0 && native_sets > 0 {
        let per_period = native_sets as f64 / periods as f64;
        (native_sets, (per_period / RENEWAL_BATCH).ceil())
    } else {
        (scripted, scripted as f64 / periods as f64)
    }
}

/// Every lock still held? (lost on the client's side, lost on the server, names checked).
async fn lost(
    locker: &Locker,
    admin: &mut MultiplexedConnection,
    holding: &Holding,
    watchdog: Option<&Watchdog>,
    args: &ChildArgs,
) -> Result<(u64, u64, usize), String> {
    match holding {
        Holding::Guards(guards) => {
            let lost_client = match (locker, watchdog) {
                (Locker::Ours(_), _) => guards
                    .iter()
                    .filter(|h| matches!(h, Held::Ours(g) if !g.is_held()))
                    .count() as u64,
                (_, Some(w)) => w.lost(),
                _ => 0,
            };
            let (lost_server, checked) = check_server(locker, admin, guards).await?;
            Ok((lost_client, lost_server, checked))
        }
        Holding::Rslock { failed, .. } => {
            let failed = failed.load(Ordering::Relaxed);
            let names: Vec<String> = (0..args.count).map(|i| name(&args.prefix, i)).collect();
            let missing = count_missing(admin, &names).await?;
            Ok((failed, missing, names.len()))
        }
    }
}

async fn child_run(args: &ChildArgs) -> Result<serde_json::Value, String> {
    let client = redis::Client::open(args.opts.url.as_str()).map_err(|e| e.to_string())?;
    let mut admin = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let locker = Locker::connect_with(args.kind, &args.opts, Some(args.lease)).await;
    // Warm up before the memory baseline.
    let held = locker
        .lock(&name(&args.prefix, usize::MAX), Duration::from_secs(5))
        .await?;
    locker.unlock(held).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let rss_base = rss_bytes();

    let t0 = Instant::now();
    let (holding, rss_mid) = take_all(&locker, args).await?;
    let rss_acquired = rss_bytes();
    let watchdog = floor_watchdog(&locker, &holding, args.lease);
    let acquire_s = t0.elapsed().as_secs_f64();
    // Let one renewal round pass so that every lock is in its steady state.
    tokio::time::sleep(args.lease / 3).await;

    let period = args.lease / 3;
    let frame = Frame::start(&mut admin).await;
    tokio::time::sleep(period * args.periods).await;
    let Cost { delta, cpu_us, .. } = frame.stop(&mut admin).await;
    let rss_end = rss_bytes();
    let (renew_calls, per_period) = renewals(&delta, args.periods);
    let (lost_client, lost_server, checked) =
        lost(&locker, &mut admin, &holding, watchdog.as_ref(), args).await?;
    let half = args.count / 2;
    Ok(serde_json::json!({
        "contender": args.kind.name(),
        "locks": args.count,
        "lease_ms": args.lease.as_millis() as u64,
        "periods": args.periods,
        "acquire_s": acquire_s,
        "renew_round_trips_per_period": per_period,
        "renew_server_commands_per_period": renew_calls as f64 / args.periods as f64,
        "round_trips_per_100_locks_per_period": per_period / (args.count as f64 / 100.0),
        "cpu_ms_per_period": cpu_us / 1e3 / args.periods as f64,
        "rss_base_bytes": rss_base,
        "rss_end_bytes": rss_end,
        "bytes_per_lock": (rss_end.saturating_sub(rss_base)) as f64 / args.count as f64,
        "rss_mid_bytes": rss_mid,
        "rss_acquired_bytes": rss_acquired,
        "marginal_bytes_per_lock":
            (rss_acquired.saturating_sub(rss_mid)) as f64 / (args.count - half).max(1) as f64,
        "lost_client": lost_client,
        "lost_server": lost_server,
        "checked_server": checked,
        "commands": delta.to_json(),
    }))
}

enum Holding {
    Guards(Vec<Held>),
    Rslock {
        failed: Arc<AtomicU64>,
        _stop: tokio::sync::watch::Sender<bool>,
    },
}

async fn acquire_all(
    locker: &Locker,
    args: &ChildArgs,
    names: std::ops::Range<usize>,
) -> Result<Vec<Held>, String> {
    let per = names.len().div_ceil(ACQUIRE_TASKS);
    let handles: Vec<_> = (0..ACQUIRE_TASKS)
        .map(|t| {
            let (locker, prefix) = (locker.clone(), args.prefix.clone());
            let start = (names.start + t * per).min(names.end);
            let range = start..(start + per).min(names.end);
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(range.len());
                for i in range {
                    out.push(
                        locker
                            .lock(&name(&prefix, i), Duration::from_secs(5))
                            .await?,
                    );
                }
                Ok::<_, String>(out)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(names.len());
    for h in handles {
        match tokio::time::timeout(ACQUIRE_TIMEOUT, h).await {
            Ok(Ok(Ok(v))) => all.extend(v),
            Ok(Ok(Err(e))) => return Err(e),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("W5: taking the locks timed out".into()),
        }
    }
    all.shrink_to_fit();
    Ok(all)
}

/// rslock: one `using` task per lock; its routine waits for the stop signal. `using` returns
/// early (an error) only when an extension failed: that lock was lost.
async fn hold_rslock(
    locker: &Locker,
    args: &ChildArgs,
    names: std::ops::Range<usize>,
    failed: &Arc<AtomicU64>,
    stop_rx: &tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let Locker::Rslock { waiting, .. } = locker else {
        unreachable!()
    };
    let gate = Arc::new(tokio::sync::Semaphore::new(ACQUIRE_TASKS));
    let lease = args.lease;
    let deadline = Instant::now() + ACQUIRE_TIMEOUT;
    for i in names {
        let permit = tokio::time::timeout_at(deadline.into(), gate.clone().acquire_owned())
            .await
            .map_err(|_| "W5: taking the rslock locks timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        let (manager, failed, stop_rx) = (waiting.clone(), failed.clone(), stop_rx.clone());
        let key = name(&args.prefix, i);
        tokio::spawn(async move {
            let routine = async move || {
                let mut stop_rx = stop_rx;
                drop(permit);
                let _ = stop_rx.wait_for(|s| *s).await;
            };
            if manager.using(key.as_bytes(), lease, routine).await.is_err() {
                failed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    // Wait for the last acquisitions.
    let _all = tokio::time::timeout_at(deadline.into(), gate.acquire_many(ACQUIRE_TASKS as u32))
        .await
        .map_err(|_| "W5: taking the rslock locks timed out".to_owned())?;
    Ok(())
}

/// Checks on the server: ours with `lock_info` on a sample (held, same fencing token); the
/// floor with `GET` on every key (same token).
async fn check_server(
    locker: &Locker,
    admin: &mut MultiplexedConnection,
    guards: &[Held],
) -> Result<(u64, usize), String> {
    match locker {
        Locker::Ours(client) => {
            let step = (guards.len() / SAMPLE).max(1);
            let mut lost = 0;
            let mut checked = 0;
            for h in guards.iter().step_by(step) {
                let Held::Ours(g) = h else { continue };
                let info = client
                    .mutex(g.name())
                    .info()
                    .await
                    .map_err(|e| e.to_string())?;
                checked += 1;
                if !info.held || info.fencing_token != Some(g.fencing_token()) {
                    lost += 1;
                }
            }
            Ok((lost, checked))
        }
        _ => {
            let mut lost = 0;
            for chunk in guards.chunks(1000) {
                let mut pipe = redis::pipe();
                for h in chunk {
                    if let Held::Floor(g) = h {
                        pipe.get(g.key());
                    }
                }
                let values: Vec<Option<String>> =
                    pipe.query_async(admin).await.map_err(|e| e.to_string())?;
                for (h, v) in chunk.iter().zip(values) {
                    if let Held::Floor(g) = h
                        && v.as_deref() != Some(g.token())
                    {
                        lost += 1;
                    }
                }
            }
            Ok((lost, guards.len()))
        }
    }
}

async fn count_missing(admin: &mut MultiplexedConnection, names: &[String]) -> Result<u64, String> {
    let mut missing = 0;
    for chunk in names.chunks(1000) {
        let mut pipe = redis::pipe();
        for n in chunk {
            pipe.exists(n);
        }
        let found: Vec<bool> = pipe.query_async(admin).await.map_err(|e| e.to_string())?;
        missing += found.iter().filter(|f| !**f).count() as u64;
    }
    Ok(missing)
}

/// W5 in a child process; returns its JSON report.
pub(crate) async fn run(args: ChildArgs) -> Result<serde_json::Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let child = tokio::process::Command::new(exe)
        .args(args.to_args())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawn W5 child: {e}"))?;
    let out = tokio::time::timeout(
        ACQUIRE_TIMEOUT + args.lease * (args.periods + 5),
        child.wait_with_output(),
    )
    .await
    .map_err(|_| "W5 child timed out".to_owned())?
    .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("");
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("W5 child output {line:?}: {e}"))?;
    if let Some(e) = v.get("error") {
        return Err(format!("W5 {}: {e}", args.kind.name()));
    }
    Ok(v)
}
