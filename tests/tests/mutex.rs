//! The reentrant leased mutex against a real redis-server: exclusion, ownership, re-entry,
//! leases, the watchdog, loss, waiting, fencing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{LockClient, LockError};
use lock_tests::RedisServer;
use lock_tests::fixtures::{
    assert_clean, client, client_with_lease, command_calls, eventually, lock_keys, lua_calls,
    scripted_client,
};
use tokio::time::Instant;

const SHORT: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_clients_and_tasks() {
    let server = RedisServer::start();
    let clients = [
        client(&server.url()).await,
        client(&server.url()).await,
        client(&server.url()).await,
    ];
    // A read-sleep-write on shared state with no atomicity of its own: without mutual
    // exclusion, increments are lost.
    let value = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    const PER_TASK: u64 = 4;
    let mut tasks = Vec::new();
    for c in &clients {
        for t in 0..16u64 {
            let (c, value, inside, max_inside) =
                (c.clone(), value.clone(), inside.clone(), max_inside.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..PER_TASK {
                    let guard = c
                        .lock("counter")
                        .wait(Duration::from_secs(30))
                        .await
                        .unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    let read = value.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_micros(200 + (t * 7 + i) % 5 * 100)).await;
                    value.store(read + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.unlock().await.unwrap());
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(value.load(Ordering::SeqCst), 3 * 16 * PER_TASK);
    assert_eq!(max_inside.load(Ordering::SeqCst), 1);
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_owner_cannot_release_or_extend() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    // A holds with a short fixed lease and stalls past it; B takes the lock.
    let stale = a
        .lock("res")
        .lease(Duration::from_millis(100))
        .await
        .unwrap();
    let fresh = b.lock("res").wait(Duration::from_secs(5)).await.unwrap();
    assert!(fresh.fencing_token() > stale.fencing_token());
    assert!(!stale.is_held());
    // A's extend and unlock must not touch B's lock.
    assert!(matches!(
        stale.extend(Duration::from_secs(60)).await,
        Err(LockError::Lost { .. })
    ));
    assert!(!stale.unlock().await.unwrap());
    let info = b.mutex("res").info().await.unwrap();
    assert!(info.held);
    assert_eq!(info.fencing_token, Some(fresh.fencing_token()));
    // The owner names the holding client by the id it reports.
    assert_ne!(a.client_id(), b.client_id());
    let owner = info.owner.as_deref().unwrap();
    assert_eq!(owner.split_once(':').unwrap().0, b.client_id(), "{owner}");
    assert!(info.ttl.unwrap() > Duration::from_secs(20), "{info:?}");
    assert!(fresh.is_held());
    assert!(fresh.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_counts_holds() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    lock_core::reentrant(async {
        let outer = c.lock("acct").await.unwrap();
        let inner = c.lock("acct").wait(Duration::ZERO).await.unwrap();
        let third = inner.reenter().await.unwrap();
        assert_eq!(outer.fencing_token(), inner.fencing_token());
        assert_eq!(c.mutex("acct").info().await.unwrap().hold_count, 3);
        assert!(third.unlock().await.unwrap());
        assert!(inner.unlock().await.unwrap());
        let info = c.mutex("acct").info().await.unwrap();
        assert!(info.held);
        assert_eq!(info.hold_count, 1);
        assert!(outer.unlock().await.unwrap());
        assert!(!c.mutex("acct").info().await.unwrap().held);
    })
    .await;
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_scope_the_same_task_waits_for_itself() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let first = c.lock("solo").await.unwrap();
    assert!(c.try_lock("solo").await.unwrap().is_none());
    let err = c
        .lock("solo")
        .wait(Duration::from_millis(150))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    // A task spawned inside a scope does not inherit it.
    lock_core::reentrant(async {
        let _held = c.lock("scoped").await.unwrap();
        let c2 = c.clone();
        let spawned = tokio::spawn(async move { c2.try_lock("scoped").await.unwrap().is_none() });
        assert!(spawned.await.unwrap());
    })
    .await;
    drop(first);
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_expires_and_frees_the_lock() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let lease = Duration::from_millis(300);
    let start = Instant::now();
    let guard = a.lock("lease").lease(lease).await.unwrap();
    let other = b.lock("lease").wait(Duration::from_secs(10)).await.unwrap();
    let waited = start.elapsed();
    assert!(waited >= lease - Duration::from_millis(20), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(!guard.is_held());
    tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .unwrap();
    drop(guard);
    assert!(other.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_lock_through_four_leases() {
    let server = RedisServer::start();
    let a = client_with_lease(&server.url(), SHORT).await;
    let b = client(&server.url()).await;
    let guard = a.lock("long-job").await.unwrap();
    let lost = guard.lost();
    tokio::pin!(lost);
    let until = Instant::now() + SHORT * 4;
    while Instant::now() < until {
        tokio::select! {
            _ = &mut lost => panic!("lost while the watchdog should renew"),
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        assert!(guard.is_held());
        assert!(b.try_lock("long-job").await.unwrap().is_none());
    }
    let ttl = b.mutex("long-job").info().await.unwrap().ttl.unwrap();
    assert!(ttl > Duration::from_millis(100), "{ttl:?}");
    assert!(guard.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_the_key_is_deleted() {
    let server = RedisServer::start();
    let a = client_with_lease(&server.url(), SHORT).await;
    let guard = a.lock("victim").await.unwrap();
    let start = Instant::now();
    assert_eq!(server.cmd(&["DEL", "lock:{victim}"]), "1");
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .unwrap();
    assert!(start.elapsed() <= SHORT + Duration::from_millis(200));
    assert!(!guard.is_held());
    assert!(!guard.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_the_server_dies() {
    let mut server = RedisServer::start();
    let a = client_with_lease(&server.url(), SHORT).await;
    let guard = a.lock("doomed").await.unwrap();
    server.kill();
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .unwrap();
    // Lost no later than one lease after the last renewal (plus scheduling slack).
    assert!(
        start.elapsed() <= SHORT + Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
    assert!(!guard.is_held());
    // Unlocking a lost lock with Redis down reports an error or "not held", never a hang.
    let r = tokio::time::timeout(Duration::from_secs(10), guard.unlock())
        .await
        .unwrap();
    assert!(!matches!(r, Ok(true)), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_on_release_without_polling() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let guard = a.lock("handoff").await.unwrap();
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let waiter = tokio::spawn(async move {
        let start = Instant::now();
        let g = b
            .lock("handoff")
            .wait(Duration::from_secs(20))
            .await
            .unwrap();
        let waited = start.elapsed();
        g.unlock().await.unwrap();
        waited
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let release = Instant::now();
    assert!(guard.unlock().await.unwrap());
    let waited = waiter.await.unwrap();
    assert!(waited >= Duration::from_millis(450), "{waited:?}");
    // Woken by the release message, not by the (30 s) lease running out.
    assert!(
        release.elapsed() < Duration::from_secs(2),
        "{:?}",
        release.elapsed()
    );
    // Two tries of the waiter (before and after subscribing), one after the message, the
    // holder's release and the waiter's release: a poller would have sent far more.
    assert!(lua_calls(&server) <= 6);
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_takes_over_from_a_crashed_holder_at_its_lease() {
    let server = RedisServer::start();
    let b = client(&server.url()).await;
    // A holder that crashed: its lock exists, its lease runs, and nobody will publish.
    server.cmd(&["SET", "lock:{crash}", "dead-client:1|1|7||1", "PX", "600"]);
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let start = Instant::now();
    let g = b.lock("crash").wait(Duration::from_secs(20)).await.unwrap();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(450), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    assert!(lua_calls(&server) <= 4);
    assert!(g.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_deadline_is_honoured() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let guard = a.lock("busy").await.unwrap();
    let start = Instant::now();
    let err = b
        .lock("busy")
        .wait(Duration::from_millis(300))
        .await
        .unwrap_err();
    let waited = start.elapsed();
    let LockError::Timeout {
        name, holder_ttl, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(name, "busy");
    assert!(holder_ttl.unwrap() > Duration::from_secs(20));
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    assert!(guard.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_makes_exactly_one_attempt() {
    let server = RedisServer::start();
    let a = scripted_client(&server.url()).await;
    let b = scripted_client(&server.url()).await;
    let guard = a.lock("once").await.unwrap();
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let start = Instant::now();
    assert!(b.try_lock("once").await.unwrap().is_none());
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(lua_calls(&server), 1);
    assert!(server.pubsub_channels().is_empty());
    drop(guard);
    eventually("dropped guard released", || lock_keys(&server).is_empty()).await;
    let g = b.try_lock("once").await.unwrap().unwrap();
    assert!(g.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_strictly_increase_across_clients() {
    let server = RedisServer::start();
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let c = client(&server.url()).await;
        let tokens = tokens.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..250 {
                let g = c
                    .lock("fenced")
                    .wait(Duration::from_secs(30))
                    .await
                    .unwrap();
                // Recorded while holding: the vector's order is the acquisition order.
                tokens.lock().unwrap().push(g.fencing_token());
                assert!(g.unlock().await.unwrap());
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .unwrap()
            .unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 1000);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "not strictly increasing"
    );
    assert_clean(&server).await;
}

/// One meaning, one number: a kind that has a fencing token gives the same number through
/// its guard (`u64`), the `Guard` trait, its `HeldLock` and `info()`; every other kind says
/// `None` through the trait and its `HeldLock`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_view_gives_the_same_fencing_token_or_none() {
    use lock_core::{Guard, current_lock};

    let server = RedisServer::start();
    let c = client(&server.url()).await;
    fn same<G: Guard>(guard: &G, own: u64) {
        assert_eq!(Guard::fencing_token(guard), Some(own), "{guard:?}");
        assert_eq!(guard.held_lock().fencing_token(), Some(own), "{guard:?}");
    }
    fn none<G: Guard>(guard: &G) {
        assert_eq!(Guard::fencing_token(guard), None, "{guard:?}");
        assert_eq!(guard.held_lock().fencing_token(), None, "{guard:?}");
    }
    lock_core::reentrant(async {
        let mutex = c.lock("views").await.unwrap();
        same(&mutex, mutex.fencing_token());
        let in_scope = current_lock("views").expect("held in this scope");
        assert_eq!(in_scope.fencing_token(), Some(mutex.fencing_token()));
        let info = c.mutex("views").info().await.unwrap();
        assert_eq!(info.fencing_token, Some(mutex.fencing_token()));
        mutex.unlock().await.unwrap();
    })
    .await;
    let fair = c.fair_lock("views").lock().await.unwrap();
    same(&fair, fair.fencing_token());
    let write = c.read_write_lock("views").write().await.unwrap();
    same(&write, write.fencing_token());
    write.unlock().await.unwrap();
    let read = c.read_write_lock("views").read().await.unwrap();
    none(&read);
    let permits = c.semaphore("views", 2).acquire(1).await.unwrap();
    none(&permits);
    let multi = c.multi_lock(["views:a", "views:b"]).lock().await.unwrap();
    none(&multi);
    assert!(multi.fencing_tokens().iter().all(|t| *t > 0));
    assert!(fair.unlock().await.unwrap());
    assert!(read.unlock().await.unwrap());
    assert!(permits.unlock().await.unwrap());
    assert!(multi.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_fencing_counter_stays_ahead() {
    let server = RedisServer::start();
    let c = scripted_client(&server.url()).await;
    let first = c.lock("recreated").await.unwrap().fencing_token();
    // Let the (dropped) guard's release land, then burn through tokens quickly.
    eventually("released", || lock_keys(&server).is_empty()).await;
    let mut last = first;
    for _ in 0..200 {
        let g = c.lock("recreated").await.unwrap();
        assert!(g.fencing_token() > last);
        last = g.fencing_token();
        g.unlock().await.unwrap();
    }
    // A free lock keeps its counter for the fence TTL (1 h), not forever.
    let ttl: i64 = server.cmd(&["PTTL", "lock:{recreated}"]).parse().unwrap();
    assert!(ttl > 3_000_000 && ttl <= 3_600_000, "{ttl}");
    // The counter expires (as it will for a name not used for an hour): the next token is
    // still above every earlier one.
    assert_eq!(server.cmd(&["DEL", "lock:{recreated}"]), "1");
    let g = c.lock("recreated").await.unwrap();
    assert!(g.fencing_token() > last, "{} <= {last}", g.fencing_token());
    g.unlock().await.unwrap();
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_is_survived() {
    let server = RedisServer::start();
    let c = client_with_lease(&server.url(), SHORT).await;
    // Both ways the code can go missing: scripts and the function library.
    let flush = || {
        server.cmd(&["SCRIPT", "FLUSH"]);
        server.cmd(&["FUNCTION", "FLUSH"]);
    };
    let g = c.lock("flushed").await.unwrap();
    flush();
    // The watchdog's renewals must survive it too.
    tokio::time::sleep(SHORT * 2).await;
    assert!(g.is_held());
    flush();
    assert!(g.unlock().await.unwrap());
    flush();
    let g = c.try_lock("flushed").await.unwrap().unwrap();
    flush();
    assert!(c.mutex("flushed").info().await.unwrap().held);
    flush();
    assert!(c.mutex("flushed").force_unlock().await.unwrap());
    assert!(!g.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_frees_the_lock_and_wakes_waiters() {
    let server = RedisServer::start();
    let a = client_with_lease(&server.url(), SHORT).await;
    let b = client(&server.url()).await;
    let g = a.lock("stuck").await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("stuck").wait(Duration::from_secs(20)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(b.mutex("stuck").force_unlock().await.unwrap());
    let taken = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // The old holder finds out at its next renewal.
    tokio::time::timeout(Duration::from_secs(2), g.lost())
        .await
        .unwrap();
    assert!(taken.fencing_token() > g.fencing_token());
    assert!(!b.mutex("nothing-here").force_unlock().await.unwrap());
    drop(g);
    assert!(taken.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_in_the_background() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let g = a.lock("dropped").await.unwrap();
    drop(g);
    eventually("released after drop", || lock_keys(&server).is_empty()).await;
    // An aborted task and a panicking task release their locks the same way.
    let c = a.clone();
    let task = tokio::spawn(async move {
        let _g = c.lock("aborted").await.unwrap();
        std::future::pending::<()>().await;
    });
    eventually("taken", || !lock_keys(&server).is_empty()).await;
    task.abort();
    let _ = task.await;
    eventually("released after abort", || lock_keys(&server).is_empty()).await;
    let c = a.clone();
    let task = tokio::spawn(async move {
        let _g = c.lock("panicked").await.unwrap();
        panic!("inside the critical section");
    });
    assert!(task.await.is_err());
    eventually("released after panic", || lock_keys(&server).is_empty()).await;
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_moves_a_fixed_lease() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let g = c
        .lock("ext")
        .lease(Duration::from_millis(200))
        .await
        .unwrap();
    g.extend(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(g.is_held());
    assert!(c.mutex("ext").info().await.unwrap().ttl.unwrap() > Duration::from_secs(3));
    assert!(matches!(
        g.extend(Duration::ZERO).await,
        Err(LockError::InvalidOption { .. })
    ));
    assert!(g.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_local_waiters_queue_and_all_get_the_lock() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let holder = c.lock("queue").await.unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (c, done) = (c.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let g = c.lock("queue").wait(Duration::from_secs(30)).await.unwrap();
            done.fetch_add(1, Ordering::SeqCst);
            g.unlock().await.unwrap();
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // One subscription for all twenty.
    assert_eq!(
        server.pubsub_channels(),
        vec!["lock:{queue}:released".to_owned()]
    );
    assert_eq!(done.load(Ordering::SeqCst), 0);
    holder.unlock().await.unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 20);
    assert_clean(&server).await;
}

/// Tasks of one client take turns on a name: while one holds it (watchdog lease), the next
/// local waiter does not ask Redis, where it would find the lock busy and set its waiters
/// flag; it sends its attempt once the lock is given back. A hand-off between them costs a
/// release and an acquisition, and no release publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_ask_redis_only_once_the_lock_is_given_back() {
    let server = RedisServer::start();
    let c = scripted_client(&server.url()).await;
    const TASKS: usize = 8;
    const SECTIONS: usize = 10;
    let inside = Arc::new(AtomicUsize::new(0));
    let (calls, publishes) = (lua_calls(&server), command_calls(&server, "publish"));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (c, inside) = (c.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..SECTIONS {
                let g = c.lock("turns").wait(Duration::from_secs(30)).await.unwrap();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                // The section's work.
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(g.unlock().await.unwrap());
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .unwrap()
            .unwrap();
    }
    let sections = (TASKS * SECTIONS) as u64;
    let calls = lua_calls(&server) - calls;
    let publishes = command_calls(&server, "publish") - publishes;
    // Before the queue forms, each task may try once and find the lock busy (and flag it,
    // so that release publishes); after that, two calls per section and no messages.
    let start = TASKS as u64;
    assert!(
        calls <= 2 * sections + start,
        "{calls} calls for {sections} sections"
    );
    assert!(
        publishes <= start,
        "{publishes} releases published for {sections} sections"
    );
    assert_clean(&server).await;
}

/// The local queue's turn stays with a hold only under the watchdog: a fixed lease may run out
/// in Redis while its guard lives, and the next local waiter then takes the lock, as a waiter
/// in another process would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_waiter_takes_a_lock_whose_fixed_lease_ran_out() {
    let server = RedisServer::start();
    let c = scripted_client(&server.url()).await;
    let first = c.lock("fixed").await.unwrap();
    let base = lua_calls(&server);
    let second = tokio::spawn({
        let c = c.clone();
        async move {
            c.lock("fixed")
                .lease(Duration::from_millis(300))
                .wait(Duration::from_secs(10))
                .await
                .unwrap()
        }
    });
    // Its first attempt finds the lock busy; it then takes the local turn and tries again.
    eventually("the second task holds the local turn", || {
        lua_calls(&server) >= base + 2
    })
    .await;
    let third = tokio::spawn({
        let c = c.clone();
        async move { c.lock("fixed").wait(Duration::from_secs(10)).await.unwrap() }
    });
    assert!(first.unlock().await.unwrap());
    let second = second.await.unwrap();
    // The second guard lives on past its lease; the third task gets the lock meanwhile.
    let third = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("the third task waited for the second guard, not its lease")
        .unwrap();
    assert!(!second.is_held());
    assert!(third.fencing_token() > second.fencing_token());
    drop(second);
    assert!(third.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_can_share_an_application_pool() {
    let server = RedisServer::start();
    let manager = bb8_redis::RedisConnectionManager::new(server.url()).unwrap();
    let pool = bb8_redis::bb8::Pool::builder()
        .max_size(4)
        .build(manager)
        .await
        .unwrap();
    let c = LockClient::builder(&server.url())
        .pool(pool.clone())
        .build()
        .await
        .unwrap();
    let g = c.lock("shared-pool").await.unwrap();
    assert!(g.unlock().await.unwrap());
    assert!(pool.state().connections >= 1);
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_goes_quiet_after_release_and_with_the_client() {
    let server = RedisServer::start();
    // Renewals counted as calls of the scripts' renew function.
    let c = LockClient::builder(&server.url())
        .watchdog_lease(SHORT)
        .mutex_protocol(lock_core::MutexProtocol::Scripted)
        .build()
        .await
        .unwrap();
    let g = c.lock("quiet").await.unwrap();
    // It renews while the guard lives...
    server.cmd(&["CONFIG", "RESETSTAT"]);
    tokio::time::sleep(SHORT).await;
    assert!(lua_calls(&server) >= 2);
    // ...and sends nothing once the lock is released.
    assert!(g.unlock().await.unwrap());
    server.cmd(&["CONFIG", "RESETSTAT"]);
    tokio::time::sleep(SHORT * 2).await;
    assert_eq!(lua_calls(&server), 0);
    // Dropping the client and its last guard ends its background work: the guard's release
    // is the last command it sends.
    let g = c.lock("quiet").await.unwrap();
    drop(c);
    drop(g);
    eventually("released", || lock_keys(&server).is_empty()).await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    tokio::time::sleep(SHORT * 2).await;
    assert_eq!(lua_calls(&server), 0);
    eventually("no pub/sub connection left", || {
        server.cmd(&["CLIENT", "LIST", "TYPE", "pubsub"]).is_empty()
    })
    .await;
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_lock_and_handles_see_the_hold() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    assert!(lock_core::current_lock("seen").is_none());
    lock_core::reentrant(async {
        let g = c.lock("seen").await.unwrap();
        let held = lock_core::current_lock("seen").unwrap();
        assert_eq!(held.fencing_token(), Some(g.fencing_token()));
        assert!(held.is_held());
        let handle = g.held_lock();
        assert!(g.unlock().await.unwrap());
        assert!(!handle.is_held());
        assert!(!held.is_held());
        assert!(lock_core::current_lock("seen").is_none());
        tokio::time::timeout(Duration::from_secs(1), handle.lost())
            .await
            .unwrap();
    })
    .await;
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_follows_the_watchdog_after_an_extend() {
    let server = RedisServer::start();
    let c = client_with_lease(&server.url(), SHORT).await;
    let g = c.lock("extended").await.unwrap();
    g.extend(Duration::from_secs(5)).await.unwrap();
    assert!(g.remaining() > Duration::from_secs(4));
    // The watchdog's next renewals set the server's lease back to SHORT; the guard must not
    // believe it holds the lock longer than the server keeps it.
    // (What the guard believes is read first: a renewal between the two reads only moves the
    // server's expiry later.)
    tokio::time::sleep(SHORT).await;
    let believed = g.remaining();
    let server_ttl = c.mutex("extended").info().await.unwrap().ttl.unwrap();
    assert!(server_ttl <= SHORT, "{server_ttl:?}");
    assert!(
        believed <= server_ttl + Duration::from_millis(50),
        "{believed:?} > {server_ttl:?}"
    );
    assert!(g.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_serve_where_functions_are_refused() {
    let server = RedisServer::start();
    // A user that may not load functions (as a managed service may configure it): the client
    // falls back to scripts, and everything works the same.
    server.cmd(&[
        "ACL",
        "SETUSER",
        "scripts",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-function",
    ]);
    let url = format!("redis://scripts:pw@{}", server.addr());
    let c = scripted_client(&url).await;
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let g = c.lock("via-scripts").await.unwrap();
    assert!(c.try_lock("via-scripts").await.unwrap().is_none());
    assert!(g.unlock().await.unwrap());
    assert!(command_calls(&server, "evalsha") >= 3);
    assert_eq!(command_calls(&server, "fcall"), 0);
    assert_clean(&server).await;
}

/// Acquisitions and releases that queue behind calls in flight go out as one batch call, and
/// each still gets its own answer: exclusion and increasing tokens on contended names, fresh
/// names granted, a key of another type an error for its request alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_queue_go_out_in_batches_each_answered_alone() {
    let server = RedisServer::start();
    server.cmd(&["SET", "lock:{foreign}", "someone else's string"]);
    let c = scripted_client(&server.url()).await;
    const TASKS: usize = 48;
    const CYCLES: usize = 20;
    const NAMES: usize = 6;
    // Per contended name: who is inside, and the last token granted.
    let state: Arc<Vec<std::sync::Mutex<(usize, u64)>>> =
        Arc::new((0..NAMES).map(|_| Default::default()).collect());
    let before = lua_calls(&server);
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (c, state) = (c.clone(), state.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..CYCLES {
                // A contended name.
                let n = (t + i) % NAMES;
                let guard = c
                    .lock(format!("b-{n}"))
                    .wait(Duration::from_secs(30))
                    .await
                    .unwrap();
                {
                    let mut s = state[n].lock().unwrap();
                    assert_eq!(s.0, 0, "two holders of b-{n}");
                    assert!(guard.fencing_token() > s.1, "token went back on b-{n}");
                    *s = (1, guard.fencing_token());
                }
                tokio::task::yield_now().await;
                state[n].lock().unwrap().0 = 0;
                assert!(guard.unlock().await.unwrap());
                // A fresh name, and (now and then) the foreign key.
                let guard = c.try_lock(format!("fresh-{t}-{i}")).await.unwrap();
                assert!(guard.unwrap().unlock().await.unwrap());
                if i % 5 == 0 {
                    let err = c.try_lock("foreign").await.unwrap_err();
                    assert!(matches!(err, LockError::Redis(_)), "{err:?}");
                }
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .unwrap()
            .unwrap();
    }
    // 4 calls per cycle, one more every 5th, if each went alone.
    let alone = (TASKS * CYCLES * 4 + TASKS * CYCLES / 5) as u64;
    let calls = lua_calls(&server) - before;
    assert!(
        calls < alone / 2,
        "{calls} calls for {alone} requests: no batching"
    );
    server.cmd(&["DEL", "lock:{foreign}"]);
    assert_clean(&server).await;
}

/// `reenter()` on a guard with a fixed lease: the re-entry gets what is left of that lease.
/// (It read the lease kind and the time left under one lock of the hold's state, taking it
/// twice: a deadlock.) The re-entry runs on a worker task of a runtime this test shuts down
/// without waiting, so a deadlock fails the test instead of hanging it.
#[test]
fn a_fixed_lease_guard_reenters_without_deadlocking() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let server = RedisServer::start();
    let url = server.url();
    let outcome = rt.block_on(async move {
        let c = client(&url).await;
        let outer = c
            .lock("fixed")
            .lease(Duration::from_secs(20))
            .await
            .unwrap();
        let reentry = tokio::spawn(async move {
            let inner = outer.reenter().await?;
            let left = inner.remaining();
            let count = c.mutex("fixed").info().await?.hold_count;
            inner.unlock().await?;
            outer.unlock().await?;
            Ok::<_, LockError>((left, count))
        });
        tokio::time::timeout(Duration::from_secs(10), reentry).await
    });
    rt.shutdown_background();
    let (left, count) = outcome
        .expect("the re-entry deadlocked")
        .expect("the task ended")
        .unwrap();
    assert_eq!(count, 2);
    assert!(
        left > Duration::from_secs(10) && left <= Duration::from_secs(20),
        "{left:?}"
    );
}
