//! A whole run: the server, the contenders' clients, every scenario asked for, the output.

use std::time::{Duration, Instant};

use lock_tests::RedisServer;
use redis::aio::MultiplexedConnection;

use crate::cli::Args;
use crate::contender::{Kind, Locker, Opts};
use crate::ctx::Ctx;
use crate::plan::Plan;
use crate::report::{self, NO_DELIFEQ, Report, RunInfo};
use crate::server::ServerVersion;
use crate::{calls, cycles, floor, median, rate, saturate, w3, w4, w5, w6, w7};

/// The clients of a run.
struct Clients {
    lockers: Vec<Locker>,
    core_calls: Option<Locker>,
    native: Option<Locker>,
}

async fn connect(opts: &Opts, has_delifeq: bool) -> Clients {
    let mut lockers = Vec::new();
    for kind in Kind::ALL {
        lockers.push(Locker::connect(kind, opts).await);
    }
    // After lock-core's client, which loads its functions.
    let core_calls = match &lockers[1] {
        Locker::Floor(floor) => floor.with_lock_core_calls().await.map(Locker::Floor),
        _ => None,
    };
    // Connected last, so the three contenders' clients are set up as before it existed.
    let native = if has_delifeq {
        Some(Locker::connect(Kind::NativeFloor, opts).await)
    } else {
        None
    };
    Clients {
        lockers,
        core_calls,
        native,
    }
}

/// Runs every scenario `args` asks for; returns the failures.
async fn scenarios(
    args: &Args,
    ctx: &Ctx<'_>,
    report: &mut Report,
    admin: &mut MultiplexedConnection,
) -> Vec<String> {
    let mut failures = Vec::new();
    macro_rules! scenario {
        ($name:literal, $body:expr) => {
            if args.wants($name) {
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
    let plan = ctx.plan;
    scenario!(
        "W1",
        cycles::cycles(report, ctx, admin, "W1", 1, plan.w1_cycles)
    );
    scenario!(
        "W2",
        cycles::cycles(report, ctx, admin, "W2", plan.w2_tasks, plan.w2_cycles)
    );
    scenario!("W3h", w3::w3h(report, ctx, admin));
    scenario!("W3x", w3::w3x(report, ctx, admin));
    scenario!("W4", w4::w4(report, ctx, admin));
    scenario!("W5", w5::w5(report, ctx));
    scenario!("W6", w6::w6(report, ctx, admin));
    scenario!("W7", w7::w7(report, ctx, admin));
    scenario!("R1", rate::rate(report, ctx, admin, "R1", 1));
    scenario!("R2", rate::rate(report, ctx, admin, "R2", rate::MANY_KEYS));
    scenario!("S1", calls::calls(report, ctx, admin));
    scenario!("X1", saturate::x1(report, ctx, admin));
    failures
}

/// Output: tables, targets, files, then the BENCH lines last. `report` is the median of
/// `runs` where there are several.
fn output(args: &Args, report: &Report, runs: &[Report], info: &RunInfo<'_>) {
    report::print_tables(report, info);
    let svg_path = report::svg_path(args.svg.as_deref(), args.json.as_deref());
    report::write_chart(report, &svg_path);
    if let Some(path) = &args.json {
        report::write_json(report, runs, info, path, &svg_path);
    }
    println!();
    for b in &report.benches {
        println!("{}", b.line());
    }
}

/// What every run of the plan shares: the clients, their options, the server, the plan, the
/// first run's id.
struct Setup<'a> {
    clients: &'a Clients,
    opts: &'a Opts,
    url: &'a str,
    plan: &'a Plan,
    first_run: String,
    /// Whether the bench started the server.
    local_server: bool,
}

/// Runs the plan `args.runs` times (every run after the first on names of its own); each
/// run's report, and every failure (named by its run when there are several).
async fn every_run(
    args: &Args,
    setup: &Setup<'_>,
    admin: &mut MultiplexedConnection,
) -> (Vec<Report>, Vec<String>) {
    let mut runs = Vec::with_capacity(args.runs);
    let mut failures = Vec::new();
    for i in 0..args.runs {
        let run = if i == 0 {
            setup.first_run.clone()
        } else {
            uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
        };
        if args.runs > 1 {
            eprintln!("lock-bench: run {} of {}, run id {run}", i + 1, args.runs);
        }
        let ctx = Ctx {
            lockers: &setup.clients.lockers,
            core_calls: setup.clients.core_calls.as_ref(),
            native: setup.clients.native.as_ref(),
            opts: setup.opts,
            url: setup.url,
            run: &run,
            plan: setup.plan,
            local_server: setup.local_server,
        };
        let mut report = Report::default();
        let failed = scenarios(args, &ctx, &mut report, admin).await;
        if args.runs > 1 {
            failures.extend(failed.into_iter().map(|f| format!("run {}: {f}", i + 1)));
        } else {
            failures.extend(failed);
        }
        runs.push(report);
    }
    (runs, failures)
}

/// The whole run; whether every scenario succeeded.
pub(crate) async fn bench(args: Args) -> bool {
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
        mutex_protocol: args.mutex_protocol,
    };
    let mut plan = Plan::new(args.quick);
    plan.x1_procs = args.x1_procs;
    let mut admin = redis::Client::open(url.as_str())
        .expect("redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis");
    let version = ServerVersion::read(&mut admin).await;
    let has_delifeq = floor::server_has_delifeq(&mut admin).await;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let clients = connect(&opts, has_delifeq).await;
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
    let setup = Setup {
        clients: &clients,
        opts: &opts,
        url: &url,
        plan: &plan,
        first_run: run,
        local_server: server.is_some(),
    };
    let (mut runs, failures) = every_run(&args, &setup, &mut admin).await;
    let report = if runs.len() == 1 {
        runs.pop().unwrap_or_default()
    } else {
        median::merge(&runs)
    };
    let info = RunInfo {
        quick: args.quick,
        seconds: t_start.elapsed().as_secs_f64(),
        version: &version,
        has_delifeq,
        pool: opts.pool,
        rslock_retry_ms: args.rslock_retry_ms,
        failures: &failures,
        runs: args.runs,
    };
    output(&args, &report, &runs, &info);
    drop(clients);
    drop(server);
    failures.is_empty()
}
