//! W3h and W3x: contended hand-off of one name, between tasks of one process (W3h) and
//! across processes (W3x).

use redis::aio::MultiplexedConnection;

use crate::contender::Kind;
use crate::ctx::Ctx;
use crate::handoff;
use crate::report::{Bench, Report, na_row, native_ratio, ratio};
use crate::stats::Sample;

/// Sections run under `MONITOR` after each timed W3h/W3x run, to count requests.
const COUNT_SECTIONS: u64 = 300;

/// A timed hand-off run and its counting pass, put together.
struct HandoffResult {
    kind: Kind,
    sample: Sample,
    mean_hold_us: f64,
    requests_per_section: f64,
    server_us_per_section: f64,
    client_us_per_section: f64,
    json: serde_json::Value,
}

fn combine(kind: Kind, timed: handoff::HandoffRun, counting: handoff::HandoffRun) -> HandoffResult {
    let counts = counting.counts.unwrap_or_default();
    let sections = timed.sample.items().max(1) as f64;
    let counted = counting.sample.items().max(1) as f64;
    let requests_per_section = counts.requests() as f64 / counted;
    let server_us_per_section = timed.cost.delta.server_usec(&counts) / sections;
    let client_us_per_section = timed.cost.cpu_us / sections;
    let mut json = timed.sample.summary();
    json["requests_per_section"] = requests_per_section.into();
    json["server_us_per_section"] = server_us_per_section.into();
    json["client_cpu_us_per_section"] = client_us_per_section.into();
    json["commandstats"] = timed.cost.delta.to_json();
    json["monitor"] = counts.to_json();
    json["monitor_sections"] = counting.sample.items().into();
    json["mean_hold_us"] = timed.mean_hold_us.into();
    json["mean_handoff_us"] = timed.sample.mean().into();
    json["handoff_us"] = timed.sample.raw_us().into();
    HandoffResult {
        kind,
        mean_hold_us: timed.mean_hold_us,
        sample: timed.sample,
        requests_per_section,
        server_us_per_section,
        client_us_per_section,
        json,
    }
}

