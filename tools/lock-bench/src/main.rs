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
//! On a server with `DELIFEQ` (Valkey 9; `REDIS_SERVER_BIN` picks the binary the bench
//! starts) every scenario but W5 also runs the *native floor* last: the floor without scripts
//! (`SET NX PX`, `DELIFEQ`, a waiters flag; see `floor.rs`). Every `BENCH` line ends with the
//! server µs per cycle of each row.
//!
//! ```text
//! cargo run --release -p lock-bench -- [--quick] [--redis URL] [--json FILE] [--svg FILE]
//!                                      [--only W1,W3h,...] [--rslock-retry-ms N] [--pool N]
//! ```
//!
//! | scenario | what |
//! |---|---|
//! | W1 | 1 task, 20,000 acquire + release cycles on distinct names |
//! | W2 | 64 tasks, 100,000 cycles on distinct names |
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
    /// The native floor's figure, where it ran (a server with `DELIFEQ`).
    native: Option<f64>,
    /// Server µs per cycle of each row that has it, in the order of the rows: (row key, µs).
    server_us: Vec<(&'static str, f64)>,
}

impl Bench {
    fn new(scenario: &'static str, values: [Option<f64>; 3], decimals: usize) -> Self {
        Bench {
            scenario,
            values,
            decimals,
            native: None,
            server_us: Vec::new(),
        }
    }

