//! X1: what one server core serves. Several client processes (this binary, `__x1-child`)
//! run acquire + release cycles on distinct names (as W2) as fast as they can for a fixed
//! time, each contender in turn; the figure is the cycles completed per second of the
//! server's CPU time, which is what a fleet sharing one Redis can do per server core.
//!
//! The server's CPU time is `used_cpu_user + used_cpu_sys` of `INFO cpu`, read just before
//! the start and at the end of the window: the server's own `getrusage` (every thread of
//! it, microseconds), read the same way whether the server is the bench's own or an external
//! one (`--redis`), where `/proc/<pid>/stat` would need the server on this machine and counts
//! in 10 ms ticks. Its CPU utilisation over the window (CPU seconds over wall seconds) says
//! whether the clients kept it busy: near 100 % the figure is the server's capacity; well
//! below it, the clients (or the machine) were the limit, and the figure still is the
//! server's cost per cycle, only measured on a server that was partly idle.
//!
//! Where the bench started the server, the machine has two cores or more and `taskset` is
//! there, the server is pinned to CPU 0 for X1 (its pid from `INFO server`'s `process_id`)
//! and the clients run on the other CPUs, so the clients cannot take the server's core;
//! the server's affinity is restored after X1. Otherwise nothing is pinned, and the table,
//! the JSON and the `BENCH` line (`pinned=no`) say so.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::children;
use crate::contender::{Kind, Locker, Opts};
use crate::ctx::Ctx;
use crate::report::{Bench, Report, na_row, native_ratio};
use crate::stats::{CmdDelta, CmdStats};
use crate::sys::{cpu_us, mono_ns};

/// Bound on one acquisition (nothing else holds X1's names: it never waits).
const CYCLE_WAIT: Duration = Duration::from_secs(5);
/// How long after its window a child may take to report.
const REPORT_GRACE: Duration = Duration::from_secs(60);

/// Arguments of the hidden `__x1-child` subcommand.
pub(crate) struct ChildArgs {
    pub(crate) kind: Kind,
    pub(crate) opts: Opts,
    pub(crate) coord_key: String,
    /// Every lock name starts with it, then the child's pid.
    pub(crate) prefix: String,
    pub(crate) tasks: usize,
    /// The window, from the start the parent writes.
    pub(crate) duration: Duration,
}

impl ChildArgs {
    fn to_args(&self) -> Vec<String> {
        let mut args = children::head_args("__x1-child", self.kind, &self.opts, &self.coord_key);
        args.extend([
            self.prefix.clone(),
            self.tasks.to_string(),
            self.duration.as_millis().to_string(),
        ]);
        args
    }

    pub(crate) fn parse(args: &[String]) -> Option<ChildArgs> {
        let (kind, opts, coord_key, rest) = children::parse_head(args)?;
        let [prefix, tasks, duration_ms] = rest else {
            return None;
        };
        Some(ChildArgs {
            kind,
            opts,
            coord_key,
            prefix: prefix.clone(),
            tasks: tasks.parse().ok()?,
            duration: Duration::from_millis(duration_ms.parse().ok()?),
        })
    }
}

/// The X1 child process: connects, warms up, reports ready, waits for the start, runs its
/// tasks until the window ends and prints the cycles they completed inside it and its CPU
/// time over them as one JSON line.
pub(crate) async fn child_main(args: ChildArgs) {
    let line = match child_run(&args).await {
        Ok((cycles, cpu_us)) => serde_json::json!({ "cycles": cycles, "cpu_us": cpu_us }),
        Err(e) => serde_json::json!({ "error": e }),
    };
    println!("{line}");
}

async fn child_run(args: &ChildArgs) -> Result<(u64, f64), String> {
    let client = redis::Client::open(args.opts.url.as_str()).map_err(|e| e.to_string())?;
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let signals = children::listen(&client, &children::signal_channel(&args.coord_key)).await?;
    let locker = Locker::connect(args.kind, &args.opts).await;
    let prefix = format!("{}:{}", args.prefix, std::process::id());
    let warm = format!("{prefix}:warm");
    let held = locker.lock(&warm, CYCLE_WAIT).await?;
    locker.unlock(held).await?;

    let start = children::ready_and_wait(&mut con, &args.coord_key, &signals.go).await?;
    let deadline = start + args.duration.as_nanos() as u64;
    let cpu0 = cpu_us();
    let handles: Vec<_> = (0..args.tasks)
        .map(|t| {
            tokio::spawn(cycle_until(
                locker.clone(),
                format!("{prefix}:{t}"),
                deadline,
            ))
        })
        .collect();
    let mut cycles = 0;
    for h in handles {
        cycles += h.await.map_err(|e| format!("task failed: {e}"))??;
    }
    let cpu = cpu_us() - cpu0;
    signals.listener.abort();
    Ok((cycles, cpu))
}

