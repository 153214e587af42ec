//! W6: the HTTP layer (`DistributedLockLayer`) against handlers that lock by themselves, on a
//! plain `axum::serve` server and on one with `TCP_NODELAY` (W6n).

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::contender::Kind;
use crate::ctx::Ctx;
use crate::cycles::CORE_CALLS;
use crate::http;
use crate::measure::{Cost, Frame};
use crate::monitor::{self, Counts};
use crate::report::{Bench, Report, core_calls_bounds, na_row, native_ratio};
use crate::stats::Sample;

/// Requests of each W6 variant run under `MONITOR` after the timed rounds, to tell a row's
/// requests from the commands its scripts call (for its server µs per request).
const W6_COUNT_REQUESTS: usize = 256;

/// The native floor's W6 variants (JSON keys, request ids).
const NATIVE_PLAIN: &str = "native_floor";
const NATIVE_NODELAY: &str = "native_floor_nodelay";

/// Timed rounds per variant, interleaved, so that a slow patch of the machine hits every
/// variant.
const ROUNDS: usize = 2;

/// A server and route driven with requests: (JSON key, server, route, label).
type Variant<'a> = (&'static str, &'a http::Server, &'static str, &'static str);

/// The variants, in the order they run: the first six as they were before the last two (the
/// floor and rslock on the `TCP_NODELAY` server, for W6n) were added, then (where it runs)
/// the floor's client sending lock-core's calls (the bound lock-core's server calls set on
/// W6n), then (on a server with `DELIFEQ`) the native floor on both servers.
fn variants<'a>(
    plain: &'a http::Server,
    nodelay: &'a http::Server,
    core_calls: bool,
    native: bool,
) -> Vec<Variant<'a>> {
    let mut variants: Vec<Variant<'a>> = vec![
        ("layer", plain, "layer", "ours: DistributedLockLayer"),
        ("ours", plain, "ours", "ours: handler calls lock-core"),
        ("floor", plain, "floor", "floor: handler calls the floor"),
        ("rslock", plain, "rslock", "rslock: handler calls rslock"),
        (
            "layer_nodelay",
            nodelay,
            "layer",
            "ours: DistributedLockLayer, TCP_NODELAY server",
        ),
        (
            "ours_nodelay",
            nodelay,
            "ours",
            "ours: handler calls lock-core, TCP_NODELAY server",
        ),
        (
            "floor_nodelay",
            nodelay,
            "floor",
            "floor: handler calls the floor, TCP_NODELAY server",
        ),
        (
            "rslock_nodelay",
            nodelay,
            "rslock",
            "rslock: handler calls rslock, TCP_NODELAY server",
        ),
    ];
    if core_calls {
        variants.push((
            CORE_CALLS,
            nodelay,
            http::CORE_CALLS_ROUTE,
            "floor client on lock-core's server calls, TCP_NODELAY server",
        ));
    }
    if native {
        variants.push((
            NATIVE_PLAIN,
            plain,
            http::NATIVE_ROUTE,
            "native floor: handler calls the native floor",
        ));
        variants.push((
            NATIVE_NODELAY,
            nodelay,
            http::NATIVE_ROUTE,
            "native floor: handler calls the native floor, TCP_NODELAY server",
        ));
    }
    variants
}

/// A variant's timed rounds and counting pass, put together.
struct Measured {
    sample: Sample,
    cost: Cost,
    counts: Counts,
    server_us: f64,
    client_us: f64,
    /// Heap allocations per request, where counted (the `allocs` feature).
    allocs: Option<f64>,
}

