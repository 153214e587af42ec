//! Self-tests of the multi-node harness: [`RedisCluster`] and [`SentinelGroup`].
//!
//! Everything here talks raw RESP through [`RedisServer::query`], so the checks
//! depend on nothing but the harness itself.

use std::time::Instant;

use lock_tests::cluster::SLOT_COUNT;
use lock_tests::{RedisCluster, RedisServer, Reply, SentinelGroup, init_tracing};

/// `ROLE`'s first field (`master`, `slave` or `sentinel`).
fn role(node: &RedisServer) -> String {
    node.query(&["ROLE"]).into_strings().remove(0)
}

/// Asserts that `reply` is a `-MOVED slot 127.0.0.1:port` redirection.
fn assert_moved(reply: &Reply, slot: u16, to: &RedisServer) {
    assert_eq!(
        reply,
        &Reply::Error(format!("MOVED {slot} 127.0.0.1:{}", to.port())),
        "expected a MOVED redirection to port {}",
        to.port()
    );
}

/// A primary other than `owner`.
fn other_primary(cluster: &RedisCluster, owner: usize) -> usize {
    cluster
        .primaries()
        .into_iter()
        .find(|&p| p != owner)
        .expect("a cluster has at least 3 primaries")
}

#[test]
fn cluster_forms_and_redirects() {
    init_tracing();
    let started = Instant::now();
    let cluster = RedisCluster::start();
    tracing::info!(elapsed = ?started.elapsed(), "cluster up");

    assert_eq!(cluster.nodes().len(), 6);
    assert_eq!(cluster.urls().len(), 6);
    assert!(
        cluster
            .urls()
            .iter()
            .all(|u| u.starts_with("redis://127.0.0.1:") && u.ends_with('/'))
    );
    assert!(cluster.nodes().iter().all(|n| n.port() != 6379));
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3);
    assert_eq!(cluster.primary_urls().len(), 3);
    let ranges = cluster.slot_ranges();
    let covered: u32 = ranges.iter().map(|r| u32::from(r.end - r.start) + 1).sum();
    assert_eq!(covered, u32::from(SLOT_COUNT));
    for &p in &primaries {
        assert_eq!(role(cluster.node(p)), "master");
        let replica = cluster.replica_of(p);
        assert!(!primaries.contains(&replica));
        assert_eq!(role(cluster.node(replica)), "slave");
        assert_eq!(cluster.primary_of(replica), p);
    }

    // The Rust slot function agrees with the server, hash tags included.
    let mut keys: Vec<String> = (0..40).map(|i| format!("key-{i}")).collect();
    keys.extend(
        [
            "lock:{a}:x",
            "lock:{a}:y",
            "{a}",
            "a",
            "lock:{}:x",
            "{}{a}",
            "lock:{{a}}",
            "lock:{a",
            "lock:a}{b}",
            "",
            "héllo-ü",
        ]
        .map(str::to_owned),
    );
    for key in &keys {
        let server = cluster
            .node(primaries[0])
            .query(&["CLUSTER", "KEYSLOT", key]);
        assert_eq!(
            server,
            Reply::Integer(i64::from(RedisCluster::slot_of(key))),
            "slot of {key:?}"
        );
    }
    assert_eq!(
        RedisCluster::slot_of("lock:{a}:x"),
        RedisCluster::slot_of("a")
    );

    // Keys are served by their owner; another primary redirects with MOVED.
    for key in ["lock:{a}:x", "lock:{b}:x", "lock:{c}:x", "plain"] {
        let slot = RedisCluster::slot_of(key);
        let owner = cluster.node_for_slot(slot);
        assert_eq!(cluster.node_for_key(key), owner);
        assert_eq!(cluster.node(owner).cmd(&["SET", key, "v"]), "OK");
        assert_eq!(cluster.node(owner).cmd(&["GET", key]), "v");
        let wrong = other_primary(&cluster, owner);
        assert_moved(
            &cluster.node(wrong).query(&["GET", key]),
            slot,
            cluster.node(owner),
        );
    }
    let key = RedisCluster::key_for_slot("lock:", 1234);
    assert_eq!(RedisCluster::slot_of(&key), 1234);
    tracing::info!(elapsed = ?started.elapsed(), "done");
}

