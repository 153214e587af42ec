//! Fault scenarios (F1–F30, listed in `tests/README.md`) on one standalone Redis that
//! `faults.rs` and `mutex.rs` do not already cover, each checked with an invariant checker
//! (`lock_tests::checkers`). `tests/README.md` maps every scenario F1–F30 to its tests.
//!
//! Every test starts its own redis-server (and fault proxy), bounds its whole body with
//! [`bounded`], and synchronises on events (lost signals, server state) rather than sleeps;
//! where a duration is the point (a pause longer than a lease), the margins are generous.

use std::future::IntoFuture;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::{HeldLock, LockClient, LockError, LockGuard};
use lock_tests::checkers::{FencedStore, IntervalLog, Stale, UnsafeCounter};
use lock_tests::fixtures::{
    abort_if_hung, assert_clean, client, client_with_lease, command_calls, eventually, lock_keys,
    lua_calls, native, scripted_client,
};
use lock_tests::{FaultProxy, RedisServer, Reply, unique_name};
use rand::Rng;
use tokio::time::Instant;

/// The watchdog lease of the scenarios that wait for a lease to run out.
const LEASE: Duration = Duration::from_secs(1);
/// Slack for scheduling on a loaded two-core machine, on top of a bound the design states.
const SLACK: Duration = Duration::from_millis(400);

/// Runs a test body with a generous upper bound: a hang is a failure, not a stuck CI job.
/// A deadlock that blocks the runtime thread the timeout needs aborts the process instead,
/// 30 s later.
async fn bounded<T>(secs: u64, body: impl Future<Output = T>) -> T {
    let _hang = abort_if_hung("a fault scenario", Duration::from_secs(secs + 30));
    tokio::time::timeout(Duration::from_secs(secs), body)
        .await
        .unwrap_or_else(|_| panic!("the scenario did not finish within {secs} s"))
}

/// Watches a hold from the outside: resolves to the last instant `is_held()` was seen true
/// (read *before* the check, so the interval it ends is never too long) once it turns false.
fn last_seen_held(handle: HeldLock) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        let mut last = Instant::now();
        loop {
            let now = Instant::now();
            if !handle.is_held() {
                return last;
            }
            last = now;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
}

/// Whether a command error is one of the typed "Redis did not answer / could not be reached"
/// outcomes (or the lock stayed busy until the wait ran out).
fn is_bounded_failure(e: &LockError) -> bool {
    e.is_unavailable() || e.is_timeout()
}

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
    }
    out
}

/// Sends `args` on a fresh connection from a blocking thread and returns its reply; for
/// commands that block the server (`DEBUG SLEEP`), so the runtime's workers never wait.
fn send_blocking(addr: SocketAddr, args: &[&str]) -> tokio::task::JoinHandle<Reply> {
    let command = encode(args);
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream.write_all(&command).unwrap();
        Reply::read_from(&mut BufReader::new(stream)).unwrap()
    })
}

/// Whether the server answers a `PING` within `within`.
async fn answers(addr: SocketAddr, within: Duration) -> bool {
    tokio::task::spawn_blocking(move || {
        let Ok(mut stream) = TcpStream::connect_timeout(&addr, within) else {
            return false;
        };
        stream.set_read_timeout(Some(within)).unwrap();
        stream.write_all(&encode(&["PING"])).unwrap();
        matches!(
            Reply::read_from(&mut BufReader::new(stream)),
            Ok(Reply::Status(s)) if s == "PONG"
        )
    })
    .await
    .unwrap()
}

/// The owner count and fencing token the server has for `name` (0, None when free).
async fn server_view(c: &LockClient, name: &str) -> (u32, Option<u64>) {
    let info = c.mutex(name).info().await.unwrap();
    (info.hold_count, info.fencing_token)
}

/// [`server_view`] for a lock `holder` holds, as `observer` sees it: the native protocol keeps
/// only the owner in Redis (the count and the token are the holder's), so there the server
/// must name the same owner as the holder's view, whose count and token are then taken.
async fn server_view_of(
    holder: &LockClient,
    observer: &LockClient,
    name: &str,
) -> (u32, Option<u64>) {
    if !native(holder) {
        return server_view(observer, name).await;
    }
    let seen = observer.mutex(name).info().await.unwrap();
    let own = holder.mutex(name).info().await.unwrap();
    assert_eq!((seen.held, &seen.owner), (own.held, &own.owner));
    (own.hold_count, own.fencing_token)
}

/// Calls that renew a lock since the last `CONFIG RESETSTAT`, in either protocol: the renew
/// script's `PEXPIRE`, the native `SET … IFEQ … PX` (a native client sends no other `SET`
/// once its lock is taken).
fn renewals(server: &RedisServer) -> u64 {
    command_calls(server, "pexpire") + command_calls(server, "set")
}

// ---------------------------------------------------------------------------------------
// F1: a holder paused past its lease
// ---------------------------------------------------------------------------------------

