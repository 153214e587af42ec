//! Fair locks against a real redis-server: arrival order across clients, dead and departing
//! waiters, one wake-up per release.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_tests::RedisServer;
use lock_tests::fixtures::{client, eventually};
use tokio::time::Instant;

fn queued(server: &RedisServer, name: &str) -> usize {
    server
        .cmd(&["ZCARD", &format!("lock:{{{name}}}:fair:queue")])
        .parse()
        .unwrap()
}

async fn assert_fair_clean(server: &RedisServer, name: &str) {
    eventually("the queue is empty", || queued(server, name) == 0).await;
    eventually("the lock is free", || {
        let v = server.cmd(&["GET", &format!("lock:{{{name}}}:fair")]);
        v == "(nil)" || v.starts_with('|')
    })
    .await;
    eventually("every channel unsubscribed", || {
        server.pubsub_channels().is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_across_clients_get_the_lock_in_arrival_order() {
    let server = RedisServer::start();
    let clients = [client(&server.url()).await, client(&server.url()).await];
    let holder = clients[0].fair_lock("turns").lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let lock = clients[i % 2].fair_lock("turns");
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = lock.lock().wait(Duration::from_secs(60)).await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert!(g.unlock().await.unwrap());
        }));
        // The next waiter arrives only once this one is queued.
        eventually("queued", || queued(&server, "turns") == i + 1).await;
    }
    assert!(holder.unlock().await.unwrap());
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());
    assert_fair_clean(&server, "turns").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiter_delays_the_queue_only_until_its_deadline() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let holder = c.fair_lock("dead").lock().await.unwrap();
    // A waiter that died right after queueing: first in line, it will never call again.
    let time = server.cmd(&["TIME"]);
    let mut parts = time.lines();
    let (secs, micros): (u64, u64) = (
        parts.next().unwrap().parse().unwrap(),
        parts.next().unwrap().parse().unwrap(),
    );
    let now_ms = secs * 1000 + micros / 1000;
    server.cmd(&["ZADD", "lock:{dead}:fair:queue", "1", "dead-client:1"]);
    server.cmd(&[
        "ZADD",
        "lock:{dead}:fair:deadlines",
        &(now_ms + 800).to_string(),
        "dead-client:1",
    ]);
    let waiter = tokio::spawn({
        let c = c.clone();
        async move {
            let g = c
                .fair_lock("dead")
                .waiter_timeout(Duration::from_millis(600))
                .lock()
                .wait(Duration::from_secs(20))
                .await
                .unwrap();
            g.unlock().await.unwrap()
        }
    });
    eventually("queued behind the dead one", || {
        queued(&server, "dead") == 2
    })
    .await;
    let released = Instant::now();
    assert!(holder.unlock().await.unwrap());
    // The release woke the dead head; the live waiter gets its turn when the dead one's
    // deadline passes, not never.
    assert!(
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap()
    );
    assert!(released.elapsed() < Duration::from_secs(3));
    assert_fair_clean(&server, "dead").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_queue_and_passes_the_turn_on() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let holder = a.fair_lock("leave").lock().await.unwrap();
    let quitter = b.fair_lock("leave").lock().wait(Duration::from_millis(300));
    let patient = tokio::spawn({
        let b = b.clone();
        async move {
            // Arrives second.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let g = b
                .fair_lock("leave")
                .lock()
                .wait(Duration::from_secs(20))
                .await
                .unwrap();
            g.unlock().await.unwrap()
        }
    });
    assert!(quitter.await.unwrap_err().is_timeout());
    eventually("the quitter left", || queued(&server, "leave") == 1).await;
    let released = Instant::now();
    assert!(holder.unlock().await.unwrap());
    assert!(
        tokio::time::timeout(Duration::from_secs(5), patient)
            .await
            .unwrap()
            .unwrap()
    );
    // Woken at once by the release, not by a deadline.
    assert!(released.elapsed() < Duration::from_millis(1500));
    // A single attempt never queues, and never jumps the queue.
    let g = a.fair_lock("leave").try_lock().await.unwrap().unwrap();
    assert!(b.fair_lock("leave").try_lock().await.unwrap().is_none());
    assert_eq!(queued(&server, "leave"), 0);
    g.unlock().await.unwrap();
    assert_fair_clean(&server, "leave").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_counts_the_queue() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let lock = a.fair_lock("desk");
    let held = lock.lock().await.unwrap();
    let info = lock.info().await.unwrap();
    assert!(info.lock.held);
    assert_eq!(info.lock.fencing_token, Some(held.fencing_token()));
    assert_eq!(info.queued, 0);
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let lock = lock.clone();
            // Each unlocks itself: they get the lock in queue order, not in spawn order.
            tokio::spawn(async move {
                let guard = lock.lock().wait(Duration::from_secs(20)).await?;
                guard.unlock().await
            })
        })
        .collect();
    let mut queued = 0;
    for _ in 0..500 {
        queued = lock.info().await.unwrap().queued;
        if queued == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(queued, 3);
    held.unlock().await.unwrap();
    for waiter in waiters {
        assert!(waiter.await.unwrap().unwrap());
    }
    assert_eq!(lock.info().await.unwrap().queued, 0);
}

/// A free fair lock with nobody queued is taken without touching the queue, and its release
/// wakes nobody: the queue's keys are never written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_fair_lock_with_an_empty_queue_leaves_the_queue_alone() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let fair = c.fair_lock("calm");
    for _ in 0..3 {
        let guard = fair.try_lock().await.unwrap().expect("free");
        assert!(guard.fencing_token() > 0);
        assert!(guard.unlock().await.unwrap());
    }
    for key in ["lock:{calm}:fair:queue", "lock:{calm}:fair:deadlines"] {
        assert_eq!(server.cmd(&["EXISTS", key]), "0", "{key}");
    }
    assert_eq!(
        server.cmd(&["EXISTS", "lock:{calm}:fair"]),
        "1",
        "its counter is kept"
    );
}
