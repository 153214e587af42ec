//! The floor: the minimal correct lock, written here to measure lock-core against.
//!
//! * acquire: `SET key token NX PX lease` on one multiplexed connection;
//! * release: one compare-and-delete script (EVALSHA) that also `PUBLISH`es on the name's
//!   channel;
//! * wait: subscribe to the name's channel (one pub/sub connection per `Floor`, channels
//!   reference counted), try again, and then try again on every message, or after
//!   [`RECHECK`] in case the holder crashed and its lease ran out without a message.
//!
//! No reentrancy, no fencing tokens, no watchdog, no local queueing: every local waiter
//! retries on every message. [`Watchdog`] is a minimal batched renewal for W5 only.
//!
//! [`Floor::connect_native`] is the same lock on a server with native compare commands
//! (Valkey 9's `DELIFEQ`; see [`server_has_delifeq`]), without any script: the *native floor*.
//!
//! * acquire: `SET key token NX PX lease`, as above;
//! * release: `DELIFEQ key token` pipelined with `DEL key:w` (the waiters flag), then, only
//!   when that `DEL` removed a flag, `PUBLISH` on the name's channel;
//! * wait: subscribe to the name's channel first; then every attempt is `SET key:w 1 PX`
//!   [`FLAG_TTL`] pipelined before the `SET NX`; then wait for a message or [`RECHECK`].
//!
//! Why no wake-up is lost: a waiter's flag is set after its subscription and before its
//! attempt, and that attempt failed, so the holder's `DELIFEQ` (and the `DEL` after it on the
//! same connection) run after the flag was set: the `DEL` finds it and the holder publishes
//! to a channel the waiter already listens on. If another release's `DEL` took the flag
//! first, that release published, which woke the waiter too; a woken waiter sets the flag
//! again before its next attempt. If the flag expired (a waiter's wait is at most [`RECHECK`],
//! shorter than [`FLAG_TTL`]), the re-check covers it, as it covers a holder that died. A
//! release publishes whenever its `DEL` removed a flag, even when its `DELIFEQ` found the lock
//! gone (its lease ran out), so a flag it takes from another holder's waiters still wakes them
//! and they set it again. Nobody waiting: nothing is published, no flag key is ever written.
//!
//! [`Floor::with_lock_core_calls`] gives a second contender for the uncontended scenarios
//! (W1, W2, W6): this client sending lock-core's own two server calls per cycle (`FCALL` of the
//! acquire and release functions lock-core loaded) instead of its own. Against the floor, it
//! measures what lock-core's server side costs on its own (its fencing token, re-entry count
//! and kept counter); against lock-core, what lock-core's client adds to the same calls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::aio::{MultiplexedConnection, PubSubSink};
use tokio::sync::Notify;

static RELEASE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
           redis.call('DEL', KEYS[1]) redis.call('PUBLISH', ARGV[2], '1') return 1 \
         end return 0",
    )
});

static RENEW: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "local lost = 0 \
         for i, key in ipairs(KEYS) do \
           if redis.call('GET', key) == ARGV[i + 1] then redis.call('PEXPIRE', key, ARGV[1]) \
           else lost = lost + 1 end \
         end return lost",
    )
});

/// How long a waiter waits for a message before it tries again anyway.
const RECHECK: Duration = Duration::from_secs(1);
/// The native floor's waiters flag (`key:w`) lives this long: longer than one wait
/// ([`RECHECK`]), and set again before every attempt, so it stays while anyone waits.
const FLAG_TTL: Duration = Duration::from_secs(2);
/// Bound on a single command or subscription.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// How long lock-core keeps a free lock's fencing counter by default (its `fence_ttl`, 1 h),
/// sent with the release call.
const LOCK_CORE_FENCE_TTL_MS: u64 = 3_600_000;

/// The floor lock client. Cloning shares the connections.
#[derive(Clone)]
pub(crate) struct Floor {
    con: MultiplexedConnection,
    subs: Arc<Subs>,
    lease_ms: u64,
    /// Set: lock-core's server calls instead of the floor's own.
    calls: Option<Arc<CoreCalls>>,
    /// The native floor: `DELIFEQ` and a waiters flag instead of the release script.
    native: bool,
}

