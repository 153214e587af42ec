//! Read-write locks against a real redis-server: readers overlap, a writer excludes everyone
//! (checked on shared state), crashed readers' shares expire alone, re-entry and downgrade,
//! writers are not starved.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lock_tests::RedisServer;
use lock_tests::fixtures::{client, client_with_lease, eventually};
use tokio::time::Instant;

async fn assert_rw_clean(server: &RedisServer) {
    eventually("no reader left", || {
        server.keys("lock:*:rw:readers").is_empty()
            || server
                .keys("lock:*:rw:readers")
                .iter()
                .all(|k| server.cmd(&["HLEN", k]) == "0")
    })
    .await;
    eventually("no writer left", || {
        server
            .keys("lock:*:rw")
            .iter()
            .all(|k| server.cmd(&["GET", k]).starts_with('|'))
    })
    .await;
    eventually("every channel unsubscribed", || {
        server.pubsub_channels().is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_overlap_and_a_writer_waits_for_them() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let r1 = a.read_write_lock("doc").read().await.unwrap();
    let r2 = b
        .read_write_lock("doc")
        .read()
        .wait(Duration::ZERO)
        .await
        .unwrap();
    assert!(r1.is_held() && r2.is_held());
    assert!(
        b.read_write_lock("doc")
            .write()
            .wait(Duration::ZERO)
            .await
            .unwrap_err()
            .is_timeout()
    );
    let writer = tokio::spawn({
        let b = b.clone();
        async move {
            b.read_write_lock("doc")
                .write()
                .wait(Duration::from_secs(20))
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(r1.unlock().await.unwrap());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!writer.is_finished(), "a reader still reads");
    let released = Instant::now();
    assert!(r2.unlock().await.unwrap());
    let w = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .unwrap()
        .unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "woken by the last reader"
    );
    assert!(w.fencing_token() > 0);
    assert!(w.unlock().await.unwrap());
    assert_rw_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_excludes_readers_and_writers() {
    let server = RedisServer::start();
    let value = Arc::new(AtomicU64::new(0));
    let torn = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let c = client(&server.url()).await;
        for t in 0..6 {
            let (c, value, torn, reads) = (c.clone(), value.clone(), torn.clone(), reads.clone());
            tasks.push(tokio::spawn(async move {
                let rw = c.read_write_lock("state");
                for _ in 0..6 {
                    if t % 3 == 0 {
                        let w = rw.write().wait(Duration::from_secs(30)).await.unwrap();
                        let v = value.load(Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_micros(500)).await;
                        value.store(v + 1, Ordering::SeqCst);
                        assert!(w.unlock().await.unwrap());
                    } else {
                        let r = rw.read().wait(Duration::from_secs(30)).await.unwrap();
                        let before = value.load(Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_micros(500)).await;
                        if value.load(Ordering::SeqCst) != before {
                            torn.fetch_add(1, Ordering::SeqCst);
                        }
                        reads.fetch_add(1, Ordering::SeqCst);
                        assert!(r.unlock().await.unwrap());
                    }
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
    assert_eq!(value.load(Ordering::SeqCst), 2 * 2 * 6, "lost writes");
    assert_eq!(
        torn.load(Ordering::SeqCst),
        0,
        "a write happened during a read"
    );
    assert_eq!(reads.load(Ordering::SeqCst), 2 * 4 * 6);
    assert_rw_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_readers_share_expires_without_freeing_the_others() {
    let server = RedisServer::start();
    let a = client_with_lease(&server.url(), Duration::from_millis(300)).await;
    let b = client(&server.url()).await;
    let rw_a = a.read_write_lock("shares");
    let crashed = rw_a.read().lease(Duration::from_millis(300)).await.unwrap();
    let live = rw_a.read().await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!crashed.is_held());
    assert!(live.is_held(), "renewed by the watchdog");
    let rw_b = b.read_write_lock("shares");
    assert!(
        rw_b.write()
            .wait(Duration::ZERO)
            .await
            .unwrap_err()
            .is_timeout()
    );
    assert!(live.unlock().await.unwrap());
    let w = rw_b.write().wait(Duration::from_secs(5)).await.unwrap();
    assert!(!crashed.unlock().await.unwrap());
    w.unlock().await.unwrap();
    assert_rw_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_re_enters_and_downgrades() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    lock_core::reentrant(async {
        let rw = a.read_write_lock("down");
        let w1 = rw.write().await.unwrap();
        let w2 = rw.write().wait(Duration::ZERO).await.unwrap();
        assert_eq!(w1.fencing_token(), w2.fencing_token());
        let r = rw.read().wait(Duration::ZERO).await.unwrap();
        assert!(w2.unlock().await.unwrap());
        assert!(w1.unlock().await.unwrap());
        // Downgraded: still reading; others may read, nobody may write.
        assert!(r.is_held());
        let other = b.read_write_lock("down");
        let r2 = other.read().wait(Duration::ZERO).await.unwrap();
        assert!(
            other
                .write()
                .wait(Duration::ZERO)
                .await
                .unwrap_err()
                .is_timeout()
        );
        r2.unlock().await.unwrap();
        r.unlock().await.unwrap();
    })
    .await;
    assert_rw_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_holds_new_readers_back_until_it_is_done_or_gives_up() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let c = client(&server.url()).await;
    let reader = a.read_write_lock("fair").read().await.unwrap();
    let writer = tokio::spawn({
        let b = b.clone();
        async move {
            let w = b
                .read_write_lock("fair")
                .write()
                .wait(Duration::from_secs(20))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            w.unlock().await.unwrap()
        }
    });
    eventually("the writer waits", || {
        !server.keys("lock:{fair}:rw:writer-waiting").is_empty()
    })
    .await;
    // A new reader holds back while a writer waits...
    let rw_c = c.read_write_lock("fair");
    assert!(
        rw_c.read()
            .wait(Duration::ZERO)
            .await
            .unwrap_err()
            .is_timeout()
    );
    // ...and gets in once the writer has had its turn, woken by the writer's release.
    let late_reader = tokio::spawn({
        let rw_c = rw_c.clone();
        async move { rw_c.read().wait(Duration::from_secs(20)).await.unwrap() }
    });
    reader.unlock().await.unwrap();
    assert!(writer.await.unwrap());
    let r = tokio::time::timeout(Duration::from_secs(5), late_reader)
        .await
        .unwrap()
        .unwrap();
    r.unlock().await.unwrap();

    // A writer that gives up removes its mark: readers go on at once.
    let reader = a.read_write_lock("fair").read().await.unwrap();
    let err = b
        .read_write_lock("fair")
        .write()
        .wait(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    eventually("the mark is gone", || {
        server.keys("lock:{fair}:rw:writer-waiting").is_empty()
    })
    .await;
    let r = rw_c.read().wait(Duration::ZERO).await.unwrap();
    r.unlock().await.unwrap();
    reader.unlock().await.unwrap();
    assert_rw_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_shows_readers_the_writer_and_a_waiting_writer() {
    let server = RedisServer::start();
    let a = client(&server.url()).await;
    let b = client(&server.url()).await;
    let lock = a.read_write_lock("shelf");
    assert_eq!(lock.info().await.unwrap(), Default::default());

    let r1 = lock.read().await.unwrap();
    let r2 = b.read_write_lock("shelf").read().await.unwrap();
    let info = lock.info().await.unwrap();
    assert_eq!((info.readers, info.read_shares), (2, 2));
    assert!(!info.writer.held && !info.writer_waiting);
    assert!(info.readers_ttl.unwrap() <= a.watchdog_lease());

    // A writer waits: it marks the lock.
    let writer = tokio::spawn({
        let b = b.clone();
        async move {
            b.read_write_lock("shelf")
                .write()
                .wait(Duration::from_secs(20))
                .await
        }
    });
    let mut waiting = false;
    for _ in 0..500 {
        if lock.info().await.unwrap().writer_waiting {
            waiting = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(waiting, "the waiting writer never showed");
    assert!(
        lock.try_read().await.unwrap().is_none(),
        "new readers hold back"
    );
    r1.unlock().await.unwrap();
    r2.unlock().await.unwrap();
    let w = writer.await.unwrap().unwrap();
    let info = lock.info().await.unwrap();
    assert!(info.writer.held && !info.writer_waiting);
    assert_eq!(info.writer.fencing_token, Some(w.fencing_token()));
    assert_eq!(info.readers, 0);
    assert!(lock.try_write().await.unwrap().is_none());
    w.unlock().await.unwrap();
}
