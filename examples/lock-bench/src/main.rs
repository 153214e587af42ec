//! `lock-bench`: lock-core ("ours") against the floor (the minimal correct lock, written in
//! this crate: `SET key token NX PX` + a compare-and-delete script on one multiplexed
//! connection, pub/sub wake-ups where it waits) and against rslock (crates.io), measured in
//! one run on one private redis-server. Every figure is also reported as a ratio.
//!
//! W1, W2 and W6 also run a fourth row that is not a contender: the floor's client sending
//! lock-core's own server calls (`FCALL` of the acquire and release functions lock-core
//! loaded). Its rate over the floor's is what lock-core's server side alone leaves (no client
//! of those calls does better); ours over its rate is what lock-core's client keeps of that.
//!
//! ```text
//! cargo run --release -p lock-bench -- [--quick] [--redis URL] [--json FILE] [--svg FILE]
//!                                      [--only W1,W3h,...] [--rslock-retry-ms N] [--pool N]
//! ```
//!
//! | scenario | what |
//! |---|---|
//! | W1 | 1 task, 20,000 acquire + release cycles on distinct names |
//! | W2 | 64 tasks, 100,000 cycles on distinct names; server µs per cycle |
//! | W3h | 16 tasks in this process on one name, 2,000 sections of 1 ms, strict hand-off |
//! | W3x | the same across 4 processes × 4 tasks (this binary run as child processes) |
//! | W4 | one waiter on another client; the holder releases after 100 ms; 20 trials |
//! | W5 | 100,000 watchdog-leased locks (9 s lease; quick: 25,000 on 3 s) held for 3 renewal periods |
//! | W6 | axum handler behind `DistributedLockLayer` vs the same handler locking itself (W6n: the layer vs the handler calling the floor, both on a `TCP_NODELAY` server) |
//! | W7 | a realistic mix: 64 tasks over 10,000 names drawn Zipf(1.0), 1 ms hold, 200,000 sections or 30 s |
//!
//! `--quick` runs a quarter of the cycles, sections, locks and requests, and W7 for a quarter
//! of its sections and time (≤ 90 s); the full run takes about 4 minutes. See the README of
//! this directory for what each number means.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod chart;
mod contender;
mod floor;
mod handoff;
mod http;
mod mix;
mod monitor;
mod stats;
mod sys;
mod watchdog;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use contender::{Kind, Locker, Opts};
use lock_tests::RedisServer;
use redis::aio::MultiplexedConnection;
use stats::{CmdStats, Sample};

const SCENARIOS: [&str; 8] = ["W1", "W2", "W3h", "W3x", "W4", "W5", "W6", "W7"];

struct Args {
    quick: bool,
    redis: Option<String>,
    json: Option<PathBuf>,
    svg: Option<PathBuf>,
    only: Option<Vec<String>>,
    rslock_retry_ms: u64,
    pool: u32,
}

const USAGE: &str = "usage: lock-bench [--quick] [--redis URL] [--json FILE] [--svg FILE] \
                     [--only W1,W2,W3h,W3x,W4,W5,W6,W7] [--rslock-retry-ms N] [--pool N]";

fn parse_args(argv: &[String]) -> Args {
    let mut args = Args {
        quick: false,
        redis: None,
        json: None,
        svg: None,
        only: None,
        rslock_retry_ms: 10,
        pool: 16,
    };
    let mut it = argv[1.min(argv.len())..].iter();
    let value = |it: &mut std::slice::Iter<'_, String>, flag: &str| -> String {
        it.next().cloned().unwrap_or_else(|| {
            eprintln!("{flag} needs a value; {USAGE}");
            std::process::exit(2)
        })
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => args.quick = true,
            "--redis" => args.redis = Some(value(&mut it, a)),
            "--json" => args.json = Some(value(&mut it, a).into()),
            "--svg" => args.svg = Some(value(&mut it, a).into()),
            "--only" => {
                let list = value(&mut it, a);
                let only: Vec<String> = list.split(',').map(|s| s.trim().to_owned()).collect();
                if let Some(bad) = only.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
                    eprintln!("unknown scenario {bad:?}; known: {SCENARIOS:?}");
                    std::process::exit(2);
                }
                args.only = Some(only);
            }
            "--rslock-retry-ms" => {
                args.rslock_retry_ms = value(&mut it, a).parse().unwrap_or_else(|_| {
                    eprintln!("--rslock-retry-ms needs a number of milliseconds");
                    std::process::exit(2)
                })
            }
            "--pool" => {
                args.pool = value(&mut it, a).parse().unwrap_or_else(|_| {
                    eprintln!("--pool needs a number");
                    std::process::exit(2)
                })
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => {
                eprintln!("unknown argument {other:?}; {USAGE}");
                std::process::exit(2);
            }
        }
    }
    args
}

/// How much of each scenario to run.
struct Plan {
    w1_cycles: usize,
    w2_cycles: usize,
    w2_tasks: usize,
    w3_tasks: usize,
    w3_sections: u64,
    w3x_procs: usize,
    w3_hold: Duration,
    w4_trials: usize,
    w4_hold: Duration,
    w5_locks: usize,
    w5_lease: Duration,
    w5_periods: u32,
    w6_requests: usize,
    w6_concurrency: usize,
    w7: mix::Mix,
}

impl Plan {
    fn new(quick: bool) -> Self {
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
        }
    }
}