/// lock-core's acquire and release functions, and owner ids in lock-core's format.
struct CoreCalls {
    acquire: String,
    release: String,
    /// This client's id; an acquisition's owner is `{id}:{n}`.
    id: String,
    next: AtomicU64,
}

struct Subs {
    /// Orders SUBSCRIBE / UNSUBSCRIBE and holds the sink they go through.
    sink: tokio::sync::Mutex<PubSubSink>,
    /// channel -> (waiters, their wake-up); read by the message task.
    channels: Mutex<HashMap<String, (usize, Arc<Notify>)>>,
}

/// A held floor lock.
#[derive(Debug)]
pub(crate) struct FloorGuard {
    key: String,
    /// The floor's random value, or with lock-core's calls the owner id.
    token: String,
    /// With lock-core's calls: the fencing token the acquisition answered.
    fence: Option<String>,
}

impl FloorGuard {
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }
}

fn channel(key: &str) -> String {
    format!("{key}:released")
}

/// The native floor's waiters flag of a name.
fn flag(key: &str) -> String {
    format!("{key}:w")
}

/// Whether the server has `DELIFEQ` (Valkey 9): `COMMAND INFO DELIFEQ` answers one entry,
/// nil for a command the server does not know.
pub(crate) async fn server_has_delifeq(con: &mut MultiplexedConnection) -> bool {
    let info: redis::RedisResult<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("DELIFEQ")
        .query_async(con)
        .await;
    match info {
        Ok(redis::Value::Array(entries)) => entries
            .first()
            .is_some_and(|e| !matches!(e, redis::Value::Nil)),
        _ => false,
    }
}

