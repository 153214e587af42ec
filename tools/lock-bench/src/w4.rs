//! W4: the wake-up of one waiter on another client when the holder releases.

use redis::aio::MultiplexedConnection;

use crate::contender::{Kind, Locker};
use crate::ctx::Ctx;
use crate::handoff;
use crate::measure::{Cost, Frame};
use crate::monitor::{self, Counts};
use crate::report::{Bench, Report, na_row, native_ratio};
use crate::stats::Sample;

/// Trials run under `MONITOR` after each timed W4 run, to tell a row's requests from the
/// commands its scripts call (for its server µs per cycle).
const W4_COUNT_TRIALS: usize = 3;

/// One row's timed trials and counting pass.
struct Row {
    kind: Kind,
    sample: Sample,
    cost: Cost,
    counts: Counts,
    server_us: f64,
    client_us: f64,
}

/// Times `kind`'s trials (`holder` holds, a new client of the same kind waits) in the
/// measuring frame, then counts the requests of [`W4_COUNT_TRIALS`] more under `MONITOR`.
async fn measure_row(
    kind: Kind,
    holder: &Locker,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
) -> Result<Row, String> {
    let (trials, hold) = (ctx.plan.w4_trials, ctx.plan.w4_hold);
    let waiter = Locker::connect(kind, ctx.opts).await;
    let prefix = format!("lb:{}:W4:{}", ctx.run, kind.name());
    let frame = Frame::start(admin).await;
    let sample = handoff::run_single_waiter(holder, &waiter, &prefix, trials, hold).await?;
    let cost = frame.stop(admin).await;
    // Counting pass.
    let watch = monitor::Watch::start(ctx.url).await?;
    let count_prefix = format!("{prefix}:count");
    handoff::run_single_waiter(holder, &waiter, &count_prefix, W4_COUNT_TRIALS, hold).await?;
    let counts = watch.stop(admin, None, None, &[]).await?;
    drop(waiter);
    // Two cycles a trial: the holder's and the waiter's.
    let cycles = (2 * trials) as f64;
    Ok(Row {
        kind,
        server_us: cost.delta.server_usec(&counts) / cycles,
        client_us: cost.cpu_us / cycles,
        sample,
        cost,
        counts,
    })
}

impl Row {
    fn table_row(&self) -> String {
        let s = &self.sample;
        format!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} |\n",
            self.kind.label(),
            s.percentile(50.0),
            s.percentile(99.0),
            s.percentile(100.0),
            self.server_us,
            self.client_us,
        )
    }

    fn json(&self) -> serde_json::Value {
        let mut j = self.sample.summary();
        j["latency_us"] = self.sample.raw_us().into();
        j["server_us_per_cycle"] = self.server_us.into();
        j["client_cpu_us_per_cycle"] = self.client_us.into();
        j["commandstats"] = self.cost.delta.to_json();
        j["monitor"] = self.counts.to_json();
        j["monitor_trials"] = W4_COUNT_TRIALS.into();
        j
    }
}

/// W4: one row per contender (and the native floor, where it runs).
pub(crate) async fn w4(
    report: &mut Report,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
) -> Result<(), String> {
    let mut table = format!(
        "| W4: 1 waiter (another client), release after {} ms, {} trials | release→acquire p50 µs | p99 µs | max µs | server µs/cycle | client CPU µs/cycle |\n|---|---:|---:|---:|---:|---:|\n",
        ctx.plan.w4_hold.as_millis(),
        ctx.plan.w4_trials
    );
    let mut json = serde_json::Map::new();
    let mut rows = Vec::new();
    // The native floor last, after the three contenders.
    for (kind, holder) in ctx.rows() {
        let row = measure_row(kind, holder, ctx, admin).await?;
        table += &row.table_row();
        json.insert(kind.name().into(), row.json());
        report
            .handoffs
            .push(("W4", kind.label(), row.sample.clone()));
        rows.push(row);
    }
    if ctx.native.is_none() {
        table += &na_row(5);
    }
    report.tables.push(table);
    let p50s: Vec<Option<f64>> = rows
        .iter()
        .map(|r| Some(r.sample.percentile(50.0)))
        .collect();
    let p50 = p50s[0].unwrap_or(f64::NAN);
    let ours_max = rows[0].sample.percentile(100.0);
    report.target(
        "W4",
        "release → acquire ≤ 1 ms (median; max shown)",
        format!("p50 {p50:.0} µs, max {ours_max:.0} µs"),
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
    bench.server_us = rows.iter().map(|r| (r.kind.name(), r.server_us)).collect();
    bench.client_us = rows.iter().map(|r| (r.kind.name(), r.client_us)).collect();
    report.benches.push(bench);
    Ok(())
}
