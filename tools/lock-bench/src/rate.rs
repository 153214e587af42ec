//! R1 and R2: rate-limit decisions, lock-core's `RateLimit::check` (GCRA, one script call)
//! against the fixed-window floor (`window.rs`: `INCR` + `PEXPIRE … NX`, one pipeline), with
//! W2's concurrency: R1 on one hot key, R2 spread over many keys.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockClient, Quota};
use redis::aio::MultiplexedConnection;

use crate::contender::Locker;
use crate::ctx::Ctx;
use crate::measure::{self, Cost};
use crate::monitor::Counts;
use crate::report::{Bench, Report, ratio};
use crate::stats::Sample;
use crate::window::FixedWindow;

/// Both limiters' quota: this many decisions allowed per [`WINDOW`] per key (lock-core's
/// burst is the same number, so a fresh key allows as many at once in both).
const LIMIT: u32 = 1_000;
/// The period of [`LIMIT`].
const WINDOW: Duration = Duration::from_secs(1);
/// Decisions run under `MONITOR` after each timed run, to count requests.
const COUNT_DECISIONS: usize = 256;
/// R2's keys.
pub(crate) const MANY_KEYS: usize = 10_000;

/// A rate limiter under test.
#[derive(Clone)]
enum Limiter {
    /// lock-core: `client.rate_limit(key).quota(..).check()`.
    Ours(LockClient, Quota),
    /// The fixed-window floor.
    Window(FixedWindow),
}

impl Limiter {
    fn key(&self) -> &'static str {
        match self {
            Limiter::Ours(..) => "ours",
            Limiter::Window(_) => "floor",
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Limiter::Ours(..) => "ours (lock-core `RateLimit::check`, GCRA)",
            Limiter::Window(_) => "floor (fixed window: INCR + PEXPIRE NX)",
        }
    }

    /// One decision on `name`: whether it was allowed.
    async fn check(&self, name: &str) -> Result<bool, String> {
        match self {
            Limiter::Ours(client, quota) => client
                .rate_limit(name)
                .quota(*quota)
                .check()
                .await
                .map(|d| d.is_allowed())
                .map_err(|e| e.to_string()),
            Limiter::Window(w) => w.check(name).await,
        }
    }

    /// The Redis key of `name`'s state.
    fn redis_key(&self, name: &str) -> String {
        match self {
            Limiter::Ours(client, quota) => client
                .rate_limit(name)
                .quota(*quota)
                .key()
                .unwrap_or_default(),
            Limiter::Window(_) => name.to_owned(),
        }
    }
}

/// `decisions` decisions spread over `tasks` tasks, on `keys` names (`prefix:<n>`, the task's
/// i-th decision on name `(t + i × tasks) % keys`); the latencies and how many were allowed.
async fn run_decisions(
    limiter: &Limiter,
    prefix: &str,
    tasks: usize,
    decisions: usize,
    keys: usize,
) -> Result<(Sample, usize), String> {
    let prefix = Arc::new(prefix.to_owned());
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (limiter, prefix) = (limiter.clone(), prefix.clone());
            let n = decisions / tasks + usize::from(t < decisions % tasks);
            tokio::spawn(async move {
                let (mut lat, mut allowed) = (Vec::with_capacity(n), 0);
                for i in 0..n {
                    let name = format!("{prefix}:{}", (t + i * tasks) % keys);
                    let t0 = Instant::now();
                    allowed += usize::from(limiter.check(&name).await?);
                    lat.push(t0.elapsed());
                }
                Ok::<_, String>((lat, allowed))
            })
        })
        .collect();
    let (mut all, mut allowed) = (Vec::with_capacity(decisions), 0);
    for h in handles {
        let (lat, ok) = tokio::time::timeout(Duration::from_secs(120), h)
            .await
            .map_err(|_| "timed out".to_owned())?
            .map_err(|e| e.to_string())??;
        all.extend(lat);
        allowed += ok;
    }
    Ok((Sample::new(all, start.elapsed()), allowed))
}

/// One row's figures.
struct Row {
    sample: Sample,
    allowed: usize,
    cost: Cost,
    counts: Counts,
    server_us: f64,
    client_us: f64,
    requests: f64,
    /// The stored state of one key: `STRLEN`, `MEMORY USAGE`.
    bytes: (f64, f64),
}

/// Decisions on a fresh name before its state is measured: enough that lock-core's key lives
/// long enough to be read (one permit of 1 ms each), the same for both.
const SIZE_DECISIONS: usize = 100;

/// Reads `STRLEN` and `MEMORY USAGE` of the state of a fresh name after [`SIZE_DECISIONS`]
/// decisions in a row.
async fn state_size(
    limiter: &Limiter,
    admin: &mut MultiplexedConnection,
    name: &str,
) -> Result<(f64, f64), String> {
    for _ in 0..SIZE_DECISIONS {
        limiter.check(name).await?;
    }
    let key = limiter.redis_key(name);
    let len: u64 = redis::cmd("STRLEN")
        .arg(&key)
        .query_async(admin)
        .await
        .map_err(|e| format!("STRLEN: {e}"))?;
    let usage: Option<u64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&key)
        .query_async(admin)
        .await
        .map_err(|e| format!("MEMORY USAGE: {e}"))?;
    Ok((len as f64, usage.map_or(f64::NAN, |u| u as f64)))
}

