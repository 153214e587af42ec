//! Locks on a Sentinel-managed primary with one replica and three sentinels: the client finds
//! the primary, follows a failover (commands, renewals and pub/sub), a replica-acknowledged
//! lock survives the failover, and an unacknowledged one can be lost — which fencing catches;
//! a rate limit's state lives on the primary.

use std::net::SocketAddr;
use std::time::Duration;

use lock_core::{LockClient, LockError};
use lock_tests::checkers::FencedStore;
use lock_tests::fixtures::{
    blocking, eventually, is_lock_of, lock_replicated, recovered, renewed, woken,
};
use lock_tests::{FaultProxy, SentinelGroup};
use tokio::time::Instant;

async fn sentinel_client(group: &SentinelGroup, lease: Duration) -> LockClient {
    LockClient::builder_sentinel(group.sentinel_urls(), group.master_name())
        .watchdog_lease(lease)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_finds_the_primary_and_its_locks_live_there() {
    let group = blocking(SentinelGroup::start);
    let c = sentinel_client(&group, Duration::from_secs(5)).await;
    let g = c.lock("found").await.unwrap();
    let value = group.primary().cmd(&["GET", "lock:{found}"]);
    assert!(is_lock_of(&value, &c, g.fencing_token()), "{value}");
    assert!(g.unlock().await.unwrap());

    // A rate limit's state lives on the primary too.
    let limit = c.rate_limit("found").per(Duration::from_secs(60), 1);
    assert!(limit.check().await.unwrap().is_allowed());
    assert!(!limit.check().await.unwrap().is_allowed());
    assert_eq!(group.primary().cmd(&["EXISTS", "lock:{found}:rate"]), "1");

    // A wrong service name is a typed error, not a hang.
    let started = Instant::now();
    let err = LockClient::builder_sentinel(group.sentinel_urls(), "no-such-service")
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::NoPrimary { service, .. } if service == "no-such-service"),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_acknowledged_lock_survives_a_failover_and_its_waiter_follows() {
    let mut group = blocking(SentinelGroup::start);
    // Long enough to outlast the failover (down-after 1 s + election) with room to spare.
    let lease = Duration::from_secs(12);
    let a = LockClient::builder_sentinel(group.sentinel_urls(), group.master_name())
        .watchdog_lease(lease)
        .min_replicas(1, Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let b = sentinel_client(&group, lease).await;
    let held = lock_replicated(&a, "f6").await;
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.lock("f6").wait(Duration::from_secs(40)).await })
    };
    let channel = "lock:{f6}:released";
    eventually("the waiter subscribed on the primary", || {
        group
            .primary()
            .cmd(&["PUBSUB", "CHANNELS"])
            .contains(channel)
    })
    .await;

    let new_primary = blocking(|| group.kill_primary_and_wait_failover());
    assert_eq!(group.primary().addr(), new_primary);
    recovered(&b, "f6-other").await;

    // The promoted replica has the acknowledged lock: nobody else gets it.
    assert!(b.try_lock("f6").await.unwrap().is_none());
    // The waiter's pub/sub connection moved to the new primary.
    eventually("the waiter subscribed on the new primary", || {
        group
            .primary()
            .cmd(&["PUBSUB", "CHANNELS"])
            .contains(channel)
    })
    .await;
    // The holder's watchdog renews on the new primary: the expiry moves later.
    renewed(&b, "f6", lease).await;
    assert!(held.is_held());

    let released = Instant::now();
    assert!(held.unlock().await.unwrap());
    assert!(woken(waiter, released).await.unlock().await.unwrap());
    // (The sentinels keep their own `__sentinel__:hello` channel.)
    eventually("no lock channel left", || {
        !group
            .primary()
            .pubsub_channels()
            .iter()
            .any(|c| c.starts_with("lock:"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_min_replicas_a_failover_can_lose_a_lock_and_fencing_rejects_the_stale_writer() {
    // The replica replicates through a proxy, so the test can keep one write from it.
    let mut proxy = None;
    let mut group = blocking(|| {
        SentinelGroup::start_with_replication_via(|primary: SocketAddr| {
            let p = tokio::runtime::Handle::current().block_on(FaultProxy::start(primary));
            let addr = p.addr();
            proxy = Some(p);
            addr
        })
    });
    let proxy = proxy.unwrap();
    let lease = Duration::from_secs(3);
    let a = sentinel_client(&group, lease).await;
    let b = sentinel_client(&group, lease).await;
    let store = FencedStore::new();

    // Replication stalls; the primary grants the lock anyway (asynchronous replication).
    proxy.blackhole();
    let held = a.lock("f6-lost").await.unwrap();
    let stale_token = held.fencing_token();
    store.write(stale_token, "a".to_owned()).unwrap();
    assert_eq!(group.replica().cmd(&["EXISTS", "lock:{f6-lost}"]), "0");

    // The primary dies before the replica saw the lock; the replica is promoted without it.
    blocking(|| group.kill_primary_and_wait_failover());
    recovered(&b, "f6-lost-other").await;

    // Documented unsafe: a second client now gets the lock the first never gave back.
    let second = b
        .try_lock("f6-lost")
        .await
        .unwrap()
        .expect("the failover lost the lock");
    assert!(second.fencing_token() > stale_token, "tokens still grow");
    store.write(second.fencing_token(), "b".to_owned()).unwrap();
    // What saves the data: the first holder's late write carries a smaller token.
    assert!(store.write(stale_token, "a-late".to_owned()).is_err());
    assert_eq!(store.value().as_deref(), Some("b"));
    // And the first holder learns at its next renewal (within a lease).
    tokio::time::timeout(lease * 2, held.lost())
        .await
        .expect("the first holder learns it lost the lock");
    assert!(!held.is_held());
    assert!(second.unlock().await.unwrap());
}

/// A primary with a password reached without one: the error says so and names the option
/// the password goes in (the primary's URL, not the sentinels'); given there, it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_password_missing_says_it_goes_in_the_primary_url() {
    let group = blocking(SentinelGroup::start);
    let master = group.master_name();
    // The sentinels and the replica learn the password first, so nothing fails over.
    for sentinel in group.sentinels() {
        assert_eq!(
            sentinel.cmd(&["SENTINEL", "SET", master, "auth-pass", "pw"]),
            "OK"
        );
    }
    let [primary, replica] = group.data_nodes() else {
        unreachable!("two data nodes")
    };
    assert_eq!(replica.cmd(&["CONFIG", "SET", "masterauth", "pw"]), "OK");
    assert_eq!(primary.cmd(&["CONFIG", "SET", "requirepass", "pw"]), "OK");
    assert_eq!(replica.cmd(&["CONFIG", "SET", "requirepass", "pw"]), "OK");

    let err = LockClient::builder_sentinel(group.sentinel_urls(), master)
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            LockError::AuthRequired {
                option: "sentinel_primary_url",
                refused: false,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("requires authentication")
            && text.contains("sentinel_primary_url")
            && text.contains("redis://user:password@host:port"),
        "{text}"
    );

    let c = LockClient::builder_sentinel(group.sentinel_urls(), master)
        .sentinel_primary_url("redis://:pw@primary/")
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let g = c.lock("authenticated").await.unwrap();
    assert!(g.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_no_primary_is_known_operations_fail_with_a_typed_error() {
    let mut group = blocking(SentinelGroup::start);
    let c = sentinel_client(&group, Duration::from_secs(3)).await;
    c.lock("np").await.unwrap().unlock().await.unwrap();
    // Both data nodes down: no sentinel can name a reachable primary.
    blocking(|| {
        group.replica_mut().kill();
        group.primary_mut().kill();
    });
    let started = Instant::now();
    let err = c.lock("np").wait(Duration::from_secs(1)).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "bounded: {:?}",
        started.elapsed()
    );
}

/// A graceful failover (`SENTINEL FAILOVER`): the old primary lives on as a replica and
/// answers writes with `READONLY`. The holder's renewals and release, and the waiter's
/// pub/sub, move to the new primary; the waiter is woken by the release, not by the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_failover_moves_holder_and_waiter_to_the_new_primary() {
    let mut group = blocking(SentinelGroup::start);
    let lease = Duration::from_secs(12);
    let a = LockClient::builder_sentinel(group.sentinel_urls(), group.master_name())
        .watchdog_lease(lease)
        .min_replicas(1, Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let b = sentinel_client(&group, lease).await;
    let held = lock_replicated(&a, "graceful").await;
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.lock("graceful").wait(Duration::from_secs(40)).await })
    };
    let channel = "lock:{graceful}:released".to_owned();
    eventually("the waiter subscribed on the primary", || {
        group.primary().pubsub_channels().contains(&channel)
    })
    .await;

    let new_primary = blocking(|| group.failover());
    assert_eq!(group.primary().addr(), new_primary);
    // The waiter's pub/sub follows the primary although its old connection still works.
    eventually("the waiter subscribed on the new primary", || {
        group.primary().pubsub_channels().contains(&channel)
    })
    .await;
    assert!(held.is_held());
    let released = Instant::now();
    assert!(held.unlock().await.unwrap(), "released on the new primary");
    // Woken by the release on the new primary, not by the 12 s lease.
    assert!(woken(waiter, released).await.unlock().await.unwrap());
}
