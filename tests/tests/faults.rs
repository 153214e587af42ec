//! The mutex under faults: lost replies, cancellation, dead, paused and restarted servers,
//! a dropped pub/sub connection, and bad input.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{LeaseState, LockClient, LockError};
use lock_tests::fixtures::{
    assert_clean, blocking, client, client_with_lease, eventually, lock_keys, native,
};
use lock_tests::{FaultProxy, RedisServer};
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

const SHORT: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_retried_after_a_lost_reply_is_applied_once() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let c = client(&proxy.url()).await;
    lock_core::reentrant(async {
        let outer = c.lock("twice").await.unwrap();
        let inner = c.lock("twice").await.unwrap();
        assert_eq!(c.mutex("twice").info().await.unwrap().hold_count, 2);
        // The release runs, its reply is lost with the connection; the client reconnects
        // and sends it again. The count must drop by one, not two.
        proxy.drop_next_reply();
        assert!(inner.unlock().await.unwrap());
        assert_eq!(proxy.dropped_replies(), 1);
        let info = c.mutex("twice").info().await.unwrap();
        assert!(info.held);
        assert_eq!(info.hold_count, 1);
        // The same for the last release: the retry is recognised as already applied.
        proxy.drop_next_reply();
        assert!(outer.unlock().await.unwrap());
        assert_eq!(proxy.dropped_replies(), 2);
        assert!(!c.mutex("twice").info().await.unwrap().held);
    })
    .await;
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_retried_after_a_lost_reply_is_applied_once() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let c = client(&proxy.url()).await;
    proxy.drop_next_reply();
    let g = c.lock("acq").await.unwrap();
    assert_eq!(proxy.dropped_replies(), 1);
    let info = c.mutex("acq").info().await.unwrap();
    assert_eq!(info.hold_count, 1);
    assert_eq!(info.fencing_token, Some(g.fencing_token()));
    lock_core::reentrant(async {
        let a = c.lock("acq2").await.unwrap();
        proxy.drop_next_reply();
        let b = c.lock("acq2").await.unwrap();
        assert_eq!(c.mutex("acq2").info().await.unwrap().hold_count, 2);
        b.unlock().await.unwrap();
        a.unlock().await.unwrap();
    })
    .await;
    assert!(g.unlock().await.unwrap());
    assert_clean(&server).await;
}

/// An unlock whose future is dropped before it completes (a timeout around it) still
/// releases: here the inner hold of a re-entered lock, whose unlock waits for the outer one's
/// to finish and is cut short meanwhile. Without that, the lock would stay held for its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_unlock_still_releases() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    // Every round trip takes over a millisecond.
    proxy.delay(Duration::from_micros(500));
    let c = client(&proxy.url()).await;
    let other = client(&server.url()).await;
    lock_core::reentrant(async {
        let outer = c.lock("cancelled-unlock").await.unwrap();
        let inner = outer.reenter().await.unwrap();
        let (outer, inner) = tokio::join!(
            outer.unlock(),
            tokio::time::timeout(Duration::from_micros(200), inner.unlock())
        );
        assert!(outer.unwrap());
        assert!(inner.is_err(), "the inner unlock was not cut short");
    })
    .await;
    // The lease is 30 s: only the finished release lets this in.
    let g = other
        .lock("cancelled-unlock")
        .wait(Duration::from_secs(5))
        .await
        .unwrap();
    g.unlock().await.unwrap();
    assert_clean(&server).await;
}