/// Runs the timed rounds, each variant in the measuring frame, then the counting passes.
async fn measure(
    variants: &[Variant<'_>],
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
) -> Result<Vec<Measured>, String> {
    let (run, concurrency) = (ctx.run, ctx.plan.w6_concurrency);
    let per_round = ctx.plan.w6_requests / ROUNDS;
    let mut lat: Vec<Vec<u64>> = vec![Vec::new(); variants.len()];
    let mut wall = vec![Duration::ZERO; variants.len()];
    let mut costs = vec![Cost::default(); variants.len()];
    for round in 0..ROUNDS {
        for (i, (key, server, route, _)) in variants.iter().enumerate() {
            let id = format!("{run}-{key}-{round}");
            let frame = Frame::start(admin).await;
            let s = http::drive(&server.base, route, &id, concurrency, per_round).await?;
            costs[i].add(&frame.stop(admin).await);
            wall[i] += Duration::from_secs_f64(s.items() as f64 / s.rate().max(1e-9));
            lat[i].extend(s.raw_us().iter().map(|us| (us * 1e3) as u64));
        }
    }
    // Counting passes, after every timed round.
    let mut measured = Vec::with_capacity(variants.len());
    for (((key, server, route, _), lat), (wall, cost)) in
        variants.iter().zip(lat).zip(wall.into_iter().zip(costs))
    {
        let watch = monitor::Watch::start(ctx.url).await?;
        let id = format!("{run}-{key}-count");
        http::drive(&server.base, route, &id, concurrency, W6_COUNT_REQUESTS).await?;
        let counts = watch.stop(admin, None, None, &[]).await?;
        let n = lat.len();
        let sample = Sample::from_ns(lat, n, wall);
        let requests = sample.items().max(1) as f64;
        measured.push(Measured {
            server_us: cost.delta.server_usec(&counts) / requests,
            client_us: cost.cpu_us / requests,
            allocs: cost.allocs.map(|n| n as f64 / requests),
            sample,
            cost,
            counts,
        });
    }
    Ok(measured)
}

/// W6's table and JSON.
fn publish(report: &mut Report, ctx: &Ctx<'_>, variants: &[Variant<'_>], measured: &[Measured]) {
    let mut table = format!(
        "| W6: axum over loopback HTTP, {} requests each, {} connections, distinct keys | requests/s | p50 µs | p99 µs | server µs/request | client CPU µs/request |\n|---|---:|---:|---:|---:|---:|\n",
        ctx.plan.w6_requests, ctx.plan.w6_concurrency
    );
    let mut json = serde_json::Map::new();
    for ((key, _, _, label), m) in variants.iter().zip(measured) {
        let s = &m.sample;
        table += &format!(
            "| {label} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} |\n",
            s.rate(),
            s.percentile(50.0),
            s.percentile(99.0),
            m.server_us,
            m.client_us,
        );
        let mut j = s.summary();
        j["server_us_per_request"] = m.server_us.into();
        j["client_cpu_us_per_request"] = m.client_us.into();
        if let Some(allocs) = m.allocs {
            j["client_allocs_per_request"] = allocs.into();
        }
        j["commandstats"] = m.cost.delta.to_json();
        j["monitor"] = m.counts.to_json();
        j["monitor_requests"] = W6_COUNT_REQUESTS.into();
        json.insert((*key).into(), j);
    }
    if ctx.native.is_none() {
        table += &na_row(5);
    }
    report.tables.push(table);
    report
        .json
        .insert("W6".into(), serde_json::Value::Object(json));
}