#[test]
fn cluster_migrates_slots_with_ask_window() {
    init_tracing();
    let started = Instant::now();
    let cluster = RedisCluster::start();

    // Full migration: the key follows the slot.
    let key = "lock:{migrate}:x";
    let slot = RedisCluster::slot_of(key);
    let source = cluster.node_for_slot(slot);
    let target = other_primary(&cluster, source);
    assert_eq!(cluster.node(source).cmd(&["SET", key, "moved"]), "OK");
    cluster.migrate_slot(slot, target);
    assert_eq!(cluster.node_for_slot(slot), target);
    assert_eq!(cluster.node(target).cmd(&["GET", key]), "moved");
    assert_moved(
        &cluster.node(source).query(&["GET", key]),
        slot,
        cluster.node(target),
    );
    // Every node agrees, replicas included.
    for node in cluster.nodes() {
        let reply = node.query(&["GET", key]);
        if node.port() != cluster.node(target).port() && role(node) == "master" {
            assert_moved(&reply, slot, cluster.node(target));
        }
    }
    cluster.migrate_slot(slot, target); // no-op

    // Split migration: ASK in the middle.
    let present = "lock:{ask}:present";
    let missing = "lock:{ask}:missing";
    let slot = RedisCluster::slot_of(present);
    let source = cluster.node_for_slot(slot);
    let target = other_primary(&cluster, source);
    assert_eq!(cluster.node(source).cmd(&["SET", present, "here"]), "OK");
    cluster.begin_migration(slot, target);
    let ask = format!("ASK {slot} 127.0.0.1:{}", cluster.node(target).port());
    // The source still serves what it has, and sends the rest to the target.
    assert_eq!(cluster.node(source).cmd(&["GET", present]), "here");
    assert_eq!(
        cluster.node(source).query(&["GET", missing]),
        Reply::Error(ask)
    );
    // The target only serves the slot after ASKING.
    assert_moved(
        &cluster.node(target).query(&["GET", missing]),
        slot,
        cluster.node(source),
    );
    let replies = cluster
        .node(target)
        .query_many(&[&["ASKING"], &["SET", missing, "new"]]);
    assert_eq!(
        replies,
        vec![Reply::Status("OK".into()), Reply::Status("OK".into())]
    );
    cluster.finish_migration(slot, target);
    assert_eq!(cluster.node_for_slot(slot), target);
    assert_eq!(cluster.node(target).cmd(&["GET", present]), "here");
    assert_eq!(cluster.node(target).cmd(&["GET", missing]), "new");
    assert_moved(
        &cluster.node(source).query(&["GET", present]),
        slot,
        cluster.node(target),
    );
    tracing::info!(elapsed = ?started.elapsed(), "done");
}