/// F1 (Kleppmann's K1). A's process "pauses" (its connection is black-holed, so its watchdog
/// cannot renew) for longer than its lease. B takes the lock once A's key expires and writes
/// with its larger token; A "resumes": it already knows the lock is lost, its late write is
/// refused by the fencing store, and its release does not touch B's lock. A's belief that it
/// held (the last moment `is_held()` was true) ends before B's hold starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f01_a_holder_paused_past_its_lease_is_fenced_off() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let a = client_with_lease(&proxy.url(), LEASE).await;
    let b = client_with_lease(&server.url(), LEASE).await;
    let name = unique_name("f1");
    let store = FencedStore::new();
    let log = IntervalLog::new();
    bounded(30, async {
        let ga = a.lock(&name).await.unwrap();
        let a_start = Instant::now();
        store
            .write(ga.fencing_token(), "a: before the pause")
            .unwrap();
        let a_belief = last_seen_held(ga.held_lock());

        // The pause: nothing of A reaches Redis any more.
        proxy.blackhole();
        let paused = Instant::now();
        let gb = b.lock(&name).wait(Duration::from_secs(10)).await.unwrap();
        let b_start = Instant::now();
        // B got it once A's lease ran out (A renewed at most a third of a lease ago).
        assert!(
            paused.elapsed() <= LEASE + SLACK,
            "B waited {:?}",
            paused.elapsed()
        );
        assert!(gb.fencing_token() > ga.fencing_token());
        store.write(gb.fencing_token(), "b").unwrap();

        // A resumes.
        proxy.pass();
        tokio::time::timeout(Duration::from_millis(100), ga.lost())
            .await
            .expect("A's lost signal had not fired by the time B held the lock");
        assert!(!ga.is_held());
        let a_last_held = a_belief.await.unwrap();
        assert_eq!(
            store.write(ga.fencing_token(), "a: after the pause"),
            Err(Stale {
                token: ga.fencing_token(),
                max_seen: gb.fencing_token()
            })
        );
        // A's release is owner-checked: B's lock stays.
        let a_release = tokio::time::timeout(Duration::from_secs(10), ga.unlock())
            .await
            .unwrap();
        assert!(!matches!(a_release, Ok(true)), "{a_release:?}");
        assert_eq!(server_view(&b, &name).await, (1, Some(gb.fencing_token())));
        assert!(gb.is_held());
        let b_end = Instant::now();
        assert!(gb.unlock().await.unwrap());

        log.record("A", a_start, a_last_held);
        log.record("B", b_start, b_end);
        log.assert_no_overlap();
        assert_eq!(store.accepted().len(), 2);
        assert_eq!(store.rejected().len(), 1);
    })
    .await;
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------
// F2: the acquisition's reply arrives after its lease
// ---------------------------------------------------------------------------------------

/// F2 on one server. The round trip of a fixed-lease acquisition takes longer than the lease
/// (the proxy delays the request and the reply). The client must not return a lock it cannot
/// trust: reliability.md asks for an error and a release, as RedLock does; the client answers
/// `Lost` and gives the grant back. Nothing is left behind. (Found by this suite: it used to
/// return `Ok` with a guard that was dead on arrival, `is_held()` false.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f02_an_acquire_answered_after_its_lease_is_not_believed_held() {
    lock_tests::init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let a = LockClient::builder(&proxy.url())
        .response_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let b = client(&server.url()).await;
    let name = unique_name("f2");
    bounded(30, async {
        proxy.delay(Duration::from_millis(150));
        let lease = Duration::from_millis(200);
        let started = Instant::now();
        let outcome = a.lock(&name).lease(lease).await;
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        tracing::info!(?outcome, ?took, "f02: acquisition answered after its lease");
        // Not a guard that is dead on arrival: an error, and the grant is given back.
        assert!(
            matches!(&outcome, Err(LockError::Lost { name: n }) if *n == name),
            "{outcome:?}"
        );
        proxy.pass();
        eventually("the late grant expired", || lock_keys(&server).is_empty()).await;
        let gb = b.lock(&name).wait(Duration::from_secs(5)).await.unwrap();
        assert!(gb.unlock().await.unwrap());
    })
    .await;
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------
// F4: client clock
// ---------------------------------------------------------------------------------------

