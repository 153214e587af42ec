//! Multi-lock against a real redis-server: all or nothing, waiting, no deadlock between
//! overlapping multi-locks, re-entry, cancellation, bad input.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::LockError;
use lock_tests::RedisServer;
use lock_tests::fixtures::{assert_clean, client, eventually, lock_keys};
use rand::Rng;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing_when_one_is_busy() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let held = a.lock("b").await.unwrap();
    let err = b
        .multi_lock(["a", "b", "c"])
        .lock()
        .wait(Duration::ZERO)
        .await
        .unwrap_err();
    let LockError::Timeout {
        name, holder_ttl, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(name, "b");
    assert!(holder_ttl.is_some());
    // Nothing partial: only A's lock exists.
    assert_eq!(lock_keys(&server), vec!["lock:{b}".to_owned()]);
    held.unlock().await.unwrap();
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_the_busy_one_then_takes_all() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let held = a.lock("y").await.unwrap();
    let y_token = held.fencing_token();
    let waiter = tokio::spawn(async move {
        let g = b
            .multi_lock(["x", "y", "z"])
            .lock()
            .wait(Duration::from_secs(20))
            .await
            .unwrap();
        let tokens = g.fencing_tokens();
        assert!(g.is_held());
        assert!(g.unlock().await.unwrap());
        tokens
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(lock_keys(&server), vec!["lock:{y}".to_owned()]);
    let released = Instant::now();
    held.unlock().await.unwrap();
    let tokens = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    // Woken by the release message, not the 30 s lease.
    assert!(released.elapsed() < Duration::from_secs(3));
    assert_eq!(tokens.len(), 3);
    assert!(tokens[1] > y_token, "tokens follow the names' order");
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_multi_locks_exclude_and_never_deadlock() {
    let server = RedisServer::start();
    let clients = [client(&server.url()).await, client(&server.url()).await];
    // Two counters updated by read-sleep-write under multi-locks taken in opposite orders.
    let x = Arc::new(AtomicU64::new(0));
    let y = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (ci, c) in clients.iter().enumerate() {
        for t in 0..4 {
            let (c, x, y) = (c.clone(), x.clone(), y.clone());
            let names = if (ci + t) % 2 == 0 {
                ["x", "y"]
            } else {
                ["y", "x"]
            };
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let g = c
                        .multi_lock(names)
                        .lock()
                        .wait(Duration::from_secs(30))
                        .await
                        .unwrap();
                    let (rx, ry) = (x.load(Ordering::SeqCst), y.load(Ordering::SeqCst));
                    tokio::time::sleep(Duration::from_micros(300)).await;
                    x.store(rx + 1, Ordering::SeqCst);
                    y.store(ry + 1, Ordering::SeqCst);
                    assert!(g.unlock().await.unwrap());
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
    assert_eq!(x.load(Ordering::SeqCst), 80);
    assert_eq!(y.load(Ordering::SeqCst), 80);
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_re_enters_what_its_scope_holds() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    lock_core::reentrant(async {
        let a = c.lock("r1").await.unwrap();
        let both = c
            .multi_lock(["r1", "r2"])
            .lock()
            .wait(Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(both.fencing_tokens()[0], a.fencing_token());
        assert_eq!(c.mutex("r1").info().await.unwrap().hold_count, 2);
        assert_eq!(c.mutex("r2").info().await.unwrap().hold_count, 1);
        assert!(both.unlock().await.unwrap());
        assert!(c.mutex("r1").info().await.unwrap().held);
        assert!(!c.mutex("r2").info().await.unwrap().held);
        a.unlock().await.unwrap();
    })
    .await;
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_multi_locks_leave_nothing_behind() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let other = client(&server.url()).await;
    let mut rng = rand::rng();
    let deadline = Instant::now() + Duration::from_secs(30);
    for i in 0..150 {
        assert!(Instant::now() < deadline, "round {i} ran out of time");
        let blocker = if i % 3 == 0 {
            Some(other.lock("m2").await.unwrap())
        } else {
            None
        };
        let budget = Duration::from_micros(rng.random_range(0..3000));
        if let Ok(r) = tokio::time::timeout(budget, c.multi_lock(["m1", "m2", "m3"]).lock()).await {
            drop(r.unwrap());
        }
        if let Some(b) = blocker {
            b.unlock().await.unwrap();
        }
    }
    eventually("nothing held", || lock_keys(&server).is_empty()).await;
    let g = c
        .multi_lock(["m1", "m2", "m3"])
        .lock()
        .wait(Duration::from_secs(5))
        .await
        .unwrap();
    g.unlock().await.unwrap();
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_multi_lock_input_is_refused() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let none: [&str; 0] = [];
    assert!(matches!(
        c.multi_lock(none).lock().await,
        Err(LockError::InvalidOption {
            option: "names",
            ..
        })
    ));
    assert!(matches!(
        c.multi_lock(["a", "b", "a"]).lock().await,
        Err(LockError::InvalidOption {
            option: "names",
            ..
        })
    ));
    assert!(matches!(
        c.multi_lock(["a", "b{"]).lock().await,
        Err(LockError::InvalidName { .. })
    ));
    let many: Vec<String> = (0..65).map(|i| format!("n{i}")).collect();
    assert!(matches!(
        c.multi_lock(many).lock().await,
        Err(LockError::InvalidOption { .. })
    ));
    assert!(matches!(
        c.multi_lock(["a"]).lock().lease(Duration::ZERO).await,
        Err(LockError::InvalidOption {
            option: "lease",
            ..
        })
    ));
    assert_eq!(server.dbsize(), 0);
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_reports_each_name_in_the_order_given() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let both = a.multi_lock(["m2", "m1"]);
    let guard = both.lock().await.unwrap();
    let infos = both.info().await.unwrap();
    assert_eq!(infos.len(), 2);
    assert!(infos.iter().all(|i| i.held));
    let tokens: Vec<Option<u64>> = guard.fencing_tokens().into_iter().map(Some).collect();
    assert_eq!(
        infos.iter().map(|i| i.fencing_token).collect::<Vec<_>>(),
        tokens
    );
    assert_eq!(lock_core::Guard::fencing_token(&guard), None);
    assert_eq!(guard.name(), "m2+m1");
    guard.unlock().await.unwrap();
    assert!(both.info().await.unwrap().iter().all(|i| !i.held));
    assert_clean(&server).await;
}