#[test]
fn cluster_failover_promotes_the_replica() {
    init_tracing();
    let started = Instant::now();
    let mut cluster = RedisCluster::start();

    let key = "lock:{failover}:x";
    let slot = RedisCluster::slot_of(key);
    let primary = cluster.node_for_slot(slot);
    assert_eq!(cluster.node(primary).cmd(&["SET", key, "before"]), "OK");
    // Make sure the write reached the replica before crashing the primary.
    assert_eq!(cluster.node(primary).cmd(&["WAIT", "1", "5000"]), "1");

    let replica = cluster.replica_of(primary);
    let promoted = cluster.failover(primary);
    assert_eq!(promoted, replica);
    tracing::info!(elapsed = ?started.elapsed(), "crash failover done");
    assert_eq!(role(cluster.node(promoted)), "master");
    assert_eq!(cluster.node_for_slot(slot), promoted);
    assert!(cluster.node(primary).is_killed());
    assert_eq!(cluster.node(promoted).cmd(&["GET", key]), "before");
    assert_eq!(cluster.node(promoted).cmd(&["SET", key, "after"]), "OK");
    let other = other_primary(&cluster, promoted);
    assert_moved(
        &cluster.node(other).query(&["GET", key]),
        slot,
        cluster.node(promoted),
    );

    // The crashed node comes back as a replica of the new owner.
    cluster.restart_node(primary);
    tracing::info!(elapsed = ?started.elapsed(), "restart done");
    assert_eq!(role(cluster.node(primary)), "slave");
    assert_eq!(cluster.primary_of(primary), promoted);

    // Manual failover swaps them back.
    let demoted = cluster.manual_failover(primary);
    assert_eq!(demoted, promoted);
    assert_eq!(role(cluster.node(primary)), "master");
    assert_eq!(role(cluster.node(promoted)), "slave");
    assert_eq!(cluster.node_for_slot(slot), primary);
    assert_eq!(cluster.node(primary).cmd(&["GET", key]), "after");
    tracing::info!(elapsed = ?started.elapsed(), "done");
}

#[test]
fn sentinel_group_fails_over_on_crash() {
    init_tracing();
    let started = Instant::now();
    let mut group = SentinelGroup::start();
    tracing::info!(elapsed = ?started.elapsed(), "sentinel group up");

    assert_eq!(group.sentinel_urls().len(), 3);
    assert!(group.sentinels().iter().all(|s| role(s) == "sentinel"));
    assert_eq!(group.current_primary_addr(), group.primary().addr());
    assert_eq!(role(group.primary()), "master");
    assert_eq!(role(group.replica()), "slave");
    assert_eq!(group.primary().cmd(&["SET", "k", "before"]), "OK");
    assert_eq!(group.primary().cmd(&["WAIT", "1", "5000"]), "1");

    let old = group.primary_index();
    let new_addr = group.kill_primary_and_wait_failover();
    tracing::info!(elapsed = ?started.elapsed(), "crash failover done");
    assert_ne!(group.primary_index(), old);
    assert_eq!(new_addr, group.primary().addr());
    for sentinel in group.sentinels() {
        let reported = sentinel
            .query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", group.master_name()])
            .into_strings();
        assert_eq!(
            reported,
            vec!["127.0.0.1".to_owned(), new_addr.port().to_string()]
        );
    }
    assert_eq!(role(group.primary()), "master");
    assert_eq!(group.primary().cmd(&["GET", "k"]), "before");
    assert_eq!(group.primary().cmd(&["SET", "k", "after"]), "OK");

    group.restart_old_primary();
    tracing::info!(elapsed = ?started.elapsed(), "old primary back");
    assert_eq!(role(group.replica()), "slave");
    assert_eq!(group.primary().cmd(&["WAIT", "1", "5000"]), "1");
    assert_eq!(group.replica().cmd(&["GET", "k"]), "after");
    tracing::info!(elapsed = ?started.elapsed(), "done");
}

#[test]
fn sentinel_group_graceful_failover() {
    init_tracing();
    let started = Instant::now();
    let mut group = SentinelGroup::start();
    let old = group.primary_index();
    let new_addr = group.failover();
    tracing::info!(elapsed = ?started.elapsed(), "graceful failover done");
    assert_ne!(group.primary_index(), old);
    assert_eq!(group.current_primary_addr(), new_addr);
    assert_eq!(role(group.primary()), "master");
    assert_eq!(role(group.replica()), "slave");
    assert_eq!(group.primary().cmd(&["SET", "k", "v"]), "OK");
    assert_eq!(group.primary().cmd(&["WAIT", "1", "5000"]), "1");
    assert_eq!(group.replica().cmd(&["GET", "k"]), "v");
    assert!(group.replica().query(&["SET", "k", "w"]).is_error());
    tracing::info!(elapsed = ?started.elapsed(), "done");
}
