//! Shared pieces of the lock suites: clients on a test server, and the end-of-test checks.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use lock_core::{LockClient, LockGuard};

use crate::server::RedisServer;

/// A client on `url` with the given watchdog lease and short timeouts.
pub async fn client_with_lease(url: &str, watchdog_lease: Duration) -> LockClient {
    LockClient::builder(url)
        .watchdog_lease(watchdog_lease)
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap()
}

/// A client on `url` with the default configuration (the mutex protocol follows the
/// server: native on Valkey 9, hybrid on Redis 7 and Valkey 8).
pub async fn client(url: &str) -> LockClient {
    LockClient::connect(url).await.unwrap()
}

/// A client on `url` that speaks the scripted mutex protocol whatever the server has: for the
/// tests of the scripts' own key layout, calls and answers.
pub async fn scripted_client(url: &str) -> LockClient {
    LockClient::builder(url)
        .mutex_protocol(lock_core::MutexProtocol::Scripted)
        .build()
        .await
        .unwrap()
}

/// Whether `value`, read from a mutex's key, is a lock of `c`'s with fencing token `token`: the
/// scripts' lock string holds the token; the native protocol's value is the owner id alone.
pub fn is_lock_of(value: &str, c: &LockClient, token: u64) -> bool {
    if native(c) {
        value.starts_with(c.client_id())
    } else {
        value.starts_with(c.client_id()) && value.contains(&token.to_string())
    }
}

/// Whether the test server has the native protocol's commands (Valkey 9).
pub fn native_server(server: &RedisServer) -> bool {
    let reply = server.cmd(&["COMMAND", "INFO", "DELIFEQ"]);
    !reply.is_empty() && reply != "(nil)"
}

/// The mutex protocol a client that may use the native commands (and find out what the
/// server has) speaks on a test server: native where the server has them (Valkey 9), else
/// hybrid (every test server has `SET … NX GET`: Redis 7.0 or later).
pub fn expected_protocol(native: bool) -> lock_core::MutexProtocol {
    if native {
        lock_core::MutexProtocol::Native
    } else {
        lock_core::MutexProtocol::Hybrid
    }
}

/// Whether `c` keeps its mutexes in the native protocol's format (a held lock is its owner id,
/// a free one no key, tokens from a counter): it speaks the native protocol or the hybrid one.
pub fn native(c: &LockClient) -> bool {
    matches!(
        c.server_capabilities().mutex_protocol,
        lock_core::MutexProtocol::Native | lock_core::MutexProtocol::Hybrid
    )
}

/// The locks held right now under the default prefix (keys whose value names an owner: a
/// free lock keeps its key, `|0|<token>|...`, until its fencing counter expires). Lock keys
/// only: `lock:{…`, not a client's owner description (`lock:client:<id>`) nor a lock's record
/// (`lock:{…}:record`, lock-core's `record`).
pub fn lock_keys(server: &RedisServer) -> Vec<String> {
    server
        .keys("lock:{*")
        .into_iter()
        .filter(|k| !k.ends_with(lock_core::layout::RECORD_SUFFIX))
        .filter(|k| {
            let value = server.cmd(&["GET", k]);
            value != "(nil)" && !value.starts_with('|') && !value.starts_with("WRONGTYPE")
        })
        .collect()
}

/// Waits (up to 5 s) until `check` holds, polling the test server every 10 ms; panics with
/// `what` if it never does. For checks on the *server's* state after background work.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The end-of-test checks: no lock left held, no channel subscribed, every lock key with a
/// time to live (so per-request names cannot pile up).
pub async fn assert_clean(server: &RedisServer) {
    eventually("every lock released", || lock_keys(server).is_empty()).await;
    eventually("every channel unsubscribed", || {
        server.pubsub_channels().is_empty()
    })
    .await;
    for key in server.keys("lock:*") {
        // The native protocol's fencing counters (one per slot) never expire, by design.
        if key == "lock:fence" || key.starts_with("lock:fence:{") {
            continue;
        }
        let ttl: i64 = server.cmd(&["PTTL", &key]).parse().unwrap();
        assert!(ttl > 0, "{key} has no time to live ({ttl})");
    }
}