/// One scenario's headline figure per contender, for its `BENCH` line.
struct Bench {
    scenario: &'static str,
    /// `[ours, floor, rslock]`
    values: [Option<f64>; 3],
    decimals: usize,
}

impl Bench {
    fn line(&self) -> String {
        let fmt = |v: f64| format!("{v:.*}", self.decimals);
        let mut s = format!("BENCH {}", self.scenario);
        for (kind, v) in Kind::ALL.iter().zip(self.values) {
            if let Some(v) = v {
                s += &format!(" {}={}", kind.name(), fmt(v));
            }
        }
        if let Some(x) = self.values[0] {
            for (i, label) in [(1, "ratio_floor"), (2, "ratio_rslock")] {
                if let Some(y) = self.values[i] {
                    s += &format!(" {label}={:.3}", x / y);
                }
            }
        }
        s
    }
}

/// A target of the issue, checked against this run.
struct Target {
    scenario: &'static str,
    what: String,
    measured: String,
    met: Option<bool>,
}

#[derive(Default)]
struct Report {
    tables: Vec<String>,
    benches: Vec<Bench>,
    targets: Vec<Target>,
    json: serde_json::Map<String, serde_json::Value>,
    /// (scenario, contender, hand-off sample) for the chart.
    handoffs: Vec<(&'static str, &'static str, Sample)>,
}

impl Report {
    fn target(&mut self, scenario: &'static str, what: &str, measured: String, met: Option<bool>) {
        self.targets.push(Target {
            scenario,
            what: what.to_owned(),
            measured,
            met,
        });
    }
}

fn main() {
    // With the `metrics` feature, lock-core records into a recorder that keeps nothing, so a
    // run measures what the calls cost (every process: W3x and W5 children too).
    #[cfg(feature = "metrics")]
    metrics::set_global_recorder(metrics::NoopRecorder).expect("the first recorder of the process");
    let argv: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match argv.get(1).map(String::as_str) {
        Some("__w3x-child") => {
            let Some(args) = handoff::ChildArgs::parse(&argv[2..]) else {
                eprintln!("bad __w3x-child arguments");
                std::process::exit(2);
            };
            rt.block_on(handoff::child_main(args));
        }
        Some("__w5-child") => {
            let Some(args) = watchdog::ChildArgs::parse(&argv[2..]) else {
                eprintln!("bad __w5-child arguments");
                std::process::exit(2);
            };
            rt.block_on(watchdog::child_main(args));
        }
        _ => {
            let args = parse_args(&argv);
            let ok = rt.block_on(bench(args));
            // Child processes and the redis-server are gone by now; do not wait for stray
            // background tasks (W5's rslock holders, watchdogs) to notice.
            rt.shutdown_timeout(Duration::from_secs(1));
            std::process::exit(if ok { 0 } else { 1 });
        }
    }
}

fn wants(args: &Args, scenario: &str) -> bool {
    args.only
        .as_ref()
        .is_none_or(|o| o.iter().any(|s| s == scenario))
}