/// Times `decisions` decisions of `limiter` in the measuring frame, counts the requests of
/// [`COUNT_DECISIONS`] more under `MONITOR`, then reads one key's size.
async fn measure_row(
    limiter: &Limiter,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
    prefix: &str,
    keys: usize,
) -> Result<Row, String> {
    let (tasks, decisions) = (ctx.plan.w2_tasks, ctx.plan.w2_cycles);
    let count_prefix = format!("{prefix}:count");
    let count_tasks = tasks.min(COUNT_DECISIONS);
    let m = measure::timed_and_counted(
        admin,
        ctx.url,
        decisions,
        COUNT_DECISIONS,
        run_decisions(limiter, prefix, tasks, decisions, keys),
        async {
            run_decisions(limiter, &count_prefix, count_tasks, COUNT_DECISIONS, keys)
                .await
                .map(drop)
        },
    )
    .await?;
    let bytes = state_size(limiter, admin, &format!("{prefix}:size")).await?;
    let (sample, allowed) = m.out;
    Ok(Row {
        server_us: m.server_us,
        client_us: m.client_us,
        requests: m.requests,
        sample,
        allowed,
        cost: m.cost,
        counts: m.counts,
        bytes,
    })
}

impl Row {
    fn table_row(&self, label: &str) -> String {
        let s = &self.sample;
        format!(
            "| {label} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.2} | {:.1} % | {:.0} B / {:.0} B |\n",
            s.rate(),
            s.percentile(50.0),
            s.percentile(99.0),
            self.server_us,
            self.client_us,
            self.requests,
            100.0 * self.allowed as f64 / s.items().max(1) as f64,
            self.bytes.0,
            self.bytes.1,
        )
    }

    fn json(&self) -> serde_json::Value {
        let mut j = self.sample.summary();
        j["allowed"] = self.allowed.into();
        j["server_us_per_decision"] = self.server_us.into();
        j["requests_per_decision"] = self.requests.into();
        j["client_cpu_us_per_decision"] = self.client_us.into();
        j["state_bytes"] = self.bytes.0.into();
        j["memory_usage_bytes"] = self.bytes.1.into();
        j["commandstats"] = self.cost.delta.to_json();
        j["monitor"] = self.counts.to_json();
        j
    }
}

/// The two limiters: ours on lock-core's client of the run, the floor on a connection of its
/// own.
async fn limiters(ctx: &Ctx<'_>) -> Result<Vec<Limiter>, String> {
    let Some(Locker::Ours(client)) = ctx.lockers.first() else {
        return Err("no lock-core client".into());
    };
    let quota = Quota::per(WINDOW, LIMIT).burst(LIMIT);
    let window = FixedWindow::connect(ctx.url, u64::from(LIMIT), WINDOW).await?;
    Ok(vec![
        Limiter::Ours(client.clone(), quota),
        Limiter::Window(window),
    ])
}

/// R1 (`keys` 1: one hot key) or R2 (`keys` [`MANY_KEYS`]).
pub(crate) async fn rate(
    report: &mut Report,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
    scenario: &'static str,
    keys: usize,
) -> Result<(), String> {
    let (tasks, decisions) = (ctx.plan.w2_tasks, ctx.plan.w2_cycles);
    let mut table = format!(
        "| {scenario}: {tasks} tasks, {decisions} decisions over {keys} key(s), {LIMIT} per {WINDOW:?} per key | decisions/s | p50 µs | p99 µs | server µs/decision | client CPU µs/decision | requests/decision | allowed | state per key (value / MEMORY USAGE) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let mut json = serde_json::Map::new();
    let (mut server, mut client, mut extra) = (Vec::new(), Vec::new(), Vec::new());
    let mut rates = [None; 3];
    for (i, limiter) in limiters(ctx).await?.iter().enumerate() {
        let prefix = format!("lb:{}:{scenario}:{}", ctx.run, limiter.key());
        let row = measure_row(limiter, ctx, admin, &prefix, keys).await?;
        table += &row.table_row(limiter.label());
        json.insert(limiter.key().into(), row.json());
        rates[i] = Some(row.sample.rate());
        server.push((limiter.key(), row.server_us));
        client.push((limiter.key(), row.client_us));
        extra.push((format!("state_bytes_{}", limiter.key()), row.bytes.0));
        extra.push((format!("memory_usage_{}", limiter.key()), row.bytes.1));
    }
    report.tables.push(table);
    let r = ratio(rates[0], rates[1]);
    report.target(
        scenario,
        "ours ÷ fixed-window floor decisions/s (informational: no target)",
        format!("{:.3}×", r.unwrap_or(f64::NAN)),
        None,
    );
    json.insert("tasks".into(), tasks.into());
    json.insert("decisions".into(), decisions.into());
    json.insert("keys".into(), keys.into());
    report
        .json
        .insert(scenario.into(), serde_json::Value::Object(json));
    let mut bench = Bench::new(scenario, rates, 0);
    bench.server_us = server;
    bench.client_us = client;
    bench.extra = extra;
    report.benches.push(bench);
    Ok(())
}
