//! S1: what each of lock-core's server calls costs the server, one call at a time.
//!
//! Every operation a primitive sends (an acquisition, a release, a renewal, an inspection, a
//! rate decision, a guarded take of one unit) runs `n` times in a row from one task on fresh
//! names, in the measuring frame, so nothing batches: the server µs per call is that operation's own script (or, on
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

/// One S1 run: the client, the names every kind takes, the costs so far.
struct Run<'a> {
    client: &'a LockClient,
    admin: &'a mut MultiplexedConnection,
    names: Vec<String>,
    out: Vec<OpCost>,
}

impl Run<'_> {
    /// Times `body` as the call `key` and keeps its cost; returns what it gave.
    async fn time<T>(
        &mut self,
        key: &'static str,
        body: impl Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        let (out, op) = timed(self.admin, key, self.names.len(), body).await?;
        self.out.push(op);
        Ok(out)
    }

    /// Times taking every name with `take` (`keys.0`), then giving each back with `give`
    /// (`keys.1`).
    async fn take_and_give<G, T, TFut, R, RFut>(
        &mut self,
        keys: (&'static str, &'static str),
        take: T,
        give: R,
    ) -> Result<(), String>
    where
        T: Fn(String) -> TFut,
        TFut: Future<Output = Result<Option<G>, lock_core::LockError>>,
        R: Fn(G) -> RFut,
        RFut: Future<Output = Result<bool, lock_core::LockError>>,
    {
        let names = self.names.clone();
        let guards = self.time(keys.0, take_all(&names, take)).await?;
        self.time(keys.1, give_all(guards, give)).await
    }

    /// The mutex: acquisition, renewal, inspection, release.
    async fn mutex(&mut self) -> Result<(), String> {
        let (client, names) = (self.client, self.names.clone());
        let take = |name: String| client.try_lock(name).into_future();
        let guards = self.time("mutex_acquire", take_all(&names, take)).await?;
        let renew = async {
            for g in &guards {
                let lease = Duration::from_secs(30);
                g.extend(lease).await.map_err(err("extend"))?;
            }
            Ok(())
        };
        self.time("mutex_renew", renew).await?;
        let inspect = async {
            for name in &names {
                client.mutex(name).info().await.map_err(err("info"))?;
            }
            Ok(())
        };
        self.time("mutex_inspect", inspect).await?;
        self.time("mutex_release", give_all(guards, LockGuard::unlock))
            .await
    }

    /// The fair lock, the read-write lock's two sides, a semaphore of 4, a multi-lock of
    /// three names: acquisition and release.
    async fn others(&mut self) -> Result<(), String> {
        let client = self.client;
        let fair = |name: String| client.fair_lock(name).try_lock().into_future();
        self.take_and_give(("fair_acquire", "fair_release"), fair, LockGuard::unlock)
            .await?;
        let read = |name: String| client.read_write_lock(name).try_read().into_future();
        let keys = ("rw_read_acquire", "rw_read_release");
        self.take_and_give(keys, read, lock_core::ReadGuard::unlock)
            .await?;
        let write = |name: String| client.read_write_lock(name).try_write().into_future();
        let keys = ("rw_write_acquire", "rw_write_release");
        self.take_and_give(keys, write, lock_core::WriteGuard::unlock)
            .await?;
        let permit = |name: String| client.semaphore(name, 4).try_acquire(1).into_future();
        let keys = ("sem_acquire", "sem_release");
        self.take_and_give(keys, permit, lock_core::SemaphoreGuard::unlock)
            .await?;
        let multi = |name: String| {
            let names = [0, 1, 2].map(|i| format!("{name}:multi:{i}"));
            client.multi_lock(names).try_lock().into_future()
        };
        let keys = ("multi3_acquire", "multi3_release");
        self.take_and_give(keys, multi, lock_core::MultiLockGuard::unlock)
            .await
    }

    /// A rate limit's decision.
    async fn rate(&mut self) -> Result<(), String> {
        let (client, names) = (self.client, self.names.clone());
        let decide = async {
            for name in &names {
                let limit = client.rate_limit(name).per(Duration::from_secs(1), 100);
                limit.check().await.map_err(err("rate limit"))?;
            }
            Ok(())
        };
        self.time("rate_decision", decide).await
    }

    /// A guarded take of one unit (`guard.update().take(stock, 1, 0)`, issue 45) on a counter
    /// in each lock's slot, beside a plain `DECR` and a Lua decrement-if-positive of the same
    /// counters, for scale. The counters are set before and deleted after, untimed.
    async fn guarded(&mut self) -> Result<(), String> {
        let (client, names) = (self.client, self.names.clone());
        let take = |name: String| client.try_lock(name).into_future();
        let guards = take_all(&names, take).await?;
        let stocks: Vec<String> = guards
            .iter()
            .map(|g| g.key_in_slot("bench-stock:"))
            .collect::<Result<_, _>>()
            .map_err(err("key_in_slot"))?;
        let mut conn = client.connection();
        let redis_err = |what: &'static str| move |e: redis::RedisError| format!("{what}: {e}");
        for stock in &stocks {
            redis::cmd("SET")
                .arg(stock)
                .arg(1_000)
                .query_async::<()>(&mut conn)
                .await
                .map_err(redis_err("set stock"))?;
        }
        let sell = async {
            for (guard, stock) in guards.iter().zip(&stocks) {
                match guard.update().take(stock, 1, 0).send().await {
                    Ok(lock_core::Updated::Applied { .. }) => {}
                    other => return Err(format!("guarded take: {other:?}")),
                }
            }
            Ok(())
        };
        self.time("guarded_take", sell).await?;
        let mut decr_conn = client.connection();
        let decr = async {
            for stock in &stocks {
                redis::cmd("DECR")
                    .arg(stock)
                    .query_async::<i64>(&mut decr_conn)
                    .await
                    .map_err(redis_err("DECR"))?;
            }
            Ok(())
        };
        self.time("plain_decr", decr).await?;
        let script = redis::Script::new(
            "local v = tonumber(redis.call('GET', KEYS[1]) or '0') \
             if v > 0 then return redis.call('DECR', KEYS[1]) end return -1",
        );
        // Loaded before the frame, so the timed calls are EVALSHA only.
        script
            .key(&stocks[0])
            .invoke_async::<i64>(&mut conn)
            .await
            .map_err(redis_err("Lua decrement"))?;
        let lua = async {
            for stock in &stocks {
                script
                    .key(stock)
                    .invoke_async::<i64>(&mut conn)
                    .await
                    .map_err(redis_err("Lua decrement"))?;
            }
            Ok(())
        };
        self.time("lua_decrement_if_positive", lua).await?;
        for stock in &stocks {
            redis::cmd("DEL")
                .arg(stock)
                .query_async::<()>(&mut decr_conn)
                .await
                .map_err(redis_err("DEL"))?;
        }
        give_all(guards, LockGuard::unlock).await
    }

    /// The floor's `SET NX PX` and compare-and-delete script, for scale.
    async fn floor(&mut self, floor: &Locker) -> Result<(), String> {
        let names = self.names.clone();
        let take = async {
            let mut held = Vec::with_capacity(names.len());
            for name in &names {
                held.push(floor.try_lock(name).await?.ok_or("floor: busy")?);
            }
            Ok::<Vec<Held>, String>(held)
        };
        let held = self.time("floor_set_nx", take).await?;
        let give = async {
            for h in held {
                floor.unlock(h).await?;
            }
            Ok(())
        };
        self.time("floor_compare_and_delete", give).await
    }
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
    let mut run = Run {
        client,
        admin,
        names: (0..n)
            .map(|i| format!("bench:{}:S1:{i}", ctx.run))
            .collect(),
        out: Vec::new(),
    };
    run.mutex().await?;
    run.others().await?;
    run.rate().await?;
    run.guarded().await?;
    run.floor(&ctx.lockers[1]).await?;
    let ops = run.out;

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