/// F4. Validity and the watchdog's schedule use the monotonic clock only: no wall clock in
/// lock-core's sources (a wall-clock step could otherwise stretch or shrink a lease). Two
/// exceptions, which name periods and time no lease: `period.rs` names the periods of a
/// schedule by the wall clock, which is its purpose; the job runner (`scheduled/`) names them
/// by the server's `TIME`, hands them to the job as `SystemTime`s, matches cron expressions
/// with chrono, and reads the local wall clock once, as the base its monotonic clock advances
/// from (the offset to the server's clock, measured at every decision, cancels it).
#[test]
fn f04_lock_core_never_reads_the_wall_clock() {
    fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lock-core/src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(
        files.len() > 5,
        "lock-core sources not found under {root:?}"
    );
    for file in files {
        if file.ends_with("period.rs") || file.parent().is_some_and(|d| d.ends_with("scheduled")) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for forbidden in ["SystemTime", "chrono::", "Utc::now", "Local::now"] {
            assert!(
                !text.contains(forbidden),
                "{} uses {forbidden}: lock timing must use Instant only",
                file.display()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// F9: eviction
// ---------------------------------------------------------------------------------------

/// F9. Lock keys carry a TTL, so `volatile-*` eviction picks them. The server runs out of
/// memory while A holds a lock: the key is evicted, A's watchdog finds it gone and reports
/// the loss. With nothing left to evict, an acquisition fails with Redis's OOM error (a typed
/// `LockError::Redis`, not a timeout or "busy"). Once memory is back, the next holder gets a
/// larger fencing token than the evicted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f09_an_evicted_lock_is_reported_lost_and_oom_is_a_typed_error() {
    let server = RedisServer::start();
    let a = client_with_lease(&server.url(), LEASE).await;
    let b = client_with_lease(&server.url(), LEASE).await;
    let name = unique_name("f9");
    bounded(30, async {
        let ga = a.lock(&name).await.unwrap();
        assert_eq!(
            server.cmd(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]),
            "OK"
        );
        assert_eq!(server.cmd(&["CONFIG", "SET", "maxmemory", "1"]), "OK");
        let full = Instant::now();
        tokio::time::timeout(LEASE + SLACK, ga.lost())
            .await
            .expect("the evicted lock was not reported lost");
        assert!(!ga.is_held());
        assert!(full.elapsed() <= LEASE + SLACK, "{:?}", full.elapsed());
        assert!(
            server.keys("lock:{*").is_empty(),
            "the lock key was not evicted"
        );
        let err = b
            .lock(&name)
            .wait(Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LockError::Redis(e) if e.to_string().contains("OOM")),
            "{err:?}"
        );
        assert!(!err.is_timeout());
        assert_eq!(server.cmd(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
        let gb = b.lock(&name).wait(Duration::from_secs(5)).await.unwrap();
        assert!(gb.fencing_token() > ga.fencing_token());
        assert!(!matches!(ga.unlock().await, Ok(true)));
        assert!(gb.unlock().await.unwrap());
    })
    .await;
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------
// F10 / F11: connection cut mid-acquire / mid-release, at every point
// ---------------------------------------------------------------------------------------

/// Per-chunk delay of the proxy in the cut tests: a request reaches Redis after about one
/// delay, its reply the client after about two.
const HOP: Duration = Duration::from_millis(40);

/// Cut points from "request still in the proxy" to "reply on its way back".
fn cut_points() -> Vec<Duration> {
    (1..=8).map(|i| HOP * i / 4).collect()
}

/// A client with one pooled connection (and the default 30 s lease, so an orphan would
/// outlive every 5 s check).
async fn one_connection_client(url: &str) -> LockClient {
    LockClient::builder(url).pool_size(1).build().await.unwrap()
}

/// Runs `op` on `c` and cuts every proxied connection `cut` after it started: exactly one
/// fault. First a harmless command repairs the connection if an earlier cut broke it after
/// its command had already been answered (otherwise `op` would meet two faults: the stale
/// connection and the cut; `f11_a_failed_inner_release_…` covers two faults).
async fn cut_during<T>(
    c: &LockClient,
    proxy: &FaultProxy,
    cut: Duration,
    op: impl IntoFuture<Output = T>,
) -> T {
    c.mutex("warm-up").info().await.unwrap();
    let (out, ()) = tokio::join!(op, async {
        tokio::time::sleep(cut).await;
        proxy.reset_all();
    });
    out
}

/// F10, fuzzed over the cut point (the existing test loses a reply only after the command
/// ran). A fresh acquisition and a re-entry are cut at eight points between "request not
/// forwarded yet" and "reply on its way". Each ends either held with the right count (the
/// retry was recognised) or failed with nothing applied: never an orphan, never a count
/// bumped twice. The default 30 s lease makes an orphan visible to the 5 s checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f10_an_acquire_cut_at_any_point_is_held_once_or_not_at_all() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let c = one_connection_client(&proxy.url()).await;
    let observer = client(&server.url()).await;
    let name = unique_name("f10");
    let (mut held, mut failed) = (0, 0);
    bounded(60, async {
        proxy.delay(HOP);
        for cut in cut_points() {
            // A fresh acquisition.
            match cut_during(&c, &proxy, cut, c.lock(&name).wait(Duration::from_secs(5))).await {
                Ok(g) => {
                    held += 1;
                    assert_eq!(
                        server_view_of(&c, &observer, &name).await,
                        (1, Some(g.fencing_token())),
                        "cut at {cut:?}"
                    );
                    assert!(g.unlock().await.unwrap());
                }
                Err(e) => {
                    failed += 1;
                    assert!(
                        is_bounded_failure(&e) || matches!(e, LockError::Redis(_)),
                        "{e:?}"
                    );
                }
            }
            eventually("no orphan after a cut acquisition", || {
                lock_keys(&server).is_empty()
            })
            .await;

            // A re-entry of a held lock.
            let g1 = c.lock(&name).await.unwrap();
            let token = Some(g1.fencing_token());
            match cut_during(&c, &proxy, cut, g1.reenter()).await {
                Ok(g2) => {
                    held += 1;
                    assert_eq!(g2.fencing_token(), g1.fencing_token());
                    assert_eq!(
                        server_view_of(&c, &observer, &name).await,
                        (2, token),
                        "cut at {cut:?}"
                    );
                    assert!(g2.unlock().await.unwrap());
                }
                Err(e) => {
                    failed += 1;
                    assert!(
                        is_bounded_failure(&e) || matches!(e, LockError::Redis(_)),
                        "{e:?}"
                    );
                }
            }
            // Whatever happened, exactly the first hold is left.
            let mut count = 0;
            for _ in 0..100 {
                count = server_view_of(&c, &observer, &name).await.0;
                if count == 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(
                count, 1,
                "cut at {cut:?}: the re-entry was applied twice or lost"
            );
            assert!(g1.is_held());
            assert!(g1.unlock().await.unwrap());
            assert_eq!(server_view_of(&c, &observer, &name).await, (0, None));
        }
    })
    .await;
    assert!(held > 0, "no cut acquisition succeeded ({failed} failed)");
    tracing::info!("f10: {held} cut acquisitions held, {failed} failed cleanly");
    proxy.pass();
    assert_clean(&server).await;
}

/// F11, fuzzed over the cut point, for a re-entered lock: the inner release cut at eight
/// points must take the count from 2 to 1 exactly (not 0), and the outer one, cut the same
/// way, must free the lock (its retry recognised by the recorded release token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f11_a_release_of_a_reentered_lock_cut_at_any_point_is_applied_once() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let c = one_connection_client(&proxy.url()).await;
    let observer = client(&server.url()).await;
    let name = unique_name("f11");
    bounded(60, async {
        proxy.delay(HOP);
        for cut in cut_points() {
            let outer = c.lock(&name).await.unwrap();
            let inner = outer.reenter().await.unwrap();
            assert_eq!(server_view_of(&c, &observer, &name).await.0, 2);
            let released = cut_during(&c, &proxy, cut, inner.unlock()).await;
            assert!(matches!(released, Ok(true)), "cut at {cut:?}: {released:?}");
            assert_eq!(
                server_view_of(&c, &observer, &name).await,
                (1, Some(outer.fencing_token())),
                "cut at {cut:?}: the inner release was applied twice or not at all"
            );
            assert!(outer.is_held());
            let released = cut_during(&c, &proxy, cut, outer.unlock()).await;
            assert!(matches!(released, Ok(true)), "cut at {cut:?}: {released:?}");
            assert_eq!(server_view_of(&c, &observer, &name).await, (0, None));
        }
    })
    .await;
    proxy.pass();
    assert_clean(&server).await;
}

/// F11 with two faults. The inner release of a re-entered lock fails: its request is lost
/// and so is the one retry (the connection is black-holed), so the server still counts two
/// holds. The failed release is retried in the background (holding the owner's operation
/// lock), so once the link is back the outer `unlock()` frees the lock. (Found by this suite:
/// the outer unlock used to answer `Ok(true)` and leave the lock held, unrenewed, for a whole
/// lease.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f11_a_failed_inner_release_is_retried_so_the_outer_unlock_frees_the_lock() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let c = LockClient::builder(&proxy.url())
        .pool_size(1)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let observer = client(&server.url()).await;
    let name = unique_name("f11-twice");
    bounded(30, async {
        let outer = c.lock(&name).await.unwrap();
        let inner = outer.reenter().await.unwrap();
        proxy.blackhole();
        let failed = inner.unlock().await;
        assert!(failed.is_err(), "{failed:?}");
        proxy.pass();
        // The lost request never reached Redis; the background retry may have by now.
        let count = server_view_of(&c, &observer, &name).await.0;
        assert!((1..=2).contains(&count), "count {count}");
        // The outer release waits for the retried one, then frees the lock.
        assert!(outer.unlock().await.unwrap());
        let info = observer.mutex(&name).info().await.unwrap();
        assert!(
            !info.held,
            "unlock() said released, but the lock is held with count {} for another {:?}",
            info.hold_count, info.ttl
        );
    })
    .await;
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------
// F12: connection trouble mid-renew
// ---------------------------------------------------------------------------------------

/// F12. A renewal whose reply is lost (the connection closes after Redis applied it) is
/// retried and the repeat is harmless: three times in a row the lock stays ours, with one
/// hold and the same token, and the watchdog goes on renewing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f12_a_renewal_whose_reply_is_lost_keeps_the_lock() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let a = client_with_lease(&proxy.url(), LEASE).await;
    let observer = client(&server.url()).await;
    let name = unique_name("f12");
    bounded(30, async {
        let g = a.lock(&name).await.unwrap();
        let lost = g.lost();
        tokio::pin!(lost);
        // Only the watchdog talks on this client now, so the next reply is a renewal's.
        for n in 1..=3 {
            server.cmd(&["CONFIG", "RESETSTAT"]);
            proxy.drop_next_reply();
            eventually("a renewal reply was dropped", || {
                proxy.dropped_replies() == n
            })
            .await;
            // The retry (or the next period's renewal) is applied.
            eventually("renewed after the lost reply", || renewals(&server) >= 2).await;
            assert!(g.is_held());
            assert_eq!(
                server_view_of(&a, &observer, &name).await,
                (1, Some(g.fencing_token()))
            );
        }
        // Two more leases: still ours, never reported lost.
        let until = Instant::now() + LEASE * 2;
        while Instant::now() < until {
            tokio::select! {
                () = &mut lost => panic!("lost after renewals with lost replies"),
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
            assert!(g.is_held());
        }
        assert!(g.unlock().await.unwrap());
    })
    .await;
    assert_clean(&server).await;
}

/// F12. Renewals reach Redis (and are applied there) but their replies come later than the
/// response timeout. The client cannot know they were applied, so it must not extend its
/// belief: it reports the loss within a lease of its last *confirmed* renewal. Once it has
/// given up it stops renewing, so the key expires and another client takes the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f12_renewals_answered_too_late_are_not_trusted() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    // Response timeout 500 ms.
    let a = client_with_lease(&proxy.url(), LEASE).await;
    let b = client_with_lease(&server.url(), LEASE).await;
    let name = unique_name("f12late");
    let log = IntervalLog::new();
    bounded(30, async {
        let ga = a.lock(&name).await.unwrap();
        let a_start = Instant::now();
        let a_belief = last_seen_held(ga.held_lock());
        proxy.delay(Duration::from_millis(800));
        let slowed = Instant::now();
        tokio::time::timeout(LEASE + SLACK, ga.lost())
            .await
            .expect("not reported lost within a lease of the last confirmed renewal");
        assert!(!ga.is_held());
        let a_last_held = a_belief.await.unwrap();
        assert!(a_last_held - slowed <= LEASE, "{:?}", a_last_held - slowed);
        // Late renewals may still land, but nothing renews after the loss: the key expires.
        eventually("the lost lock expired", || lock_keys(&server).is_empty()).await;
        let gb = b.lock(&name).wait(Duration::from_secs(5)).await.unwrap();
        let b_start = Instant::now();
        assert!(gb.fencing_token() > ga.fencing_token());
        let a_release = tokio::time::timeout(Duration::from_secs(10), ga.unlock())
            .await
            .unwrap();
        assert!(!matches!(a_release, Ok(true)), "{a_release:?}");
        assert_eq!(server_view(&b, &name).await.1, Some(gb.fencing_token()));
        let b_end = Instant::now();
        assert!(gb.unlock().await.unwrap());
        log.record("A", a_start, a_last_held);
        log.record("B", b_start, b_end);
        log.assert_no_overlap();
    })
    .await;
    proxy.pass();
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------
// F14 / F15: a stalled server
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Stall {
    /// `DEBUG SLEEP`: the whole server stops answering.
    DebugSleep,
    /// `CLIENT PAUSE ms ALL`: every command of every client waits.
    PauseAll,
    /// `CLIENT PAUSE ms WRITE`: writes and scripts wait, reads and PING do not.
    PauseWrite,
}

/// How long the server stalls: three leases, so the holder's lease surely runs out.
const STALL: Duration = Duration::from_secs(3);

/// The bound on one acquisition attempt while the server stalls: the attempt (response
/// timeout), the pool's repair (a PING per connection, a reconnect bounded by the connect
/// timeout) and one retry (response timeout), with slack; or the stall ends first and it
/// succeeds. Either way, never a hang.
const STALLED_ACQUIRE_BOUND: Duration = Duration::from_secs(5);

/// F14/F15. A holds a lock; the server stalls for three leases. A's renewals cannot be
/// confirmed, so A learns of the loss within its lease, while the server is still stalled.
/// B's acquisition during the stall ends within a stated bound with a typed error (or after
/// the stall with the lock). After the stall A's key has expired: B takes the lock with a
/// larger token, A's late write is refused and A never believes again that it holds it. An
/// acquisition that timed out is undone: nothing is left but B's lock.
async fn stalled_server_scenario(stall: Stall) {
    let server = RedisServer::start();
    let a = client_with_lease(&server.url(), LEASE).await;
    let b = client_with_lease(&server.url(), LEASE).await;
    let name = unique_name("stall");
    let store = FencedStore::new();
    let log = IntervalLog::new();
    bounded(40, async {
        let ga = a.lock(&name).await.unwrap();
        let a_start = Instant::now();
        store.write(ga.fencing_token(), "a").unwrap();
        let a_belief = last_seen_held(ga.held_lock());

        // `stall_over` resolves when the server takes writes again.
        let ms = STALL.as_millis().to_string();
        let stall_over = match stall {
            Stall::DebugSleep => {
                let secs = STALL.as_secs().to_string();
                let sleeper = send_blocking(server.addr(), &["DEBUG", "SLEEP", &secs]);
                // Wait until it has started: the server stops answering.
                while answers(server.addr(), Duration::from_millis(150)).await {}
                sleeper
            }
            Stall::PauseAll | Stall::PauseWrite => {
                let mode = if matches!(stall, Stall::PauseAll) {
                    "ALL"
                } else {
                    "WRITE"
                };
                assert_eq!(server.cmd(&["CLIENT", "PAUSE", &ms, mode]), "OK");
                // A write sent now is answered when the pause ends.
                send_blocking(server.addr(), &["SET", "stall-probe", "1"])
            }
        };
        let stalled = Instant::now();

        // B tries during the stall.
        let tried = Instant::now();
        let attempt = tokio::time::timeout(
            STALLED_ACQUIRE_BOUND * 2,
            b.lock(&name).wait(Duration::from_millis(300)),
        )
        .await
        .expect("an acquisition hung while the server stalled");
        let took = tried.elapsed();
        assert!(
            took <= STALLED_ACQUIRE_BOUND,
            "{stall:?}: the attempt took {took:?}: {attempt:?}"
        );
        let early = match attempt {
            Ok(g) => {
                // Only possible once the stall is over and A's key has expired.
                assert!(stalled.elapsed() >= STALL - SLACK, "{stall:?}: {g:?}");
                Some(g)
            }
            Err(e) => {
                assert!(is_bounded_failure(&e), "{stall:?}: {e:?}");
                None
            }
        };
        tracing::info!(
            "{stall:?}: acquisition during the stall took {took:?}, got the lock: {}",
            early.is_some()
        );

        // A learns within its lease, before the stall ends.
        tokio::time::timeout(LEASE + SLACK, ga.lost())
            .await
            .unwrap_or_else(|_| panic!("{stall:?}: A was not told it lost the lock"));
        let a_last_held = a_belief.await.unwrap();
        assert!(
            a_last_held < stalled + LEASE,
            "{stall:?}: A believed it held {:?} into the stall",
            a_last_held - stalled
        );

        assert_eq!(stall_over.await.unwrap(), Reply::Status("OK".into()));
        assert!(stalled.elapsed() >= STALL - SLACK);
        // After the stall B gets the lock (an orphan of its timed-out attempt, if the undo
        // ran before the late attempt, lasts one lease at most).
        let gb = match early {
            Some(g) => g,
            None => b.lock(&name).wait(Duration::from_secs(10)).await.unwrap(),
        };
        let b_start = Instant::now();
        assert!(gb.fencing_token() > ga.fencing_token());
        store.write(gb.fencing_token(), "b").unwrap();
        // A never comes back to believing it holds the lock, and its late write is refused.
        assert!(!ga.is_held());
        assert!(store.write(ga.fencing_token(), "a, late").is_err());
        let a_release = tokio::time::timeout(Duration::from_secs(10), ga.unlock())
            .await
            .unwrap();
        assert!(!matches!(a_release, Ok(true)), "{stall:?}: {a_release:?}");
        assert_eq!(server_view(&b, &name).await, (1, Some(gb.fencing_token())));
        let b_end = Instant::now();
        assert!(gb.unlock().await.unwrap());
        log.record("A", a_start, a_last_held);
        log.record("B", b_start, b_end);
        log.assert_no_overlap();
        assert_eq!(store.rejected().len(), 1);
    })
    .await;
    assert_clean(&server).await;
}

/// F14: `DEBUG SLEEP` for three leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f14_a_server_in_debug_sleep_bounds_acquisitions_and_the_holder_learns() {
    stalled_server_scenario(Stall::DebugSleep).await;
}

/// F15: `CLIENT PAUSE … ALL` for three leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f15_client_pause_all_bounds_acquisitions_and_the_holder_learns() {
    stalled_server_scenario(Stall::PauseAll).await;
}

/// F15: `CLIENT PAUSE … WRITE` for three leases (scripts wait; PING does not, so the pool's
/// repair finds its connections healthy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f15_client_pause_write_bounds_acquisitions_and_the_holder_learns() {
    stalled_server_scenario(Stall::PauseWrite).await;
}

