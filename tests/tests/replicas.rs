//! Replica-acknowledged locks (`min_replicas`) on a primary with one replica: an acquisition
//! succeeds only once the replica has the lock, and one the replica did not confirm is given
//! back with a typed error.

use std::time::Duration;

use lock_core::{LockClient, LockError};
use lock_tests::fixtures::{assert_clean, is_lock_of};
use lock_tests::{RedisServer, Reply};

/// How long `WAIT` waits for the replica: generous, so a loaded machine does not fail a grant.
const ACK: Duration = Duration::from_secs(1);

/// A primary and a replica whose replication link is up.
async fn primary_and_replica() -> (RedisServer, RedisServer) {
    // No diskless-sync delay: by default the primary waits 5 s for more replicas before the
    // first full sync.
    let no_delay = ["--repl-diskless-sync-delay", "0"];
    let primary = RedisServer::start_with(&no_delay);
    let port = primary.port().to_string();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &port, no_delay[0], no_delay[1]]);
    replica_acks(&primary).await;
    (primary, replica)
}

/// Waits until a replica acknowledges writes: a write followed by `WAIT 1` on one connection
/// is confirmed (the replica's link being up, or the primary listing it online, comes earlier).
async fn replica_acks(primary: &RedisServer) {
    until("a replica acknowledges writes", || {
        let replies = primary.query_many(&[&["SET", "probe", "1"], &["WAIT", "1", "200"]]);
        matches!(replies.last(), Some(Reply::Integer(1)))
    })
    .await;
}

