//! Locks on a Redis Cluster (3 primaries on loopback, plus replicas where a failover is
//! tested): exclusion across clients, sharded pub/sub wake-ups, renewals grouped by slot,
//! cross-slot multi-locks refused before anything is sent, a slot migrated mid-run (MOVED and
//! ASK), and a primary failover.

use std::collections::HashMap;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockClient, LockError, LockGuard};
use lock_tests::fixtures::{
    blocking, command_calls, eventually, is_lock_of, lock_replicated, lua_calls, native, recovered,
    renewed, woken,
};
use lock_tests::{RedisCluster, RedisServer};
use tokio::task::JoinHandle;
use tokio::time::Instant;

async fn cluster_client(cluster: &RedisCluster, lease: Duration) -> LockClient {
    LockClient::builder_cluster(cluster.primary_urls())
        .watchdog_lease(lease)
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap()
}

fn key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// A lock name (starting with `prefix`) whose slot the primary `node` owns.
fn name_on(cluster: &RedisCluster, node: usize, prefix: &str) -> String {
    (0..100_000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|n| cluster.node_for_key(&key(n)) == node)
        .expect("some name hashes to every primary")
}

/// Another lock name in the same slot as `name`.
fn name_in_slot_of(name: &str, prefix: &str) -> String {
    let slot = RedisCluster::slot_of(&key(name));
    (0..1_000_000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|n| n != name && RedisCluster::slot_of(&key(n)) == slot)
        .expect("a name in the same slot")
}

/// Every node answered; no shard channel is left subscribed anywhere.
async fn assert_no_shard_channels(cluster: &RedisCluster) {
    for i in 0..cluster.nodes().len() {
        let node = cluster.node(i);
        eventually("every shard channel unsubscribed", || {
            node.query(&["PUBSUB", "SHARDCHANNELS"])
                .into_strings()
                .is_empty()
        })
        .await;
    }
}

/// `b` waits (up to 25 s) for the lock `name`, in a task of its own.
fn spawn_waiter(b: &LockClient, name: &str) -> JoinHandle<Result<LockGuard, LockError>> {
    let (b, name) = (b.clone(), name.to_owned());
    tokio::spawn(async move { b.lock(name).wait(Duration::from_secs(25)).await })
}

/// The release channel of the lock `name`.
fn channel(name: &str) -> String {
    format!("{}:released", key(name))
}

fn shard_channels(node: &RedisServer) -> Vec<String> {
    node.query(&["PUBSUB", "SHARDCHANNELS"]).into_strings()
}

/// Waits until `node` has the shard channel `channel` subscribed.
async fn shard_subscribed(node: &RedisServer, channel: &str) {
    eventually("the waiter subscribed on the lock's shard", || {
        shard_channels(node).iter().any(|c| c == channel)
    })
    .await;
}

fn reset_stats(cluster: &RedisCluster) {
    for i in 0..cluster.nodes().len() {
        cluster.node(i).cmd(&["CONFIG", "RESETSTAT"]);
    }
}