// ---------------------------------------------------------------------------------------
// F16: script cache flushed under load
// ---------------------------------------------------------------------------------------

/// True for the error a script call returns when the cache was flushed again between the
/// client's `SCRIPT LOAD` and its retried `EVALSHA` (it retries once, as F16 asks).
/// The code went missing again between its reload and the retry (a second flush).
fn is_noscript(e: &LockError) -> bool {
    matches!(e, LockError::Redis(r) if r.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        || r.to_string().contains("Function not found"))
}

/// F16 under load (`mutex.rs::script_flush_is_survived` flushes between single operations):
/// `SCRIPT FLUSH` and `FUNCTION FLUSH` every 3 ms while eight tasks on two clients take the
/// lock and increment a non-atomic counter. The code is loaded again when it is missing
/// (NOSCRIPT, "Function not found"); no update is lost and no two critical sections overlap.
/// (An operation whose retry is hit by a second flush fails with a typed error: it is counted
/// and retried by the test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f16_script_flushes_under_load_keep_exclusion() {
    let server = RedisServer::start();
    let clients = [
        scripted_client(&server.url()).await,
        scripted_client(&server.url()).await,
    ];
    let name = unique_name("f16");
    let counter = Arc::new(
        UnsafeCounter::in_redis(&server.url(), "f16-counter")
            .await
            .with_gap(Duration::from_millis(1)),
    );
    let log = Arc::new(IntervalLog::new());
    let noscript = Arc::new(AtomicU64::new(0));
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let stop = Arc::new(tokio::sync::Notify::new());
    let flusher = tokio::spawn({
        let url = server.url();
        let stop = stop.clone();
        async move {
            let mut conn = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let mut flushes = 0u64;
            loop {
                for what in ["SCRIPT", "FUNCTION"] {
                    let () = redis::cmd(what)
                        .arg("FLUSH")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                }
                flushes += 1;
                tokio::select! {
                    () = stop.notified() => return flushes,
                    () = tokio::time::sleep(Duration::from_millis(3)) => {}
                }
            }
        }
    });
    bounded(60, async {
        let mut tasks = Vec::new();
        for t in 0..8 {
            let (c, name) = (clients[t % 2].clone(), name.clone());
            let (counter, log) = (counter.clone(), log.clone());
            let noscript = noscript.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = 0;
                while done < 10 {
                    let g = match c.lock(&name).wait(Duration::from_secs(20)).await {
                        Ok(g) => g,
                        Err(e) if is_noscript(&e) => {
                            noscript.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        Err(e) => panic!("{e:?}"),
                    };
                    let start = Instant::now();
                    counter.increment().await;
                    log.record(format!("task {t}"), start, Instant::now());
                    done += 1;
                    match g.unlock().await {
                        Ok(held) => assert!(held),
                        // Not released: the lease (one second) expires it.
                        Err(e) if is_noscript(&e) => {
                            noscript.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("{e:?}"),
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    stop.notify_one();
    let flushes = flusher.await.unwrap();
    assert!(flushes > 10, "only {flushes} flushes");
    // The fallback really ran: the code was loaded again after flushes.
    let reloads = command_calls(&server, "script|load") + command_calls(&server, "function|load");
    let noscript = noscript.load(Ordering::Relaxed);
    tracing::info!(
        "f16: {flushes} flushes, {reloads} reloads, {noscript} operations hit a second NOSCRIPT"
    );
    assert!(reloads > 0);
    counter.assert_consistent().await;
    assert_eq!(counter.expected(), 80);
    log.assert_no_overlap();
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------
// F18: a release message that never arrives
// ---------------------------------------------------------------------------------------

/// F18. The waiter's pub/sub link goes silent (black-holed, not closed: the client cannot
/// tell) and the holder's release message is lost on it. The waiter does not rely on the
/// message alone: it looks again when the holder's lease (as last seen) runs out, so it gets
/// the lock within about one watchdog lease of the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f18_a_release_message_lost_on_a_silent_pubsub_link_costs_at_most_a_lease() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let a = client_with_lease(&server.url(), LEASE).await;
    // Commands go straight to Redis; only the pub/sub connection (made from the URL) goes
    // through the proxy.
    let pool = bb8_redis::bb8::Pool::builder()
        .max_size(4)
        .build(bb8_redis::RedisConnectionManager::new(server.url()).unwrap())
        .await
        .unwrap();
    let b = LockClient::builder(&proxy.url())
        .pool(pool)
        .watchdog_lease(LEASE)
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let name = unique_name("f18");
    let log = IntervalLog::new();
    bounded(30, async {
        let ga = a.lock(&name).await.unwrap();
        let a_start = Instant::now();
        server.cmd(&["CONFIG", "RESETSTAT"]);
        let waiter = tokio::spawn({
            let (b, name) = (b.clone(), name.clone());
            async move {
                let g = b.lock(&name).wait(Duration::from_secs(20)).await;
                (g, Instant::now())
            }
        });
        // The waiter's second try (a busy acquisition is the only script calling PTTL) comes
        // after its subscription was confirmed: only then may the link go silent (earlier,
        // the confirmation itself would be lost and the waiter would poll instead).
        eventually("the waiter subscribed and tried again", || {
            command_calls(&server, "pttl") >= 2
        })
        .await;
        let channel = format!("lock:{{{name}}}:released");
        assert!(server.pubsub_channels().contains(&channel));
        proxy.blackhole();
        server.cmd(&["CONFIG", "RESETSTAT"]);
        let a_token = ga.fencing_token();
        let a_end = Instant::now();
        assert!(ga.unlock().await.unwrap());
        let released = Instant::now();
        // The release was published (by the release script), and went nowhere.
        assert!(command_calls(&server, "publish") >= 1);
        let (gb, b_start) = waiter.await.unwrap();
        let gb = gb.unwrap();
        let waited = b_start - released;
        assert!(
            waited <= LEASE + SLACK,
            "the waiter took {waited:?} after a release it did not hear"
        );
        assert!(gb.fencing_token() > a_token);
        proxy.pass();
        let b_end = Instant::now();
        assert!(gb.unlock().await.unwrap());
        log.record("A", a_start, a_end);
        log.record("B", b_start, b_end);
        log.assert_no_overlap();
    })
    .await;
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------
// F20 / F21: the watchdog and a lost hold
// ---------------------------------------------------------------------------------------

/// F20/F21. Once the watchdog finds the lock gone it reports it (lost(), is_held() false) and
/// stops renewing it, although the guard is still alive: no renewal reaches Redis over three
/// more leases, and nothing can resurrect the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f21_the_watchdog_stops_renewing_a_lost_hold_while_its_guard_lives() {
    let server = RedisServer::start();
    let short = Duration::from_millis(300);
    let a = client_with_lease(&server.url(), short).await;
    let name = unique_name("f21");
    bounded(30, async {
        let g = a.lock(&name).await.unwrap();
        server.cmd(&["CONFIG", "RESETSTAT"]);
        eventually("renewing", || renewals(&server) >= 1).await;
        assert_eq!(server.cmd(&["DEL", &format!("lock:{{{name}}}")]), "1");
        tokio::time::timeout(short * 3, g.lost()).await.unwrap();
        assert!(!g.is_held());
        // Three leases with the guard alive: the watchdog sends nothing for it.
        server.cmd(&["CONFIG", "RESETSTAT"]);
        tokio::time::sleep(short * 3).await;
        assert_eq!(lua_calls(&server) + renewals(&server), 0);
        assert!(!g.is_held());
        assert!(matches!(g.extend(short).await, Err(LockError::Lost { .. })));
        assert!(!g.unlock().await.unwrap());
    })
    .await;
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------
// F22 / F23: random cancellation, panics and aborts
// ---------------------------------------------------------------------------------------

/// How a critical section ends in the randomized run.
#[derive(Debug, Clone, Copy)]
enum Exit {
    Unlock,
    Drop,
    Panic,
    Abort,
}

/// The message of the deliberate panics of the randomized run.
const DELIBERATE: &str = "deliberate panic inside the critical section (F23)";

/// Keeps the deliberate panics out of the output (with `RUST_BACKTRACE=1` each would also
/// resolve a backtrace, slowing every test of the binary); any other panic is reported as
/// usual.
fn quiet_deliberate_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&DELIBERATE) {
                previous(info);
            }
        }));
    });
}