/// Cancellations of requests that went out in a batch (many tasks at once, so most requests
/// queue behind calls in flight) leave nothing behind either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_requests_in_batches_leave_no_lock_behind() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    proxy.delay(Duration::from_micros(500));
    let c = client(&proxy.url()).await;
    let acquired = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..32u64 {
        let (c, acquired) = (c.clone(), acquired.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(t);
            for i in 0..30u64 {
                let name = format!("batch-cancel-{}", (t + i) % 4);
                let budget = Duration::from_micros(rng.random_range(0..20_000));
                if let Ok(r) = tokio::time::timeout(budget, c.lock(name)).await {
                    // Dropped: released in the background.
                    drop(r.unwrap());
                    acquired.fetch_add(1, Ordering::Relaxed);
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
    assert!(acquired.load(Ordering::Relaxed) > 0, "nothing was acquired");
    proxy.pass();
    // An orphan would hold its name for the whole 30 s lease.
    for n in 0..4 {
        let name = format!("batch-cancel-{n}");
        let g = c.lock(name).wait(Duration::from_secs(5)).await.unwrap();
        g.unlock().await.unwrap();
    }
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisitions_leave_no_lock_behind() {
    lock_tests::init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    // A small delay on every chunk makes cancellations land while requests are in flight.
    proxy.delay(Duration::from_micros(500));
    let c = client(&proxy.url()).await;
    let other = client(&server.url()).await;
    let mut rng = rand::rng();
    let mut acquired = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    for i in 0..300 {
        assert!(Instant::now() < deadline, "round {i} ran out of time");
        // Every third round someone else holds the lock, so cancellations also hit waits.
        let blocker = if i % 3 == 0 {
            Some(other.lock("cancel").await.unwrap())
        } else {
            None
        };
        let budget = Duration::from_micros(rng.random_range(0..4000));
        if let Ok(r) = tokio::time::timeout(budget, c.lock("cancel")).await {
            drop(r.unwrap());
            acquired += 1;
        }
        if let Some(b) = blocker {
            b.unlock().await.unwrap();
        }
    }
    assert!(
        acquired > 0,
        "no round acquired: the test did not exercise success"
    );
    eventually("no lock left by cancelled acquisitions", || {
        lock_keys(&server).is_empty()
    })
    .await;
    proxy.pass();
    // Tasks of cancelled acquisitions may still be undoing their work: an orphan would hold
    // the lock for its whole 30 s lease, so a 5 s wait tells the two apart.
    let g = c.lock("cancel").wait(Duration::from_secs(5)).await.unwrap();
    assert_eq!(c.mutex("cancel").info().await.unwrap().hold_count, 1);
    g.unlock().await.unwrap();
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_nothing_fails_promptly() {
    // A port nobody listens on.
    let port = lock_tests::free_port();
    // A refused connection fails at once, with its cause, however long the connect timeout.
    let start = Instant::now();
    let err = LockClient::builder(&format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_secs(20))
        .build()
        .await
        .unwrap_err();
    let took = start.elapsed();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    let LockError::Unavailable {
        source: Some(cause),
        waited,
    } = &err
    else {
        panic!("no cause: {err:?}")
    };
    assert!(cause.is_connection_refusal(), "{cause:?}");
    // What it really waited (a refusal is at once), not the 20 s it would have waited.
    assert!(
        *waited <= took,
        "waited {waited:?}, but the build returned after {took:?}"
    );
    assert!(
        err.to_string().to_lowercase().contains("refused"),
        "the message names the cause: {err}"
    );
    assert!(std::error::Error::source(&err).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_password_fails_at_once_and_says_so() {
    let server = RedisServer::start();
    // (Set after start: the harness checks a new server without a password.)
    assert_eq!(server.cmd(&["CONFIG", "SET", "requirepass", "right"]), "OK");
    let start = Instant::now();
    let url = format!("redis://:wrong@{}", server.addr());
    let err = LockClient::builder(&url)
        .connect_timeout(Duration::from_secs(20))
        .build()
        .await
        .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(
            &err,
            LockError::AuthRequired {
                option: "url",
                refused: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_unavailable());
    let text = err.to_string();
    assert!(
        text.contains("refused the user and password")
            && text.contains("redis://user:password@host:port")
            && !text.contains("wrong"),
        "the message names the cause and the way out, never the password: {text}"
    );
    let url = format!("redis://:right@{}", server.addr());
    let c = LockClient::builder(&url).build().await.unwrap();
    c.lock("authenticated")
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_a_password_reached_without_one_says_how_to_give_it() {
    let server = RedisServer::start();
    assert_eq!(server.cmd(&["CONFIG", "SET", "requirepass", "right"]), "OK");
    // Connecting succeeds without a password; the first command is refused (NOAUTH). No
    // retry waits it out.
    let build = LockClient::builder(&server.url())
        .connect_timeout(Duration::from_secs(20))
        .connect_retry(Duration::from_secs(600))
        .build();
    let err = tokio::time::timeout(Duration::from_secs(60), build)
        .await
        .expect("a refusal is not retried")
        .unwrap_err();
    assert!(
        matches!(
            &err,
            LockError::AuthRequired {
                option: "url",
                refused: false,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_unavailable(), "no wait rides it out");
    let text = err.to_string();
    assert!(
        text.contains("requires authentication")
            && text.contains("redis://user:password@host:port")
            && text.contains("NOAUTH"),
        "{text}"
    );
}

/// A service started before its Redis: `build()` with `connect_retry` keeps trying until the
/// server comes up on the port it aims at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_started_before_its_redis_connects_once_it_is_up() {
    // Something on the port that hangs up on every connection, until Redis takes it: the
    // build's tries are seen (no sleep decides when Redis starts).
    let stand_in = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = stand_in.local_addr().unwrap().port();
    let build = tokio::spawn(
        LockClient::builder(&format!("redis://127.0.0.1:{port}"))
            .connect_timeout(Duration::from_secs(2))
            .connect_retry(Duration::from_secs(60))
            .build(),
    );
    for _ in 0..2 {
        let (hung_up, _) = tokio::time::timeout(Duration::from_secs(20), stand_in.accept())
            .await
            .expect("the build tries again")
            .unwrap();
        drop(hung_up);
    }
    assert!(!build.is_finished(), "still trying");
    drop(stand_in);
    let server = blocking(move || RedisServer::try_start_on(port, None, &[]))
        .unwrap_or_else(|e| panic!("redis-server on port {port}: {e}"));
    let c = tokio::time::timeout(Duration::from_secs(30), build)
        .await
        .expect("the build connects once Redis is up")
        .unwrap()
        .unwrap();
    let g = c.lock("late-redis").await.unwrap();
    assert!(g.unlock().await.unwrap());
    assert_clean(&server).await;
}

/// A Redis that never comes: after `connect_retry`'s bound, the error says how long the
/// client tried and the last cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_never_comes_fails_after_the_bound_with_the_cause() {
    let port = lock_tests::free_port();
    let max_wait = Duration::from_millis(700);
    let err = LockClient::builder(&format!("redis://127.0.0.1:{port}"))
        .connect_retry(max_wait)
        .build()
        .await
        .unwrap_err();
    let LockError::Unavailable {
        waited,
        source: Some(cause),
    } = &err
    else {
        panic!("Unavailable with a cause: {err:?}")
    };
    assert!(cause.is_connection_refusal(), "{cause:?}");
    assert!(*waited >= max_wait, "tried for the whole bound: {waited:?}");
    let text = err.to_string();
    assert!(text.to_lowercase().contains("refused"), "{text}");
    // Bad input is said at once, before anything connects.
    let bad = LockClient::builder(&format!("redis://127.0.0.1:{port}"))
        .connect_retry(Duration::ZERO)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(
            bad,
            LockError::InvalidOption {
                option: "connect_retry",
                ..
            }
        ),
        "{bad:?}"
    );
}

/// A renewal that fails (its connection black-holed) puts the lock at risk while it is still
/// held; a later renewal that succeeds clears that; with none, the lock is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_renewal_puts_the_lock_at_risk_until_one_succeeds() {
    const BOUND: Duration = Duration::from_secs(20);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    // Renewals every 2 s; a failed one is known within a few hundred ms.
    let lease = Duration::from_secs(6);
    let c = LockClient::builder(&proxy.url())
        .watchdog_lease(lease)
        .response_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let g = c.lock("risk").await.unwrap();
    let mut watch = g.watch_lease();
    let held = g.held_lock();
    assert_eq!(g.lease_state(), LeaseState::Held);

    let at_risk = g.at_risk();
    proxy.blackhole();
    tokio::time::timeout(BOUND, at_risk)
        .await
        .expect("a renewal fails");
    assert!(g.is_held(), "at risk, but still held");
    assert!(g.remaining() > Duration::ZERO);
    assert_eq!(g.lease_state(), LeaseState::AtRisk);
    assert_eq!(held.lease_state(), LeaseState::AtRisk, "every view says so");
    assert_eq!(watch.changed().await, LeaseState::AtRisk);

    proxy.pass();
    let recovered = tokio::time::timeout(BOUND, watch.changed())
        .await
        .expect("a later renewal succeeds");
    assert_eq!(recovered, LeaseState::Held);
    assert!(g.is_held());

    // No renewal succeeds again: at risk first, then lost when the lease runs out.
    let at_risk = g.at_risk();
    proxy.blackhole();
    tokio::time::timeout(BOUND, at_risk)
        .await
        .expect("a renewal fails again");
    assert!(g.is_held(), "at risk before it is lost");
    assert_eq!(watch.changed().await, LeaseState::AtRisk);
    tokio::time::timeout(BOUND, g.lost())
        .await
        .expect("lost when no renewal succeeds within the lease");
    assert!(!g.is_held());
    assert_eq!(g.lease_state(), LeaseState::Ended);
    assert_eq!(watch.changed().await, LeaseState::Ended);
    assert_eq!(watch.changed().await, LeaseState::Ended, "final");
    proxy.pass();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_gives_a_prompt_error_not_a_hang() {
    let mut server = RedisServer::start();
    let c = LockClient::builder(&server.url())
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    server.kill();
    let start = Instant::now();
    let err = c
        .lock("nowhere")
        .wait(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    // After a restart the same client works again: broken connections are replaced.
    server.restart();
    let g = c.lock("nowhere").await.unwrap();
    assert!(g.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_past_the_lease_loses_the_lock_to_a_waiter() {
    let mut server = RedisServer::start();
    let a = client_with_lease(&server.url(), SHORT).await;
    let b = client_with_lease(&server.url(), SHORT).await;
    let g = a.lock("paused").await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("paused").wait(Duration::from_secs(30)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.pause();
    let paused = Instant::now();
    // No renewal can succeed: the holder learns within its lease, while the server is
    // still stopped.
    tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .unwrap();
    assert!(paused.elapsed() <= SHORT + Duration::from_millis(300));
    tokio::time::sleep(SHORT).await;
    server.resume();
    // On resume the key has expired: the waiter takes the lock, the old holder cannot free it.
    let taken = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(taken.fencing_token() > g.fencing_token());
    assert!(!g.unlock().await.unwrap());
    assert!(b.mutex("paused").info().await.unwrap().held);
    assert!(taken.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_connection_loses_the_lock_within_the_lease() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let a = client_with_lease(&proxy.url(), SHORT).await;
    let g = a.lock("hole").await.unwrap();
    proxy.blackhole();
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .unwrap();
    assert!(
        start.elapsed() <= SHORT + Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
    assert!(!g.is_held());
    proxy.pass();
    drop(g);
    eventually("expired", || lock_keys(&server).is_empty()).await;
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_survive_a_killed_pubsub_connection() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let g = a.lock("resub").await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..5 {
        let b = b.clone();
        waiters.push(tokio::spawn(async move {
            let g = b.lock("resub").wait(Duration::from_secs(20)).await?;
            g.unlock().await
        }));
    }
    eventually("subscribed", || !server.pubsub_channels().is_empty()).await;
    server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    eventually("resubscribed", || !server.pubsub_channels().is_empty()).await;
    let released = Instant::now();
    assert!(g.unlock().await.unwrap());
    for w in waiters {
        assert!(w.await.unwrap().unwrap());
    }
    // Woken by messages, not by the 30 s lease.
    assert!(released.elapsed() < Duration::from_secs(5));
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loses_held_locks_and_the_client_recovers() {
    let mut server = RedisServer::start();
    let a = client_with_lease(&server.url(), SHORT).await;
    let g = a.lock("restart").await.unwrap();
    server.kill();
    server.restart();
    // The server came back empty: the next renewal finds the lock gone.
    tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .unwrap();
    let g2 = a.lock("restart").await.unwrap();
    assert!(g2.is_held());
    assert!(g2.unlock().await.unwrap());
    drop(g);
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_are_refused_before_reaching_redis() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let long = "x".repeat(513);
    for bad in ["", "a{b}", "}", "a b", "line\nfeed", "nul\0", long.as_str()] {
        let err = c.lock(bad).await.unwrap_err();
        assert!(
            matches!(err, LockError::InvalidName { .. }),
            "{bad:?}: {err:?}"
        );
        let err = c.try_lock(bad).await.unwrap_err();
        assert!(
            matches!(err, LockError::InvalidName { .. }),
            "{bad:?}: {err:?}"
        );
        assert!(matches!(
            c.mutex(bad).info().await,
            Err(LockError::InvalidName { .. })
        ));
        assert!(matches!(
            c.mutex(bad).force_unlock().await,
            Err(LockError::InvalidName { .. })
        ));
    }
    assert_eq!(server.dbsize(), 0);
    // Glob characters and quotes are ordinary names: no pattern, no script injection.
    for odd in ["*", "?", "[a]", "it's", "\"]]--", "订单:42"] {
        let g = c.lock(odd).await.unwrap();
        assert!(g.unlock().await.unwrap());
    }
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_options_are_refused() {
    let server = RedisServer::start();
    let url = server.url();
    let c = client(&url).await;
    for lease in [Duration::ZERO, Duration::from_micros(500), Duration::MAX] {
        let err = c.lock("x").lease(lease).await.unwrap_err();
        assert!(
            matches!(
                err,
                LockError::InvalidOption {
                    option: "lease",
                    ..
                }
            ),
            "{err:?}"
        );
        let err = c.try_lock("x").lease(lease).await.unwrap_err();
        assert!(matches!(err, LockError::InvalidOption { .. }), "{err:?}");
    }
    let builds = [
        LockClient::builder(&url).watchdog_lease(Duration::ZERO),
        LockClient::builder(&url).watchdog_lease(Duration::MAX),
        LockClient::builder(&url).fence_ttl(Duration::ZERO),
        LockClient::builder(&url).key_prefix("a{b}"),
        LockClient::builder(&url).key_prefix("has space"),
        LockClient::builder(&url).pool_size(0),
        LockClient::builder(&url).connect_timeout(Duration::ZERO),
        LockClient::builder("not a url"),
        LockClient::builder("http://127.0.0.1:1"),
        // Topologies: nothing to connect to, or nonsense, is refused before any connection.
        LockClient::builder_cluster(Vec::<String>::new()),
        LockClient::builder_cluster(["not a url"]),
        LockClient::builder_sentinel(Vec::<String>::new(), "svc"),
        LockClient::builder_sentinel([url.as_str()], ""),
        LockClient::builder_sentinel(["not a url"], "svc"),
        LockClient::builder_sentinel([url.as_str()], "svc").sentinel_primary_url("not a url"),
        LockClient::builder_sentinel([url.as_str()], "svc").pool(
            bb8_redis::bb8::Pool::builder()
                .build_unchecked(bb8_redis::RedisConnectionManager::new(url.as_str()).unwrap()),
        ),
    ];
    for b in builds {
        let err = b.build().await.unwrap_err();
        assert!(matches!(err, LockError::InvalidOption { .. }), "{err:?}");
    }
    // A huge wait is "forever", not an overflow.
    let g = c.lock("x").wait(Duration::MAX).await.unwrap();
    g.unlock().await.unwrap();
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_taken_by_another_key_type_is_an_error_not_busy() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    server.cmd(&["SET", "lock:{clash}", "someone else's string"]);
    let err = c
        .lock("clash")
        .wait(Duration::from_millis(100))
        .await
        .unwrap_err();
    if native(&c) {
        // The native protocol's lock is any string: this one is held, with no lease.
        assert!(
            matches!(
                err,
                LockError::Timeout {
                    holder_ttl: None,
                    ..
                }
            ),
            "{err:?}"
        );
        server.cmd(&["DEL", "lock:{clash}"]);
        server.cmd(&["HSET", "lock:{clash}", "a", "b"]);
        let err = c.try_lock("clash").await.unwrap_err();
        assert!(matches!(err, LockError::Redis(_)), "a hash: {err:?}");
        server.cmd(&["DEL", "lock:{clash}"]);
        assert_clean(&server).await;
        return;
    }
    assert!(matches!(err, LockError::Redis(_)), "{err:?}");
    assert!(!err.is_timeout());
    server.cmd(&["DEL", "lock:{clash}"]);
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_after_its_runtime_is_gone_expires_and_is_not_renewed() {
    let server = RedisServer::start();
    let url = server.url();
    // A runtime of its own, shut down while the guard is alive.
    let guard = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let guard = rt.block_on(async {
            let c = client_with_lease(&url, SHORT).await;
            c.lock("orphan").await.unwrap()
        });
        rt.shutdown_background();
        guard
    })
    .join()
    .unwrap();
    // Dropping it outside any runtime must not panic or block.
    drop(guard);
    // Nobody renews it: it expires within one lease.
    eventually("expired", || lock_keys(&server).is_empty()).await;
    assert_clean(&server).await;
}

/// Requests already waiting ride out a restart of Redis within their wait: every primitive's
/// waiter is woken by the dropped pub/sub connection, its attempts fail while the server is
/// down, and it gets the lock once the server is back (empty: the holders' locks are gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_every_primitive_ride_out_a_restart() {
    let mut server = RedisServer::start();
    let holder = client(&server.url()).await;
    let waiter = client_with_lease(&server.url(), Duration::from_secs(5)).await;
    let long = Duration::from_secs(60);
    let _lock = holder.lock("ride").lease(long).await.unwrap();
    let _permit = holder
        .semaphore("ride-sem", 1)
        .acquire(1)
        .lease(long)
        .await
        .unwrap();
    let _write = holder
        .read_write_lock("ride-rw")
        .write()
        .lease(long)
        .await
        .unwrap();
    let _fair = holder
        .fair_lock("ride-fair")
        .lock()
        .lease(long)
        .await
        .unwrap();

    let wait = Duration::from_secs(20);
    let w = waiter.clone();
    let lock = tokio::spawn(async move { w.lock("ride").wait(wait).await.map(|_| ()) });
    let w = waiter.clone();
    let permit = tokio::spawn(async move {
        w.semaphore("ride-sem", 1)
            .acquire(1)
            .wait(wait)
            .await
            .map(|_| ())
    });
    let w = waiter.clone();
    let read = tokio::spawn(async move {
        w.read_write_lock("ride-rw")
            .read()
            .wait(wait)
            .await
            .map(|_| ())
    });
    let w = waiter.clone();
    let fair =
        tokio::spawn(async move { w.fair_lock("ride-fair").lock().wait(wait).await.map(|_| ()) });
    eventually("all four wait on their channels", || {
        server.pubsub_channels().len() >= 4
    })
    .await;

    // Down long enough for the woken waiters to fail at least once.
    tokio::task::block_in_place(|| server.kill());
    tokio::time::sleep(Duration::from_millis(800)).await;
    tokio::task::block_in_place(|| server.restart());

    for (what, task) in [
        ("lock", lock),
        ("permit", permit),
        ("read", read),
        ("fair", fair),
    ] {
        let outcome = tokio::time::timeout(Duration::from_secs(15), task)
            .await
            .unwrap_or_else(|_| panic!("{what}: bounded"))
            .unwrap();
        assert!(outcome.is_ok(), "{what}: {outcome:?}");
    }
}

/// A renewal that gets no answer within the response timeout puts the hold at risk at once,
/// while the server is still frozen (the lease still runs: it is held), and the answer that
/// comes after the server resumes makes it held again. Measured from the acquisition: the
/// first renewal goes out a third of the lease later (5 s), so at risk comes about 5.5 s in;
/// before the response timeout had its say it came only when the healed and resent renewal
/// gave up (7.5 s in, measured).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_renewal_is_at_risk_then_held_again() {
    let mut server = RedisServer::start();
    let c = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_secs(15))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let g = c.lock("frozen").await.unwrap();
    let taken = Instant::now();
    blocking(|| server.pause());
    tokio::time::timeout(Duration::from_secs(20), g.at_risk())
        .await
        .expect("at risk while the server is frozen");
    let after = taken.elapsed();
    assert_eq!(g.lease_state(), LeaseState::AtRisk);
    assert!(g.is_held(), "at risk is still held");
    assert!(
        after < Duration::from_millis(7_000),
        "at risk {after:?} after the acquisition: the renewal (due at 5 s) went unanswered \
         for longer than the response timeout (0.5 s)"
    );
    blocking(|| server.resume());
    let mut watch = g.watch_lease();
    tokio::time::timeout(Duration::from_secs(15), async {
        while watch.state() != LeaseState::Held {
            watch.changed().await;
        }
    })
    .await
    .expect("held again once a renewal is answered");
    assert!(g.unlock().await.unwrap());
    assert_clean(&server).await;
}
