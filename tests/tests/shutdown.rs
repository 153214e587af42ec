//! `LockClient::shutdown` against a real redis-server: every hold of the client is given back
//! at once (another client takes each lock without waiting for a lease), the call is bounded,
//! and every later call of the client is refused with `LockError::ShutDown`.

use std::time::Duration;

use lock_core::{LockClient, LockError};
use lock_tests::RedisServer;
use lock_tests::fixtures::client;
use tokio::time::Instant;

fn shut<T: std::fmt::Debug>(r: Result<T, LockError>) {
    assert!(matches!(r, Err(LockError::ShutDown)), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_every_hold_back_and_refuses_later_calls() {
    let server = RedisServer::start();
    // A watchdog lease of 30 s (the default): without the shutdown, the names stay blocked
    // for that long.
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let order = a.lock("order:1").await.unwrap();
    // A re-entry counts twice in Redis; a fixed lease, a read side and a permit besides.
    let (again, fixed, read, permit) = lock_core::reentrant(async {
        let again = a.lock("order:2").await.unwrap();
        let inner = a.lock("order:2").await.unwrap();
        let fixed = a
            .lock("order:3")
            .lease(Duration::from_secs(600))
            .await
            .unwrap();
        let read = a.read_write_lock("doc:1").write().await.unwrap();
        let permit = a.semaphore("export", 1).acquire(1).await.unwrap();
        drop(inner);
        (again, fixed, read, permit)
    })
    .await;
    assert!(b.try_lock("order:1").await.unwrap().is_none(), "held");

    let started = Instant::now();
    let released = a.shutdown().await;
    let took = started.elapsed();
    assert_eq!(
        released, 5,
        "order:1, order:2 (twice), order:3, doc:1, export"
    );
    assert!(took < Duration::from_secs(3), "the bound: {took:?}");

    // Another client takes each lock at once: no lease to wait out.
    for name in ["order:1", "order:2", "order:3"] {
        let guard = b.try_lock(name).await.unwrap();
        assert!(guard.is_some(), "{name} was given back");
    }
    assert!(
        b.read_write_lock("doc:1")
            .try_write()
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        b.semaphore("export", 1)
            .try_acquire(1)
            .await
            .unwrap()
            .is_some()
    );

    // The shut client refuses everything, before sending anything.
    shut(a.lock("order:9").await);
    shut(a.try_lock("order:9").await);
    shut(a.mutex("order:1").info().await);
    shut(
        a.rate_limit("buyer:1")
            .per(Duration::from_secs(1), 5)
            .check()
            .await,
    );
    let mut connection = a.connection();
    let ping: Result<String, _> = redis::cmd("PING").query_async(&mut connection).await;
    let error = ping.unwrap_err().to_string();
    assert!(error.contains("shut down"), "{error}");
    // A clone is the same client.
    shut(a.clone().lock("order:10").await);
    // Its guards say they hold nothing, and dropping them sends nothing and never panics.
    assert!(!order.is_held());
    drop((order, again, fixed, read, permit));
    assert_eq!(a.shutdown().await, 0, "only the first call does anything");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_bounded_when_redis_does_not_answer() {
    let mut server = RedisServer::start();
    let a = LockClient::builder(&server.url())
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let _guard = a.lock("frozen:1").await.unwrap();
    server.pause();
    let started = Instant::now();
    let released = a.shutdown().await;
    // connect 300 ms + response 300 ms, with room for a loaded machine.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(released, 0);
    shut(a.lock("frozen:2").await);
    server.resume();
}
