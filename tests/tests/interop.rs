//! Clients of different mutex protocols on the same names, as during a rolling upgrade (see
//! DESIGN.md, "Protocols side by side"): the native and the hybrid protocols keep a lock the
//! same way and share names as clients of one protocol do; the scripted protocol keeps it
//! another way, and a scripted client and a hybrid one never hold one name together, though
//! each fails on the other's lock rather than waiting for it.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{LockClient, MutexProtocol};
use lock_tests::RedisServer;
use lock_tests::fixtures::{assert_clean, native_server};

async fn speaking(server: &RedisServer, protocol: MutexProtocol) -> LockClient {
    let c = LockClient::builder(&server.url())
        .mutex_protocol(protocol)
        .build()
        .await
        .unwrap();
    assert_eq!(c.server_capabilities().mutex_protocol, protocol);
    c
}

/// Waits for every task (a panic in one is the test's), for at most a minute.
async fn join_within_a_minute(mut tasks: tokio::task::JoinSet<()>) {
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(task) = tasks.join_next().await {
            task.unwrap();
        }
    })
    .await
    .expect("the tasks finished within a minute");
}

/// On Valkey 9 (the only server with both): 8 tasks, half on a native client and half on a
/// hybrid one, take one name 20 times each with `lock()` (a waiter woken by the other
/// protocol's release): one holder at a time, tokens increasing, every cycle done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_and_hybrid_clients_share_a_name_as_one_protocol_does() {
    let server = RedisServer::start();
    if !native_server(&server) {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED native_and_hybrid_clients_share_a_name_as_one_protocol_does: the test \
             server has no DELIFEQ (Valkey 9.0 or later)"
        );
        return;
    }
    let native = speaking(&server, MutexProtocol::Native).await;
    let hybrid = speaking(&server, MutexProtocol::Hybrid).await;
    // One holds, the other sees it busy, and takes it once it is given back.
    let held = native.lock("shared").await.unwrap();
    assert!(hybrid.try_lock("shared").await.unwrap().is_none());
    let first = held.fencing_token();
    assert!(held.unlock().await.unwrap());
    let taken = hybrid
        .try_lock("shared")
        .await
        .unwrap()
        .expect("free again");
    assert!(taken.fencing_token() > first);
    assert!(taken.unlock().await.unwrap());

    const CYCLES: usize = 20;
    let inside = Arc::new(AtomicUsize::new(0));
    let last = Arc::new(std::sync::Mutex::new(0u64));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8 {
        let c = if i % 2 == 0 {
            native.clone()
        } else {
            hybrid.clone()
        };
        let (inside, last, done) = (inside.clone(), last.clone(), done.clone());
        tasks.spawn(async move {
            for _ in 0..CYCLES {
                let g = c.lock("shared").await.unwrap();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                {
                    let mut last = last.lock().unwrap();
                    assert!(g.fencing_token() > *last, "token went back");
                    *last = g.fencing_token();
                }
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(g.unlock().await.unwrap());
                done.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    join_within_a_minute(tasks).await;
    assert_eq!(done.load(Ordering::SeqCst), 8 * CYCLES);
    assert_clean(&server).await;
}

/// A scripted client and a hybrid one on one name (Redis 7, or Valkey 9 with the hybrid
/// protocol pinned): each sees the other's held lock as not takeable (the hybrid one as busy,
/// the scripted one as a value it did not write), the hybrid one clears a free lock string of
/// the scripts and takes the name, and under contention there is never more than one holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_and_hybrid_clients_never_hold_one_name_together() {
    let server = RedisServer::start();
    let hybrid = speaking(&server, MutexProtocol::Hybrid).await;
    let scripted = speaking(&server, MutexProtocol::Scripted).await;

    let held = hybrid.lock("a").await.unwrap();
    let refused = scripted.try_lock("a").await;
    assert!(
        refused.is_err(),
        "a hybrid lock is not the scripts': {refused:?}"
    );
    let value = server.cmd(&["GET", "lock:{a}"]);
    assert!(
        value.starts_with(hybrid.client_id()),
        "left as it was: {value}"
    );
    assert!(held.unlock().await.unwrap());

    let held = scripted.lock("a").await.unwrap();
    assert!(hybrid.try_lock("a").await.unwrap().is_none(), "busy");
    assert!(held.unlock().await.unwrap());
    // The scripts keep a free lock string for its counter: the hybrid client clears it.
    assert!(server.cmd(&["GET", "lock:{a}"]).starts_with('|'));
    let taken = hybrid
        .try_lock("a")
        .await
        .unwrap()
        .expect("a free lock string");
    assert!(taken.unlock().await.unwrap());

    // Both at once, bounded: 2 tasks per client, 100 attempts each.
    let inside = Arc::new(AtomicUsize::new(0));
    let held = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..4 {
        let c = if i % 2 == 0 {
            hybrid.clone()
        } else {
            scripted.clone()
        };
        let (inside, held) = (inside.clone(), held.clone());
        tasks.spawn(async move {
            for _ in 0..100 {
                // The scripted client's attempt on a hybrid lock is an error: not held.
                let Ok(Some(g)) = c.try_lock("b").await else {
                    tokio::task::yield_now().await;
                    continue;
                };
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                held.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(g.unlock().await.unwrap());
            }
        });
    }
    join_within_a_minute(tasks).await;
    assert!(held.load(Ordering::SeqCst) > 0, "nobody ever held it");
    assert_clean(&server).await;
}
