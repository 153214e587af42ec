//! W5: the watchdog's cost for many held locks (each contender in a child process of its own,
//! `__w5-child`; see `watchdog.rs`).

use crate::contender::Kind;
use crate::ctx::Ctx;
use crate::report::{Bench, Report};
use crate::watchdog;

/// A W5 table row from a child's figures; the client CPU µs per lock per period (one renewal
/// of one lock, W5's cycle) is its CPU ms per period over the locks held.
fn table_row(kind: Kind, v: &serde_json::Value, locks: usize) -> (String, f64) {
    let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let lost = v["lost_client"].as_u64().unwrap_or(0) + v["lost_server"].as_u64().unwrap_or(0);
    let client_us = f("cpu_ms_per_period") * 1e3 / locks.max(1) as f64;
    let row = format!(
        "| {} | {:.1} | {:.3} | {:.0} | {client_us:.2} | {:.0} | {:.0} | {lost} (client {}, server {} of {} checked) | {:.1} |\n",
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
    (row, client_us)
}

/// W5's targets, from ours: (round trips per 100 locks per period, marginal bytes per lock,
/// locks lost).
fn targets(report: &mut Report, (rt, bytes, lost): (f64, f64, u64)) {
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

/// W5: one child process per contender.
pub(crate) async fn w5(report: &mut Report, ctx: &Ctx<'_>) -> Result<(), String> {
    let plan = ctx.plan;
    let mut table = format!(
        "| W5: {} watchdog-leased locks, lease {} s, {} periods of {} ms | round trips/period | per 100 locks/period | client CPU ms/period | client CPU µs/lock/period | client bytes/lock | marginal bytes/lock | lost | s to take them |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        plan.w5_locks,
        plan.w5_lease.as_secs(),
        plan.w5_periods,
        (plan.w5_lease / 3).as_millis()
    );
    let mut json = serde_json::Map::new();
    let mut rt100 = Vec::new();
    let mut client = Vec::new();
    let mut ours = None;
    for kind in Kind::ALL {
        let mut v = watchdog::run(watchdog::ChildArgs {
            kind,
            opts: ctx.opts.clone(),
            prefix: format!("lb:{}:W5:{}", ctx.run, kind.name()),
            count: plan.w5_locks,
            lease: plan.w5_lease,
            periods: plan.w5_periods,
        })
        .await?;
        let (row, client_us) = table_row(kind, &v, plan.w5_locks);
        table += &row;
        v["client_cpu_us_per_lock_per_period"] = client_us.into();
        let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        rt100.push(Some(f("round_trips_per_100_locks_per_period")));
        client.push((kind.name(), client_us));
        if kind == Kind::Ours {
            let lost =
                v["lost_client"].as_u64().unwrap_or(0) + v["lost_server"].as_u64().unwrap_or(0);
            let rt = f("round_trips_per_100_locks_per_period");
            ours = Some((rt, f("marginal_bytes_per_lock"), lost));
        }
        json.insert(kind.name().into(), v);
    }
    report.tables.push(table);
    if let Some(ours) = ours {
        targets(report, ours);
    }
    report
        .json
        .insert("W5".into(), serde_json::Value::Object(json));
    let mut bench = Bench::new("W5", [rt100[0], rt100[1], rt100[2]], 3);
    bench.client_us = client;
    report.benches.push(bench);
    Ok(())
}
