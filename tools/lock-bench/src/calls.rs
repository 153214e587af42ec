//! S1: what each of lock-core's server calls costs the server, one call at a time.
//!
//! Every operation a primitive sends (an acquisition, a release, a renewal, an inspection, a
//! rate decision) runs `n` times in a row from one task on fresh names, in the measuring
//! frame, so nothing batches: the server µs per call is that operation's own script (or, on
//! the native protocol, its commands), and the floor's two calls (`SET NX PX`, the
//! compare-and-delete script) run the same way beside them for scale.

use std::future::Future;
use std::time::Duration;

use lock_core::{LockClient, LockGuard};
use redis::aio::MultiplexedConnection;

use crate::contender::{Held, Locker};
use crate::ctx::Ctx;
use crate::measure::{Cost, Frame};
use crate::report::{Bench, Report};

/// Commands that run Lua: their time includes the commands the script calls, which
/// `INFO commandstats` times again.
const SCRIPT_COMMANDS: [&str; 6] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// One operation's cost.
struct OpCost {
    /// The operation's key: `server_us_<key>` on the `BENCH` line.
    key: &'static str,
    server_us: f64,
    client_us: f64,
    /// Commands the server counted per call (a script's own calls included).
    commands: f64,
}

/// Server µs a run's requests took: the scripts' time where scripts ran (it includes what they
/// called); otherwise every command's but `EXEC`'s, which times its queued commands again.
fn request_usec(cost: &Cost) -> f64 {
    let json = cost.delta.to_json();
    let Some(map) = json.as_object() else {
        return f64::NAN;
    };
    let usec = |name: &str| map[name]["usec"].as_f64().unwrap_or(0.0);
    let scripts: Vec<&String> = map
        .keys()
        .filter(|k| SCRIPT_COMMANDS.contains(&k.as_str()))
        .collect();
    if !scripts.is_empty() {
        return scripts.iter().map(|k| usec(k)).sum();
    }
    map.keys().filter(|k| *k != "exec").map(|k| usec(k)).sum()
}

/// Runs `body` (`n` calls of one operation) in the measuring frame.
async fn timed<T, F>(
    admin: &mut MultiplexedConnection,
    key: &'static str,
    n: usize,
    body: F,
) -> Result<(T, OpCost), String>
where
    F: Future<Output = Result<T, String>>,
{
    let frame = Frame::start(admin).await;
    let out = body.await?;
    let cost = frame.stop(admin).await;
    let calls: f64 = cost
        .delta
        .to_json()
        .as_object()
        .map(|m| m.values().filter_map(|v| v["calls"].as_f64()).sum())
        .unwrap_or(f64::NAN);
    let per = n as f64;
    let op = OpCost {
        key,
        server_us: request_usec(&cost) / per,
        client_us: cost.cpu_us / per,
        commands: calls / per,
    };
    Ok((out, op))
}