/// Waits (up to 30 s: replication steps are slower than the 5 s of `eventually` on a loaded
/// machine) until `check` holds.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn acked_client(url: &str) -> LockClient {
    LockClient::builder(url)
        .min_replicas(1, ACK)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_lock_is_on_the_replica_when_granted() {
    let (primary, replica) = primary_and_replica().await;
    let c = acked_client(&primary.url()).await;
    for i in 0..20 {
        let name = format!("acked-{i}");
        let guard = c.lock(name.clone()).await.unwrap();
        // WAIT returned 1: the replica has the write, at once, not eventually.
        let on_replica = replica.cmd(&["GET", &format!("lock:{{{name}}}")]);
        let token = guard.fencing_token();
        assert!(
            is_lock_of(&on_replica, &c, token),
            "replica has {on_replica:?}, token {token}"
        );
        guard.unlock().await.unwrap();
    }
    assert_clean(&primary).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_replica_the_acquisition_is_given_back_with_a_typed_error() {
    let primary = RedisServer::start();
    let c = acked_client(&primary.url()).await;
    let err = c.lock("lonely").await.unwrap_err();
    match &err {
        LockError::NotReplicated {
            name,
            acked,
            required,
            timeout,
        } => {
            assert_eq!(name, "lonely");
            assert_eq!((*acked, *required, *timeout), (0, 1, ACK));
        }
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(err.is_unavailable());
    let err = c.try_lock("lonely").await.unwrap_err();
    assert!(matches!(err, LockError::NotReplicated { .. }), "{err:?}");
    // Given back before the error was returned, so anyone can take it at once.
    assert!(!c.mutex("lonely").info().await.unwrap().held);
    let plain = LockClient::connect(&primary.url()).await.unwrap();
    let taken = plain.try_lock("lonely").await.unwrap();
    taken
        .expect("the unconfirmed lock was given back")
        .unlock()
        .await
        .unwrap();
    assert_clean(&primary).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_replica_fails_acquisitions_cleanly_until_it_returns() {
    let (primary, mut replica) = primary_and_replica().await;
    let c = acked_client(&primary.url()).await;
    c.lock("before").await.unwrap().unlock().await.unwrap();

    replica.pause();
    let started = tokio::time::Instant::now();
    let err = c.lock("during").await.unwrap_err();
    assert!(
        matches!(err, LockError::NotReplicated { acked: 0, .. }),
        "{err:?}"
    );
    // Bounded by the acknowledgement timeout plus round trips, not by a lease.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !c.mutex("during").info().await.unwrap().held,
        "given back at once"
    );

    replica.resume();
    replica_acks(&primary).await;
    let mut guard = None;
    for _ in 0..50 {
        match c.lock("during").await {
            Ok(g) => {
                guard = Some(g);
                break;
            }
            Err(LockError::NotReplicated { .. }) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    guard
        .expect("acquisitions succeed once the replica answers")
        .unlock()
        .await
        .unwrap();
    assert_clean(&primary).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_is_acknowledged_or_given_back() {
    let (primary, replica) = primary_and_replica().await;
    let c = acked_client(&primary.url()).await;
    let multi = c.multi_lock(["m1", "m2"]).lock().await.unwrap();
    let on_replica = replica.cmd(&["GET", "lock:{m2}"]);
    assert!(
        is_lock_of(&on_replica, &c, multi.fencing_tokens()[1]),
        "{on_replica}"
    );
    assert!(multi.unlock().await.unwrap());
    let permit = c.semaphore("sem", 2).acquire(1).await.unwrap();
    assert_eq!(replica.cmd(&["ZCARD", "lock:{sem}:permits"]), "1");
    assert!(permit.unlock().await.unwrap());
    let read = c.read_write_lock("rw").read().await.unwrap();
    assert_eq!(replica.cmd(&["HLEN", "lock:{rw}:rw:readers"]), "1");
    assert!(read.unlock().await.unwrap());
    let fair = c.fair_lock("fair").lock().await.unwrap();
    assert_eq!(replica.cmd(&["EXISTS", "lock:{fair}:fair"]), "1");
    assert!(fair.unlock().await.unwrap());

    // Without a replica every one of them is refused, and nothing is left held.
    drop(replica);
    until("the primary noticed", || {
        primary
            .cmd(&["INFO", "replication"])
            .contains("connected_slaves:0")
    })
    .await;
    let refused = |e: LockError| assert!(matches!(e, LockError::NotReplicated { .. }), "{e:?}");
    refused(c.multi_lock(["m1", "m2"]).lock().await.unwrap_err());
    refused(c.semaphore("sem", 2).acquire(1).await.unwrap_err());
    refused(c.read_write_lock("rw").write().await.unwrap_err());
    refused(c.read_write_lock("rw").read().await.unwrap_err());
    refused(c.fair_lock("fair").lock().await.unwrap_err());
    for name in ["m1", "m2"] {
        assert!(
            !c.mutex(name).info().await.unwrap().held,
            "{name} given back"
        );
    }
    assert_eq!(primary.cmd(&["ZCARD", "lock:{sem}:permits"]), "0");
    assert_eq!(primary.cmd(&["HLEN", "lock:{rw}:rw:readers"]), "0");
    assert_clean(&primary).await;
}

#[tokio::test]
async fn bad_replica_options_are_refused() {
    let primary = RedisServer::start();
    for (n, timeout) in [
        (0, ACK),
        (17, ACK),
        (1, Duration::ZERO),
        (1, Duration::from_secs(7200)),
    ] {
        let err = LockClient::builder(&primary.url())
            .min_replicas(n, timeout)
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                LockError::InvalidOption {
                    option: "min_replicas",
                    ..
                }
            ),
            "{n} {timeout:?}: {err:?}"
        );
    }
}

/// F7, split brain: the replica is promoted on the other side of a partition (here by hand,
/// `REPLICAOF NO ONE`, as Sentinel would) while a client still talks to the old primary.
/// Without `min_replicas` the old primary grants a lock the new one grants too; with it, the
/// old primary — which no replica follows any more — cannot get its grant confirmed, so the
/// client gives it back and reports `NotReplicated`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_brain_old_primary_cannot_grant_an_acknowledged_lock() {
    let (old_primary, new_primary) = primary_and_replica().await;
    let acked = acked_client(&old_primary.url()).await;
    let plain_old = LockClient::connect(&old_primary.url()).await.unwrap();
    assert_eq!(new_primary.cmd(&["REPLICAOF", "NO", "ONE"]), "OK");
    until("the old primary lost its replica", || {
        old_primary
            .cmd(&["INFO", "replication"])
            .contains("connected_slaves:0")
    })
    .await;
    let plain_new = LockClient::connect(&new_primary.url()).await.unwrap();

    // Documented unsafe without the option: both sides grant the same lock.
    let on_new = plain_new.lock("split").await.unwrap();
    let on_old = plain_old.lock("split").await.unwrap();
    assert!(on_new.is_held() && on_old.is_held(), "two holders at once");
    on_old.unlock().await.unwrap();

    // With it, the isolated side refuses.
    let err = acked.lock("split").await.unwrap_err();
    assert!(
        matches!(err, LockError::NotReplicated { acked: 0, .. }),
        "{err:?}"
    );
    assert!(!plain_old.mutex("split").info().await.unwrap().held);
    on_new.unlock().await.unwrap();
    assert_clean(&old_primary).await;
    assert_clean(&new_primary).await;
}
