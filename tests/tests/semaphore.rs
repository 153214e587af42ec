//! Semaphores with leased permits against a real redis-server: never more holders than
//! permits across clients, waiting and waking, permits of a crashed holder coming back,
//! renewal, cancellation, bad input.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::LockError;
use lock_tests::RedisServer;
use lock_tests::fixtures::{client, client_with_lease, eventually};
use rand::Rng;
use tokio::time::Instant;

const SHORT: Duration = Duration::from_millis(300);

fn permits_held(server: &RedisServer, name: &str) -> usize {
    let reply = server.cmd(&["ZCARD", &format!("lock:{{{name}}}:permits")]);
    reply.parse().unwrap()
}

async fn assert_sem_clean(server: &RedisServer, name: &str) {
    eventually("every permit given back", || {
        permits_held(server, name) == 0
    })
    .await;
    eventually("every channel unsubscribed", || {
        server.pubsub_channels().is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_holders_than_permits_across_clients() {
    let server = RedisServer::start();
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let sections = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let c = client(&server.url()).await;
        for _ in 0..6 {
            let sem = c.semaphore("pool", 3);
            let (inside, max_inside, sections) =
                (inside.clone(), max_inside.clone(), sections.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let permit = sem.acquire(1).wait(Duration::from_secs(30)).await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    sections.fetch_add(1, Ordering::SeqCst);
                    assert!(permit.unlock().await.unwrap());
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
    assert_eq!(sections.load(Ordering::SeqCst), 90);
    let max = max_inside.load(Ordering::SeqCst);
    assert!(max <= 3, "{max} holders at once");
    assert!(
        max >= 2,
        "permits were never shared: the test did not exercise concurrency"
    );
    assert_sem_clean(&server, "pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_permits_at_once_and_a_waiter_wakes_on_release() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let sem_a = a.semaphore("slots", 5);
    let sem_b = b.semaphore("slots", 5);
    let three = sem_a.acquire(3).await.unwrap();
    assert_eq!(three.permits(), 3);
    assert!(sem_b.try_acquire(3).await.unwrap().is_none());
    let two = sem_b.try_acquire(2).await.unwrap().unwrap();
    let waiter = tokio::spawn(async move {
        let start = Instant::now();
        let g = sem_b
            .acquire(2)
            .wait(Duration::from_secs(20))
            .await
            .unwrap();
        (start.elapsed(), g.unlock().await.unwrap())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(three.unlock().await.unwrap());
    let (waited, released) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(released);
    // Woken by the release, not by the 30 s lease of the permits.
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    assert!(two.unlock().await.unwrap());
    assert_sem_clean(&server, "slots").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_of_a_crashed_holder_come_back_and_renewal_keeps_live_ones() {
    let server = RedisServer::start();
    let c = client_with_lease(&server.url(), SHORT).await;
    let sem = c.semaphore("leased", 2);
    // A crashed holder: its permit's lease runs out and nobody renews it.
    let crashed = sem
        .acquire(1)
        .lease(Duration::from_millis(300))
        .await
        .unwrap();
    // A live holder with a watchdog lease keeps its permit through several leases.
    let live = sem.acquire(1).await.unwrap();
    assert!(sem.try_acquire(1).await.unwrap().is_none());
    let start = Instant::now();
    let third = sem.acquire(1).wait(Duration::from_secs(10)).await.unwrap();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
    assert!(!crashed.is_held());
    tokio::time::sleep(SHORT * 3).await;
    assert!(live.is_held());
    assert!(sem.try_acquire(1).await.unwrap().is_none());
    assert!(!crashed.unlock().await.unwrap());
    assert!(live.unlock().await.unwrap());
    assert!(third.unlock().await.unwrap());
    assert_sem_clean(&server, "leased").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_permits_vanish() {
    let server = RedisServer::start();
    let c = client_with_lease(&server.url(), SHORT).await;
    let sem = c.semaphore("vanish", 2);
    let g = sem.acquire(2).await.unwrap();
    server.cmd(&["DEL", "lock:{vanish}:permits"]);
    tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .unwrap();
    assert!(!g.is_held());
    assert!(!g.unlock().await.unwrap());
    assert_sem_clean(&server, "vanish").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_permit_requests_leave_nothing_behind() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let other = client(&server.url()).await;
    let sem = c.semaphore("cancel", 2);
    let other_sem = other.semaphore("cancel", 2);
    let mut rng = rand::rng();
    let deadline = Instant::now() + Duration::from_secs(30);
    for i in 0..150 {
        assert!(Instant::now() < deadline, "round {i} ran out of time");
        let blocker = if i % 3 == 0 {
            Some(other_sem.acquire(2).await.unwrap())
        } else {
            None
        };
        let budget = Duration::from_micros(rng.random_range(0..3000));
        if let Ok(r) = tokio::time::timeout(budget, sem.acquire(1)).await {
            drop(r.unwrap());
        }
        if let Some(b) = blocker {
            b.unlock().await.unwrap();
        }
    }
    assert_sem_clean(&server, "cancel").await;
    let g = sem.acquire(2).wait(Duration::from_secs(5)).await.unwrap();
    g.unlock().await.unwrap();
    assert_sem_clean(&server, "cancel").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_semaphore_input_is_refused() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    for (size, n) in [(0, 1), (3, 0), (3, 4), (200_000, 1)] {
        let err = c.semaphore("bad", size).acquire(n).await.unwrap_err();
        assert!(matches!(err, LockError::InvalidOption { .. }), "{err:?}");
    }
    let err = c.semaphore("a b", 2).acquire(1).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidName { .. }), "{err:?}");
    let err = c
        .semaphore("ok", 2)
        .acquire(1)
        .lease(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        LockError::InvalidOption {
            option: "lease",
            ..
        }
    ));
    assert_eq!(server.dbsize(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_size_is_recorded_and_another_size_is_refused_while_permits_are_held() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let five = a.semaphore("sized", 5);
    let info = five.info().await.unwrap();
    assert_eq!(
        (info.size, info.held, info.free, info.holders),
        (None, 0, 5, 0)
    );

    let two = five.acquire(2).await.unwrap();
    let one = five.acquire(1).await.unwrap();
    let info = five.info().await.unwrap();
    assert_eq!(
        (info.size, info.held, info.free, info.holders),
        (Some(5), 3, 2, 2)
    );
    assert!(info.next_expiry.unwrap() <= a.watchdog_lease());

    // Another client that believes the semaphore has 10 permits is told, not let in.
    let err = b.semaphore("sized", 10).acquire(1).await.unwrap_err();
    let LockError::SizeMismatch {
        name,
        requested,
        recorded,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!((name.as_str(), *requested, *recorded), ("sized", 10, 5));
    assert!(err.to_string().contains("has 5 permits, not 10"), "{err}");
    assert!(b.semaphore("sized", 10).try_acquire(1).await.is_err());

    // Once every permit is back, the record goes with them: a new size may start.
    assert!(two.unlock().await.unwrap());
    assert!(one.unlock().await.unwrap());
    assert_eq!(five.info().await.unwrap().size, None);
    let ten = b.semaphore("sized", 10).acquire(7).await.unwrap();
    assert_eq!(
        b.semaphore("sized", 10).info().await.unwrap().size,
        Some(10)
    );
    ten.unlock().await.unwrap();
    assert_eq!(server.keys("lock:{sized}*"), Vec::<String>::new());
}

fn key_pttl(server: &RedisServer, key: &str) -> i64 {
    server.cmd(&["PTTL", key]).parse().unwrap()
}

/// A semaphore nobody holds is taken by the short path (no repeat check, purge or size
/// check): its keys still expire with the lease, and a second holder, a repeat and a size
/// mismatch still take the long one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_semaphores_keys_expire_with_the_first_permits_lease() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let (permits, size) = ("lock:{fresh}:permits", "lock:{fresh}:permits:size");
    let sem = c.semaphore("fresh", 2);
    let first = sem
        .try_acquire(1)
        .lease(Duration::from_secs(20))
        .await
        .unwrap()
        .expect("a free semaphore");
    for key in [permits, size] {
        let ttl = key_pttl(&server, key);
        assert!((1..=20_000).contains(&ttl), "{key} expires in {ttl} ms");
    }
    // The second permit, on a held semaphore: a longer lease stretches both keys.
    let second = sem
        .try_acquire(1)
        .lease(Duration::from_secs(40))
        .await
        .unwrap()
        .expect("one permit left");
    for key in [permits, size] {
        let ttl = key_pttl(&server, key);
        assert!(
            (20_001..=40_000).contains(&ttl),
            "{key} expires in {ttl} ms"
        );
    }
    assert!(
        sem.try_acquire(1).await.unwrap().is_none(),
        "no permit left"
    );
    let other_size = c.semaphore("fresh", 3).try_acquire(1).await;
    assert!(
        matches!(other_size, Err(LockError::SizeMismatch { .. })),
        "{other_size:?}"
    );
    assert!(first.unlock().await.unwrap());
    assert!(second.unlock().await.unwrap());
    assert_sem_clean(&server, "fresh").await;
    assert_eq!(
        server.cmd(&["EXISTS", size]),
        "0",
        "the size goes with the last permit"
    );
}