fn err(what: &str) -> impl Fn(lock_core::LockError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Takes every name with `take`, one after another; each must be free.
async fn take_all<G, F, Fut>(names: &[String], take: F) -> Result<Vec<G>, String>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<Option<G>, lock_core::LockError>>,
{
    let mut guards = Vec::with_capacity(names.len());
    for name in names {
        let guard = take(name.clone())
            .await
            .map_err(err("acquire"))?
            .ok_or_else(|| format!("{name} was busy"))?;
        guards.push(guard);
    }
    Ok(guards)
}

/// Gives back every guard with `give`, one after another; each must still be held.
async fn give_all<G, F, Fut>(guards: Vec<G>, give: F) -> Result<(), String>
where
    F: Fn(G) -> Fut,
    Fut: Future<Output = Result<bool, lock_core::LockError>>,
{
    for guard in guards {
        if !give(guard).await.map_err(err("release"))? {
            return Err("a release found its hold gone".into());
        }
    }
    Ok(())
}

/// The mutex: acquisition, renewal, inspection, release.
async fn mutex(
    client: &LockClient,
    admin: &mut MultiplexedConnection,
    names: &[String],
    out: &mut Vec<OpCost>,
) -> Result<(), String> {
    let n = names.len();
    let take = |name: String| client.try_lock(name).into_future();
    let (guards, op) = timed(admin, "mutex_acquire", n, take_all(names, take)).await?;
    out.push(op);
    let renew = async {
        for g in &guards {
            g.extend(Duration::from_secs(30))
                .await
                .map_err(err("extend"))?;
        }
        Ok(())
    };
    out.push(timed(admin, "mutex_renew", n, renew).await?.1);
    let inspect = async {
        for name in names {
            client.mutex(name).info().await.map_err(err("info"))?;
        }
        Ok(())
    };
    out.push(timed(admin, "mutex_inspect", n, inspect).await?.1);
    let give = give_all(guards, LockGuard::unlock);
    out.push(timed(admin, "mutex_release", n, give).await?.1);
    Ok(())
}

/// The fair lock, the read-write lock's two sides, a semaphore of 4: acquisition and release.
async fn others(
    client: &LockClient,
    admin: &mut MultiplexedConnection,
    names: &[String],
    out: &mut Vec<OpCost>,
) -> Result<(), String> {
    let n = names.len();
    let fair = |name: String| client.fair_lock(name).try_lock().into_future();
    let (guards, op) = timed(admin, "fair_acquire", n, take_all(names, fair)).await?;
    out.push(op);
    out.push(
        timed(
            admin,
            "fair_release",
            n,
            give_all(guards, LockGuard::unlock),
        )
        .await?
        .1,
    );

    let read = |name: String| client.read_write_lock(name).try_read().into_future();
    let (guards, op) = timed(admin, "rw_read_acquire", n, take_all(names, read)).await?;
    out.push(op);
    let give = give_all(guards, lock_core::ReadGuard::unlock);
    out.push(timed(admin, "rw_read_release", n, give).await?.1);

    let write = |name: String| client.read_write_lock(name).try_write().into_future();
    let (guards, op) = timed(admin, "rw_write_acquire", n, take_all(names, write)).await?;
    out.push(op);
    let give = give_all(guards, lock_core::WriteGuard::unlock);
    out.push(timed(admin, "rw_write_release", n, give).await?.1);

    let permit = |name: String| client.semaphore(name, 4).try_acquire(1).into_future();
    let (guards, op) = timed(admin, "sem_acquire", n, take_all(names, permit)).await?;
    out.push(op);
    let give = give_all(guards, lock_core::SemaphoreGuard::unlock);
    out.push(timed(admin, "sem_release", n, give).await?.1);
    Ok(())
}

/// A multi-lock of three names, and a rate limit's decision.
async fn multi_and_rate(
    client: &LockClient,
    admin: &mut MultiplexedConnection,
    names: &[String],
    out: &mut Vec<OpCost>,
) -> Result<(), String> {
    let n = names.len();
    let multi = |name: String| {
        let names = [0, 1, 2].map(|i| format!("{name}:{i}"));
        client.multi_lock(names).try_lock().into_future()
    };
    let (guards, op) = timed(admin, "multi3_acquire", n, take_all(names, multi)).await?;
    out.push(op);
    let give = give_all(guards, lock_core::MultiLockGuard::unlock);
    out.push(timed(admin, "multi3_release", n, give).await?.1);

    let decide = async {
        for name in names {
            client
                .rate_limit(name)
                .per(Duration::from_secs(1), 100)
                .check()
                .await
                .map_err(err("rate limit"))?;
        }
        Ok(())
    };
    out.push(timed(admin, "rate_decision", n, decide).await?.1);
    Ok(())
}

/// The floor's `SET NX PX` and compare-and-delete script, for scale.
async fn floor(
    floor: &Locker,
    admin: &mut MultiplexedConnection,
    names: &[String],
    out: &mut Vec<OpCost>,
) -> Result<(), String> {
    let n = names.len();
    let take = async {
        let mut held = Vec::with_capacity(n);
        for name in names {
            held.push(floor.try_lock(name).await?.ok_or("floor: busy")?);
        }
        Ok::<Vec<Held>, String>(held)
    };
    let (held, op) = timed(admin, "floor_set_nx", n, take).await?;
    out.push(op);
    let give = async {
        for h in held {
            floor.unlock(h).await?;
        }
        Ok(())
    };
    out.push(timed(admin, "floor_compare_and_delete", n, give).await?.1);
    Ok(())
}

/// S1: every operation's server µs per call.
pub(crate) async fn calls(
    report: &mut Report,
    ctx: &Ctx<'_>,
    admin: &mut MultiplexedConnection,
) -> Result<(), String> {
    let Locker::Ours(client) = &ctx.lockers[0] else {
        return Err("the first contender is not lock-core".into());
    };
    let n = (ctx.plan.w1_cycles / 10).max(1);
    let names = |kind: &str| -> Vec<String> {
        (0..n)
            .map(|i| format!("bench:{}:S1:{kind}:{i}", ctx.run))
            .collect()
    };
    let mut ops = Vec::new();
    mutex(client, admin, &names("mutex"), &mut ops).await?;
    others(client, admin, &names("other"), &mut ops).await?;
    multi_and_rate(client, admin, &names("multi"), &mut ops).await?;
    floor(&ctx.lockers[1], admin, &names("floor"), &mut ops).await?;

    let mut table = format!(
        "\n### S1: server cost per call, one call at a time ({n} calls of each)\n\n\
         | call | server µs/call | commands/call | client CPU µs/call |\n|---|---|---|---|\n"
    );
    let mut json = serde_json::Map::new();
    let mut bench = Bench::new("S1", [None; 3], 0);
    for op in &ops {
        table += &format!(
            "| {} | {:.2} | {:.1} | {:.1} |\n",
            op.key, op.server_us, op.commands, op.client_us
        );
        json.insert(
            op.key.into(),
            serde_json::json!({
                "server_us_per_call": op.server_us,
                "commands_per_call": op.commands,
                "client_cpu_us_per_call": op.client_us,
            }),
        );
        bench.server_us.push((op.key, op.server_us));
    }
    json.insert("calls".into(), n.into());
    report.tables.push(table);
    report.json.insert("S1".into(), json.into());
    report.benches.push(bench);
    Ok(())
}
