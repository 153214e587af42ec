//! The mutex protocols against the test server: which one a client speaks follows what the
//! server has, and the native one (Valkey 9.0 or later: `SET … IFEQ`, `DELIFEQ`) and the
//! hybrid one (Redis 7.0 or later: the same with those two as small scripts) keep every
//! promise the scripted one does, with their own key layout: a held lock is its owner id with
//! the lease as TTL, a free one has no key, tokens come from one never-expiring counter per
//! slot. The tests of that layout run on whichever of the two the server gets; the tests of
//! the native commands themselves need Valkey 9 (`REDIS_SERVER_BIN=.../valkey-server`, see
//! `scripts/ensure-valkey.sh`), and on another server print why they are skipped.

use std::io::Write;
use std::time::Duration;

use lock_core::fenced::Fenced;
use lock_core::{LockClient, LockError, MutexProtocol};
use lock_tests::RedisServer;
use lock_tests::fixtures::{
    assert_clean, client, client_with_lease, command_calls, eventually, expected_protocol,
    native_server, renewed,
};

/// True (and says so) when the test server cannot run a native test.
fn skip_without_native(server: &RedisServer, test: &str) -> bool {
    if native_server(server) {
        return false;
    }
    // Written to the stream itself: the test harness does not capture it, so it is loud.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: the test server has no DELIFEQ (the native mutex protocol needs Valkey \
         9.0 or later; run with REDIS_SERVER_BIN set to scripts/ensure-valkey.sh's valkey-server)"
    );
    true
}

/// True (and says so) when the test server cannot run the native acquisition (`SET … NX
/// GET`: Redis 7.0 or later): every test of the protocols' shared format runs on the native
/// protocol (Valkey 9) or on the hybrid one (Redis 7), whichever the server gets.
fn skip_without_native_acquisition(server: &RedisServer, test: &str) -> bool {
    let reply = server.cmd(&["COMMAND", "INFO", "SINTERCARD"]);
    if !reply.is_empty() && reply != "(nil)" {
        return false;
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: the test server has no SET … NX GET (Redis 7.0 or later)"
    );
    true
}