fn table_header(title: &str) -> String {
    format!(
        "| {title} | sections/s | hand-off p50 µs | p90 µs | p99 µs | max µs | mean µs | mean hold µs | requests/section | server µs/section | client CPU µs/section |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
}

fn table_row(r: &HandoffResult) -> String {
    let s = &r.sample;
    format!(
        "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} |\n",
        r.kind.label(),
        s.rate(),
        s.percentile(50.0),
        s.percentile(90.0),
        s.percentile(99.0),
        s.percentile(100.0),
        s.mean(),
        r.mean_hold_us,
        r.requests_per_section,
        r.server_us_per_section,
        r.client_us_per_section,
    )
}

/// The counting pass's shape: the timed run's, with [`COUNT_SECTIONS`] sections.
fn counting(shape: handoff::Shape) -> handoff::Shape {
    handoff::Shape {
        sections: COUNT_SECTIONS,
        ..shape
    }
}

/// Puts a hand-off scenario's rows (the three contenders, then the native floor where it
/// ran) into the report: its table, the chart's samples, its JSON (with `extra`), the
/// "ours ÷ native floor" line and its `BENCH` line.
fn publish(
    report: &mut Report,
    scenario: &'static str,
    mut table: String,
    results: &[HandoffResult],
    extra: serde_json::Map<String, serde_json::Value>,
) {
    let mut json = serde_json::Map::new();
    for r in results {
        table += &table_row(r);
        json.insert(r.kind.name().into(), r.json.clone());
        report
            .handoffs
            .push((scenario, r.kind.label(), r.sample.clone()));
    }
    if results.len() < 4 {
        table += &na_row(10);
    }
    report.tables.push(table);
    let values = [0, 1, 2].map(|i| Some(results[i].sample.rate()));
    let native_rate = results.get(3).map(|r| r.sample.rate());
    native_ratio(
        report,
        scenario,
        "ours ÷ native floor sections/s",
        values[0],
        native_rate,
    );
    json.extend(extra);
    report
        .json
        .insert(scenario.into(), serde_json::Value::Object(json));
    let mut bench = Bench::new(scenario, values, 0);
    bench.native = native_rate;
    let per = |f: fn(&HandoffResult) -> f64| -> Vec<(&'static str, f64)> {
        results.iter().map(|r| (r.kind.name(), f(r))).collect()
    };
    bench.server_us = per(|r| r.server_us_per_section);
    bench.client_us = per(|r| r.client_us_per_section);
    report.benches.push(bench);
}

/// W3h: the hand-off between tasks of this process.
pub(crate) async fn w3h(
    report: &mut Report,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
) -> Result<(), String> {
    let plan = ctx.plan;
    let shape = handoff::Shape {
        procs: 1,
        tasks: plan.w3_tasks,
        sections: plan.w3_sections,
        hold: plan.w3_hold,
    };
    let table = table_header(&format!(
        "W3h: {} tasks, 1 name, {} sections of {} ms",
        shape.tasks,
        shape.sections,
        shape.hold.as_millis()
    ));
    let mut results = Vec::new();
    // The native floor last, after the three contenders.
    for (kind, locker) in ctx.rows() {
        let name = format!("lb:{}:W3h:{}", ctx.run, kind.name());
        let timed = handoff::run_local(locker, admin, None, &name, shape).await?;
        let count_name = format!("{name}:count");
        let counted =
            handoff::run_local(locker, admin, Some(ctx.url), &count_name, counting(shape)).await?;
        results.push(combine(kind, timed, counted));
    }
    let mut extra = serde_json::Map::new();
    extra.insert("tasks".into(), shape.tasks.into());
    extra.insert("sections".into(), shape.sections.into());
    extra.insert("hold_ms".into(), (shape.hold.as_secs_f64() * 1e3).into());
    w3h_targets(report, &results);
    publish(report, "W3h", table, &results, extra);
    Ok(())
}

/// W3h's targets, before the "ours ÷ native floor" line.
fn w3h_targets(report: &mut Report, results: &[HandoffResult]) {
    let ours = &results[0];
    let rf = ratio(Some(ours.sample.rate()), Some(results[1].sample.rate()));
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
}

/// W3x: the hand-off across child processes (this binary, `__w3x-child`).
pub(crate) async fn w3x(
    report: &mut Report,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
) -> Result<(), String> {
    let plan = ctx.plan;
    let shape = handoff::Shape {
        procs: plan.w3x_procs,
        tasks: plan.w3_tasks / plan.w3x_procs,
        sections: plan.w3_sections,
        hold: plan.w3_hold,
    };
    let table = table_header(&format!(
        "W3x: {} processes × {} tasks, 1 name, {} sections of {} ms",
        shape.procs,
        shape.tasks,
        shape.sections,
        shape.hold.as_millis()
    ));
    let mut results = Vec::new();
    // The native floor last, after the three contenders.
    for (kind, _) in ctx.rows() {
        let name = format!("lb:{}:W3x:{}", ctx.run, kind.name());
        let opts = ctx.opts;
        let timed = handoff::run_processes(kind, opts, admin, None, &name, shape).await?;
        let count_name = format!("{name}:count");
        let url = Some(opts.url.as_str());
        let counted =
            handoff::run_processes(kind, opts, admin, url, &count_name, counting(shape)).await?;
        results.push(combine(kind, timed, counted));
    }
    let mut extra = serde_json::Map::new();
    extra.insert("processes".into(), shape.procs.into());
    extra.insert("tasks_per_process".into(), shape.tasks.into());
    extra.insert("sections".into(), shape.sections.into());
    // The target comes before the native ratio in the targets table.
    let p50 = results[0].sample.percentile(50.0);
    report.target(
        "W3x",
        "hand-off p50 ≤ 300 µs",
        format!("{p50:.0} µs"),
        Some(p50 <= 300.0),
    );
    publish(report, "W3x", table, &results, extra);
    Ok(())
}