    /// The `BENCH` line: `ours=`, `floor=`, `rslock=` and their ratios as always, then (new
    /// fields at the end, so older parsers keep working) `native_floor=` and
    /// `ratio_native_floor=` where the native floor ran, and `server_us_<row>=` per row.
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
        if let Some(n) = self.native {
            s += &format!(" {}={}", Kind::NativeFloor.name(), fmt(n));
            if let Some(x) = self.values[0] {
                s += &format!(" ratio_native_floor={:.3}", x / n);
            }
        }
        for (key, us) in &self.server_us {
            if us.is_finite() {
                s += &format!(" server_us_{key}={us:.2}");
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
    let version = ServerVersion::read(&mut admin).await;
    let redis_version = version.redis.clone();
    let has_delifeq = floor::server_has_delifeq(&mut admin).await;
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
    // Connected last, so the three contenders' clients are set up as before it existed.
    let native = if has_delifeq {
        Some(Locker::connect(Kind::NativeFloor, &opts).await)
    } else {
        None
    };
    let native = native.as_ref();
    let mut report = Report::default();
    let mut failures = Vec::new();
    eprintln!(
        "lock-bench: {} at {url}, {} run, run id {run}, lock-core metrics {}, native floor {}",
        version.describe(),
        if args.quick { "quick" } else { "full" },
        if cfg!(feature = "metrics") {
            "on (no-op recorder)"
        } else {
            "off"
        },
        if has_delifeq { "on" } else { NO_DELIFEQ }
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
            native,
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
            native,
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
        w3h(&mut report, &lockers, native, &mut admin, &url, &run, &plan)
    );
    scenario!(
        "W3x",
        w3x(&mut report, &opts, has_delifeq, &mut admin, &run, &plan)
    );
    scenario!(
        "W4",
        w4(
            &mut report,
            &opts,
            &lockers,
            native,
            &mut admin,
            &url,
            &run,
            &plan
        )
    );
    scenario!("W5", w5(&mut report, &opts, &run, &plan));
    scenario!(
        "W6",
        w6(
            &mut report,
            &lockers,
            core_calls.as_ref(),
            native,
            &mut admin,
            &url,
            &run,
            &plan
        )
    );
    scenario!(
        "W7",
        w7(&mut report, &lockers, native, &mut admin, &url, &run, &plan)
    );

    // Output: tables, targets, files, then the BENCH lines last.
    let total = t_start.elapsed().as_secs_f64();
    println!();
    println!(
        "lock-bench ({} run, {total:.0} s): {}-server {} on 127.0.0.1, {} CPUs, \
         lock-core pool {}, rslock retry delay 0..{} ms, native floor {}",
        if args.quick { "quick" } else { "full" },
        version.product(),
        version.version(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        opts.pool,
        args.rslock_retry_ms,
        if has_delifeq {
            "on (DELIFEQ)"
        } else {
            NO_DELIFEQ
        }
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
        // The workspace's target directory (this crate is tools/lock-bench).
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
                "valkey_version": version.valkey,
                "server": version.describe(),
                "native_floor": has_delifeq,
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

/// What the native floor's row says on a server without `DELIFEQ`.
const NO_DELIFEQ: &str = "n/a: the server has no DELIFEQ";

/// The server's versions from `INFO server`: Valkey reports `redis_version:7.2.4` whatever its
/// own version, which is `valkey_version`.
#[derive(Debug)]
struct ServerVersion {
    redis: String,
    valkey: Option<String>,
}

impl ServerVersion {
    async fn read(admin: &mut MultiplexedConnection) -> Self {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(admin)
            .await
            .unwrap_or_default();
        Self::parse(&info)
    }

    fn parse(info: &str) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        ServerVersion {
            redis: field("redis_version").unwrap_or_else(|| "?".to_owned()),
            valkey: field("valkey_version"),
        }
    }

    /// `redis` or `valkey`.
    fn product(&self) -> &'static str {
        if self.valkey.is_some() {
            "valkey"
        } else {
            "redis"
        }
    }

    /// The product's own version.
    fn version(&self) -> &str {
        self.valkey.as_deref().unwrap_or(&self.redis)
    }

    /// `redis 7.0.15`, or `valkey 9.1.2 (redis_version 7.2.4)`.
    fn describe(&self) -> String {
        match &self.valkey {
            Some(v) => format!("valkey {v} (redis_version {})", self.redis),
            None => format!("redis {}", self.redis),
        }
    }
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
    native: Option<&Locker>,
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
    // floor's client on lock-core's calls, then the native floor: each added row runs after
    // the ones before it existed.
    let contenders = Kind::ALL
        .iter()
        .map(|k| (k.name(), k.label()))
        .zip(lockers)
        .chain(core_calls.map(|l| ((CORE_CALLS, CORE_CALLS_LABEL), l)))
        .chain(native.map(|l| ((Kind::NativeFloor.name(), Kind::NativeFloor.label()), l)));
    let mut server = Vec::new();
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
        rows.push((key, sample.rate()));
        server.push((key, server_us));
    }
    if native.is_none() {
        table += &na_row(6);
    }
    report.tables.push(table);
    let rate = |key: &str| rows.iter().find(|(k, _)| *k == key).map(|&(_, r)| r);
    let values = Kind::ALL.map(|k| rate(k.name()));
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
    if let (Some(ours), Some(floor), Some(calls)) = (values[0], values[1], rate(CORE_CALLS)) {
        core_calls_bounds(report, scenario, ours, floor, calls);
    }
    let native_rate = rate(Kind::NativeFloor.name());
    native_ratio(
        report,
        scenario,
        "ours ÷ native floor cycles/s",
        values[0],
        native_rate,
    );
    json.insert("tasks".into(), tasks.into());
    json.insert("cycles".into(), cycles.into());
    report
        .json
        .insert(scenario.into(), serde_json::Value::Object(json));
    let mut bench = Bench::new(scenario, values, 0);
    bench.native = native_rate;
    bench.server_us = server;
    report.benches.push(bench);
    Ok(())
}

/// A table row saying the native floor did not run: its label, [`NO_DELIFEQ`], and `cells`
/// empty cells after it (the table's other columns).
fn na_row(cells: usize) -> String {
    format!(
        "| {} | {NO_DELIFEQ} |{}\n",
        Kind::NativeFloor.label(),
        " |".repeat(cells - 1)
    )
}

/// The informational "ours ÷ native floor" line of the targets table (no target: the native
/// floor needs a server with `DELIFEQ`, and lock-core does not use it).
fn native_ratio(
    report: &mut Report,
    scenario: &'static str,
    what: &str,
    ours: Option<f64>,
    native: Option<f64>,
) {
    let measured = match (ours, native) {
        (Some(o), Some(n)) => format!("{:.3}×", o / n),
        (_, None) => NO_DELIFEQ.to_owned(),
        (None, Some(_)) => "n/a".to_owned(),
    };
    report.target(scenario, &format!("no target: {what}"), measured, None);
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

/// Server µs per section of each hand-off row (ours, the floor, rslock, the native floor).
fn handoff_server_us(results: &[HandoffResult]) -> Vec<(&'static str, f64)> {
    Kind::ALL
        .into_iter()
        .chain([Kind::NativeFloor])
        .zip(results)
        .map(|(k, r)| (k.name(), r.server_us_per_section))
        .collect()
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
        kind.label(),
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
    native: Option<&Locker>,
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
    // The native floor last, after the three contenders.
    let rows = Kind::ALL
        .iter()
        .zip(lockers)
        .chain(native.map(|l| (&Kind::NativeFloor, l)));
    for (kind, locker) in rows {
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
        report
            .handoffs
            .push(("W3h", kind.label(), r.sample.clone()));
        results.push(r);
    }
    if native.is_none() {
        table += &na_row(9);
    }
    report.tables.push(table);
    let values = [0, 1, 2].map(|i| Some(results[i].sample.rate()));
    let native_rate = results.get(3).map(|r| r.sample.rate());
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
    native_ratio(
        report,
        "W3h",
        "ours ÷ native floor sections/s",
        values[0],
        native_rate,
    );
    json.insert("tasks".into(), shape.tasks.into());
    json.insert("sections".into(), shape.sections.into());
    json.insert("hold_ms".into(), (shape.hold.as_secs_f64() * 1e3).into());
    report
        .json
        .insert("W3h".into(), serde_json::Value::Object(json));
    let mut bench = Bench::new("W3h", values, 0);
    bench.native = native_rate;
    bench.server_us = handoff_server_us(&results);
    report.benches.push(bench);
    Ok(())
}

async fn w3x(
    report: &mut Report,
    opts: &Opts,
    native: bool,
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
    // The native floor last, after the three contenders.
    let kinds = Kind::ALL
        .into_iter()
        .chain(native.then_some(Kind::NativeFloor));
    for kind in kinds {
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
        report
            .handoffs
            .push(("W3x", kind.label(), r.sample.clone()));
        results.push(r);
    }
    if !native {
        table += &na_row(9);
    }
    report.tables.push(table);
    let values = [0, 1, 2].map(|i| Some(results[i].sample.rate()));
    let native_rate = results.get(3).map(|r| r.sample.rate());
    let p50 = results[0].sample.percentile(50.0);
    report.target(
        "W3x",
        "hand-off p50 ≤ 300 µs",
        format!("{p50:.0} µs"),
        Some(p50 <= 300.0),
    );
    native_ratio(
        report,
        "W3x",
        "ours ÷ native floor sections/s",
        values[0],
        native_rate,
    );
    json.insert("processes".into(), shape.procs.into());
    json.insert("tasks_per_process".into(), shape.tasks.into());
    json.insert("sections".into(), shape.sections.into());
    report
        .json
        .insert("W3x".into(), serde_json::Value::Object(json));
    let mut bench = Bench::new("W3x", values, 0);
    bench.native = native_rate;
    bench.server_us = handoff_server_us(&results);
    report.benches.push(bench);
    Ok(())
}

// ---------------------------------------------------------------- W4

/// Trials run under `MONITOR` after each timed W4 run, to tell a row's requests from the
/// commands its scripts call (for its server µs per cycle).
const W4_COUNT_TRIALS: usize = 3;

#[allow(clippy::too_many_arguments)]
async fn w4(
    report: &mut Report,
    opts: &Opts,
    lockers: &[Locker],
    native: Option<&Locker>,
    admin: &mut MultiplexedConnection,
    url: &str,
    run: &str,
    plan: &Plan,
) -> Result<(), String> {
    let mut table = format!(
        "| W4: 1 waiter (another client), release after {} ms, {} trials | release→acquire p50 µs | p99 µs | max µs | server µs/cycle |\n|---|---:|---:|---:|---:|\n",
        plan.w4_hold.as_millis(),
        plan.w4_trials
    );
    let mut json = serde_json::Map::new();
    let mut p50s = Vec::new();
    let mut server = Vec::new();
    // The native floor last, after the three contenders.
    let rows = Kind::ALL
        .into_iter()
        .zip(lockers)
        .chain(native.map(|l| (Kind::NativeFloor, l)));
    for (kind, holder) in rows {
        let waiter = Locker::connect(kind, opts).await;
        let prefix = format!("lb:{run}:W4:{}", kind.name());
        let before = CmdStats::read(admin).await;
        let s = handoff::run_single_waiter(holder, &waiter, &prefix, plan.w4_trials, plan.w4_hold)
            .await?;
        let delta = CmdStats::read(admin).await.since(&before);
        // Counting pass.
        let watch = monitor::Watch::start(url).await?;
        handoff::run_single_waiter(
            holder,
            &waiter,
            &format!("{prefix}:count"),
            W4_COUNT_TRIALS,
            plan.w4_hold,
        )
        .await?;
        let counts = watch.stop(admin, None, None, &[]).await?;
        drop(waiter);
        // Two cycles a trial: the holder's and the waiter's.
        let server_us = delta.server_usec(&counts) / (2 * plan.w4_trials) as f64;
        table += &format!(
            "| {} | {:.0} | {:.0} | {:.0} | {server_us:.1} |\n",
            kind.label(),
            s.percentile(50.0),
            s.percentile(99.0),
            s.percentile(100.0)
        );
        let mut j = s.summary();
        j["latency_us"] = s.raw_us().into();
        j["server_us_per_cycle"] = server_us.into();
        j["commandstats"] = delta.to_json();
        j["monitor"] = counts.to_json();
        j["monitor_trials"] = W4_COUNT_TRIALS.into();
        json.insert(kind.name().into(), j);
        p50s.push(Some(s.percentile(50.0)));
        server.push((kind.name(), server_us));
        report.handoffs.push(("W4", kind.label(), s));
    }
    if native.is_none() {
        table += &na_row(4);
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
    let native_p50 = p50s.get(3).copied().flatten();
    native_ratio(
        report,
        "W4",
        "ours ÷ native floor release → acquire p50 (lower is better)",
        p50s[0],
        native_p50,
    );
    report
        .json
        .insert("W4".into(), serde_json::Value::Object(json));
    let mut bench = Bench::new("W4", [p50s[0], p50s[1], p50s[2]], 1);
    bench.native = native_p50;
    bench.server_us = server;
    report.benches.push(bench);
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
    report
        .benches
        .push(Bench::new("W5", [rt100[0], rt100[1], rt100[2]], 3));
    Ok(())
}

// ---------------------------------------------------------------- W6

/// Requests of each W6 variant run under `MONITOR` after the timed rounds, to tell a row's
/// requests from the commands its scripts call (for its server µs per request).
const W6_COUNT_REQUESTS: usize = 256;

#[allow(clippy::too_many_arguments)]
async fn w6(
    report: &mut Report,
    lockers: &[Locker],
    core_calls: Option<&Locker>,
    native: Option<&Locker>,
    admin: &mut MultiplexedConnection,
    url: &str,
    run: &str,
    plan: &Plan,
) -> Result<(), String> {
    // One server as `axum::serve` comes (the lock-tower docs' setup), one with TCP_NODELAY
    // on its accepted connections.
    let plain = http::serve(lockers, core_calls, native, false).await;
    let nodelay = http::serve(lockers, core_calls, native, true).await;
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
    // After it, on a server with DELIFEQ: the native floor, on both servers.
    if native.is_some() {
        variants.push((
            NATIVE_PLAIN,
            &plain,
            http::NATIVE_ROUTE,
            "native floor: handler calls the native floor",
        ));
        variants.push((
            NATIVE_NODELAY,
            &nodelay,
            http::NATIVE_ROUTE,
            "native floor: handler calls the native floor, TCP_NODELAY server",
        ));
    }
    // Two rounds, interleaved, so that a slow patch of the machine hits every variant.
    let rounds = 2;
    let per_round = plan.w6_requests / rounds;
    let mut lat: Vec<Vec<u64>> = vec![Vec::new(); variants.len()];
    let mut wall = vec![Duration::ZERO; variants.len()];
    let mut deltas = vec![stats::CmdDelta::default(); variants.len()];
    for round in 0..rounds {
        for (i, (key, server, route, _)) in variants.iter().enumerate() {
            let before = CmdStats::read(admin).await;
            let s = http::drive(
                &server.base,
                route,
                &format!("{run}-{key}-{round}"),
                plan.w6_concurrency,
                per_round,
            )
            .await?;
            deltas[i].add(&CmdStats::read(admin).await.since(&before));
            wall[i] += Duration::from_secs_f64(s.items() as f64 / s.rate().max(1e-9));
            lat[i].extend(s.raw_us().iter().map(|us| (us * 1e3) as u64));
        }
    }
    // Counting passes, after every timed round.
    let mut counts = Vec::with_capacity(variants.len());
    for (key, server, route, _) in &variants {
        let watch = monitor::Watch::start(url).await?;
        http::drive(
            &server.base,
            route,
            &format!("{run}-{key}-count"),
            plan.w6_concurrency,
            W6_COUNT_REQUESTS,
        )
        .await?;
        counts.push(watch.stop(admin, None, None, &[]).await?);
    }
    let samples: Vec<Sample> = lat
        .into_iter()
        .zip(&wall)
        .map(|(l, w)| {
            let n = l.len();
            Sample::from_ns(l, n, *w)
        })
        .collect();
    let server_us: Vec<f64> = deltas
        .iter()
        .zip(&counts)
        .zip(&samples)
        .map(|((d, c), s)| d.server_usec(c) / s.items().max(1) as f64)
        .collect();
    let mut table = format!(
        "| W6: axum over loopback HTTP, {} requests each, {} connections, distinct keys | requests/s | p50 µs | p99 µs | server µs/request |\n|---|---:|---:|---:|---:|\n",
        plan.w6_requests, plan.w6_concurrency
    );
    let mut json = serde_json::Map::new();
    for (i, ((key, _, _, label), s)) in variants.iter().zip(&samples).enumerate() {
        table += &format!(
            "| {label} | {:.0} | {:.0} | {:.0} | {:.1} |\n",
            s.rate(),
            s.percentile(50.0),
            s.percentile(99.0),
            server_us[i]
        );
        let mut j = s.summary();
        j["server_us_per_request"] = server_us[i].into();
        j["commandstats"] = deltas[i].to_json();
        j["monitor"] = counts[i].to_json();
        j["monitor_requests"] = W6_COUNT_REQUESTS.into();
        json.insert((*key).into(), j);
    }
    if native.is_none() {
        table += &na_row(4);
    }
    report.tables.push(table);
    let at = |key: &str| variants.iter().position(|v| v.0 == key);
    let rate = |key: &str| at(key).map(|i| samples[i].rate());
    let us = |key: &str| at(key).map(|i| server_us[i]);
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
    native_ratio(
        report,
        "W6",
        "layer ÷ handler calling the native floor",
        Some(samples[0].rate()),
        rate(NATIVE_PLAIN),
    );
    if let Some(calls) = rate(CORE_CALLS) {
        core_calls_bounds(report, "W6n", samples[4].rate(), samples[6].rate(), calls);
    }
    native_ratio(
        report,
        "W6n",
        "layer ÷ handler calling the native floor, both TCP_NODELAY",
        Some(samples[4].rate()),
        rate(NATIVE_NODELAY),
    );
    report
        .json
        .insert("W6".into(), serde_json::Value::Object(json));
    // BENCH W6: ours = the layer, floor = the same handler calling lock-core directly (the
    // layer's floor), rslock = the handler calling rslock; all on the plain axum::serve. The
    // native floor and the server µs fields name the same variants (server_us_floor: the
    // handler calling lock-core).
    let mut bench = Bench::new(
        "W6",
        [
            Some(samples[0].rate()),
            Some(samples[1].rate()),
            Some(samples[3].rate()),
        ],
        0,
    );
    bench.native = rate(NATIVE_PLAIN);
    bench.server_us = [
        ("ours", "layer"),
        ("floor", "ours"),
        ("rslock", "rslock"),
        (Kind::NativeFloor.name(), NATIVE_PLAIN),
    ]
    .into_iter()
    .filter_map(|(field, key)| Some((field, us(key)?)))
    .collect();
    report.benches.push(bench);
    // BENCH W6n: the issue's comparison, all on the TCP_NODELAY server: ours = the layer,
    // floor = the handler calling the floor, rslock = the handler calling rslock.
    let mut bench = Bench::new(
        "W6n",
        [
            Some(samples[4].rate()),
            Some(samples[6].rate()),
            Some(samples[7].rate()),
        ],
        0,
    );
    bench.native = rate(NATIVE_NODELAY);
    bench.server_us = [
        ("ours", "layer_nodelay"),
        ("floor", "floor_nodelay"),
        ("rslock", "rslock_nodelay"),
        (Kind::NativeFloor.name(), NATIVE_NODELAY),
        (CORE_CALLS, CORE_CALLS),
    ]
    .into_iter()
    .filter_map(|(field, key)| Some((field, us(key)?)))
    .collect();
    report.benches.push(bench);
    Ok(())
}

/// The native floor's W6 variants (JSON keys, request ids).
const NATIVE_PLAIN: &str = "native_floor";
const NATIVE_NODELAY: &str = "native_floor_nodelay";

// ---------------------------------------------------------------- W7

/// Sections run under `MONITOR` after each timed W7 run, to count requests.
const W7_COUNT_SECTIONS: u64 = 2_000;

async fn w7(
    report: &mut Report,
    lockers: &[Locker],
    native: Option<&Locker>,
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
    let mut server = Vec::new();
    // The native floor last, after the three contenders.
    let rows = Kind::ALL
        .iter()
        .zip(lockers)
        .chain(native.map(|l| (&Kind::NativeFloor, l)));
    for (kind, locker) in rows {
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
            kind.label(),
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
        server.push((kind.name(), server_us));
        results.push(timed);
    }
    if native.is_none() {
        table += &na_row(9);
    }
    report.tables.push(table);
    let values = [0, 1, 2].map(|i| Some(results[i].acquire.rate()));
    let native_rate = results.get(3).map(|r| r.acquire.rate());
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
    native_ratio(
        report,
        "W7",
        "ours ÷ native floor sections/s",
        values[0],
        native_rate,
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
    let mut bench = Bench::new("W7", values, 0);
    bench.native = native_rate;
    bench.server_us = server;
    report.benches.push(bench);
    if violated.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "MUTUAL EXCLUSION VIOLATED (an acquire returned a name another task was holding): {}",
            violated.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_version_prefers_valkey_version() {
        let redis =
            ServerVersion::parse("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n");
        assert_eq!(redis.describe(), "redis 7.0.15");
        assert_eq!((redis.product(), redis.version()), ("redis", "7.0.15"));
        let valkey = ServerVersion::parse(
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n",
        );
        assert_eq!(valkey.describe(), "valkey 9.1.2 (redis_version 7.2.4)");
        assert_eq!((valkey.product(), valkey.version()), ("valkey", "9.1.2"));
        assert_eq!(ServerVersion::parse("").describe(), "redis ?");
    }

    #[test]
    fn bench_line_keeps_its_fields_first_and_adds_new_ones_at_the_end() {
        let old = "BENCH W1 ours=900 floor=1000 rslock=1200 ratio_floor=0.900 ratio_rslock=0.750";
        let mut b = Bench::new("W1", [Some(900.0), Some(1000.0), Some(1200.0)], 0);
        assert_eq!(b.line(), old);
        b.native = Some(1125.0);
        b.server_us = vec![("ours", 7.891), ("floor", 3.9), ("native_floor", f64::NAN)];
        let line = b.line();
        assert_eq!(
            line,
            format!(
                "{old} native_floor=1125 ratio_native_floor=0.800 server_us_ours=7.89 server_us_floor=3.90"
            )
        );
        // Every field after the scenario is key=number.
        for field in line.split(' ').skip(2) {
            let (_, v) = field.split_once('=').unwrap();
            assert!(v.parse::<f64>().is_ok(), "{field}");
        }
    }

    #[test]
    fn na_row_has_the_tables_cell_count() {
        let header = "| W4: ... | release→acquire p50 µs | p99 µs | max µs | server µs/cycle |";
        let row = na_row(4);
        assert_eq!(row.matches('|').count(), header.matches('|').count());
        assert!(row.starts_with("| native floor | n/a: the server has no DELIFEQ |"));
    }
}