/// Acquire + release cycles on fresh names until `deadline` (`CLOCK_MONOTONIC`, ns); the
/// cycles that ended by then.
async fn cycle_until(locker: Locker, prefix: String, deadline: u64) -> Result<u64, String> {
    let (mut done, mut i) = (0u64, 0u64);
    while mono_ns() < deadline {
        let name = format!("{prefix}:{i}");
        i += 1;
        let held = locker.lock(&name, CYCLE_WAIT).await?;
        locker.unlock(held).await?;
        if mono_ns() <= deadline {
            done += 1;
        }
    }
    Ok(done)
}

/// The server's CPU time so far, seconds: `used_cpu_user + used_cpu_sys` of `INFO cpu`.
async fn server_cpu_s(admin: &mut MultiplexedConnection) -> Result<f64, String> {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(admin)
        .await
        .map_err(|e| format!("INFO cpu: {e}"))?;
    parse_cpu(&info).ok_or_else(|| "INFO cpu has no used_cpu_user / used_cpu_sys".to_owned())
}

/// `used_cpu_user + used_cpu_sys` (not the `_children` or `_main_thread` fields).
fn parse_cpu(info: &str) -> Option<f64> {
    let field = |name: &str| -> Option<f64> {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
    };
    Some(field("used_cpu_user")? + field("used_cpu_sys")?)
}

