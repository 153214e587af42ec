//! The in-memory backend (`lock_core::testing`), with no Redis at all, on a paused tokio
//! clock: every primitive's behaviour (expiry, watchdog renewals, `lost()`, fencing tokens,
//! fair order, readers sharing, semaphore counts, all-or-none multi-locks, `hold_at_least`,
//! leader terms), the fault hooks, bad input and leaks, and `#[distributed_lock]` and
//! lock-tower's layer on it.
//!
//! Time is tokio's paused clock: a test that waits for a lease to run out advances it at once,
//! and nothing asserts on how long something took.

use std::any::Any;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::{Extension, Router};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use lock_core::testing::MemoryServer;
use lock_core::{
    HeldLock, LockClient, LockError, LockGuard, MutexProtocol, Period, RedLock, distributed_lock,
    reentrant,
};
use lock_tower::{DistributedLockLayer, PathParam};
use tokio::task::JoinHandle;
use tower::ServiceExt;

const SECOND: Duration = Duration::from_secs(1);

/// Looks again every millisecond of tokio's (paused) clock until `check` holds, for at most
/// 100 s of it.
async fn until<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    for _ in 0..100_000 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("never happened: {what}");
}

/// A server and two clients of it: two instances of a service.
async fn two_instances() -> (MemoryServer, LockClient, LockClient) {
    let server = MemoryServer::new();
    let a = server.client().await.unwrap();
    let b = server.client().await.unwrap();
    (server, a, b)
}

/// `a` holds the mutex `name` and `b` waits for it (for at most `wait`) in a task of its own,
/// which has had a second to start waiting.
async fn held_and_awaited(
    (a, b): (&LockClient, &LockClient),
    name: &'static str,
    wait: Duration,
) -> (LockGuard, JoinHandle<Result<LockGuard, LockError>>) {
    let held = a.lock(name).await.unwrap();
    let b = b.clone();
    let waiting = tokio::spawn(async move { b.lock(name).wait(wait).await });
    tokio::time::sleep(SECOND).await;
    (held, waiting)
}

/// Every key but the mutexes' fencing counter is gone once the fence TTL (1 h) has passed.
async fn assert_clean(server: &MemoryServer) {
    tokio::time::sleep(Duration::from_secs(3601)).await;
    let mut keys = server.keys();
    keys.retain(|k| k != "lock:fence");
    assert!(keys.is_empty(), "nothing but the counter is left: {keys:?}");
}

// ---------------------------------------------------------------------------------------------
// The mutex