/// W6's and W6n's targets and bounds (`rate`: a variant's requests/s by key).
fn targets(report: &mut Report, rate: &dyn Fn(&str) -> Option<f64>) {
    let r = |a: &str, b: &str| rate(a).unwrap_or(f64::NAN) / rate(b).unwrap_or(f64::NAN);
    let checks = [
        (
            "layer",
            "ours",
            "layer ≥ 0.9× the handler calling lock-core",
        ),
        (
            "layer_nodelay",
            "ours_nodelay",
            "the same, both on a TCP_NODELAY server (not the headline)",
        ),
        (
            "layer_nodelay",
            "floor_nodelay",
            "layer ≥ 0.9× the handler calling the floor, both TCP_NODELAY (the issue's target)",
        ),
    ];
    for (a, b, what) in checks {
        let x = r(a, b);
        report.target("W6", what, format!("{x:.3}×"), Some(x >= 0.9));
    }
    native_ratio(
        report,
        "W6",
        "layer ÷ handler calling the native floor",
        rate("layer"),
        rate(NATIVE_PLAIN),
    );
    if let (Some(layer), Some(floor), Some(calls)) = (
        rate("layer_nodelay"),
        rate("floor_nodelay"),
        rate(CORE_CALLS),
    ) {
        core_calls_bounds(report, "W6n", layer, floor, calls);
    }
    native_ratio(
        report,
        "W6n",
        "layer ÷ handler calling the native floor, both TCP_NODELAY",
        rate("layer_nodelay"),
        rate(NATIVE_NODELAY),
    );
}

/// A `BENCH` line whose `ours`, `floor`, `rslock` and native floor are the variants `keys`
/// (in that order); its server and client µs fields name the same variants, and `more` adds
/// other variants' fields (`(field, key)`).
fn bench(
    scenario: &'static str,
    keys: [&'static str; 4],
    more: &[(&'static str, &'static str)],
    at: &dyn Fn(&str) -> Option<usize>,
    measured: &[Measured],
) -> Bench {
    let rate = |key: &str| at(key).map(|i| measured[i].sample.rate());
    let mut bench = Bench::new(scenario, [rate(keys[0]), rate(keys[1]), rate(keys[2])], 0);
    bench.native = rate(keys[3]);
    let fields = ["ours", "floor", "rslock", Kind::NativeFloor.name()];
    let pairs: Vec<(&'static str, &'static str)> = fields
        .into_iter()
        .zip(keys)
        .chain(more.iter().copied())
        .collect();
    let per = |f: fn(&Measured) -> f64| -> Vec<(&'static str, f64)> {
        pairs
            .iter()
            .filter_map(|&(field, key)| Some((field, f(&measured[at(key)?]))))
            .collect()
    };
    bench.server_us = per(|m| m.server_us);
    bench.client_us = per(|m| m.client_us);
    bench.allocs = per(|m| m.allocs.unwrap_or(f64::NAN));
    bench
}

/// W6 and W6n.
pub(crate) async fn w6(
    report: &mut Report,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
) -> Result<(), String> {
    // One server as `axum::serve` comes (the lock-tower docs' setup), one with TCP_NODELAY
    // on its accepted connections.
    let (lockers, core_calls, native) = (ctx.lockers, ctx.core_calls, ctx.native);
    let plain = http::serve(lockers, core_calls, native, false).await;
    let nodelay = http::serve(lockers, core_calls, native, true).await;
    let variants = variants(&plain, &nodelay, core_calls.is_some(), native.is_some());
    let measured = measure(&variants, ctx, admin).await?;
    publish(report, ctx, &variants, &measured);
    let at = |key: &str| variants.iter().position(|v| v.0 == key);
    targets(report, &|key| at(key).map(|i| measured[i].sample.rate()));
    // BENCH W6: ours = the layer, floor = the same handler calling lock-core directly (the
    // layer's floor), rslock = the handler calling rslock; all on the plain axum::serve. The
    // native floor and the server µs fields name the same variants (server_us_floor: the
    // handler calling lock-core).
    let keys = ["layer", "ours", "rslock", NATIVE_PLAIN];
    report.benches.push(bench("W6", keys, &[], &at, &measured));
    // BENCH W6n: the comparison, all on the TCP_NODELAY server: ours = the layer,
    // floor = the handler calling the floor, rslock = the handler calling rslock.
    let keys = [
        "layer_nodelay",
        "floor_nodelay",
        "rslock_nodelay",
        NATIVE_NODELAY,
    ];
    let more = [(CORE_CALLS, CORE_CALLS)];
    report
        .benches
        .push(bench("W6n", keys, &more, &at, &measured));
    Ok(())
}