/// The command a last release is counted by: `DELIFEQ` on the native protocol, on the hybrid
/// one the `DEL` its compare-and-delete script makes (commands a script runs are counted too).
fn release_command(server: &RedisServer) -> &'static str {
    if native_server(server) {
        "delifeq"
    } else {
        "del"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protocol_follows_what_the_server_has() {
    let server = RedisServer::start();
    let auto = client(&server.url()).await;
    let caps = auto.server_capabilities().clone();
    let native = native_server(&server);
    assert_eq!(caps.native_compare, native, "{caps}");
    assert_eq!(caps.mutex_protocol, expected_protocol(native), "{caps}");
    assert!(caps.scripting && caps.wait && caps.sharded_pubsub, "{caps}");
    // Asked for explicitly: scripts always work where there is Lua; native only where the
    // commands are.
    let scripted = LockClient::builder(&server.url())
        .mutex_protocol(MutexProtocol::Scripted)
        .build()
        .await
        .unwrap();
    assert_eq!(
        scripted.server_capabilities().mutex_protocol,
        MutexProtocol::Scripted
    );
    // The hybrid protocol wherever `SET … NX GET` is (every test server: Redis 7, Valkey 9).
    let hybrid = LockClient::builder(&server.url())
        .mutex_protocol(MutexProtocol::Hybrid)
        .build()
        .await
        .unwrap();
    assert_eq!(
        hybrid.server_capabilities().mutex_protocol,
        MutexProtocol::Hybrid
    );
    let asked = LockClient::builder(&server.url())
        .mutex_protocol(MutexProtocol::Native)
        .build()
        .await;
    match asked {
        Ok(c) => {
            assert!(native);
            assert_eq!(
                c.server_capabilities().mutex_protocol,
                MutexProtocol::Native
            );
        }
        Err(e) => {
            assert!(!native, "{e}");
            assert!(matches!(e, LockError::Unsupported { .. }), "{e:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_lock_is_its_owner_while_held_and_gone_when_free() {
    let server = RedisServer::start();
    if skip_without_native_acquisition(
        &server,
        "a_native_lock_is_its_owner_while_held_and_gone_when_free",
    ) {
        return;
    }
    let c = client(&server.url()).await;
    let guard = c.lock("plain").await.unwrap();
    let owner = server.cmd(&["GET", "lock:{plain}"]);
    assert!(
        owner.starts_with(c.client_id()) && !owner.contains('|'),
        "{owner}"
    );
    let ttl: i64 = server.cmd(&["PTTL", "lock:{plain}"]).parse().unwrap();
    assert!(ttl > 20_000 && ttl <= 30_000, "the watchdog lease: {ttl}");
    let info = c.mutex("plain").info().await.unwrap();
    assert!(info.held && info.owner.as_deref() == Some(owner.as_str()));
    assert_eq!(
        info.fencing_token,
        Some(guard.fencing_token()),
        "its holder knows it"
    );
    assert_eq!(info.fencing_token_at_most, Some(guard.fencing_token()));
    let other = client(&server.url()).await;
    let elsewhere = other.mutex("plain").info().await.unwrap();
    assert_eq!((elsewhere.hold_count, elsewhere.fencing_token), (1, None));
    // Another client sees a bound: the counter, at or above the holder's token, and it
    // stays a bound while busy attempts draw tokens of their own.
    assert_eq!(elsewhere.fencing_token_at_most, Some(guard.fencing_token()));
    assert!(other.try_lock("plain").await.unwrap().is_none());
    let bound = other
        .mutex("plain")
        .info()
        .await
        .unwrap()
        .fencing_token_at_most;
    assert!(
        bound.is_some_and(|b| b > guard.fencing_token()),
        "{bound:?}"
    );
    assert!(guard.unlock().await.unwrap());
    let free = other.mutex("plain").info().await.unwrap();
    assert_eq!((free.held, free.fencing_token_at_most), (false, None));
    assert_eq!(
        server.cmd(&["EXISTS", "lock:{plain}"]),
        "0",
        "a free lock has no key"
    );
    // The fencing counter is the server's one, with no time to live.
    assert_eq!(server.cmd(&["PTTL", "lock:fence"]), "-1");
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_tokens_increase_across_release_expiry_force_unlock_and_a_lost_counter() {
    let server = RedisServer::start();
    let test = "native_tokens_increase_across_release_expiry_force_unlock_and_a_lost_counter";
    if skip_without_native_acquisition(&server, test) {
        return;
    }
    let (a, b) = (client(&server.url()).await, client(&server.url()).await);
    let mut last = 0;
    let mut next = |token: u64, what: &str| {
        assert!(token > last, "{what}: {token} after {last}");
        last = token;
    };
    // Released.
    let g = a.lock("t").await.unwrap();
    next(g.fencing_token(), "first");
    assert!(g.unlock().await.unwrap());
    // Expired.
    let g = b.lock("t").lease(Duration::from_millis(50)).await.unwrap();
    next(g.fencing_token(), "after a release");
    let g2 = a.lock("t").wait(Duration::from_secs(5)).await.unwrap();
    next(g2.fencing_token(), "after an expiry");
    drop(g);
    // Force-unlocked.
    assert!(b.mutex("t").force_unlock().await.unwrap());
    let g3 = b.lock("t").wait(Duration::from_secs(5)).await.unwrap();
    next(g3.fencing_token(), "after a force-unlock");
    assert!(
        !g2.unlock().await.unwrap(),
        "the forced holder's release finds it gone"
    );
    assert!(g3.unlock().await.unwrap());
    // The counter itself lost (a flush, a failover to a server without it): seeded again from
    // the clock, above every token so far.
    assert_eq!(server.cmd(&["DEL", "lock:fence"]), "1");
    let g4 = a.lock("t").await.unwrap();
    next(g4.fencing_token(), "after the counter was lost");
    assert!(g4.unlock().await.unwrap());
    assert_clean(&server).await;
}

/// What an uncontended cycle sends, as the server counts it: the acquisition is `MULTI`,
/// `SET counter seed NX`, `INCR` of the counter, `SET … NX PX … GET`, `EXEC`, and a `PTTL`
/// (the holder's remaining lease, read when the name is busy) only where a busy answer ends
/// the request (`try_lock`, `wait(0)`): a request that waits subscribes and asks again when
/// it finds the name busy. The release is `DELIFEQ` and a `PUBLISH` (always: see DESIGN.md,
/// "No waiters flag").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_native_cycle_is_seven_commands_and_a_single_tries_eight() {
    let server = RedisServer::start();
    let test = "an_uncontended_native_cycle_is_seven_commands_and_a_single_tries_eight";
    if skip_without_native_acquisition(&server, test) {
        return;
    }
    let c = client(&server.url()).await;
    for (case, pttl) in [("lock", 0), ("try_lock", 1)] {
        server.cmd(&["CONFIG", "RESETSTAT"]);
        let g = match case {
            "lock" => c.lock("plain").await.unwrap(),
            _ => c.try_lock("plain").await.unwrap().expect("free"),
        };
        assert!(g.unlock().await.unwrap());
        let sent = [
            ("multi", 1),
            ("incr", 1),
            ("set", 2),
            ("pttl", pttl),
            ("exec", 1),
            (release_command(&server), 1),
            ("publish", 1),
        ];
        for (command, calls) in sent {
            assert_eq!(command_calls(&server, command), calls, "{case}: {command}");
        }
    }
    assert_clean(&server).await;
}

/// Concurrent acquisitions, re-entries and releases of one client go out in batches (see
/// `wire::native::Call::batch`): 64 tasks on names of their own, and 8 on one shared name,
/// each 25 cycles. Every cycle is applied (one `DELIFEQ` each), far fewer transactions than
/// acquisitions reach the server, and the batches keep every promise: one holder of the
/// shared name at a time, its tokens increasing, a re-entry inside a batch keeping the
/// holder's token, nothing left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_native_calls_go_out_in_batches_and_keep_every_promise() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let server = RedisServer::start();
    let test = "concurrent_native_calls_go_out_in_batches_and_keep_every_promise";
    if skip_without_native_acquisition(&server, test) {
        return;
    }
    let c = client(&server.url()).await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    const CYCLES: usize = 25;
    let inside = Arc::new(AtomicUsize::new(0));
    let last_token = Arc::new(std::sync::Mutex::new(0u64));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..72 {
        let (c, inside, last_token) = (c.clone(), inside.clone(), last_token.clone());
        tasks.spawn(lock_core::reentrant(async move {
            let shared = i >= 64;
            let name = if shared {
                "shared".to_owned()
            } else {
                format!("own:{i}")
            };
            for _ in 0..CYCLES {
                let g = c.lock(&name).await.unwrap();
                if shared {
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    let mut last = last_token.lock().unwrap();
                    assert!(g.fencing_token() > *last, "token went back");
                    *last = g.fencing_token();
                    drop(last);
                    inside.fetch_sub(1, Ordering::SeqCst);
                } else {
                    // A re-entry, sent while other tasks' calls queue: same token.
                    let again = c.lock(&name).await.unwrap();
                    assert_eq!(again.hold_count(), 2);
                    assert_eq!(again.fencing_token(), g.fencing_token());
                    assert!(again.unlock().await.unwrap());
                }
                assert!(g.unlock().await.unwrap());
            }
        }));
    }
    let deadline = Duration::from_secs(60);
    tokio::time::timeout(deadline, async {
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    })
    .await
    .expect("the cycles finished within 60 s");
    let acquisitions = 72 * CYCLES as u64;
    assert_eq!(
        command_calls(&server, release_command(&server)),
        acquisitions
    );
    let transactions = command_calls(&server, "exec");
    assert!(
        transactions >= 1 && transactions < acquisitions / 2,
        "{transactions} transactions for {acquisitions} fresh acquisitions: not batched"
    );
    if !native_server(&server) {
        // The hybrid protocol's scripts: one per re-entry and one per earlier hold's release
        // (64 tasks, each cycle), and the last releases' deletes, batched into one script
        // per batch.
        let reentries = 2 * 64 * CYCLES as u64;
        let evals = command_calls(&server, "eval");
        assert!(
            evals > reentries && evals < reentries + acquisitions / 2,
            "{evals} scripts for {reentries} re-entries and their releases and \
             {acquisitions} last releases: the last releases' scripts not batched"
        );
    }
    assert_clean(&server).await;
}

/// A waiter is woken by the release, with the holder on another client and on the waiter's
/// own client. The holder's lease (60 s) outlasts the wait (20 s): a waiter that missed the
/// release would look again only when that lease ran out, and time out instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_release_wakes_its_waiter_long_before_the_lease_would() {
    let server = RedisServer::start();
    let test = "a_native_release_wakes_its_waiter_long_before_the_lease_would";
    if skip_without_native_acquisition(&server, test) {
        return;
    }
    let holder = client(&server.url()).await;
    let elsewhere = client(&server.url()).await;
    for (case, waiter) in [("another client", &elsewhere), ("the same client", &holder)] {
        let guard = holder
            .lock("w")
            .lease(Duration::from_secs(60))
            .await
            .unwrap();
        server.cmd(&["CONFIG", "RESETSTAT"]);
        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            async move {
                let guard = waiter.lock("w").wait(Duration::from_secs(20)).await;
                (guard, tokio::time::Instant::now())
            }
        });
        // The waiter listens on the release channel and has found the lock busy: it sleeps
        // until a message or the holder's lease runs out.
        eventually("the waiter listens and found the lock busy", || {
            let listeners = server.query(&["PUBSUB", "NUMSUB", "lock:{w}:released"]);
            let count = listeners
                .into_strings()
                .get(1)
                .and_then(|n| n.parse::<u32>().ok());
            let listening = count.is_some_and(|n| n >= 1);
            listening && command_calls(&server, "exec") >= 1
        })
        .await;
        let released = tokio::time::Instant::now();
        assert!(guard.unlock().await.unwrap());
        let (taken, at) = waiting.await.unwrap();
        let taken = taken.unwrap_or_else(|e| panic!("{case}: the wake-up was lost: {e}"));
        assert!(
            at - released < Duration::from_secs(5),
            "{case}: woken {:?} after the release",
            at - released
        );
        assert!(taken.unlock().await.unwrap());
    }
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lock_string_of_the_scripts_does_not_block_a_native_acquisition() {
    let server = RedisServer::start();
    let test = "a_free_lock_string_of_the_scripts_does_not_block_a_native_acquisition";
    if skip_without_native_acquisition(&server, test) {
        return;
    }
    // What a scripted client leaves for an hour after a release: the fencing counter.
    let old = "|0|1700000000000000|1700000000000000|";
    server.cmd(&["SET", "lock:{migrated}", old, "PX", "3600000"]);
    let c = client(&server.url()).await;
    let g = c
        .try_lock("migrated")
        .await
        .unwrap()
        .expect("taken at once");
    assert!(g.fencing_token() > 1_700_000_000_000_000);
    // A held lock string of the scripts is someone's lock: busy, untouched.
    let held = "someone:1|1|1700000000000001||";
    server.cmd(&["SET", "lock:{theirs}", held, "PX", "3600000"]);
    assert!(c.try_lock("theirs").await.unwrap().is_none());
    assert_eq!(server.cmd(&["GET", "lock:{theirs}"]), held);
    assert!(g.unlock().await.unwrap());
    server.cmd(&["DEL", "lock:{theirs}"]);
    assert_clean(&server).await;
}

/// While a name of `{m1, m2, m3}` is held by another client, a multi-lock trying for all
/// three never takes the free ones, not even for a moment: the server's keyspace
/// notifications report every write to a lock key, and none comes for `m1` or `m3` during
/// twenty tries and a wait, until the busy name is released and the multi-lock takes all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_multi_lock_holds_none_of_its_names_while_one_is_busy() {
    use futures_util::StreamExt;
    let server = RedisServer::start();
    let test = "a_native_multi_lock_holds_none_of_its_names_while_one_is_busy";
    if skip_without_native_acquisition(&server, test) {
        return;
    }
    server.cmd(&["CONFIG", "SET", "notify-keyspace-events", "K$g"]);
    let watcher = lock_core::redis::Client::open(server.url()).unwrap();
    let mut pubsub = watcher.get_async_pubsub().await.unwrap();
    pubsub
        .psubscribe("__keyspace@0__:lock:{m[13]}")
        .await
        .unwrap();
    let mut events = pubsub.into_on_message();
    let (a, b) = (client(&server.url()).await, client(&server.url()).await);
    let blocker = b.lock("m2").await.unwrap();
    let multi = a.multi_lock(["m1", "m2", "m3"]).atomic();
    for _ in 0..20 {
        assert!(multi.try_lock().await.unwrap().is_none());
    }
    let waiting = tokio::spawn({
        let multi = multi.clone();
        async move { multi.lock().wait(Duration::from_secs(10)).await }
    });
    let quiet = tokio::time::timeout(Duration::from_millis(300), events.next()).await;
    assert!(
        quiet.is_err(),
        "a free name was written while another was busy: {:?}",
        quiet
            .ok()
            .flatten()
            .map(|m| (m.get_channel_name().to_owned(), m.get_payload::<String>()))
    );
    assert!(blocker.unlock().await.unwrap());
    let all = waiting.await.unwrap().unwrap();
    // Now they are taken: the notifications say so.
    let taken = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
    assert!(matches!(taken, Ok(Some(_))), "{taken:?}");
    assert!(all.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_multi_lock_takes_all_or_gives_back_what_it_took() {
    let server = RedisServer::start();
    let test = "a_native_multi_lock_takes_all_or_gives_back_what_it_took";
    if skip_without_native_acquisition(&server, test) {
        return;
    }
    let (a, b) = (client(&server.url()).await, client(&server.url()).await);
    let blocker = b.lock("m2").await.unwrap();
    let multi = a.multi_lock(["m1", "m2", "m3"]).atomic();
    assert!(multi.try_lock().await.unwrap().is_none());
    for free in ["m1", "m3"] {
        assert!(
            !a.mutex(free).info().await.unwrap().held,
            "{free} given back"
        );
    }
    // A waiting multi-lock gets all three once the busy one is released.
    let waiting = tokio::spawn(async move { multi.lock().wait(Duration::from_secs(10)).await });
    tokio::task::yield_now().await;
    assert!(blocker.unlock().await.unwrap());
    let all = waiting.await.unwrap().unwrap();
    let tokens = all.fencing_tokens();
    assert_eq!(tokens.len(), 3);
    assert!(tokens.iter().all(|t| *t > 0));
    assert!(all.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripting_the_native_mutex_works_and_the_rest_says_why_not() {
    // Lua unloaded at run time: Valkey 9.1 keeps it in a module.
    let server = RedisServer::start_with(&["--enable-module-command", "local"]);
    let test = "without_scripting_the_native_mutex_works_and_the_rest_says_why_not";
    if skip_without_native(&server, test) {
        return;
    }
    assert_eq!(server.cmd(&["MODULE", "UNLOAD", "lua"]), "OK");
    let c = client(&server.url()).await;
    let caps = c.server_capabilities();
    assert!(
        !caps.scripting && caps.mutex_protocol == MutexProtocol::Native,
        "{caps}"
    );
    let g = c.lock("no-lua").await.unwrap();
    let (again, _) = tokio::join!(c.try_lock("no-lua"), tokio::task::yield_now());
    assert!(again.unwrap().is_none());
    assert!(g.unlock().await.unwrap());
    // Records are written with a compare-and-set after a read instead of their script.
    let records = c.records();
    let ttl = Duration::from_secs(60);
    let put = |value: &'static [u8], token| records.put("rec", value, token, ttl);
    assert_eq!(put(b"one", 5).await.unwrap(), Fenced::Written);
    assert_eq!(put(b"two", 3).await.unwrap(), Fenced::Refused { stored: 5 });
    assert_eq!(put(b"three", 5).await.unwrap(), Fenced::Written, "a repeat");
    let read = records.get("rec").await.unwrap().expect("the record");
    assert_eq!((read.token(), read.value()), (5, &b"three"[..]));
    for (what, result) in [
        ("fair lock", c.fair_lock("f").try_lock().await.map(drop)),
        (
            "read-write lock",
            c.read_write_lock("r").try_read().await.map(drop),
        ),
        (
            "semaphore",
            c.semaphore("s", 2).try_acquire(1).await.map(drop),
        ),
    ] {
        match result {
            Err(LockError::Unsupported {
                feature, missing, ..
            }) => {
                assert_eq!(feature, what);
                assert!(missing.contains("scripting"), "{missing}");
            }
            other => panic!("{what} without scripting: {other:?}"),
        }
    }
    // A client that needs the scripts says so at build.
    let scripted = LockClient::builder(&server.url())
        .mutex_protocol(MutexProtocol::Scripted)
        .build()
        .await;
    assert!(scripted.is_err());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_loses_delifeq_fails_the_release_typed_and_leaves_the_lock_to_expire() {
    let mut server = RedisServer::start();
    let test = "a_server_that_loses_delifeq_fails_the_release_typed_and_leaves_the_lock_to_expire";
    if skip_without_native(&server, test) {
        return;
    }
    let c = client_with_lease(&server.url(), Duration::from_secs(2)).await;
    let other = client(&server.url()).await;
    let g = c.lock("loses").lease(Duration::from_secs(2)).await.unwrap();
    // A failover to an older server, as it looks to the client: the same address, without
    // the command. The lock is in the new server's keyspace as the old one left it.
    let owner = server.cmd(&["GET", "lock:{loses}"]);
    server.restart_with(&["--rename-command", "DELIFEQ", ""]);
    server.cmd(&["SET", "lock:{loses}", &owner, "PX", "2000"]);
    match g.unlock().await {
        Err(LockError::Unsupported { missing, .. }) => assert!(missing.contains("DELIFEQ")),
        other => panic!("a release without DELIFEQ: {other:?}"),
    }
    // Not corrupted: still the owner's until its lease ends, then free.
    assert_eq!(server.cmd(&["GET", "lock:{loses}"]), owner);
    assert!(other.try_lock("loses").await.unwrap().is_none());
    let next = other
        .lock("loses")
        .wait(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(next.is_held());
    drop(next);
}

/// The hybrid protocol's renewals are the scripts' `renew` (which knows a lock that is its
/// owner id): one script call renews a client's many locks, where a compare-and-set per lock
/// (`EVAL` each, as its re-entries and releases) would be one call each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_renewals_are_one_script_call_for_many_locks() {
    let server = RedisServer::start();
    let test = "hybrid_renewals_are_one_script_call_for_many_locks";
    if skip_without_native_acquisition(&server, test) {
        return;
    }
    let c = LockClient::builder(&server.url())
        .mutex_protocol(MutexProtocol::Hybrid)
        .watchdog_lease(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let mut guards = Vec::new();
    for i in 0..50 {
        guards.push(c.lock(format!("r:{i}")).await.unwrap());
    }
    server.cmd(&["CONFIG", "RESETSTAT"]);
    renewed(&c, "r:0", Duration::from_secs(5)).await;
    renewed(&c, "r:49", Duration::from_secs(5)).await;
    assert_eq!(command_calls(&server, "eval"), 0, "a script per lock");
    let calls = command_calls(&server, "fcall") + command_calls(&server, "evalsha");
    assert!((1..50).contains(&calls), "{calls} renew calls for 50 locks");
    for g in guards {
        assert!(g.unlock().await.unwrap());
    }
    assert_clean(&server).await;
}