impl Floor {
    pub(crate) async fn connect(url: &str, lease: Duration) -> Self {
        let client = redis::Client::open(url).expect("floor: bad URL");
        // W5 sends hundreds of 256-key renewal scripts at once; redis-rs' default 500 ms
        // response timeout would fail the last ones while the server is still working on them.
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(COMMAND_TIMEOUT));
        let con = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("floor: connect");
        let (sink, mut stream) = client
            .get_async_pubsub()
            .await
            .expect("floor: pub/sub connect")
            .split();
        let subs = Arc::new(Subs {
            sink: tokio::sync::Mutex::new(sink),
            channels: Mutex::new(HashMap::new()),
        });
        let weak = Arc::downgrade(&subs);
        tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                let Some(subs) = weak.upgrade() else { return };
                let notify = lock(&subs.channels)
                    .get(msg.get_channel_name())
                    .map(|(_, n)| n.clone());
                if let Some(n) = notify {
                    n.notify_waiters();
                }
            }
        });
        Self {
            con,
            subs,
            lease_ms: lease.as_millis() as u64,
            calls: None,
            native: false,
        }
    }

    /// The native floor (see the module's docs): for a server with `DELIFEQ` only.
    pub(crate) async fn connect_native(url: &str, lease: Duration) -> Self {
        Self {
            native: true,
            ..Self::connect(url, lease).await
        }
    }

    /// This client on lock-core's server calls: the first `lockcore_*` function library in the
    /// server (`FUNCTION LIST`; in the bench's own server, the one the bench's lock-core client
    /// loaded). None where there is none (a server without functions, where lock-core sends
    /// scripts). For uncontended runs only: its attempts never set lock-core's waiters flag, so
    /// a wait for a busy name is woken by the 1 s re-check, not by the release.
    pub(crate) async fn with_lock_core_calls(&self) -> Option<Floor> {
        let mut con = self.con.clone();
        let list: redis::Value = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg("lockcore_*")
            .query_async(&mut con)
            .await
            .ok()?;
        let mut names = Vec::new();
        strings(&list, &mut names);
        let at = names.iter().position(|n| n == "library_name")?;
        let prefix = names.get(at + 1)?;
        let calls = CoreCalls {
            acquire: format!("{prefix}_acquire"),
            release: format!("{prefix}_release"),
            id: uuid::Uuid::new_v4().simple().to_string(),
            next: AtomicU64::new(1),
        };
        Some(Floor {
            calls: Some(Arc::new(calls)),
            ..self.clone()
        })
    }

    /// One attempt through lock-core's acquire function: owner `{id}:{n}`, expecting no
    /// hold, not waiting.
    async fn try_lock_core_call(
        &self,
        calls: &CoreCalls,
        key: &str,
    ) -> Result<Option<FloorGuard>, String> {
        let owner = format!(
            "{}:{}",
            calls.id,
            calls.next.fetch_add(1, Ordering::Relaxed)
        );
        let mut con = self.con.clone();
        let reply: redis::Value = fcall(&calls.acquire, key)
            .arg(&owner)
            .arg(self.lease_ms)
            .arg(0)
            .arg(0)
            .query_async(&mut con)
            .await
            .map_err(|e| format!("floor FCALL acquire: {e}"))?;
        // A token (> 0) when taken, as a string or an integer; an integer <= 0 when not.
        let fence = match reply {
            redis::Value::BulkString(b) => String::from_utf8(b).map_err(|e| e.to_string())?,
            redis::Value::Int(t) if t > 0 => t.to_string(),
            redis::Value::Int(_) => return Ok(None),
            other => return Err(format!("floor FCALL acquire answered {other:?}")),
        };
        Ok(Some(FloorGuard {
            key: key.to_owned(),
            token: owner,
            fence: Some(fence),
        }))
    }

    /// One attempt: `SET key token NX PX lease`.
    pub(crate) async fn try_lock(&self, key: &str) -> Result<Option<FloorGuard>, String> {
        if let Some(calls) = &self.calls {
            return self.try_lock_core_call(calls, key).await;
        }
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut con = self.con.clone();
        let ok: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(self.lease_ms)
            .query_async(&mut con)
            .await
            .map_err(|e| format!("floor SET: {e}"))?;
        Ok(ok.map(|_| FloorGuard {
            key: key.to_owned(),
            token,
            fence: None,
        }))
    }

    /// An attempt of a waiter, subscribed already: the native floor sets the waiters flag
    /// first, in the same pipeline; the others just try.
    async fn try_lock_waiting(&self, key: &str) -> Result<Option<FloorGuard>, String> {
        if !self.native {
            return self.try_lock(key).await;
        }
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut con = self.con.clone();
        let ((), ok): ((), Option<String>) = redis::pipe()
            .cmd("SET")
            .arg(flag(key))
            .arg(1)
            .arg("PX")
            .arg(FLAG_TTL.as_millis() as u64)
            .cmd("SET")
            .arg(key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(self.lease_ms)
            .query_async(&mut con)
            .await
            .map_err(|e| format!("native floor SET flag + SET NX: {e}"))?;
        Ok(ok.map(|_| FloorGuard {
            key: key.to_owned(),
            token,
            fence: None,
        }))
    }

    /// Takes the lock, waiting at most `wait` (pub/sub wake-ups).
    pub(crate) async fn lock(&self, key: &str, wait: Duration) -> Result<FloorGuard, String> {
        if let Some(g) = self.try_lock(key).await? {
            return Ok(g);
        }
        let deadline = Instant::now() + wait;
        let chan = channel(key);
        let notify = self.join(&chan).await?;
        let result = async {
            loop {
                let notified = notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if let Some(g) = self.try_lock_waiting(key).await? {
                    return Ok(g);
                }
                let now = Instant::now();
                if now >= deadline {
                    return Err(format!("floor: timed out waiting for {key}"));
                }
                let _ = tokio::time::timeout(RECHECK.min(deadline - now), notified).await;
            }
        }
        .await;
        self.leave(&chan).await;
        result
    }

    /// Compare-and-delete, publishing on the name's channel (with lock-core's calls, its
    /// release function; the native floor: `DELIFEQ`, publishing only to flagged waiters).
    pub(crate) async fn unlock(&self, guard: FloorGuard) -> Result<bool, String> {
        let mut con = self.con.clone();
        if let (Some(calls), Some(fence)) = (&self.calls, &guard.fence) {
            let n: i64 = fcall(&calls.release, &guard.key)
                .arg(&guard.token)
                .arg(1)
                .arg(fence)
                .arg(channel(&guard.key))
                .arg(LOCK_CORE_FENCE_TTL_MS)
                .query_async(&mut con)
                .await
                .map_err(|e| format!("floor FCALL release: {e}"))?;
            return Ok(n == 1);
        }
        if self.native {
            let (deleted, flagged): (i64, i64) = redis::pipe()
                .cmd("DELIFEQ")
                .arg(&guard.key)
                .arg(&guard.token)
                .cmd("DEL")
                .arg(flag(&guard.key))
                .query_async(&mut con)
                .await
                .map_err(|e| format!("native floor DELIFEQ + DEL flag: {e}"))?;
            if flagged == 1 {
                let _: i64 = redis::cmd("PUBLISH")
                    .arg(channel(&guard.key))
                    .arg(1)
                    .query_async(&mut con)
                    .await
                    .map_err(|e| format!("native floor PUBLISH: {e}"))?;
            }
            return Ok(deleted == 1);
        }
        let n: i64 = RELEASE
            .key(&guard.key)
            .arg(&guard.token)
            .arg(channel(&guard.key))
            .invoke_async(&mut con)
            .await
            .map_err(|e| format!("floor release: {e}"))?;
        Ok(n == 1)
    }

    async fn join(&self, chan: &str) -> Result<Arc<Notify>, String> {
        let mut sink = self.subs.sink.lock().await;
        let (notify, first) = {
            let mut channels = lock(&self.subs.channels);
            let entry = channels
                .entry(chan.to_owned())
                .or_insert_with(|| (0, Arc::new(Notify::new())));
            entry.0 += 1;
            (entry.1.clone(), entry.0 == 1)
        };
        if first {
            match tokio::time::timeout(COMMAND_TIMEOUT, sink.subscribe(chan)).await {
                Ok(Ok(())) => {}
                other => {
                    drop(sink);
                    self.leave(chan).await;
                    return Err(format!("floor SUBSCRIBE: {other:?}"));
                }
            }
        }
        Ok(notify)
    }

    async fn leave(&self, chan: &str) {
        let mut sink = self.subs.sink.lock().await;
        let last = {
            let mut channels = lock(&self.subs.channels);
            match channels.get_mut(chan) {
                Some(entry) if entry.0 > 1 => {
                    entry.0 -= 1;
                    false
                }
                Some(_) => {
                    channels.remove(chan);
                    true
                }
                None => false,
            }
        };
        if last {
            let _ = tokio::time::timeout(COMMAND_TIMEOUT, sink.unsubscribe(chan)).await;
        }
    }
}

