//! W7: a realistic mix: many tasks over many names drawn Zipf, short holds.

use redis::aio::MultiplexedConnection;

use crate::contender::{Kind, Locker};
use crate::ctx::Ctx;
use crate::mix;
use crate::monitor::Counts;
use crate::report::{Bench, Report, na_row, native_ratio, ratio};

/// Sections run under `MONITOR` after each timed W7 run, to count requests.
const W7_COUNT_SECTIONS: u64 = 2_000;

/// One row's timed run and counting pass.
struct Row {
    kind: Kind,
    timed: mix::MixRun,
    counting: mix::MixRun,
    counts: Counts,
    requests: f64,
    server_us: f64,
    client_us: f64,
}

impl Row {
    fn violations(&self) -> u64 {
        self.timed.violations + self.counting.violations
    }
}

/// Runs the mix on `locker` (timed, in the measuring frame), then a shorter one under
/// `MONITOR` to count its requests (as W3h does).
async fn measure_row(
    kind: Kind,
    locker: &Locker,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
) -> Result<Row, String> {
    let mix = ctx.plan.w7;
    let prefix = format!("lb:{}:W7:{}", ctx.run, kind.name());
    let timed = mix::run(locker, admin, None, &prefix, mix).await?;
    let counting_mix = mix::Mix {
        sections: W7_COUNT_SECTIONS,
        ..mix
    };
    let count_prefix = format!("{prefix}:count");
    let counting = mix::run(locker, admin, Some(ctx.url), &count_prefix, counting_mix).await?;
    let counts = counting.counts.clone().unwrap_or_default();
    let sections = timed.acquire.items().max(1) as f64;
    Ok(Row {
        kind,
        requests: counts.requests() as f64 / counting.acquire.items().max(1) as f64,
        server_us: timed.cost.delta.server_usec(&counts) / sections,
        client_us: timed.cost.cpu_us / sections,
        timed,
        counting,
        counts,
    })
}

impl Row {
    fn table_row(&self) -> String {
        let (timed, violations) = (&self.timed, self.violations());
        let a = &timed.acquire;
        format!(
            "| {} | {:.0} | {}{} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} | {} |\n",
            self.kind.label(),
            a.rate(),
            a.items(),
            if timed.hit_time_limit {
                " (time limit)"
            } else {
                ""
            },
            a.percentile(50.0),
            a.percentile(99.0),
            a.percentile(100.0),
            timed.mean_hold_us,
            self.requests,
            self.server_us,
            self.client_us,
            if violations > 0 {
                format!("**{violations}**")
            } else {
                "0".to_owned()
            },
        )
    }

    fn json(&self) -> serde_json::Value {
        let timed = &self.timed;
        let mut j = timed.acquire.summary();
        j["sections"] = timed.acquire.items().into();
        j["hit_time_limit"] = timed.hit_time_limit.into();
        j["distinct_names"] = timed.distinct_names.into();
        j["mean_hold_us"] = timed.mean_hold_us.into();
        j["requests_per_section"] = self.requests.into();
        j["server_us_per_section"] = self.server_us.into();
        j["client_cpu_us_per_section"] = self.client_us.into();
        j["exclusion_violations"] = timed.violations.into();
        j["counting_exclusion_violations"] = self.counting.violations.into();
        j["commandstats"] = timed.cost.delta.to_json();
        j["monitor"] = self.counts.to_json();
        j["monitor_sections"] = self.counting.acquire.items().into();
        j
    }
}

fn table_header(mix: &mix::Mix) -> String {
    format!(
        "| W7: {} tasks, {} names Zipf({:.1}), {} ms hold, ≤ {} sections or {} s | sections/s | sections | acquire p50 µs | p99 µs | max µs | mean hold µs | requests/section | server µs/section | client CPU µs/section | exclusion violations |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        mix.tasks,
        mix.names,
        mix.s,
        mix.hold.as_millis(),
        mix.sections,
        mix.duration.as_secs_f64()
    )
}

/// W7's targets (informational) and the "ours ÷ native floor" line.
fn targets(report: &mut Report, rows: &[Row]) {
    let rate = |i: usize| rows.get(i).map(|r| r.timed.acquire.rate());
    let rf = ratio(rate(0), rate(1));
    report.target(
        "W7",
        "≥ 1.0× floor sections/s (informational)",
        format!("{:.3}×", rf.unwrap_or(f64::NAN)),
        rf.map(|r| r >= 1.0),
    );
    let p99 = |i: usize| rows[i].timed.acquire.percentile(99.0);
    let (p99, floor_p99) = (p99(0), p99(1));
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
        rate(0),
        rate(3),
    );
}

/// The mix's parameters, into W7's JSON.
fn json_params(json: &mut serde_json::Map<String, serde_json::Value>, mix: &mix::Mix) {
    json.insert("tasks".into(), mix.tasks.into());
    json.insert("names".into(), mix.names.into());
    json.insert("zipf_s".into(), mix.s.into());
    json.insert("max_sections".into(), mix.sections.into());
    json.insert("max_seconds".into(), mix.duration.as_secs_f64().into());
    json.insert("hold_ms".into(), (mix.hold.as_secs_f64() * 1e3).into());
    json.insert("seed".into(), mix.seed.into());
    json.insert("monitor_sections".into(), W7_COUNT_SECTIONS.into());
}

/// W7: one row per contender (and the native floor, where it runs); an exclusion violation
/// fails the scenario.
pub(crate) async fn w7(
    report: &mut Report,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
) -> Result<(), String> {
    let mut table = table_header(&ctx.plan.w7);
    let mut json = serde_json::Map::new();
    let mut rows = Vec::new();
    let mut violated = Vec::new();
    // The native floor last, after the three contenders.
    for (kind, locker) in ctx.rows() {
        let row = measure_row(kind, locker, ctx, admin).await?;
        let violations = row.violations();
        if violations > 0 {
            eprintln!(
                "lock-bench: !!! W7 {}: MUTUAL EXCLUSION VIOLATED {violations} time(s): an acquire returned a name another task was holding !!!",
                kind.name()
            );
            violated.push(format!("{} {violations}", kind.name()));
        }
        table += &row.table_row();
        json.insert(kind.name().into(), row.json());
        rows.push(row);
    }
    if ctx.native.is_none() {
        table += &na_row(10);
    }
    report.tables.push(table);
    targets(report, &rows);
    json_params(&mut json, &ctx.plan.w7);
    report
        .json
        .insert("W7".into(), serde_json::Value::Object(json));
    let values = [0, 1, 2].map(|i| Some(rows[i].timed.acquire.rate()));
    let mut bench = Bench::new("W7", values, 0);
    bench.native = rows.get(3).map(|r| r.timed.acquire.rate());
    bench.server_us = rows.iter().map(|r| (r.kind.name(), r.server_us)).collect();
    bench.client_us = rows.iter().map(|r| (r.kind.name(), r.client_us)).collect();
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