#[tokio::test(start_paused = true)]
async fn the_watchdog_keeps_a_lock_and_a_fixed_lease_runs_out() {
    let (_server, a, b) = two_instances().await;
    let kept = a.lock("kept").await.unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(kept.is_held(), "renewed for ten minutes of a 30 s lease");
    let info = b.mutex("kept").info().await.unwrap();
    assert!(info.held && info.ttl.is_some_and(|ttl| ttl <= Duration::from_secs(30)));
    assert!(b.try_lock("kept").await.unwrap().is_none());

    let fixed = a.try_lock("fixed").lease(SECOND).await.unwrap().unwrap();
    fixed.lost().await;
    assert!(!fixed.is_held());
    let next = b.lock("fixed").wait(SECOND).await.unwrap();
    assert!(next.fencing_token() > fixed.fencing_token());
    assert!(!fixed.unlock().await.unwrap(), "its lease had run out");
    drop((kept, next));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_woken_by_the_release_and_times_out_while_it_is_held() {
    let (_server, a, b) = two_instances().await;
    let (held, waiting) = held_and_awaited((&a, &b), "order:1", Duration::from_secs(60)).await;
    let timed_out = b.lock("order:1").wait(Duration::from_secs(5)).await;
    assert!(
        matches!(timed_out, Err(LockError::Timeout { .. })),
        "{timed_out:?}"
    );
    let token = held.fencing_token();
    assert!(held.unlock().await.unwrap());
    let taken = waiting.await.unwrap().unwrap();
    assert!(taken.fencing_token() > token);
}

/// Tokens grow across a release, a lease that ran out, a force-unlock and (for the scripts'
/// lock strings) a counter that expired, with either mutex protocol.
#[tokio::test(start_paused = true)]
async fn fencing_tokens_increase_across_release_expiry_and_force_unlock() {
    for protocol in [MutexProtocol::Native, MutexProtocol::Scripted] {
        let server = MemoryServer::new();
        let c = server
            .builder()
            .mutex_protocol(protocol)
            .build()
            .await
            .unwrap();
        assert_eq!(c.server_capabilities().mutex_protocol, protocol);
        let mut tokens = Vec::new();
        let g = c.lock("x").await.unwrap();
        tokens.push(g.fencing_token());
        g.unlock().await.unwrap();
        let g = c
            .try_lock("x")
            .lease(Duration::from_millis(50))
            .await
            .unwrap()
            .unwrap();
        tokens.push(g.fencing_token());
        g.lost().await;
        let g = c.lock("x").await.unwrap();
        tokens.push(g.fencing_token());
        assert!(c.mutex("x").force_unlock().await.unwrap());
        g.lost().await;
        let g = c.lock("x").await.unwrap();
        tokens.push(g.fencing_token());
        g.unlock().await.unwrap();
        tokio::time::sleep(Duration::from_secs(7200)).await; // the free lock string expires
        tokens.push(c.lock("x").await.unwrap().fencing_token());
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{protocol}: tokens {tokens:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn reentry_run_and_try_run() {
    let (_server, a, b) = two_instances().await;
    let counts = reentrant(async {
        let outer = a.lock("r").await.unwrap();
        let inner = a.lock("r").await.unwrap();
        let again = outer.reenter().await.unwrap();
        let counts = (
            outer.hold_count(),
            inner.fencing_token() == outer.fencing_token(),
        );
        drop((inner, again));
        outer.unlock().await.unwrap();
        counts
    })
    .await;
    assert_eq!(counts, (3, true));

    let other = &b;
    let token = a
        .lock("report")
        .run(|held: HeldLock| async move {
            assert!(other.try_lock("report").await.unwrap().is_none());
            held.fencing_token()
        })
        .await
        .unwrap();
    assert!(token.is_some());
    let busy = a.lock("busy").await.unwrap();
    let ran = b.try_lock("busy").run(|_| async { "ran" }).await.unwrap();
    assert_eq!(ran, None, "busy: the body does not run");
    busy.unlock().await.unwrap();
    let ran = b.try_lock("busy").run(|_| async { "ran" }).await.unwrap();
    assert_eq!(ran, Some("ran"));
}

#[tokio::test(start_paused = true)]
async fn hold_at_least_keeps_the_lock_taken_and_a_period_names_it() {
    let (_server, a, b) = two_instances().await;
    let period = Period::every(Duration::from_secs(24 * 3600)).unwrap();
    let name = period.name("lottery");
    let draw = |c: &LockClient| {
        c.try_lock(name.clone())
            .lease(Duration::from_secs(3600))
            .hold_at_least(Duration::from_secs(600))
            .run(|held| async move { held.fencing_token() })
    };
    assert!(
        draw(&a).await.unwrap().is_some(),
        "the first instance draws"
    );
    assert_eq!(draw(&b).await.unwrap(), None, "released, but kept taken");
    tokio::time::sleep(Duration::from_secs(601)).await;
    assert!(
        draw(&b).await.unwrap().is_some(),
        "free once the minimum hold is over"
    );
}

/// The hybrid protocol is for servers without the native commands; the in-memory server has
/// them (and no `SINTERCARD`, by which `SET … NX GET` is known), so asking for it is a typed
/// refusal at build, naming what is missing.
#[tokio::test(start_paused = true)]
async fn the_hybrid_protocol_is_refused_at_build() {
    let server = MemoryServer::new();
    let refused = server
        .builder()
        .mutex_protocol(MutexProtocol::Hybrid)
        .build()
        .await;
    match refused {
        Err(LockError::Unsupported { missing, .. }) => {
            assert!(missing.contains("SET … NX GET"), "{missing}")
        }
        other => panic!("not refused: {:?}", other.map(|_| ())),
    }
}

#[tokio::test(start_paused = true)]
async fn the_scripted_protocol_batches_many_tasks_on_one_client() {
    let server = MemoryServer::new();
    let c = server
        .builder()
        .mutex_protocol(MutexProtocol::Scripted)
        .build()
        .await
        .unwrap();
    let taken = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let (c, taken) = (c.clone(), taken.clone());
            tokio::spawn(async move {
                let name = format!("n:{}", i % 4);
                let g = c.lock(name.clone()).await.unwrap();
                taken.lock().unwrap().push((name, g.fencing_token()));
                tokio::time::sleep(Duration::from_millis(5)).await;
                assert!(g.unlock().await.unwrap());
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let mut taken = taken.lock().unwrap().clone();
    let count = taken.len();
    taken.sort_unstable();
    taken.dedup();
    assert_eq!(taken.len(), count, "no token of a name given twice");
    tokio::time::sleep(Duration::from_secs(3601)).await;
    assert!(
        server.keys().is_empty(),
        "free lock strings expire: {:?}",
        server.keys()
    );
}

#[tokio::test(start_paused = true)]
async fn info_and_owner_descriptions_read_as_on_redis() {
    let server = MemoryServer::new();
    let a = server
        .builder()
        .owner_description("billing@host-a")
        .build()
        .await
        .unwrap();
    let b = server.client().await.unwrap();
    let guard = a.lock("o").await.unwrap();
    let seen = b.mutex("o").info().await.unwrap();
    let owner = seen.owner.clone().unwrap();
    assert!(owner.starts_with(a.client_id()), "{owner}");
    // The native protocol keeps no count or token in the key: only the holder's client knows.
    assert_eq!((seen.hold_count, seen.fencing_token), (1, None));
    let own = a.mutex("o").info().await.unwrap();
    assert_eq!(own.fencing_token, Some(guard.fencing_token()));
    let described = b.owner_description(&owner).await.unwrap();
    assert_eq!(described.as_deref(), Some("billing@host-a"));
    assert!(guard.unlock().await.unwrap());
    drop(a);
    // Nothing refreshes it once its client is gone: it expires after 3 watchdog leases.
    tokio::time::sleep(Duration::from_secs(91)).await;
    assert_eq!(b.owner_description(&owner).await.unwrap(), None);
}

// ---------------------------------------------------------------------------------------------
// The other primitives

#[tokio::test(start_paused = true)]
async fn a_fair_lock_is_granted_in_arrival_order() {
    let (server, a, b) = two_instances().await;
    let held = a.fair_lock("f").lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3u32 {
        let (c, order) = (
            if i % 2 == 0 { b.clone() } else { a.clone() },
            order.clone(),
        );
        waiters.push(tokio::spawn(async move {
            let g = c
                .fair_lock("f")
                .lock()
                .wait(Duration::from_secs(60))
                .await
                .unwrap();
            order.lock().unwrap().push((i, g.fencing_token()));
            tokio::time::sleep(Duration::from_millis(10)).await;
            g.unlock().await.unwrap();
        }));
        let queued = i + 1;
        until("queued", || async {
            a.fair_lock("f").info().await.unwrap().queued == queued
        })
        .await;
    }
    let first = held.fencing_token();
    held.unlock().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(order.iter().all(|(_, t)| *t > first));
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1));
    assert_clean(&server).await;
}

#[tokio::test(start_paused = true)]
async fn readers_share_and_a_waiting_writer_holds_new_readers_back() {
    let (server, a, b) = two_instances().await;
    let rw = |c: &LockClient| c.read_write_lock("doc");
    let r1 = rw(&a).read().await.unwrap();
    let r2 = rw(&b).read().await.unwrap();
    let info = rw(&a).info().await.unwrap();
    assert_eq!((info.readers, info.writer.held), (2, false));
    assert!(rw(&b).try_write().await.unwrap().is_none());
    let writer = tokio::spawn({
        let b = b.clone();
        async move { rw(&b).write().wait(Duration::from_secs(60)).await }
    });
    until("the writer waits", || async {
        rw(&a).info().await.unwrap().writer_waiting
    })
    .await;
    assert!(
        rw(&a).try_read().await.unwrap().is_none(),
        "held back by the waiting writer"
    );
    drop(r1);
    r2.unlock().await.unwrap();
    let w = writer.await.unwrap().unwrap();
    assert!(
        rw(&a).try_read().await.unwrap().is_none(),
        "the writer holds it"
    );
    let token = w.fencing_token();
    w.unlock().await.unwrap();
    let w2 = rw(&a).write().await.unwrap();
    assert!(w2.fencing_token() > token);
    drop(w2);
    assert_clean(&server).await;
}

#[tokio::test(start_paused = true)]
async fn a_semaphore_counts_its_permits_and_their_leases() {
    let (server, a, b) = two_instances().await;
    let two = a.semaphore("pool", 3).acquire(2).await.unwrap();
    assert!(
        b.semaphore("pool", 3)
            .try_acquire(2)
            .await
            .unwrap()
            .is_none()
    );
    let one = b
        .semaphore("pool", 3)
        .try_acquire(1)
        .lease(SECOND)
        .await
        .unwrap()
        .unwrap();
    let info = b.semaphore("pool", 3).info().await.unwrap();
    assert_eq!(
        (info.size, info.held, info.free, info.holders),
        (Some(3), 3, 0, 2)
    );
    let other_size = b.semaphore("pool", 4).try_acquire(1).await;
    assert!(
        matches!(other_size, Err(LockError::SizeMismatch { recorded: 3, .. })),
        "{other_size:?}"
    );
    one.lost().await;
    let back = b
        .semaphore("pool", 3)
        .acquire(1)
        .wait(SECOND)
        .await
        .unwrap();
    assert_eq!(back.permits(), 1);
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(two.is_held() && back.is_held(), "renewed by the watchdog");
    drop((two, back));
    assert_clean(&server).await;
}

#[tokio::test(start_paused = true)]
async fn a_multi_lock_takes_all_or_none() {
    let (server, a, b) = two_instances().await;
    let names = ["m:a", "m:b", "m:c"];
    let middle = b.lock("m:b").await.unwrap();
    assert!(a.multi_lock(names).try_lock().await.unwrap().is_none());
    for name in ["m:a", "m:c"] {
        assert!(
            !a.mutex(name).info().await.unwrap().held,
            "{name} was not taken"
        );
    }
    let waiting = tokio::spawn({
        let a = a.clone();
        async move {
            a.multi_lock(names)
                .atomic()
                .lock()
                .wait(Duration::from_secs(60))
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !a.mutex("m:a").info().await.unwrap().held,
        "none held while one is busy"
    );
    let token = middle.fencing_token();
    middle.unlock().await.unwrap();
    let all = waiting.await.unwrap().unwrap();
    assert_eq!(all.fencing_tokens().len(), 3);
    assert!(all.fencing_tokens()[1] > token);
    assert!(b.try_lock("m:c").await.unwrap().is_none());
    all.unlock().await.unwrap();
    assert_clean(&server).await;
}

#[tokio::test(start_paused = true)]
async fn leader_terms_grow_when_the_leader_is_cut_off() {
    let (server, a, b) = two_instances().await;
    let first = a.leader("scheduler").campaign().await.unwrap();
    let campaign = tokio::spawn({
        let b = b.clone();
        async move { b.leader("scheduler").campaign().await }
    });
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(first.is_leader(), "renewed while it can reach the server");
    assert!(server.set_client_reachable(&a, false));
    first.deposed().await;
    assert!(!first.is_leader());
    let second = campaign.await.unwrap().unwrap();
    assert!(second.number() > first.number());
    assert!(server.set_client_reachable(&a, true));
    assert_eq!(
        a.leader("scheduler")
            .try_campaign()
            .await
            .unwrap()
            .map(|t| t.number()),
        None
    );
}

#[tokio::test(start_paused = true)]
async fn redlock_over_three_memory_servers_needs_a_majority() {
    let servers = [
        MemoryServer::new(),
        MemoryServer::new(),
        MemoryServer::new(),
    ];
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(server.client().await.unwrap());
    }
    let redlock = RedLock::new(clients.clone()).unwrap();
    redlock.check_distinct().await.unwrap();
    let again = servers[0].client().await.unwrap();
    let twice = RedLock::new([clients[0].clone(), clients[1].clone(), again]).unwrap();
    let refused = twice.check_distinct().await;
    assert!(
        matches!(refused, Err(LockError::InvalidOption { .. })),
        "{refused:?}"
    );

    servers[2].set_reachable(false);
    let guard = redlock
        .try_lock("r")
        .await
        .unwrap()
        .expect("two nodes of three");
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(guard.is_held(), "extended on the two nodes it reaches");
    servers[1].set_reachable(false);
    let minority = redlock.try_lock("other").await;
    assert!(
        !matches!(minority, Ok(Some(_))),
        "one node of three: {minority:?}"
    );
    guard.lost().await;
}

// ---------------------------------------------------------------------------------------------
// Fault hooks

#[tokio::test(start_paused = true)]
async fn an_unreachable_server_fails_calls_typed_and_waiters_ride_it_out() {
    let (server, a, b) = two_instances().await;
    let (held, waiting) = held_and_awaited((&a, &b), "o", Duration::from_secs(120)).await;
    server.set_reachable(false);
    let refused = a.try_lock("p").await;
    assert!(
        matches!(&refused, Err(e @ LockError::Unavailable { .. }) if e.is_unavailable()),
        "{refused:?}"
    );
    held.lost().await; // renewals failed for a whole lease
    server.set_reachable(true);
    let taken = waiting.await.unwrap().unwrap();
    assert!(taken.fencing_token() > held.fencing_token());
    assert!(MemoryServer::new().client().await.is_ok());
    assert!(
        !MemoryServer::new().set_client_reachable(&a, false),
        "not its client"
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_cut_off_loses_its_lock_to_the_others() {
    let (server, a, b) = two_instances().await;
    let guard = a.lock("job").await.unwrap();
    assert!(server.set_client_reachable(&a, false));
    assert!(matches!(
        a.try_lock("other").await,
        Err(LockError::Unavailable { .. })
    ));
    assert!(
        b.try_lock("other").await.unwrap().is_some(),
        "b still reaches the server"
    );
    guard.lost().await;
    let taken = b.lock("job").wait(Duration::from_secs(5)).await.unwrap();
    assert!(taken.fencing_token() > guard.fencing_token());
    assert!(server.set_client_reachable(&a, true));
    assert!(!guard.unlock().await.unwrap(), "taken over meanwhile");
    assert!(taken.is_held());
}

#[tokio::test(start_paused = true)]
async fn delayed_replies_slow_calls_down_and_a_late_grant_is_undone() {
    let server = MemoryServer::new();
    let c = server.client().await.unwrap();
    server.delay_replies(Duration::from_millis(200));
    let slow = c.lock("slow").await.unwrap();
    assert!(slow.unlock().await.unwrap());
    server.delay_replies(SECOND); // the default response timeout
    let late = c.try_lock("late").await;
    assert!(
        matches!(late, Err(LockError::ResponseTimeout(_))),
        "{late:?}"
    );
    server.delay_replies(Duration::ZERO);
    until("the late grant is given back", || async {
        !c.mutex("late").info().await.unwrap().held
    })
    .await;
    assert!(c.try_lock("late").await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn an_evicted_lock_is_lost_at_the_next_renewal() {
    let (server, a, b) = two_instances().await;
    let guard = a.lock("evicted").await.unwrap();
    assert_eq!(server.evict_lock("evicted"), 1);
    assert_eq!(server.evict_lock("evicted"), 0);
    assert_eq!(server.evict_lock("not a name"), 0);
    guard.lost().await;
    assert!(b.try_lock("evicted").await.unwrap().is_some());
    assert_eq!(MemoryServer::of(&a).map(|s| s.keys()), Some(server.keys()));
}

// ---------------------------------------------------------------------------------------------
// Bad input, leaks, what the backend cannot do

#[tokio::test(start_paused = true)]
async fn bad_input_is_typed_as_on_redis() {
    let server = MemoryServer::new();
    let c = server.client().await.unwrap();
    for name in ["", "a b", "{x}", "tab\t"] {
        let e = c.lock(name).await;
        assert!(
            matches!(e, Err(LockError::InvalidName { .. })),
            "{name:?}: {e:?}"
        );
    }
    let e = c.try_lock("x").lease(Duration::from_millis(1)).await;
    assert!(matches!(e, Err(LockError::InvalidOption { .. })), "{e:?}");
    let e = c.semaphore("s", 0).acquire(1).await;
    assert!(matches!(e, Err(LockError::InvalidOption { .. })), "{e:?}");
    let e = c.multi_lock(["a", "a"]).lock().await;
    assert!(matches!(e, Err(LockError::InvalidOption { .. })), "{e:?}");
    assert!(server.keys().is_empty(), "nothing was sent");
    let e = server.builder().key_prefix("bad prefix").build().await;
    assert!(matches!(e, Err(LockError::InvalidOption { .. })), "{e:?}");
    let e = server.builder().min_replicas(1, SECOND).build().await;
    assert!(matches!(e, Err(LockError::Unsupported { .. })), "{e:?}");
    let e = server.builder().connect_primaries().await;
    assert!(matches!(e, Err(LockError::Unsupported { .. })), "{e:?}");
    let capabilities = c.server_capabilities();
    assert!(
        capabilities.server.starts_with("lock-core-memory"),
        "{capabilities}"
    );
    assert_eq!(capabilities.mutex_protocol, MutexProtocol::Native);
}

#[tokio::test(start_paused = true)]
async fn guards_dropped_in_any_order_leave_nothing_behind() {
    let (server, a, b) = two_instances().await;
    for round in 0..4usize {
        let mut guards: Vec<Box<dyn Any + Send>> = vec![
            Box::new(a.lock("g:m").await.unwrap()),
            Box::new(b.fair_lock("g:f").lock().await.unwrap()),
            Box::new(a.read_write_lock("g:rw").read().await.unwrap()),
            Box::new(b.read_write_lock("g:rw").read().await.unwrap()),
            Box::new(a.semaphore("g:s", 4).acquire(2).await.unwrap()),
            Box::new(b.semaphore("g:s", 4).acquire(2).await.unwrap()),
            Box::new(a.multi_lock(["g:x", "g:y"]).lock().await.unwrap()),
        ];
        guards.rotate_left(round);
        if round % 2 == 1 {
            guards.reverse();
        }
        for guard in guards {
            drop(guard);
        }
        let w = b
            .read_write_lock("g:rw")
            .write()
            .wait(SECOND)
            .await
            .unwrap();
        drop(w);
    }
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// The macro and the layer, unchanged

#[distributed_lock(key = "invoice:{id}", client = client, wait = "2s")]
async fn issue(client: &LockClient, id: u64, log: &Mutex<Vec<u64>>) -> Result<u64, LockError> {
    log.lock().unwrap().push(id);
    Ok(id * 100)
}

#[tokio::test(start_paused = true)]
async fn the_macro_locks_on_the_memory_backend() {
    let (server, a, b) = two_instances().await;
    let log = Mutex::new(Vec::new());
    assert_eq!(issue(&a, 7, &log).await.unwrap(), 700);
    let held = b.lock("invoice:7").await.unwrap();
    let busy = issue(&a, 7, &log).await;
    assert!(matches!(busy, Err(LockError::Timeout { .. })), "{busy:?}");
    held.unlock().await.unwrap();
    assert_eq!(issue(&a, 7, &log).await.unwrap(), 700);
    assert_eq!(
        *log.lock().unwrap(),
        [7, 7],
        "the body ran twice, not while held"
    );
    assert_clean(&server).await;
}

#[tokio::test(start_paused = true)]
async fn the_tower_layer_locks_on_the_memory_backend() {
    let client = LockClient::in_memory().await.unwrap();
    async fn name(Extension(lock): Extension<HeldLock>) -> String {
        format!("{} {}", lock.name(), lock.is_held())
    }
    let router = Router::new().route(
        "/orders/{id}",
        get(name).route_layer(
            DistributedLockLayer::new(client.clone(), PathParam::new("id")).prefix("order:"),
        ),
    );
    let get = |uri: &str| Request::builder().uri(uri).body(Body::empty()).unwrap();
    let res = router.clone().oneshot(get("/orders/42")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "order:42 true");
    let held = client.lock("order:42").await.unwrap();
    let res = router.clone().oneshot(get("/orders/42")).await.unwrap();
    assert_eq!(
        res.status(),
        StatusCode::CONFLICT,
        "busy: fail fast by default"
    );
    held.unlock().await.unwrap();
    let res = router.oneshot(get("/orders/42")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let server = MemoryServer::of(&client).unwrap();
    until("the layer's release", || async {
        server.keys() == ["lock:fence"]
    })
    .await;
}

/// Records (`LockClient::records`, what lock-tower's `RedisStore` keeps) on the in-memory
/// backend: written, read back by another instance, a write of an older token refused, a
/// repeat written again, and gone after their time to live.
#[tokio::test(start_paused = true)]
async fn records_are_written_fenced_and_expire() {
    let (_server, a, b) = two_instances().await;
    let (ra, rb) = (a.records(), b.records());
    let ttl = Duration::from_secs(60);
    assert_eq!(
        ra.put("order:1", b"paid", 7, ttl).await.unwrap(),
        lock_core::fenced::Fenced::Written
    );
    let read = rb.get("order:1").await.unwrap().expect("the record");
    assert_eq!((read.token(), read.value()), (7, &b"paid"[..]));
    assert_eq!(
        rb.put("order:1", b"late", 6, ttl).await.unwrap(),
        lock_core::fenced::Fenced::Refused { stored: 7 }
    );
    assert_eq!(
        ra.put("order:1", b"paid", 7, ttl).await.unwrap(),
        lock_core::fenced::Fenced::Written
    );
    assert_eq!(rb.get("order:1").await.unwrap().unwrap().value(), b"paid");
    tokio::time::sleep(ttl + SECOND).await;
    assert_eq!(rb.get("order:1").await.unwrap(), None);
}

/// The guide's fenced write helper (`fenced::set`), unchanged, on the in-memory backend: the client's own
/// connection is served by the in-memory server, the stale holder's write is refused, and the
/// plain commands a test reads with are there too.
#[tokio::test(start_paused = true)]
async fn fenced_writes_run_on_the_clients_connection() {
    use lock_core::fenced::{self, Fenced};
    let server = MemoryServer::new();
    let (a, b) = (
        server.client().await.unwrap(),
        server.client().await.unwrap(),
    );
    let mut conn = a.connection();
    let stale = a.lock("report").await.unwrap();
    let old = stale.fencing_token();
    assert!(stale.unlock().await.unwrap());
    let fresh = b.lock("report").await.unwrap();
    let new = fresh.fencing_token();
    assert!(new > old);
    let key = "report:result";
    assert_eq!(
        fenced::set(&mut conn, key, "fresh", new).await.unwrap(),
        Fenced::Written
    );
    assert_eq!(
        fenced::set(&mut conn, key, "stale", old).await.unwrap(),
        Fenced::Refused { stored: new }
    );
    assert_eq!(
        fenced::get::<_, String>(&mut conn, key).await.unwrap(),
        Some(("fresh".to_owned(), new))
    );
    let mut hget = lock_core::redis::cmd("HGET");
    hget.arg(key).arg("value");
    let value: String = hget.query_async(&mut b.connection()).await.unwrap();
    assert_eq!(value, "fresh");
    // A command the in-memory server does not have is the server's error, not a panic.
    let err = lock_core::redis::cmd("LPUSH")
        .arg("l")
        .arg("x")
        .query_async::<i64>(&mut conn)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unknown command"), "{err}");
    assert!(fresh.unlock().await.unwrap());
}