/// A number of `INFO <section>`: `process_id` of `server`, `connected_clients` of `clients`.
async fn info_field<T: std::str::FromStr>(
    admin: &mut MultiplexedConnection,
    section: &str,
    name: &str,
) -> Option<T> {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(admin)
        .await
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// Runs `taskset` with `args`; its standard output if it succeeded.
fn taskset(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("taskset")
        .args(args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Where X1's processes run. Pinned, the server goes back to its former CPUs when this is
/// dropped, whatever X1's outcome.
enum Placement {
    /// The server on CPU 0, the clients on `clients`.
    Pinned {
        pid: u32,
        clients: String,
        /// The server's CPU list before (`taskset -cp`), to restore.
        restore: String,
    },
    /// Nothing pinned, and why.
    NotPinned(String),
}

impl Placement {
    /// Pins the server to CPU 0 where the bench started it, there are two CPUs or more and
    /// `taskset` works.
    async fn pin(local: bool, admin: &mut MultiplexedConnection) -> Placement {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if !local {
            return Placement::NotPinned("an external server (--redis)".into());
        }
        if cpus < 2 {
            return Placement::NotPinned(format!("{cpus} CPU"));
        }
        if taskset(&["-V"]).is_none() {
            return Placement::NotPinned("no taskset".into());
        }
        let Some(pid) = info_field::<u32>(admin, "server", "process_id").await else {
            return Placement::NotPinned("no process_id in INFO server".into());
        };
        let pid_s = pid.to_string();
        // "pid 123's current affinity list: 0,1"
        let restore = taskset(&["-cp", &pid_s])
            .and_then(|out| Some(out.rsplit(": ").next()?.trim().to_owned()))
            .filter(|l| !l.is_empty())
            .unwrap_or_else(|| format!("0-{}", cpus - 1));
        if taskset(&["-cp", "0", &pid_s]).is_none() {
            return Placement::NotPinned(format!("taskset -cp 0 {pid} failed"));
        }
        eprintln!("lock-bench: X1 pinned the server (pid {pid}) to CPU 0; it had CPUs {restore}");
        let clients = if cpus == 2 {
            "1".to_owned()
        } else {
            format!("1-{}", cpus - 1)
        };
        Placement::Pinned {
            pid,
            clients,
            restore,
        }
    }

    /// The clients' CPU list, where pinned.
    fn clients(&self) -> Option<&str> {
        match self {
            Placement::Pinned { clients, .. } => Some(clients),
            Placement::NotPinned(_) => None,
        }
    }

    fn note(&self) -> String {
        match self {
            Placement::Pinned { clients, .. } => {
                format!("server pinned to CPU 0, clients to CPU {clients}")
            }
            Placement::NotPinned(why) => format!("not pinned: {why}"),
        }
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        if let Placement::Pinned { pid, restore, .. } = self {
            match taskset(&["-cp", restore, &pid.to_string()]) {
                Some(_) => eprintln!("lock-bench: X1 gave the server its CPUs {restore} back"),
                None => {
                    eprintln!("lock-bench: X1 could not give the server its CPUs {restore} back")
                }
            }
        }
    }
}

/// The shape of an X1 row.
#[derive(Clone, Copy)]
struct Shape {
    procs: usize,
    tasks: usize,
    duration: Duration,
}

/// One contender's window.
struct RowResult {
    kind: Kind,
    /// Cycles completed inside the window, all children.
    cycles: u64,
    /// Each child's cycles.
    per_proc: Vec<u64>,
    wall_s: f64,
    server_cpu_s: f64,
    /// The children's CPU time over their window, µs.
    client_cpu_us: f64,
    /// `INFO commandstats` over the window (with the scripts' own calls, so not requests).
    commands: CmdDelta,
    /// The server's `connected_clients` halfway through the window (every process's
    /// connections, the bench's own included).
    connections: Option<u64>,
}

impl RowResult {
    fn per_server_cpu_s(&self) -> f64 {
        self.cycles as f64 / self.server_cpu_s
    }

    fn utilisation(&self) -> f64 {
        self.server_cpu_s / self.wall_s
    }

    fn rate(&self) -> f64 {
        self.cycles as f64 / self.wall_s
    }

    fn client_us(&self) -> f64 {
        self.client_cpu_us / self.cycles.max(1) as f64
    }

    fn table_row(&self) -> String {
        format!(
            "| {} | {:.0} | {:.2} | {:.0} % | {:.0} | {:.1} |\n",
            self.kind.label(),
            self.per_server_cpu_s(),
            1e6 / self.per_server_cpu_s(),
            self.utilisation() * 100.0,
            self.rate(),
            self.client_us(),
        )
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "cycles": self.cycles,
            "cycles_per_process": self.per_proc,
            "wall_s": self.wall_s,
            "server_cpu_s": self.server_cpu_s,
            "cycles_per_server_cpu_s": self.per_server_cpu_s(),
            "server_cpu_us_per_cycle": 1e6 / self.per_server_cpu_s(),
            "server_utilisation": self.utilisation(),
            "cycles_per_s": self.rate(),
            "client_cpu_us_per_cycle": self.client_us(),
            "connected_clients": self.connections,
            "commandstats": self.commands.to_json(),
        })
    }
}

/// One contender's window: spawns the children, starts them, reads the server's CPU time
/// before the start and at the window's end, and collects the cycles.
async fn run_row(
    kind: Kind,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
    clients: Option<&str>,
    shape: Shape,
) -> Result<RowResult, String> {
    let prefix = format!("lb:{}:X1:{}", ctx.run, kind.name());
    let coord_key = format!("{prefix}:coord");
    let args = ChildArgs {
        kind,
        opts: ctx.opts.clone(),
        coord_key: coord_key.clone(),
        prefix,
        tasks: shape.tasks,
        duration: shape.duration,
    };
    let kids = children::spawn(&args.to_args(), shape.procs, clients)?;
    children::wait_ready(admin, &coord_key, shape.procs, "X1").await?;
    let stats0 = CmdStats::read(admin).await;
    let cpu0 = server_cpu_s(admin).await?;
    let t0 = mono_ns();
    let start = children::start(admin, &coord_key).await?;
    let end = start + shape.duration.as_nanos() as u64;
    let until = |t: u64| tokio::time::sleep(Duration::from_nanos(t.saturating_sub(mono_ns())));
    until(start + shape.duration.as_nanos() as u64 / 2).await;
    // Halfway, when every child is connected and busy.
    let connections = info_field(admin, "clients", "connected_clients").await;
    until(end).await;
    let cpu1 = server_cpu_s(admin).await?;
    let t1 = mono_ns();
    let commands = CmdStats::read(admin).await.since(&stats0);
    let outs = children::collect(kids, shape.duration + REPORT_GRACE, "X1").await?;
    let per_proc: Vec<u64> = outs
        .iter()
        .map(|v| v["cycles"].as_u64().unwrap_or(0))
        .collect();
    let cycles = per_proc.iter().sum();
    if cycles == 0 {
        return Err(format!("{}: no cycle completed", kind.name()));
    }
    Ok(RowResult {
        kind,
        cycles,
        per_proc,
        wall_s: (t1 - t0) as f64 / 1e9,
        server_cpu_s: (cpu1 - cpu0).max(1e-6),
        client_cpu_us: outs
            .iter()
            .map(|v| v["cpu_us"].as_f64().unwrap_or(0.0))
            .sum(),
        commands,
        connections,
    })
}

/// X1: every contender (the native floor last, where it runs) saturating the server from
/// `x1_procs` processes.
pub(crate) async fn x1(
    report: &mut Report,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
) -> Result<(), String> {
    let plan = ctx.plan;
    let shape = Shape {
        procs: plan.x1_procs,
        tasks: plan.x1_tasks,
        duration: plan.x1_duration,
    };
    let placement = Placement::pin(ctx.local_server, admin).await;
    let mut results = Vec::new();
    for (kind, _) in ctx.rows() {
        results.push(run_row(kind, ctx, admin, placement.clients(), shape).await?);
    }
    let pinned = matches!(placement, Placement::Pinned { .. });
    let note = placement.note();
    drop(placement);
    publish(report, shape, pinned, &note, &results);
    Ok(())
}

/// X1's table, JSON, "ours ÷ native floor" line and `BENCH` line.
fn publish(report: &mut Report, shape: Shape, pinned: bool, note: &str, results: &[RowResult]) {
    let mut table = format!(
        "| X1: {} processes × {} tasks, distinct names, {} s a row; {note} | cycles per server-CPU-s | server CPU µs/cycle | server CPU utilisation | cycles/s | client CPU µs/cycle |\n|---|---:|---:|---:|---:|---:|\n",
        shape.procs,
        shape.tasks,
        shape.duration.as_secs(),
    );
    let mut json = serde_json::Map::new();
    for r in results {
        table += &r.table_row();
        json.insert(r.kind.name().into(), r.json());
    }
    if results.len() < 4 {
        table += &na_row(5);
    }
    report.tables.push(table);
    let figure = |kind: Kind| {
        results
            .iter()
            .find(|r| r.kind == kind)
            .map(RowResult::per_server_cpu_s)
    };
    let values = Kind::ALL.map(figure);
    let native = figure(Kind::NativeFloor);
    native_ratio(
        report,
        "X1",
        "ours ÷ native floor cycles per server-CPU-s",
        values[0],
        native,
    );
    json.insert("processes".into(), shape.procs.into());
    json.insert("tasks_per_process".into(), shape.tasks.into());
    json.insert("seconds".into(), shape.duration.as_secs_f64().into());
    json.insert("pinned".into(), pinned.into());
    json.insert("placement".into(), note.into());
    json.insert(
        "server_cpu".into(),
        "INFO cpu: used_cpu_user + used_cpu_sys".into(),
    );
    report
        .json
        .insert("X1".into(), serde_json::Value::Object(json));
    let mut bench = Bench::new("X1", values, 0);
    bench.native = native;
    bench.client_us = results
        .iter()
        .map(|r| (r.kind.name(), r.client_us()))
        .collect();
    bench.extra = results
        .iter()
        .map(|r| {
            let key = format!("server_util_pct_{}", r.kind.name());
            (key, r.utilisation() * 100.0)
        })
        .collect();
    bench.extra.push(("procs".into(), shape.procs as f64));
    bench.extra.push(("tasks".into(), shape.tasks as f64));
    bench
        .labels
        .push(("pinned", if pinned { "yes" } else { "no" }.into()));
    report.benches.push(bench);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_cpu_is_user_plus_sys_of_the_server_itself() {
        let info = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\n\
                    used_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n\
                    used_cpu_sys_main_thread:1.000000\r\nused_cpu_user_main_thread:2.000000\r\n";
        assert_eq!(parse_cpu(info), Some(3.75));
        assert_eq!(parse_cpu("# CPU\r\nused_cpu_sys:1.0\r\n"), None);
    }

    #[test]
    fn child_args_round_trip() {
        let args = ChildArgs {
            kind: Kind::Rslock,
            opts: Opts {
                url: "redis://127.0.0.1:1/".into(),
                pool: 16,
                rslock_retry: Duration::from_millis(10),
                mutex_protocol: lock_core::MutexProtocol::Auto,
            },
            coord_key: "lb:x:X1:rslock:coord".into(),
            prefix: "lb:x:X1:rslock".into(),
            tasks: 16,
            duration: Duration::from_secs(3),
        };
        let argv = args.to_args();
        assert_eq!(argv[0], "__x1-child");
        let back = ChildArgs::parse(&argv[1..]).unwrap();
        assert_eq!(back.to_args(), argv);
        assert!(ChildArgs::parse(&argv[2..]).is_none());
    }
}