async fn bench(args: Args) -> bool {
    let t_start = Instant::now();
    let server = match &args.redis {
        Some(_) => None,
        None => Some(RedisServer::start()),
    };
    let url = args
        .redis
        .clone()
        .unwrap_or_else(|| server.as_ref().map(RedisServer::url).unwrap_or_default());
    let opts = Opts {
        url: url.clone(),
        pool: args.pool,
        rslock_retry: Duration::from_millis(args.rslock_retry_ms),
    };
    let plan = Plan::new(args.quick);
    let mut admin = redis::Client::open(url.as_str())
        .expect("redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis");
    let redis_version = redis_version(&mut admin).await;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();

    let mut lockers = Vec::new();
    for kind in Kind::ALL {
        lockers.push(Locker::connect(kind, &opts).await);
    }
    // After lock-core's client, which loads its functions.
    let core_calls = match &lockers[1] {
        Locker::Floor(floor) => floor.with_lock_core_calls().await.map(Locker::Floor),
        _ => None,
    };
    let mut report = Report::default();
    let mut failures = Vec::new();
    eprintln!(
        "lock-bench: redis {redis_version} at {url}, {} run, run id {run}, lock-core metrics {}",
        if args.quick { "quick" } else { "full" },
        if cfg!(feature = "metrics") {
            "on (no-op recorder)"
        } else {
            "off"
        }
    );

    macro_rules! scenario {
        ($name:literal, $body:expr) => {
            if wants(&args, $name) {
                let t = Instant::now();
                eprintln!("lock-bench: {} ...", $name);
                if let Err(e) = $body.await {
                    eprintln!("lock-bench: {} failed: {e}", $name);
                    failures.push(format!("{}: {e}", $name));
                }
                eprintln!(
                    "lock-bench: {} done in {:.1} s",
                    $name,
                    t.elapsed().as_secs_f64()
                );
            }
        };
    }

    scenario!(
        "W1",
        cycles(
            &mut report,
            &lockers,
            core_calls.as_ref(),
            &mut admin,
            &url,
            &run,
            "W1",
            1,
            plan.w1_cycles
        )
    );
    scenario!(
        "W2",
        cycles(
            &mut report,
            &lockers,
            core_calls.as_ref(),
            &mut admin,
            &url,
            &run,
            "W2",
            plan.w2_tasks,
            plan.w2_cycles
        )
    );
    scenario!(
        "W3h",
        w3h(&mut report, &lockers, &mut admin, &url, &run, &plan)
    );
    scenario!("W3x", w3x(&mut report, &opts, &mut admin, &run, &plan));
    scenario!("W4", w4(&mut report, &opts, &lockers, &run, &plan));
    scenario!("W5", w5(&mut report, &opts, &run, &plan));
    scenario!(
        "W6",
        w6(&mut report, &lockers, core_calls.as_ref(), &run, &plan)
    );
    scenario!(
        "W7",
        w7(&mut report, &lockers, &mut admin, &url, &run, &plan)
    );

    // Output: tables, targets, files, then the BENCH lines last.
    let total = t_start.elapsed().as_secs_f64();
    println!();
    println!(
        "lock-bench ({} run, {total:.0} s): redis-server {redis_version} on 127.0.0.1, {} CPUs, \
         lock-core pool {}, rslock retry delay 0..{} ms",
        if args.quick { "quick" } else { "full" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        opts.pool,
        args.rslock_retry_ms
    );
    for t in &report.tables {
        println!();
        print!("{t}");
    }
    if !report.targets.is_empty() {
        println!();
        println!("| scenario | target (ours) | measured | |");
        println!("|---|---|---|---|");
        for t in &report.targets {
            let verdict = match t.met {
                Some(true) => "met",
                Some(false) => "**missed**",
                None => "n/a",
            };
            println!(
                "| {} | {} | {} | {verdict} |",
                t.scenario, t.what, t.measured
            );
        }
    }
    for f in &failures {
        println!("FAILED {f}");
    }

    let json_path = args.json.clone();
    let svg_path = args.svg.clone().unwrap_or_else(|| match &json_path {
        Some(j) => j.with_file_name("handoff.svg"),
        // The workspace's target directory (this crate is examples/lock-bench).
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .unwrap_or(std::path::Path::new("."))
            .join("target/lock-bench/handoff.svg"),
    });
    let panels: Vec<chart::Panel<'_>> = ["W3h", "W3x", "W4"]
        .into_iter()
        .filter_map(|sc| {
            let series: Vec<(&str, &Sample)> = report
                .handoffs
                .iter()
                .filter(|(s, _, _)| *s == sc)
                .map(|(_, c, sample)| (*c, sample))
                .collect();
            (!series.is_empty()).then(|| chart::Panel {
                title: match sc {
                    "W3h" => "W3h: 16 tasks, 1 process".to_owned(),
                    "W3x" => "W3x: 4 processes × 4 tasks".to_owned(),
                    _ => "W4: one waiter, another client".to_owned(),
                },
                series,
            })
        })
        .collect();
    if !panels.is_empty() {
        match chart::write(&svg_path, &panels) {
            Ok(()) => println!("\nhand-off chart: {}", svg_path.display()),
            Err(e) => eprintln!("lock-bench: could not write {}: {e}", svg_path.display()),
        }
    }
    if let Some(path) = &json_path {
        let mut root = serde_json::Map::new();
        root.insert(
            "run".into(),
            serde_json::json!({
                "quick": args.quick,
                "metrics": cfg!(feature = "metrics"),
                "seconds": total,
                "redis_version": redis_version,
                "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
                "lock_core_pool": opts.pool,
                "rslock_retry_delay_ms": args.rslock_retry_ms,
                "rslock_version": "0.10",
                "failures": failures,
                "chart": svg_path.display().to_string(),
            }),
        );
        root.insert(
            "scenarios".into(),
            serde_json::Value::Object(report.json.clone()),
        );
        root.insert(
            "targets".into(),
            report
                .targets
                .iter()
                .map(|t| serde_json::json!({"scenario": t.scenario, "target": t.what, "measured": t.measured, "met": t.met}))
                .collect(),
        );
        root.insert(
            "bench".into(),
            report.benches.iter().map(|b| b.line()).collect(),
        );
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = std::fs::create_dir_all(dir);
        }
        match std::fs::write(
            path,
            serde_json::to_string_pretty(&root).unwrap_or_default(),
        ) {
            Ok(()) => println!("raw results: {}", path.display()),
            Err(e) => eprintln!("lock-bench: could not write {}: {e}", path.display()),
        }
    }
    println!();
    for b in &report.benches {
        println!("{}", b.line());
    }
    drop(lockers);
    drop(server);
    failures.is_empty()
}

async fn redis_version(admin: &mut MultiplexedConnection) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(admin)
        .await
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned()
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? / b?)
}

// ---------------------------------------------------------------- W1, W2

/// Runs `cycles` acquire + release cycles on distinct names spread over `tasks` tasks.
async fn run_cycles(
    locker: &Locker,
    prefix: &str,
    tasks: usize,
    cycles: usize,
) -> Result<Sample, String> {
    let prefix = Arc::new(prefix.to_owned());
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (locker, prefix) = (locker.clone(), prefix.clone());
            let n = cycles / tasks + usize::from(t < cycles % tasks);
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(n);
                for i in 0..n {
                    let name = format!("{prefix}:{t}:{i}");
                    let t0 = Instant::now();
                    let held = locker.lock(&name, Duration::from_secs(5)).await?;
                    locker.unlock(held).await?;
                    lat.push(t0.elapsed());
                }
                Ok::<_, String>(lat)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(cycles);
    for h in handles {
        all.extend(
            tokio::time::timeout(Duration::from_secs(120), h)
                .await
                .map_err(|_| "timed out".to_owned())?
                .map_err(|e| e.to_string())??,
        );
    }
    Ok(Sample::new(all, start.elapsed()))
}

