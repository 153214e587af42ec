//! W1 and W2: uncontended acquire + release cycles on distinct names, one task and many.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::contender::{Kind, Locker};
use crate::ctx::Ctx;
use crate::measure::{self, Cost};
use crate::monitor::Counts;
use crate::report::{Bench, Report, core_calls_bounds, na_row, native_ratio, ratio};
use crate::stats::Sample;

/// Cycles run under `MONITOR` after each timed W1/W2 run, to count requests.
const COUNT_CYCLES: usize = 256;

/// The floor's client sending lock-core's calls: its key (JSON, W6 variant, lock names) and
/// its label in the tables.
pub(crate) const CORE_CALLS: &str = "floor_core_calls";
const CORE_CALLS_LABEL: &str = "floor client, lock-core's server calls";

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

/// One row's timed run and counting pass.
struct Row {
    sample: Sample,
    cost: Cost,
    counts: Counts,
    server_us: f64,
    client_us: f64,
    allocs: Option<f64>,
    requests: f64,
}

/// Times `cycles` cycles of `locker` in the measuring frame, then counts the requests of
/// [`COUNT_CYCLES`] more under `MONITOR`.
async fn measure_row(
    locker: &Locker,
    admin: &mut MultiplexedConnection,
    url: &str,
    prefix: &str,
    tasks: usize,
    cycles: usize,
) -> Result<Row, String> {
    let count_prefix = format!("{prefix}:count");
    let m = measure::timed_and_counted(
        admin,
        url,
        cycles,
        COUNT_CYCLES,
        run_cycles(locker, prefix, tasks, cycles),
        async {
            run_cycles(locker, &count_prefix, tasks.min(COUNT_CYCLES), COUNT_CYCLES)
                .await
                .map(drop)
        },
    )
    .await?;
    Ok(Row {
        server_us: m.server_us,
        client_us: m.client_us,
        allocs: m.allocs,
        requests: m.requests,
        sample: m.out,
        cost: m.cost,
        counts: m.counts,
    })
}

impl Row {
    fn table_row(&self, label: &str) -> String {
        let s = &self.sample;
        format!(
            "| {label} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.2} |\n",
            s.rate(),
            s.percentile(50.0),
            s.percentile(99.0),
            self.server_us,
            self.client_us,
            self.requests,
        )
    }

    fn json(&self) -> serde_json::Value {
        let mut j = self.sample.summary();
        j["server_us_per_cycle"] = self.server_us.into();
        j["requests_per_cycle"] = self.requests.into();
        j["client_cpu_us_per_cycle"] = self.client_us.into();
        if let Some(allocs) = self.allocs {
            j["client_allocs_per_cycle"] = allocs.into();
        }
        j["commandstats"] = self.cost.delta.to_json();
        j["monitor"] = self.counts.to_json();
        j
    }
}

/// The rows of W1/W2: the three contenders, then (not one of them: a measure of lock-core's
/// server side) the floor's client on lock-core's calls, then the native floor: each added
/// row runs after the ones before it existed. (key, label, locker).
fn rows<'a>(ctx: &Ctx<'a>) -> Vec<(&'static str, &'static str, &'a Locker)> {
    Kind::ALL
        .iter()
        .zip(ctx.lockers)
        .map(|(k, l)| (k.name(), k.label(), l))
        .chain(ctx.core_calls.map(|l| (CORE_CALLS, CORE_CALLS_LABEL, l)))
        .chain(
            ctx.native
                .map(|l| (Kind::NativeFloor.name(), Kind::NativeFloor.label(), l)),
        )
        .collect()
}

/// W1 (`tasks` 1) or W2: `cycles` cycles per row.
pub(crate) async fn cycles(
    report: &mut Report,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
    scenario: &'static str,
    tasks: usize,
    cycles: usize,
) -> Result<(), String> {
    let mut table = format!(
        "| {scenario}: {tasks} task(s), {cycles} cycles, distinct names | cycles/s | p50 µs | p99 µs | server µs/cycle | client CPU µs/cycle | requests/cycle |\n|---|---:|---:|---:|---:|---:|---:|\n"
    );
    let mut json = serde_json::Map::new();
    let mut rates = Vec::new();
    let mut bench_server = Vec::new();
    let mut bench_client = Vec::new();
    let mut bench_allocs = Vec::new();
    for (key, label, locker) in rows(ctx) {
        let prefix = format!("lb:{}:{scenario}:{key}", ctx.run);
        let row = measure_row(locker, admin, ctx.url, &prefix, tasks, cycles).await?;
        table += &row.table_row(label);
        json.insert(key.into(), row.json());
        rates.push((key, row.sample.rate()));
        bench_server.push((key, row.server_us));
        bench_client.push((key, row.client_us));
        bench_allocs.extend(row.allocs.map(|n| (key, n)));
    }
    if ctx.native.is_none() {
        table += &na_row(6);
    }
    report.tables.push(table);
    let rate = |key: &str| rates.iter().find(|(k, _)| *k == key).map(|&(_, r)| r);
    let values = Kind::ALL.map(|k| rate(k.name()));
    targets(report, scenario, values, rate(CORE_CALLS));
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
    bench.server_us = bench_server;
    bench.client_us = bench_client;
    bench.allocs = bench_allocs;
    report.benches.push(bench);
    Ok(())
}

/// W1's and W2's targets (rates `[ours, floor, rslock]`), and the bounds the floor's client on
/// lock-core's calls (`calls`) gives.
fn targets(
    report: &mut Report,
    scenario: &'static str,
    values: [Option<f64>; 3],
    calls: Option<f64>,
) {
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
    if let (Some(ours), Some(floor), Some(calls)) = (values[0], values[1], calls) {
        core_calls_bounds(report, scenario, ours, floor, calls);
    }
}