/// `FCALL function 1 key`, for the arguments to follow.
fn fcall(function: &str, key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(function).arg(1).arg(key);
    cmd
}

/// Every string in a reply, depth first.
fn strings(value: &redis::Value, out: &mut Vec<String>) {
    match value {
        redis::Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => out.push(s.clone()),
        redis::Value::Array(items) | redis::Value::Set(items) => {
            items.iter().for_each(|v| strings(v, out))
        }
        redis::Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            strings(k, out);
            strings(v, out);
        }),
        _ => {}
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The floor's watchdog for W5: every `lease / 3` one compare-and-`PEXPIRE` script per 256
/// locks, all batches sent at once on the multiplexed connection.
pub(crate) struct Watchdog {
    lost: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Watchdog {
    pub(crate) fn start(floor: &Floor, held: Arc<Vec<(String, String)>>, lease: Duration) -> Self {
        let lost = Arc::new(AtomicU64::new(0));
        let (con, lost2) = (floor.con.clone(), lost.clone());
        let lease_ms = lease.as_millis() as u64;
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(lease / 3);
            tick.tick().await;
            loop {
                tick.tick().await;
                let batches = held.chunks(256).map(|chunk| {
                    let mut con = con.clone();
                    let mut inv = RENEW.prepare_invoke();
                    inv.arg(lease_ms);
                    for (key, token) in chunk {
                        inv.key(key).arg(token);
                    }
                    async move { inv.invoke_async::<u64>(&mut con).await }
                });
                for r in futures_util::future::join_all(batches).await {
                    match r {
                        Ok(n) => {
                            lost2.fetch_add(n, Ordering::Relaxed);
                        }
                        Err(e) => eprintln!("floor watchdog: {e}"),
                    }
                }
            }
        });
        Self { lost, task }
    }

    /// Locks the renewals found gone so far (counted once per renewal that missed them).
    pub(crate) fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The native floor against the harness's server (`REDIS_SERVER_BIN`); on a server without
    /// `DELIFEQ` (redis-server 7) there is nothing to test and it says so. No timing: every
    /// wait is bounded, and what is checked is the keys and messages the server holds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn native_floor_flags_waiters_and_cleans_up() {
        let server = lock_tests::RedisServer::start();
        let url = server.url();
        let client = redis::Client::open(url.as_str()).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        if !server_has_delifeq(&mut con).await {
            eprintln!("skipped: the server has no DELIFEQ (set REDIS_SERVER_BIN to a Valkey 9)");
            return;
        }
        let holder = Floor::connect_native(&url, Duration::from_secs(30)).await;
        let waiter = Floor::connect_native(&url, Duration::from_secs(30)).await;
        let probe = con.clone();
        let exists = |key: String| {
            let mut con = probe.clone();
            async move {
                redis::cmd("EXISTS")
                    .arg(key)
                    .query_async::<i64>(&mut con)
                    .await
                    .unwrap()
            }
        };

        // Uncontended: no flag is written, and the release publishes nothing (a message of
        // our own, published after it, is the first one on the channel).
        let mut sub = client.get_async_pubsub().await.unwrap();
        sub.subscribe(channel("a")).await.unwrap();
        let g = holder.lock("a", Duration::from_secs(5)).await.unwrap();
        assert!(holder.unlock(g).await.unwrap());
        assert_eq!(exists("a".into()).await, 0);
        assert_eq!(exists(flag("a")).await, 0);
        let _: i64 = redis::cmd("PUBLISH")
            .arg(channel("a"))
            .arg("marker")
            .query_async(&mut con)
            .await
            .unwrap();
        let mut messages = sub.on_message();
        let first = messages.next().await.unwrap();
        assert_eq!(first.get_payload::<String>().unwrap(), "marker");
        drop(messages);

        // A waiter flags the name before it waits; the release takes the flag and wakes it.
        let g = holder.lock("b", Duration::from_secs(5)).await.unwrap();
        let w = waiter.clone();
        let waiting = tokio::spawn(async move { w.lock("b", Duration::from_secs(30)).await });
        let mut flagged = false;
        for _ in 0..2_000 {
            if exists(flag("b")).await == 1 {
                flagged = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(flagged, "the waiter never set b:w");
        assert!(holder.unlock(g).await.unwrap());
        let g = waiting.await.unwrap().unwrap();
        assert_eq!(exists("b".into()).await, 1);
        // The winning attempt set the flag again (it cannot know it was the last waiter); its
        // own release takes it, and nothing is left.
        assert!(waiter.unlock(g).await.unwrap());
        assert_eq!(exists("b".into()).await, 0);
        assert_eq!(exists(flag("b")).await, 0);

        // A release whose lock is gone (its lease ran out, another holder took the name)
        // reports it and leaves the other holder's key alone.
        let g = holder.lock("c", Duration::from_secs(5)).await.unwrap();
        let _: () = redis::cmd("SET")
            .arg("c")
            .arg("someone-else")
            .query_async(&mut con)
            .await
            .unwrap();
        assert!(!holder.unlock(g).await.unwrap());
        let v: String = redis::cmd("GET")
            .arg("c")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(v, "someone-else");
    }
}