/// Cycles run under `MONITOR` after each timed W1/W2 run, to count requests.
const COUNT_CYCLES: usize = 256;
/// Sections run under `MONITOR` after each timed W3h/W3x run, to count requests.
const COUNT_SECTIONS: u64 = 300;

/// The floor's client sending lock-core's calls: its key (JSON, W6 variant, lock names) and
/// its label in the tables.
const CORE_CALLS: &str = "floor_core_calls";
const CORE_CALLS_LABEL: &str = "floor client, lock-core's server calls";

#[allow(clippy::too_many_arguments)]
async fn cycles(
    report: &mut Report,
    lockers: &[Locker],
    core_calls: Option<&Locker>,
    admin: &mut MultiplexedConnection,
    url: &str,
    run: &str,
    scenario: &'static str,
    tasks: usize,
    cycles: usize,
) -> Result<(), String> {
    let mut rows = Vec::new();
    let mut table = format!(
        "| {scenario}: {tasks} task(s), {cycles} cycles, distinct names | cycles/s | p50 µs | p99 µs | server µs/cycle | client CPU µs/cycle | requests/cycle |\n|---|---:|---:|---:|---:|---:|---:|\n"
    );
    let mut json = serde_json::Map::new();
    // The three contenders, then (not one of them: a measure of lock-core's server side) the
    // floor's client on lock-core's calls.
    let contenders = Kind::ALL
        .iter()
        .map(|k| (k.name(), k.name()))
        .zip(lockers)
        .chain(core_calls.map(|l| ((CORE_CALLS, CORE_CALLS_LABEL), l)));
    for ((key, label), locker) in contenders {
        let prefix = format!("lb:{run}:{scenario}:{key}");
        let before = CmdStats::read(admin).await;
        let cpu0 = sys::cpu_ms();
        let sample = run_cycles(locker, &prefix, tasks, cycles).await?;
        let client_us = (sys::cpu_ms() - cpu0) * 1e3 / cycles as f64;
        let delta = CmdStats::read(admin).await.since(&before);
        // Counting pass.
        let watch = monitor::Watch::start(url).await?;
        run_cycles(
            locker,
            &format!("{prefix}:count"),
            tasks.min(COUNT_CYCLES),
            COUNT_CYCLES,
        )
        .await?;
        let counts = watch.stop(admin, None, None, &[]).await?;
        let server_us = delta.server_usec(&counts) / cycles as f64;
        let requests = counts.requests() as f64 / COUNT_CYCLES as f64;
        table += &format!(
            "| {label} | {:.0} | {:.0} | {:.0} | {server_us:.1} | {client_us:.1} | {requests:.2} |\n",
            sample.rate(),
            sample.percentile(50.0),
            sample.percentile(99.0),
        );
        let mut j = sample.summary();
        j["server_us_per_cycle"] = server_us.into();
        j["requests_per_cycle"] = requests.into();
        j["client_cpu_us_per_cycle"] = client_us.into();
        j["commandstats"] = delta.to_json();
        j["monitor"] = counts.to_json();
        json.insert(key.into(), j);
        rows.push(sample.rate());
    }
    report.tables.push(table);
    let values = [Some(rows[0]), Some(rows[1]), Some(rows[2])];
    let (rf, rr) = (ratio(values[0], values[1]), ratio(values[0], values[2]));
    let show = |r: Option<f64>| format!("{:.3}×", r.unwrap_or(f64::NAN));
    match scenario {
        "W1" => report.target(
            "W1",
            "≥ 0.95× floor cycles/s",
            show(rf),
            rf.map(|r| r >= 0.95),
        ),
        _ => {
            report.target(
                scenario,
                "≥ 0.8× floor cycles/s",
                show(rf),
                rf.map(|r| r >= 0.8),
            );
            report.target(
                scenario,
                "≥ 1.1× rslock cycles/s",
                show(rr),
                rr.map(|r| r >= 1.1),
            );
        }
    }
    if let Some(&calls) = rows.get(3) {
        core_calls_bounds(report, scenario, rows[0], rows[1], calls);
    }
    json.insert("tasks".into(), tasks.into());
    json.insert("cycles".into(), cycles.into());
    report
        .json
        .insert(scenario.into(), serde_json::Value::Object(json));
    report.benches.push(Bench {
        scenario,
        values,
        decimals: 0,
    });
    Ok(())
}

/// The two ratios the floor's client on lock-core's calls gives (rates `ours`, `floor`,
/// `calls`): what lock-core's server calls alone leave of the floor's rate (the most any client
/// of those calls reaches), and how much of that lock-core's own client keeps.
fn core_calls_bounds(
    report: &mut Report,
    scenario: &'static str,
    ours: f64,
    floor: f64,
    calls: f64,
) {
    report.target(
        scenario,
        "bound, no target: floor client on lock-core's server calls ÷ floor",
        format!("{:.3}×", calls / floor),
        None,
    );
    report.target(
        scenario,
        "client, no target: ours ÷ floor client on lock-core's server calls",
        format!("{:.3}×", ours / calls),
        None,
    );
}

// ---------------------------------------------------------------- W3h, W3x

/// A timed hand-off run and its counting pass, put together.
struct HandoffResult {
    sample: Sample,
    mean_hold_us: f64,
    requests_per_section: f64,
    server_us_per_section: f64,
    json: serde_json::Value,
}