async fn leave(guard: LockGuard, exit: Exit) {
    match exit {
        Exit::Unlock => assert!(guard.unlock().await.unwrap()),
        Exit::Drop => drop(guard),
        Exit::Panic => {
            let task = tokio::spawn(async move {
                let _guard = guard;
                std::panic::panic_any(DELIBERATE);
            });
            assert!(task.await.unwrap_err().is_panic());
        }
        Exit::Abort => {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let task = tokio::spawn(async move {
                let _guard = guard;
                let _ = tx.send(());
                std::future::pending::<()>().await;
            });
            rx.await.unwrap();
            task.abort();
            assert!(task.await.unwrap_err().is_cancelled());
        }
    }
}

/// F22/F23, randomized: 8 tasks × 50 iterations on two clients (one behind a proxy that
/// delays every chunk, so cancellations land while requests are in flight). Every acquisition
/// runs under a random 0–15 ms timeout; critical sections increment a non-atomic counter in
/// Redis and end by unlock, drop, panic or abort at random. The counter equals the number of
/// completed sections, no two sections overlap, and with a 30 s lease no lock is left behind
/// (an orphan would outlive the 5 s checks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f22_f23_random_cancellations_panics_and_aborts_keep_exclusion() {
    quiet_deliberate_panics();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    proxy.delay(Duration::from_micros(300));
    let clients = [client(&proxy.url()).await, client(&server.url()).await];
    let name = unique_name("f22");
    let counter = Arc::new(UnsafeCounter::in_redis(&server.url(), "f22-counter").await);
    let log = Arc::new(IntervalLog::new());
    let cancelled = Arc::new(AtomicU64::new(0));
    bounded(120, async {
        let mut tasks = Vec::new();
        for t in 0..8usize {
            let (c, name) = (clients[t % 2].clone(), name.clone());
            let (counter, log, cancelled) = (counter.clone(), log.clone(), cancelled.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    let (budget, exit) = {
                        let mut rng = rand::rng();
                        let exit = match rng.random_range(0..8) {
                            0 => Exit::Panic,
                            1 => Exit::Abort,
                            2 | 3 => Exit::Drop,
                            _ => Exit::Unlock,
                        };
                        (Duration::from_micros(rng.random_range(0..15_000)), exit)
                    };
                    let Ok(acquired) = tokio::time::timeout(budget, c.lock(&name)).await else {
                        cancelled.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let guard = acquired.unwrap();
                    let start = Instant::now();
                    counter.increment().await;
                    log.record(format!("task {t}"), start, Instant::now());
                    leave(guard, exit).await;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    let (done, cancelled) = (counter.expected(), cancelled.load(Ordering::Relaxed));
    tracing::info!("f22/f23: {done} critical sections, {cancelled} cancelled acquisitions");
    assert_eq!(done + cancelled, 400);
    assert!(done >= 20, "too few sections ran ({done}) to show anything");
    assert!(cancelled >= 20, "too few cancellations ({cancelled})");
    counter.assert_consistent().await;
    log.assert_no_overlap();
    eventually("no lock left behind", || lock_keys(&server).is_empty()).await;
    // The name is free for anyone at once: no orphan holds it for a lease.
    proxy.pass();
    let g = clients[0]
        .lock(&name)
        .wait(Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(server_view(&clients[1], &name).await.0, 1);
    assert!(g.unlock().await.unwrap());
    assert_clean(&server).await;
}