/// Calls of one command since the last `CONFIG RESETSTAT` (from `INFO commandstats`).
pub fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.cmd(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Calls of the lock's Lua code since the last `CONFIG RESETSTAT`, however they were sent
/// (`FCALL` into the function library, `EVALSHA`, `EVAL`).
pub fn lua_calls(server: &RedisServer) -> u64 {
    ["fcall", "evalsha", "eval"]
        .iter()
        .map(|command| command_calls(server, command))
        .sum()
}

/// Runs blocking harness work (starting nodes, migrating slots, failovers) without stalling
/// the test's other tasks (needs the multi-thread runtime).
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Tries to take `name` (which nobody holds) until the client works again, after a failover
/// say; panics after 15 s. Returns how long it took.
pub async fn recovered(c: &LockClient, name: &str) -> Duration {
    let started = tokio::time::Instant::now();
    match try_lock_until_answered(c, name).await {
        Some(g) => {
            g.unlock().await.unwrap();
            started.elapsed()
        }
        None => panic!("nobody holds {name}"),
    }
}

/// `c.try_lock(name)` until it answers (taken or busy), looking again every 100 ms while it
/// fails: after a failover that killed the primary, until the deployment has promoted its
/// replica (a coordinated failover needs no such loop: the first call goes through);
/// panics after 15 s of errors.
pub async fn try_lock_until_answered(c: &LockClient, name: &str) -> Option<LockGuard> {
    let started = tokio::time::Instant::now();
    loop {
        match c.try_lock(name.to_owned()).await {
            Ok(answer) => return answer,
            Err(e) => {
                assert!(
                    started.elapsed() < Duration::from_secs(15),
                    "still failing: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What a waiting task got, checked to come within 3 s of `released`: a release message woke
/// it, not a holder's (long) lease or a slow poll. Panics if it failed or took longer.
pub async fn woken<T>(
    waiter: tokio::task::JoinHandle<Result<T, lock_core::LockError>>,
    released: tokio::time::Instant,
) -> T {
    let got = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter is woken")
        .unwrap()
        .unwrap();
    let after = released.elapsed();
    assert!(after < Duration::from_secs(3), "woken after {after:?}");
    got
}

/// Rounding in what [`expiry`] measures (the server's millisecond PTTL and clock): an expiry
/// that moved later by more than this moved. A renewal moves it by a retry interval or more.
pub const EXPIRY_SLACK: Duration = Duration::from_millis(100);

/// When the mutex `name` expires on the server: no sooner than the first instant and no later
/// than the second (its PTTL counted from before and from after the request). None when
/// nobody holds it. Comparing expiries, not TTLs, tells a renewal apart: a TTL read just after
/// one renewal is never exceeded by later reads, since every renewal resets it to the lease.
pub async fn expiry(
    c: &LockClient,
    name: &str,
) -> Option<(tokio::time::Instant, tokio::time::Instant)> {
    let sent = tokio::time::Instant::now();
    let ttl = c.mutex(name).info().await.unwrap().ttl?;
    Some((sent + ttl, tokio::time::Instant::now() + ttl))
}

/// Waits (up to `within`) until the mutex `name`'s expiry moves later than it is now: its
/// holder's watchdog renewed it. Panics if it does not, or if the lock expires meanwhile.
pub async fn renewed(c: &LockClient, name: &str, within: Duration) {
    let (_, expired_by) = expiry(c, name).await.expect("the lock is held");
    let until = tokio::time::Instant::now() + within;
    loop {
        let (expires_from, _) = expiry(c, name)
            .await
            .expect("never renewed: the lock expired");
        if expires_from > expired_by + EXPIRY_SLACK {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "never renewed within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Takes `name` with a client that has `min_replicas` set, trying again while the replicas
/// do not acknowledge yet (a replica whose link just came up may not answer `WAIT` at once);
/// panics after 15 s or on any other error.
pub async fn lock_replicated(c: &LockClient, name: &str) -> lock_core::LockGuard {
    let started = tokio::time::Instant::now();
    loop {
        match c.lock(name.to_owned()).await {
            Ok(g) => return g,
            Err(lock_core::LockError::NotReplicated { .. })
                if started.elapsed() < Duration::from_secs(15) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("could not take {name}: {e:?}"),
        }
    }
}

/// Armed by [`abort_if_hung`]; dropping it (the test finished) disarms it.
#[derive(Debug)]
pub struct HangGuard {
    done: Arc<(Mutex<bool>, Condvar)>,
}

/// Aborts the whole test process, naming `what`, if the returned guard is still alive after
/// `limit`. A deadlock in the code under test blocks the very runtime thread a timeout would
/// need to fire, so only another thread can turn such a hang into a failure (the test binary
/// then fails at once instead of holding CI until its time limit).
pub fn abort_if_hung(what: &'static str, limit: Duration) -> HangGuard {
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let watched = done.clone();
    std::thread::spawn(move || {
        let (finished, wake) = &*watched;
        let finished = finished.lock().unwrap_or_else(|p| p.into_inner());
        let (finished, _) = wake
            .wait_timeout_while(finished, limit, |finished| !*finished)
            .unwrap_or_else(|p| p.into_inner());
        if !*finished {
            // The one way to say why the process ends: the test's own output is lost with it.
            let _ = writeln!(
                std::io::stderr(),
                "HUNG: {what} did not finish within {limit:?}; aborting the test process"
            );
            std::process::abort();
        }
    });
    HangGuard { done }
}

impl Drop for HangGuard {
    fn drop(&mut self) {
        let (finished, wake) = &*self.done;
        *finished.lock().unwrap_or_else(|p| p.into_inner()) = true;
        wake.notify_all();
    }
}
