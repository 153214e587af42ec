//! `force_unlock` of the fair lock, the read-write lock and the semaphore against a real
//! redis-server: the lock is freed while held, a waiter is woken by it (not by a lease or a
//! poll), the next holder's fencing token is greater than the forced holder's, and the forced
//! holder finds out (its release says not held, its lost signal fires). The mutex's is in
//! `mutex.rs`.

use std::time::Duration;

use lock_core::LockError;
use lock_tests::RedisServer;
use lock_tests::fixtures::{assert_clean, client, client_with_lease, eventually, woken};
use tokio::time::Instant;

const SHORT: Duration = Duration::from_millis(300);
/// Long enough that a waiter never looks again by itself during a test: whatever wakes it
/// within `woken`'s 3 s is the release message.
const LONG_WAIT: Duration = Duration::from_secs(60);

/// Waits until `n` channels are subscribed on `server`: the waiters listen.
async fn subscribed(server: &RedisServer, n: usize) {
    eventually("the waiters subscribed", || {
        server.pubsub_channels().len() >= n
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_is_freed_the_head_woken_and_the_counter_kept() {
    let server = RedisServer::start();
    let (holder, waiter, operator) = (
        client(&server.url()).await,
        client(&server.url()).await,
        client(&server.url()).await,
    );
    let forced = holder.fair_lock("printer").lock().await.unwrap();
    let before = operator.fair_lock("printer").info().await.unwrap();
    assert!(before.lock.owner.is_some());
    let task = tokio::spawn({
        let lock = waiter.fair_lock("printer").waiter_timeout(LONG_WAIT);
        async move { lock.lock().wait(Duration::from_secs(20)).await }
    });
    eventually("the waiter is queued", || {
        server.cmd(&["ZCARD", "lock:{printer}:fair:queue"]) == "1"
    })
    .await;
    let lock = operator.fair_lock("printer");
    assert!(lock.force_unlock().await.unwrap());
    let released = Instant::now();
    let next = woken(task, released).await;
    assert!(next.fencing_token() > forced.fencing_token());
    assert!(lock.info().await.unwrap().lock.held);
    // Nothing held by the forced holder any more; a second force finds the new holder.
    assert!(!forced.unlock().await.unwrap());
    assert!(lock.force_unlock().await.unwrap());
    assert!(!lock.force_unlock().await.unwrap(), "already free");
    assert!(!next.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_is_freed_writer_and_readers_and_its_waiters_woken() {
    let server = RedisServer::start();
    let (holder, waiter, operator) = (
        client(&server.url()).await,
        client(&server.url()).await,
        client(&server.url()).await,
    );
    let lock = operator.read_write_lock("catalog");

    // A writer held, another writer waiting.
    let writer = holder.read_write_lock("catalog").write().await.unwrap();
    let task = tokio::spawn({
        let lock = waiter.read_write_lock("catalog");
        async move { lock.write().wait(Duration::from_secs(20)).await }
    });
    subscribed(&server, 1).await;
    assert!(lock.force_unlock().await.unwrap());
    let next = woken(task, Instant::now()).await;
    let token = next.fencing_token();
    assert!(token > writer.fencing_token());
    assert!(!writer.unlock().await.unwrap());
    assert!(next.unlock().await.unwrap());

    // Two readers held, a writer waiting (its mark holds new readers back).
    let readers = [
        holder.read_write_lock("catalog").read().await.unwrap(),
        waiter.read_write_lock("catalog").read().await.unwrap(),
    ];
    let task = tokio::spawn({
        let lock = waiter.read_write_lock("catalog");
        async move { lock.write().wait(Duration::from_secs(20)).await }
    });
    eventually("the writer waits", || {
        server.cmd(&["EXISTS", "lock:{catalog}:rw:writer-waiting"]) == "1"
    })
    .await;
    let info = lock.info().await.unwrap();
    assert_eq!((info.readers, info.writer_waiting), (2, true));
    assert_eq!(info.reader_owners.len(), 2);
    assert!(lock.force_unlock().await.unwrap());
    let last = woken(task, Instant::now()).await;
    assert!(last.fencing_token() > token);
    for reader in readers {
        assert!(!reader.unlock().await.unwrap());
    }
    assert!(last.unlock().await.unwrap());
    assert!(!lock.force_unlock().await.unwrap(), "nothing held");
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_is_freed_and_its_waiter_woken() {
    let server = RedisServer::start();
    let (holder, waiter, operator) = (
        client(&server.url()).await,
        client(&server.url()).await,
        client(&server.url()).await,
    );
    let forced = holder.semaphore("exports", 2).acquire(2).await.unwrap();
    let task = tokio::spawn({
        let sem = waiter.semaphore("exports", 2);
        async move { sem.acquire(1).wait(Duration::from_secs(20)).await }
    });
    subscribed(&server, 1).await;
    // The size plays no part: any handle frees every permit.
    let sem = operator.semaphore("exports", 7);
    assert!(sem.force_unlock().await.unwrap());
    let next = woken(task, Instant::now()).await;
    let info = operator.semaphore("exports", 2).info().await.unwrap();
    assert_eq!((info.held, info.size), (1, Some(2)));
    assert_eq!(info.holder_owners.len(), 1);
    assert!(!forced.unlock().await.unwrap());
    assert!(next.unlock().await.unwrap());
    assert!(!sem.force_unlock().await.unwrap(), "nothing held");
    eventually("no permit key left", || {
        server.keys("lock:{exports}:permits*").is_empty()
    })
    .await;
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_holders_of_every_kind_find_out_at_their_next_renewal() {
    let server = RedisServer::start();
    let holder = client_with_lease(&server.url(), SHORT).await;
    let operator = client(&server.url()).await;
    let fair = holder.fair_lock("f").lock().await.unwrap();
    let write = holder.read_write_lock("w").write().await.unwrap();
    let read = holder.read_write_lock("r").read().await.unwrap();
    let permits = holder.semaphore("s", 3).acquire(2).await.unwrap();
    assert!(operator.fair_lock("f").force_unlock().await.unwrap());
    assert!(operator.read_write_lock("w").force_unlock().await.unwrap());
    assert!(operator.read_write_lock("r").force_unlock().await.unwrap());
    assert!(operator.semaphore("s", 3).force_unlock().await.unwrap());
    let within = Duration::from_secs(2);
    tokio::time::timeout(within, fair.lost()).await.unwrap();
    tokio::time::timeout(within, write.lost()).await.unwrap();
    tokio::time::timeout(within, read.lost()).await.unwrap();
    tokio::time::timeout(within, permits.lost()).await.unwrap();
    assert!(!fair.is_held() && !write.is_held() && !read.is_held() && !permits.is_held());
    // The fencing counters stayed: the next writer and fair holder get greater tokens.
    let next = operator.fair_lock("f").lock().await.unwrap();
    assert!(next.fencing_token() > fair.fencing_token());
    let next_write = operator.read_write_lock("w").write().await.unwrap();
    assert!(next_write.fencing_token() > write.fencing_token());
    drop((fair, write, read, permits));
    assert!(next.unlock().await.unwrap());
    assert!(next_write.unlock().await.unwrap());
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_refuses_bad_names_and_values_it_did_not_write() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    for bad in ["", "a b", "{x}"] {
        let refused = |r: Result<bool, LockError>| matches!(r, Err(LockError::InvalidName { .. }));
        assert!(refused(c.fair_lock(bad).force_unlock().await), "{bad:?}");
        assert!(refused(c.read_write_lock(bad).force_unlock().await));
        assert!(refused(c.semaphore(bad, 1).force_unlock().await));
    }
    assert_eq!(server.dbsize(), 0);
    // Never-used names: nothing to free, and nothing written.
    assert!(!c.fair_lock("none").force_unlock().await.unwrap());
    assert!(!c.read_write_lock("none").force_unlock().await.unwrap());
    assert!(!c.semaphore("none", 1).force_unlock().await.unwrap());
    assert_eq!(server.dbsize(), 0);
    // A value lock-core did not write is an error, never freed.
    server.cmd(&["SET", "lock:{foreign}:fair", "hello"]);
    server.cmd(&["SET", "lock:{foreign}:rw", "hello"]);
    assert!(c.fair_lock("foreign").force_unlock().await.is_err());
    assert!(c.read_write_lock("foreign").force_unlock().await.is_err());
    assert_eq!(server.cmd(&["GET", "lock:{foreign}:fair"]), "hello");
}