fn combine(timed: handoff::HandoffRun, counting: handoff::HandoffRun) -> HandoffResult {
    let counts = counting.counts.unwrap_or_default();
    let sections = timed.sample.items().max(1) as f64;
    let counted = counting.sample.items().max(1) as f64;
    let requests_per_section = counts.requests() as f64 / counted;
    let server_us_per_section = timed.delta.server_usec(&counts) / sections;
    let mut json = timed.sample.summary();
    json["requests_per_section"] = requests_per_section.into();
    json["server_us_per_section"] = server_us_per_section.into();
    json["commandstats"] = timed.delta.to_json();
    json["monitor"] = counts.to_json();
    json["monitor_sections"] = counting.sample.items().into();
    json["mean_hold_us"] = timed.mean_hold_us.into();
    json["mean_handoff_us"] = timed.sample.mean().into();
    json["handoff_us"] = timed.sample.raw_us().into();
    HandoffResult {
        mean_hold_us: timed.mean_hold_us,
        sample: timed.sample,
        requests_per_section,
        server_us_per_section,
        json,
    }
}

fn handoff_table_header(title: &str) -> String {
    format!(
        "| {title} | sections/s | hand-off p50 µs | p90 µs | p99 µs | max µs | mean µs | mean hold µs | requests/section | server µs/section |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
}

fn handoff_row(kind: Kind, r: &HandoffResult) -> String {
    let s = &r.sample;
    format!(
        "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.1} |\n",
        kind.name(),
        s.rate(),
        s.percentile(50.0),
        s.percentile(90.0),
        s.percentile(99.0),
        s.percentile(100.0),
        s.mean(),
        r.mean_hold_us,
        r.requests_per_section,
        r.server_us_per_section
    )
}

async fn w3h(
    report: &mut Report,
    lockers: &[Locker],
    admin: &mut MultiplexedConnection,
    url: &str,
    run: &str,
    plan: &Plan,
) -> Result<(), String> {
    let shape = handoff::Shape {
        procs: 1,
        tasks: plan.w3_tasks,
        sections: plan.w3_sections,
        hold: plan.w3_hold,
    };
    let mut table = handoff_table_header(&format!(
        "W3h: {} tasks, 1 name, {} sections of {} ms",
        shape.tasks,
        shape.sections,
        shape.hold.as_millis()
    ));
    let mut json = serde_json::Map::new();
    let mut results = Vec::new();
    for (kind, locker) in Kind::ALL.iter().zip(lockers) {
        let name = format!("lb:{run}:W3h:{}", kind.name());
        let timed = handoff::run_local(locker, admin, None, &name, shape).await?;
        let counting_shape = handoff::Shape {
            sections: COUNT_SECTIONS,
            ..shape
        };
        let counting = handoff::run_local(
            locker,
            admin,
            Some(url),
            &format!("{name}:count"),
            counting_shape,
        )
        .await?;
        let r = combine(timed, counting);
        table += &handoff_row(*kind, &r);
        json.insert(kind.name().into(), r.json.clone());
        report.handoffs.push(("W3h", kind.name(), r.sample.clone()));
        results.push(r);
    }
    report.tables.push(table);
    let values = [0, 1, 2].map(|i| Some(results[i].sample.rate()));
    let rf = ratio(values[0], values[1]);
    let ours = &results[0];
    report.target(
        "W3h",
        "≥ 1.5× floor sections/s",
        format!("{:.3}×", rf.unwrap_or(f64::NAN)),
        rf.map(|r| r >= 1.5),
    );
    let p50 = ours.sample.percentile(50.0);
    let p99 = ours.sample.percentile(99.0);
    report.target(
        "W3h",
        "hand-off p50 ≤ 150 µs",
        format!("{p50:.0} µs"),
        Some(p50 <= 150.0),
    );
    report.target(
        "W3h",
        "hand-off p99 ≤ 500 µs",
        format!("{p99:.0} µs"),
        Some(p99 <= 500.0),
    );
    report.target(
        "W3h",
        "≤ 3 Redis requests per section",
        format!("{:.2}", ours.requests_per_section),
        Some(ours.requests_per_section <= 3.0),
    );
    json.insert("tasks".into(), shape.tasks.into());
    json.insert("sections".into(), shape.sections.into());
    json.insert("hold_ms".into(), (shape.hold.as_secs_f64() * 1e3).into());
    report
        .json
        .insert("W3h".into(), serde_json::Value::Object(json));
    report.benches.push(Bench {
        scenario: "W3h",
        values,
        decimals: 0,
    });
    Ok(())
}

async fn w3x(
    report: &mut Report,
    opts: &Opts,
    admin: &mut MultiplexedConnection,
    run: &str,
    plan: &Plan,
) -> Result<(), String> {
    let shape = handoff::Shape {
        procs: plan.w3x_procs,
        tasks: plan.w3_tasks / plan.w3x_procs,
        sections: plan.w3_sections,
        hold: plan.w3_hold,
    };
    let mut table = handoff_table_header(&format!(
        "W3x: {} processes × {} tasks, 1 name, {} sections of {} ms",
        shape.procs,
        shape.tasks,
        shape.sections,
        shape.hold.as_millis()
    ));
    let mut json = serde_json::Map::new();
    let mut results = Vec::new();
    for kind in Kind::ALL {
        let name = format!("lb:{run}:W3x:{}", kind.name());
        let timed = handoff::run_processes(kind, opts, admin, None, &name, shape).await?;
        let counting_shape = handoff::Shape {
            sections: COUNT_SECTIONS,
            ..shape
        };
        let counting = handoff::run_processes(
            kind,
            opts,
            admin,
            Some(&opts.url),
            &format!("{name}:count"),
            counting_shape,
        )
        .await?;
        let r = combine(timed, counting);
        table += &handoff_row(kind, &r);
        json.insert(kind.name().into(), r.json.clone());
        report.handoffs.push(("W3x", kind.name(), r.sample.clone()));
        results.push(r);
    }
    report.tables.push(table);
    let values = [0, 1, 2].map(|i| Some(results[i].sample.rate()));
    let p50 = results[0].sample.percentile(50.0);
    report.target(
        "W3x",
        "hand-off p50 ≤ 300 µs",
        format!("{p50:.0} µs"),
        Some(p50 <= 300.0),
    );
    json.insert("processes".into(), shape.procs.into());
    json.insert("tasks_per_process".into(), shape.tasks.into());
    json.insert("sections".into(), shape.sections.into());
    report
        .json
        .insert("W3x".into(), serde_json::Value::Object(json));
    report.benches.push(Bench {
        scenario: "W3x",
        values,
        decimals: 0,
    });
    Ok(())
}

// ---------------------------------------------------------------- W4

async fn w4(
    report: &mut Report,
    opts: &Opts,
    lockers: &[Locker],
    run: &str,
    plan: &Plan,
) -> Result<(), String> {
    let mut table = format!(
        "| W4: 1 waiter (another client), release after {} ms, {} trials | release→acquire p50 µs | p99 µs | max µs |\n|---|---:|---:|---:|\n",
        plan.w4_hold.as_millis(),
        plan.w4_trials
    );
    let mut json = serde_json::Map::new();
    let mut p50s = Vec::new();
    for (kind, holder) in Kind::ALL.iter().zip(lockers) {
        let waiter = Locker::connect(*kind, opts).await;
        let prefix = format!("lb:{run}:W4:{}", kind.name());
        let s = handoff::run_single_waiter(holder, &waiter, &prefix, plan.w4_trials, plan.w4_hold)
            .await?;
        table += &format!(
            "| {} | {:.0} | {:.0} | {:.0} |\n",
            kind.name(),
            s.percentile(50.0),
            s.percentile(99.0),
            s.percentile(100.0)
        );
        let mut j = s.summary();
        j["latency_us"] = s.raw_us().into();
        json.insert(kind.name().into(), j);
        p50s.push(Some(s.percentile(50.0)));
        report.handoffs.push(("W4", kind.name(), s));
    }
    report.tables.push(table);
    let ours = &report
        .handoffs
        .iter()
        .rev()
        .find(|(sc, c, _)| *sc == "W4" && *c == "ours")
        .map(|(_, _, s)| s.percentile(100.0));
    let p50 = p50s[0].unwrap_or(f64::NAN);
    report.target(
        "W4",
        "release → acquire ≤ 1 ms (median; max shown)",
        format!("p50 {p50:.0} µs, max {:.0} µs", ours.unwrap_or(f64::NAN)),
        Some(p50 <= 1000.0),
    );
    report
        .json
        .insert("W4".into(), serde_json::Value::Object(json));
    report.benches.push(Bench {
        scenario: "W4",
        values: [p50s[0], p50s[1], p50s[2]],
        decimals: 1,
    });
    Ok(())
}

// ---------------------------------------------------------------- W5

async fn w5(report: &mut Report, opts: &Opts, run: &str, plan: &Plan) -> Result<(), String> {
    let mut table = format!(
        "| W5: {} watchdog-leased locks, lease {} s, {} periods of {} ms | round trips/period | per 100 locks/period | client CPU ms/period | client bytes/lock | marginal bytes/lock | lost | s to take them |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
        plan.w5_locks,
        plan.w5_lease.as_secs(),
        plan.w5_periods,
        (plan.w5_lease / 3).as_millis()
    );
    let mut json = serde_json::Map::new();
    let mut rt100 = Vec::new();
    let mut ours = None;
    for kind in Kind::ALL {
        let v = watchdog::run(watchdog::ChildArgs {
            kind,
            opts: opts.clone(),
            prefix: format!("lb:{run}:W5:{}", kind.name()),
            count: plan.w5_locks,
            lease: plan.w5_lease,
            periods: plan.w5_periods,
        })
        .await?;
        let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        let lost = v["lost_client"].as_u64().unwrap_or(0) + v["lost_server"].as_u64().unwrap_or(0);
        table += &format!(
            "| {} | {:.1} | {:.3} | {:.0} | {:.0} | {:.0} | {lost} (client {}, server {} of {} checked) | {:.1} |\n",
            kind.name(),
            f("renew_round_trips_per_period"),
            f("round_trips_per_100_locks_per_period"),
            f("cpu_ms_per_period"),
            f("bytes_per_lock"),
            f("marginal_bytes_per_lock"),
            v["lost_client"],
            v["lost_server"],
            v["checked_server"],
            f("acquire_s"),
        );
        rt100.push(Some(f("round_trips_per_100_locks_per_period")));
        if kind == Kind::Ours {
            ours = Some((
                f("round_trips_per_100_locks_per_period"),
                f("marginal_bytes_per_lock"),
                lost,
            ));
        }
        json.insert(kind.name().into(), v);
    }
    report.tables.push(table);
    if let Some((rt, bytes, lost)) = ours {
        report.target(
            "W5",
            "≤ 1 round trip per 100 locks per period",
            format!("{rt:.3}"),
            Some(rt <= 1.0),
        );
        report.target(
            "W5",
            "≤ 512 marginal bytes of client memory per held lock",
            format!("{bytes:.0} B"),
            Some(bytes <= 512.0),
        );
        report.target("W5", "zero locks lost", format!("{lost}"), Some(lost == 0));
    }
    report
        .json
        .insert("W5".into(), serde_json::Value::Object(json));
    report.benches.push(Bench {
        scenario: "W5",
        values: [rt100[0], rt100[1], rt100[2]],
        decimals: 3,
    });
    Ok(())
}

// ---------------------------------------------------------------- W6

async fn w6(
    report: &mut Report,
    lockers: &[Locker],
    core_calls: Option<&Locker>,
    run: &str,
    plan: &Plan,
) -> Result<(), String> {
    // One server as `axum::serve` comes (the lock-tower docs' setup), one with TCP_NODELAY
    // on its accepted connections.
    let plain = http::serve(lockers, core_calls, false).await;
    let nodelay = http::serve(lockers, core_calls, true).await;
    // The last two (the floor and rslock on the TCP_NODELAY server, for W6n) come after the
    // first six, so those run in the same order as before they were added.
    let mut variants: Vec<(&str, &http::Server, &str, &str)> = vec![
        ("layer", &plain, "layer", "ours: DistributedLockLayer"),
        ("ours", &plain, "ours", "ours: handler calls lock-core"),
        ("floor", &plain, "floor", "floor: handler calls the floor"),
        ("rslock", &plain, "rslock", "rslock: handler calls rslock"),
        (
            "layer_nodelay",
            &nodelay,
            "layer",
            "ours: DistributedLockLayer, TCP_NODELAY server",
        ),
        (
            "ours_nodelay",
            &nodelay,
            "ours",
            "ours: handler calls lock-core, TCP_NODELAY server",
        ),
        (
            "floor_nodelay",
            &nodelay,
            "floor",
            "floor: handler calls the floor, TCP_NODELAY server",
        ),
        (
            "rslock_nodelay",
            &nodelay,
            "rslock",
            "rslock: handler calls rslock, TCP_NODELAY server",
        ),
    ];
    // Last, where it runs: the floor's client sending lock-core's calls (the bound lock-core's
    // server calls set on W6n).
    if core_calls.is_some() {
        variants.push((
            CORE_CALLS,
            &nodelay,
            http::CORE_CALLS_ROUTE,
            "floor client on lock-core's server calls, TCP_NODELAY server",
        ));
    }
    // Two rounds, interleaved, so that a slow patch of the machine hits every variant.
    let rounds = 2;
    let per_round = plan.w6_requests / rounds;
    let mut lat: Vec<Vec<u64>> = vec![Vec::new(); variants.len()];
    let mut wall = vec![Duration::ZERO; variants.len()];
    for round in 0..rounds {
        for (i, (key, server, route, _)) in variants.iter().enumerate() {
            let s = http::drive(
                &server.base,
                route,
                &format!("{run}-{key}-{round}"),
                plan.w6_concurrency,
                per_round,
            )
            .await?;
            wall[i] += Duration::from_secs_f64(s.items() as f64 / s.rate().max(1e-9));
            lat[i].extend(s.raw_us().iter().map(|us| (us * 1e3) as u64));
        }
    }
    let samples: Vec<Sample> = lat
        .into_iter()
        .zip(&wall)
        .map(|(l, w)| {
            let n = l.len();
            Sample::from_ns(l, n, *w)
        })
        .collect();
    let mut table = format!(
        "| W6: axum over loopback HTTP, {} requests each, {} connections, distinct keys | requests/s | p50 µs | p99 µs |\n|---|---:|---:|---:|\n",
        plan.w6_requests, plan.w6_concurrency
    );
    let mut json = serde_json::Map::new();
    for ((key, _, _, label), s) in variants.iter().zip(&samples) {
        table += &format!(
            "| {label} | {:.0} | {:.0} | {:.0} |\n",
            s.rate(),
            s.percentile(50.0),
            s.percentile(99.0)
        );
        json.insert((*key).into(), s.summary());
    }
    report.tables.push(table);
    let r = samples[0].rate() / samples[1].rate();
    report.target(
        "W6",
        "layer ≥ 0.9× the handler calling lock-core",
        format!("{r:.3}×"),
        Some(r >= 0.9),
    );
    let r = samples[4].rate() / samples[5].rate();
    report.target(
        "W6",
        "the same, both on a TCP_NODELAY server (not the headline)",
        format!("{r:.3}×"),
        Some(r >= 0.9),
    );
    let r = samples[4].rate() / samples[6].rate();
    report.target(
        "W6",
        "layer ≥ 0.9× the handler calling the floor, both TCP_NODELAY (the issue's target)",
        format!("{r:.3}×"),
        Some(r >= 0.9),
    );
    if let Some(calls) = samples.get(8) {
        core_calls_bounds(
            report,
            "W6n",
            samples[4].rate(),
            samples[6].rate(),
            calls.rate(),
        );
    }
    report
        .json
        .insert("W6".into(), serde_json::Value::Object(json));
    // BENCH W6: ours = the layer, floor = the same handler calling lock-core directly (the
    // layer's floor), rslock = the handler calling rslock; all on the plain axum::serve.
    report.benches.push(Bench {
        scenario: "W6",
        values: [
            Some(samples[0].rate()),
            Some(samples[1].rate()),
            Some(samples[3].rate()),
        ],
        decimals: 0,
    });
    // BENCH W6n: the issue's comparison, all on the TCP_NODELAY server: ours = the layer,
    // floor = the handler calling the floor, rslock = the handler calling rslock.
    report.benches.push(Bench {
        scenario: "W6n",
        values: [
            Some(samples[4].rate()),
            Some(samples[6].rate()),
            Some(samples[7].rate()),
        ],
        decimals: 0,
    });
    Ok(())
}

// ---------------------------------------------------------------- W7

/// Sections run under `MONITOR` after each timed W7 run, to count requests.
const W7_COUNT_SECTIONS: u64 = 2_000;

async fn w7(
    report: &mut Report,
    lockers: &[Locker],
    admin: &mut MultiplexedConnection,
    url: &str,
    run: &str,
    plan: &Plan,
) -> Result<(), String> {
    let mix = plan.w7;
    let mut table = format!(
        "| W7: {} tasks, {} names Zipf({:.1}), {} ms hold, ≤ {} sections or {} s | sections/s | sections | acquire p50 µs | p99 µs | max µs | mean hold µs | requests/section | server µs/section | exclusion violations |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        mix.tasks,
        mix.names,
        mix.s,
        mix.hold.as_millis(),
        mix.sections,
        mix.duration.as_secs_f64()
    );
    let mut json = serde_json::Map::new();
    let mut results = Vec::new();
    let mut violated = Vec::new();
    for (kind, locker) in Kind::ALL.iter().zip(lockers) {
        let prefix = format!("lb:{run}:W7:{}", kind.name());
        let timed = mix::run(locker, admin, None, &prefix, mix).await?;
        // Counting pass: the same mix, fewer sections, under MONITOR (as W3h does).
        let counting_mix = mix::Mix {
            sections: W7_COUNT_SECTIONS,
            ..mix
        };
        let counting = mix::run(
            locker,
            admin,
            Some(url),
            &format!("{prefix}:count"),
            counting_mix,
        )
        .await?;
        let counts = counting.counts.clone().unwrap_or_default();
        let sections = timed.acquire.items();
        let requests = counts.requests() as f64 / counting.acquire.items().max(1) as f64;
        let server_us = timed.delta.server_usec(&counts) / sections.max(1) as f64;
        let violations = timed.violations + counting.violations;
        if violations > 0 {
            eprintln!(
                "lock-bench: !!! W7 {}: MUTUAL EXCLUSION VIOLATED {violations} time(s): an acquire returned a name another task was holding !!!",
                kind.name()
            );
            violated.push(format!("{} {violations}", kind.name()));
        }
        let a = &timed.acquire;
        table += &format!(
            "| {} | {:.0} | {sections}{} | {:.0} | {:.0} | {:.0} | {:.0} | {requests:.2} | {server_us:.1} | {} |\n",
            kind.name(),
            a.rate(),
            if timed.hit_time_limit {
                " (time limit)"
            } else {
                ""
            },
            a.percentile(50.0),
            a.percentile(99.0),
            a.percentile(100.0),
            timed.mean_hold_us,
            if violations > 0 {
                format!("**{violations}**")
            } else {
                "0".to_owned()
            },
        );
        let mut j = a.summary();
        j["sections"] = sections.into();
        j["hit_time_limit"] = timed.hit_time_limit.into();
        j["distinct_names"] = timed.distinct_names.into();
        j["mean_hold_us"] = timed.mean_hold_us.into();
        j["requests_per_section"] = requests.into();
        j["server_us_per_section"] = server_us.into();
        j["exclusion_violations"] = timed.violations.into();
        j["counting_exclusion_violations"] = counting.violations.into();
        j["commandstats"] = timed.delta.to_json();
        j["monitor"] = counts.to_json();
        j["monitor_sections"] = counting.acquire.items().into();
        json.insert(kind.name().into(), j);
        results.push(timed);
    }
    report.tables.push(table);
    let values = [0, 1, 2].map(|i| Some(results[i].acquire.rate()));
    let rf = ratio(values[0], values[1]);
    report.target(
        "W7",
        "≥ 1.0× floor sections/s (informational)",
        format!("{:.3}×", rf.unwrap_or(f64::NAN)),
        rf.map(|r| r >= 1.0),
    );
    let (p99, floor_p99) = (
        results[0].acquire.percentile(99.0),
        results[1].acquire.percentile(99.0),
    );
    report.target(
        "W7",
        "p99 acquire ≤ the floor's p99 (informational)",
        format!("{p99:.0} µs (floor {floor_p99:.0} µs)"),
        Some(p99 <= floor_p99),
    );
    json.insert("tasks".into(), mix.tasks.into());
    json.insert("names".into(), mix.names.into());
    json.insert("zipf_s".into(), mix.s.into());
    json.insert("max_sections".into(), mix.sections.into());
    json.insert("max_seconds".into(), mix.duration.as_secs_f64().into());
    json.insert("hold_ms".into(), (mix.hold.as_secs_f64() * 1e3).into());
    json.insert("seed".into(), mix.seed.into());
    json.insert("monitor_sections".into(), W7_COUNT_SECTIONS.into());
    report
        .json
        .insert("W7".into(), serde_json::Value::Object(json));
    report.benches.push(Bench {
        scenario: "W7",
        values,
        decimals: 0,
    });
    if violated.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "MUTUAL EXCLUSION VIOLATED (an acquire returned a name another task was holding): {}",
            violated.join(", ")
        ))
    }
}