fn assert_no_publish(cluster: &RedisCluster) {
    for i in 0..cluster.nodes().len() {
        let calls = command_calls(cluster.node(i), "publish");
        assert_eq!(calls, 0, "no PUBLISH on node {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_exclude_across_clients_on_every_primary() {
    let cluster = blocking(|| RedisCluster::start_with(3, 0));
    let a = cluster_client(&cluster, Duration::from_secs(5)).await;
    let b = cluster_client(&cluster, Duration::from_secs(5)).await;
    let names: Vec<String> = (0..3).map(|n| name_on(&cluster, n, "excl")).collect();

    // Each lock lives on the primary owning its name's slot, and only there.
    for (owner, name) in names.iter().enumerate() {
        let guard = a.lock(name.clone()).await.unwrap();
        let value = cluster.node(owner).cmd(&["GET", &key(name)]);
        assert!(is_lock_of(&value, &a, guard.fencing_token()), "{value}");
        guard.unlock().await.unwrap();
    }

    // A read-yield-write counter per name, and the last fencing token seen per name.
    let counters: Arc<std::sync::Mutex<HashMap<String, (u64, u64)>>> = Arc::default();
    let mut tasks = Vec::new();
    for client in [a.clone(), b.clone()] {
        for name in names.clone() {
            let (client, counters) = (client.clone(), counters.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..25 {
                    let guard = client
                        .lock(name.clone())
                        .wait(Duration::from_secs(20))
                        .await
                        .unwrap();
                    let (seen, last_token) = counters
                        .lock()
                        .unwrap()
                        .get(&name)
                        .copied()
                        .unwrap_or((0, 0));
                    assert!(guard.fencing_token() > last_token, "tokens grow");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    counters
                        .lock()
                        .unwrap()
                        .insert(name.clone(), (seen + 1, guard.fencing_token()));
                    guard.unlock().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("bounded")
            .unwrap();
    }
    for name in &names {
        assert_eq!(
            counters.lock().unwrap()[name].0,
            50,
            "no lost update on {name}"
        );
        assert!(!a.mutex(name).info().await.unwrap().held);
    }
    assert_no_shard_channels(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_through_sharded_pubsub() {
    let cluster = blocking(|| RedisCluster::start_with(3, 0));
    let a = cluster_client(&cluster, Duration::from_secs(5)).await;
    let b = cluster_client(&cluster, Duration::from_secs(5)).await;
    let name = name_on(&cluster, 1, "wake");
    let owner = cluster.node(1);
    reset_stats(&cluster);

    // Held with a long fixed lease: only a message can wake the waiter early.
    let held = a
        .lock(name.clone())
        .lease(Duration::from_secs(30))
        .await
        .unwrap();
    let waiter = spawn_waiter(&b, &name);
    shard_subscribed(owner, &channel(&name)).await;
    let released = Instant::now();
    held.unlock().await.unwrap();
    woken(waiter, released).await.unlock().await.unwrap();

    assert!(
        command_calls(owner, "spublish") >= 1,
        "SPUBLISH on the owner"
    );
    assert_no_publish(&cluster);
    assert_no_shard_channels(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_locks_of_many_slots() {
    let cluster = blocking(|| RedisCluster::start_with(3, 0));
    let lease = Duration::from_millis(600);
    let c = cluster_client(&cluster, lease).await;
    let mut guards = Vec::new();
    for i in 0..40 {
        guards.push(c.lock(format!("renew-{i}")).await.unwrap());
    }
    let slots: std::collections::HashSet<u16> = (0..40)
        .map(|i| RedisCluster::slot_of(&key(&format!("renew-{i}"))))
        .collect();
    assert!(slots.len() > 30, "spread over many slots");
    // Four leases pass: only renewals (one script per slot) can keep them.
    tokio::time::sleep(lease * 4).await;
    for (i, g) in guards.iter().enumerate() {
        assert!(g.is_held(), "renew-{i} kept");
        let info = c.mutex(format!("renew-{i}")).info().await.unwrap();
        assert!(info.held, "renew-{i} held in Redis");
        assert!(info.ttl.unwrap() > Duration::ZERO);
    }
    for g in guards {
        assert!(g.unlock().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_atomic_multi_lock_across_slots_fails_before_sending_anything() {
    let cluster = blocking(|| RedisCluster::start_with(3, 0));
    let c = cluster_client(&cluster, Duration::from_secs(5)).await;
    let (x, y) = (name_on(&cluster, 0, "multi"), name_on(&cluster, 2, "multi"));
    reset_stats(&cluster);
    let err = c
        .multi_lock([x.clone(), y.clone()])
        .atomic()
        .lock()
        .await
        .unwrap_err();
    match &err {
        LockError::CrossSlot { first, second } => {
            let mut got = [first.clone(), second.clone()];
            got.sort();
            let mut want = [x.clone(), y.clone()];
            want.sort();
            assert_eq!(got, want);
        }
        other => panic!("expected CrossSlot, got {other:?}"),
    }
    for i in 0..3 {
        assert_eq!(lua_calls(cluster.node(i)), 0, "nothing sent");
    }
    // Names that share a slot are taken together, atomically.
    let z = name_in_slot_of(&x, "same");
    let both = c
        .multi_lock([x.clone(), z.clone()])
        .atomic()
        .lock()
        .await
        .unwrap();
    assert!(c.mutex(&x).info().await.unwrap().held && c.mutex(&z).info().await.unwrap().held);
    assert!(both.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_across_slots_is_taken_in_order_and_rolled_back() {
    let cluster = blocking(|| RedisCluster::start_with(3, 0));
    let a = cluster_client(&cluster, Duration::from_secs(5)).await;
    let b = cluster_client(&cluster, Duration::from_secs(5)).await;
    let names: Vec<String> = (0..3).map(|n| name_on(&cluster, n, "spread")).collect();

    // All or nothing: with one name held elsewhere, the request times out and gives back the
    // names it had taken.
    let blocker = b
        .lock(names[2].clone())
        .lease(Duration::from_secs(30))
        .await
        .unwrap();
    let err = a
        .multi_lock(names.clone())
        .lock()
        .wait(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Timeout { name, .. } if *name == names[2]),
        "{err:?}"
    );
    for name in &names[..2] {
        assert!(
            !b.mutex(name).info().await.unwrap().held,
            "{name} rolled back"
        );
    }
    assert!(blocker.unlock().await.unwrap());

    // Taken: every name held, guards in the caller's order, one unlock frees all.
    let reversed: Vec<String> = names.iter().rev().cloned().collect();
    let all = a.multi_lock(reversed.clone()).lock().await.unwrap();
    for (guard, name) in all.guards().iter().zip(&reversed) {
        assert_eq!(guard.name(), name);
        assert!(b.mutex(name).info().await.unwrap().held);
    }
    assert!(all.unlock().await.unwrap());

    // Overlapping multi-locks in opposite orders from two clients never deadlock, and
    // exclude each other.
    let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for (client, list) in [(a.clone(), names.clone()), (b.clone(), reversed.clone())] {
        for _ in 0..2 {
            let (client, list, inside) = (client.clone(), list.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let g = client
                        .multi_lock(list.clone())
                        .lock()
                        .wait(Duration::from_secs(20))
                        .await
                        .unwrap();
                    assert_eq!(inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 0);
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    assert!(g.unlock().await.unwrap());
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("no deadlock")
            .unwrap();
    }
    assert_no_shard_channels(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_mid_run_keeps_locks_renewed_and_waiters_woken() {
    let cluster = blocking(|| RedisCluster::start_with(3, 0));
    let lease = Duration::from_millis(900);
    let a = cluster_client(&cluster, lease).await;
    let b = cluster_client(&cluster, lease).await;
    let name = name_on(&cluster, 0, "mig");
    let renewed = name_in_slot_of(&name, "mig-renewed");
    let slot = RedisCluster::slot_of(&key(&name));

    let held = a
        .lock(name.clone())
        .lease(Duration::from_secs(30))
        .await
        .unwrap();
    let watched = a.lock(renewed.clone()).await.unwrap();
    let waiter = spawn_waiter(&b, &name);
    shard_subscribed(cluster.node(0), &channel(&name)).await;

    // MOVED: the whole slot, keys included, goes to primary 2.
    blocking(|| cluster.migrate_slot(slot, 2));
    assert_eq!(cluster.node_for_slot(slot), 2);
    let moved = cluster.node(2).cmd(&["GET", &key(&name)]);
    assert!(is_lock_of(&moved, &a, held.fencing_token()), "{moved}");

    // The watchdog keeps renewing at the new owner for several leases.
    tokio::time::sleep(lease * 3).await;
    assert!(watched.is_held(), "renewed across the move");
    assert!(b.mutex(&renewed).info().await.unwrap().held);

    // The release goes to the new owner and wakes the waiter, subscribed again there.
    let released = Instant::now();
    assert!(held.unlock().await.unwrap());
    woken(waiter, released).await.unlock().await.unwrap();

    // ASK: with the slot half-moved back, a lock not yet on the source is taken at the target.
    blocking(|| cluster.begin_migration(slot, 1));
    let fresh = name_in_slot_of(&name, "mig-ask");
    if native(&a) {
        // The native (and hybrid) protocol's acquisition touches two keys of the slot, the
        // lock and the slot's fencing counter (still on the source): the server refuses it
        // while they are split (Valkey 9 answers TRYAGAIN; Redis 7.0 queues the commands on
        // the key it no longer has with ASK and aborts the transaction), and it is refused,
        // typed, not granted on either node.
        let err = a.try_lock(fresh.clone()).await.unwrap_err();
        let refused = format!("{err:?}");
        assert!(
            refused.contains("TryAgain") || refused.contains("Transaction aborted"),
            "{err:?}"
        );
        // Each node answers 0, or redirects (MOVED, ASK) where the key is not its own.
        for node in cluster.nodes() {
            let exists = node.cmd(&["EXISTS", &key(&fresh)]);
            assert_ne!(exists, "1", "granted on one node");
        }
    } else {
        let g = a.lock(fresh.clone()).await.unwrap();
        assert!(b.mutex(&fresh).info().await.unwrap().held);
        assert!(g.unlock().await.unwrap());
    }
    blocking(|| cluster.finish_migration(slot, 1));
    let g = b.lock(fresh.clone()).await.unwrap();
    assert!(g.unlock().await.unwrap());
    assert!(watched.unlock().await.unwrap());
    assert_no_shard_channels(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_runs_out_during_a_failover_is_known_lost() {
    let mut cluster = blocking(RedisCluster::start);
    let lease = Duration::from_secs(1);
    let a = cluster_client(&cluster, lease).await;
    let b = cluster_client(&cluster, lease).await;
    let name = name_on(&cluster, 0, "failover");
    let held = a.lock(name.clone()).await.unwrap();
    let token = held.fencing_token();

    // The failover (node timeout 2 s + election) outlasts the 1 s lease.
    let promoted = blocking(|| cluster.failover(0));
    assert_eq!(cluster.node_for_key(&key(&name)), promoted);
    recovered(&b, &name_in_slot_of(&name, "failover-other")).await;

    tokio::time::timeout(lease * 2, held.lost())
        .await
        .expect("the holder learns it lost the lock");
    assert!(!held.is_held());
    let g = b.try_lock(name.clone()).await.unwrap().expect("free again");
    assert!(
        g.fencing_token() > token,
        "tokens keep growing after a failover"
    );
    g.unlock().await.unwrap();
    assert!(matches!(
        held.unlock().await,
        Ok(false) | Err(LockError::Lost { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_acknowledged_lock_survives_a_primary_failover() {
    let mut cluster = blocking(RedisCluster::start);
    // Long enough to outlast the failover (node timeout 2 s + election) with room to spare.
    let lease = Duration::from_secs(15);
    let a = LockClient::builder_cluster(cluster.primary_urls())
        .watchdog_lease(lease)
        .min_replicas(1, Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let b = cluster_client(&cluster, lease).await;
    let name = name_on(&cluster, 0, "survivor");
    let held = lock_replicated(&a, &name).await;

    let promoted = blocking(|| cluster.failover(0));
    assert_eq!(cluster.node_for_key(&key(&name)), promoted);
    recovered(&b, &name_in_slot_of(&name, "survivor-other")).await;

    // The promoted replica has the lock: nobody else gets it, and the holder's watchdog
    // renews it there: its expiry moves later. (Not "its TTL grows": every renewal sets the
    // TTL to the full lease, so when `before` is read just after one, no TTL read after the
    // next renewal is larger unless it comes even sooner after it.)
    assert!(b.try_lock(name.clone()).await.unwrap().is_none());
    renewed(&b, &name, lease).await;
    assert!(held.is_held());
    assert!(held.unlock().await.unwrap());
    assert!(!b.mutex(&name).info().await.unwrap().held);
}

/// `MOVED` replies `node` sent since its last `CONFIG RESETSTAT` (`INFO errorstats`).
fn moved_replies(node: &RedisServer) -> u64 {
    let info = node.cmd(&["INFO", "errorstats"]);
    info.lines()
        .find_map(|line| line.strip_prefix("errorstat_MOVED:count="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_coordinated_failover_the_first_acquisition_goes_where_moved_says() {
    let cluster = blocking(RedisCluster::start);
    let b = cluster_client(&cluster, Duration::from_secs(5)).await;
    // Acquisitions acknowledged by a replica (`WAIT`) go on a connection of their own.
    let acked = LockClient::builder_cluster(cluster.primary_urls())
        .min_replicas(1, Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let name = name_on(&cluster, 0, "moved");
    let other = name_in_slot_of(&name, "moved-acked");
    // The clients learn that node 0 owns the slot, and send nothing more.
    let g = b.lock(name.clone()).await.unwrap();
    let token = g.fencing_token();
    assert!(g.unlock().await.unwrap());
    assert!(
        lock_replicated(&acked, &other)
            .await
            .unlock()
            .await
            .unwrap()
    );

    // A coordinated failover: the replica takes over, the old primary stays up as its replica
    // (answering MOVED for the slot), and every node agrees before it returns.
    let replica = cluster.replica_of(0);
    assert_eq!(blocking(|| cluster.manual_failover(replica)), 0);
    assert_eq!(cluster.node_for_key(&key(&name)), replica);
    cluster.node(0).cmd(&["CONFIG", "RESETSTAT"]);

    // The client's slot map still names node 0: the first call meets MOVED there and is taken
    // at the new owner all the same (a native `MULTI`/`EXEC` sent again by lock-core, a script
    // call redirected by the redis crate), without a second call.
    let g = b
        .try_lock(name.clone())
        .await
        .unwrap_or_else(|e| panic!("the first call after the failover failed: {e:?}"))
        .expect("nobody holds it");
    assert!(
        moved_replies(cluster.node(0)) >= 1,
        "the old owner redirected"
    );
    assert!(g.fencing_token() > token, "tokens keep growing");
    let stored = cluster.node(replica).cmd(&["GET", &key(&name)]);
    assert!(is_lock_of(&stored, &b, g.fencing_token()), "{stored}");
    assert!(g.unlock().await.unwrap());
    let again = b.try_lock(name.clone()).await.unwrap().expect("free again");
    assert!(again.unlock().await.unwrap());

    // So is an acknowledged one, and its `WAIT` goes where the lock was written.
    let g = acked
        .try_lock(other.clone())
        .await
        .unwrap_or_else(|e| panic!("the first acknowledged call failed: {e:?}"))
        .expect("nobody holds it");
    let stored = cluster.node(replica).cmd(&["GET", &key(&other)]);
    assert!(is_lock_of(&stored, &acked, g.fencing_token()), "{stored}");
    assert!(g.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_pubsub_connection_is_subscribed_again_and_the_waiter_still_woken() {
    let cluster = blocking(|| RedisCluster::start_with(3, 0));
    let a = cluster_client(&cluster, Duration::from_secs(5)).await;
    let b = cluster_client(&cluster, Duration::from_secs(5)).await;
    let name = name_on(&cluster, 2, "killed");
    let owner = cluster.node(2);
    let held = a
        .lock(name.clone())
        .lease(Duration::from_secs(30))
        .await
        .unwrap();
    let waiter = spawn_waiter(&b, &name);
    let subscribed = || shard_channels(owner).contains(&channel(&name));
    eventually("the waiter subscribed", subscribed).await;
    let killed = owner.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert_ne!(killed, "0", "a pub/sub client was killed");
    eventually("subscribed again after the kill", subscribed).await;

    let released = Instant::now();
    assert!(held.unlock().await.unwrap());
    woken(waiter, released).await.unlock().await.unwrap();
    assert_no_shard_channels(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_read_write_and_fair_locks_wake_their_waiters_on_a_cluster() {
    let cluster = blocking(|| RedisCluster::start_with(3, 0));
    let a = cluster_client(&cluster, Duration::from_secs(5)).await;
    let b = cluster_client(&cluster, Duration::from_secs(5)).await;
    reset_stats(&cluster);
    let long = Duration::from_secs(30);
    let wait = Duration::from_secs(20);

    // Each holder keeps its lock with a long fixed lease: only a release message wakes the
    // waiter early.
    let permits = a
        .semaphore("c-sem", 2)
        .acquire(2)
        .lease(long)
        .await
        .unwrap();
    let write = a.read_write_lock("c-rw").write().lease(long).await.unwrap();
    let fair = a.fair_lock("c-fair").lock().lease(long).await.unwrap();
    let sem_waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.semaphore("c-sem", 2).acquire(1).wait(wait).await })
    };
    let read_waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.read_write_lock("c-rw").read().wait(wait).await })
    };
    let fair_waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.fair_lock("c-fair").lock().wait(wait).await })
    };
    eventually("the three waiters subscribed", || {
        (0..3)
            .map(|i| shard_channels(cluster.node(i)).len())
            .sum::<usize>()
            >= 3
    })
    .await;

    let released = Instant::now();
    assert!(permits.unlock().await.unwrap());
    assert!(write.unlock().await.unwrap());
    assert!(fair.unlock().await.unwrap());
    assert!(woken(sem_waiter, released).await.unlock().await.unwrap());
    assert!(woken(read_waiter, released).await.unlock().await.unwrap());
    assert!(woken(fair_waiter, released).await.unlock().await.unwrap());
    assert_no_publish(&cluster);
    assert_no_shard_channels(&cluster).await;
}

/// F14 on a Cluster: a node stalled by `DEBUG SLEEP` bounds acquisitions of its locks (a typed
/// error, or success after the stall), never a hang; locks on other nodes are unaffected;
/// afterwards the client works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_node_bounds_acquisitions_and_spares_the_other_nodes() {
    let cluster = blocking(|| RedisCluster::start_with(3, 0));
    let c = cluster_client(&cluster, Duration::from_secs(5)).await;
    let stalled = name_on(&cluster, 1, "stalled");
    let healthy = name_on(&cluster, 2, "healthy");
    let url = format!("redis://127.0.0.1:{}", cluster.node(1).port());
    let sleeper = tokio::spawn(async move {
        let client = redis::Client::open(url).unwrap();
        // No response timeout: this returns when the node wakes up.
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        let () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(3)
            .query_async(&mut conn)
            .await
            .unwrap();
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let g = c.lock(healthy.clone()).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    g.unlock().await.unwrap();

    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(10), c.lock(stalled.clone()))
        .await
        .expect("never a hang");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    match outcome {
        Ok(g) => {
            g.unlock().await.unwrap();
        }
        Err(e) => assert!(e.is_unavailable(), "{e:?}"),
    }
    sleeper.await.unwrap();
    // Awake again: the node's locks work at once.
    let started = Instant::now();
    let g = c.lock(stalled.clone()).await.unwrap();
    assert!(g.unlock().await.unwrap());
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replicas_an_acknowledged_cluster_lock_is_given_back() {
    let cluster = blocking(|| RedisCluster::start_with(3, 0));
    let c = LockClient::builder_cluster(cluster.primary_urls())
        .min_replicas(1, Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let name = name_on(&cluster, 1, "unacked");
    let err = c.lock(name.clone()).await.unwrap_err();
    assert!(
        matches!(
            &err,
            LockError::NotReplicated {
                acked: 0,
                required: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!c.mutex(&name).info().await.unwrap().held, "given back");
    // The node keeps only the free lock's fencing counter (`|0|<token>|…`).
    let value = cluster.node(1).cmd(&["GET", &key(&name)]);
    assert!(value.starts_with('|') || value == "(nil)", "{value}");
}

/// `WAIT` blocks the node connection it runs on. With a replica stalled, acknowledged
/// acquisitions each wait their full timeout; the watchdog's renewals, on the other cluster
/// connection, must not queue behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_stalled_replica_does_not_delay_renewals() {
    let mut cluster = blocking(RedisCluster::start);
    let lease = Duration::from_millis(900);
    let c = LockClient::builder_cluster(cluster.primary_urls())
        .watchdog_lease(lease)
        .min_replicas(1, Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let held_name = name_on(&cluster, 0, "renewed");
    let held = lock_replicated(&c, &held_name).await;

    let replica = cluster.replica_of(0);
    blocking(|| cluster.node_mut(replica).pause());
    // Acknowledged acquisitions on the same node: each waits 2 s for the stalled replica.
    let tries = {
        let c = c.clone();
        let names: Vec<String> = (0..4)
            .map(|i| name_on(&cluster, 0, &format!("try{i}")))
            .collect();
        tokio::spawn(async move {
            let attempts = names.iter().map(|n| c.lock(n.clone()).into_future());
            futures_util::future::join_all(attempts).await
        })
    };
    // Three leases pass while those wait: only renewals that do not queue behind `WAIT` keep
    // the lock.
    tokio::time::sleep(lease * 3).await;
    assert!(held.is_held(), "renewals were delayed past the lease");
    // Each fails as an outage: `NotReplicated`, or a response timeout for those queued
    // behind another's `WAIT` on the same node connection.
    for outcome in tries.await.unwrap() {
        assert!(
            outcome.as_ref().is_err_and(LockError::is_unavailable),
            "{outcome:?}"
        );
    }
    blocking(|| cluster.node_mut(replica).resume());
    assert!(held.unlock().await.unwrap());
}
