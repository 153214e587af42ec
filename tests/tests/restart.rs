//! The paths around the lock after the everyday fault: each test builds a fresh client, uses
//! one path, restarts the server (killed, started again on the same port, nothing kept), and
//! then uses **only that path** again — no lock call on the same client repairs anything for
//! it. The crate's own paths (records, owner descriptions, the fenced helpers, which are safe
//! to repeat) work on the first call; an application's own command through
//! `LockClient::connection()` or `Primaries::keyed_connection()`, which is never sent twice,
//! may fail once with the broken connection's error and works on the next call. Under
//! Sentinel and on a Cluster the same paths follow a failover (the primary killed, its replica
//! promoted) on the first call after the deployment agrees on the new primary.

use std::time::Duration;

use lock_core::fenced::{self, Fenced};
use lock_core::{LockClient, redis};
use lock_tests::fixtures::{blocking, client};
use lock_tests::{RedisCluster, RedisServer, SentinelGroup};

fn restart(server: &mut RedisServer) {
    tokio::task::block_in_place(|| server.restart());
}

/// Sends `cmd` on `conn` until it is answered, at most twice: the first may meet the
/// connection the restart broke.
async fn answered_within_two(
    conn: &mut impl redis::aio::ConnectionLike,
    cmd: &redis::Cmd,
) -> redis::Value {
    match cmd.query_async(conn).await {
        Ok(value) => value,
        Err(first) => cmd
            .query_async(conn)
            .await
            .unwrap_or_else(|second| panic!("failed twice: {first}; then {second}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_work_at_once_after_a_restart() {
    let mut server = RedisServer::start();
    let c = client(&server.url()).await;
    let records = c.records();
    assert!(records.get("order:1").await.unwrap().is_none());
    restart(&mut server);
    // The first call after the restart: answered, not `broken pipe`.
    assert!(records.get("order:1").await.unwrap().is_none());
    let ttl = Duration::from_secs(60);
    assert_eq!(
        records.put("order:1", b"paid", 7, ttl).await.unwrap(),
        Fenced::Written
    );
    restart(&mut server);
    assert_eq!(
        records.put("order:1", b"paid", 7, ttl).await.unwrap(),
        Fenced::Written
    );
    let stored = records.get("order:1").await.unwrap().unwrap();
    assert_eq!((stored.value(), stored.token()), (&b"paid"[..], 7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_descriptions_are_read_at_once_after_a_restart() {
    let mut server = RedisServer::start();
    let holder = LockClient::builder(&server.url())
        .owner_description("billing-7")
        .build()
        .await
        .unwrap();
    let operator = client(&server.url()).await;
    let owner = format!("{}:1", holder.client_id());
    assert_eq!(
        operator.owner_description(&owner).await.unwrap().as_deref(),
        Some("billing-7")
    );
    restart(&mut server);
    // Nothing was kept; what matters is an answer, on the first call.
    assert_eq!(operator.owner_description(&owner).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_on_the_clients_connection_work_at_once_after_a_restart() {
    let mut server = RedisServer::start();
    let c = client(&server.url()).await;
    let mut conn = c.connection();
    let key = "report:daily:result";
    assert_eq!(
        fenced::set(&mut conn, key, "a", 5).await.unwrap(),
        Fenced::Written
    );
    restart(&mut server);
    assert_eq!(
        fenced::set(&mut conn, key, "b", 6).await.unwrap(),
        Fenced::Written
    );
    restart(&mut server);
    assert_eq!(
        fenced::get::<_, String>(&mut conn, key).await.unwrap(),
        None,
        "nothing kept across a restart without persistence"
    );
    assert_eq!(
        fenced::set(&mut conn, key, "c", 8).await.unwrap(),
        Fenced::Written
    );
    assert_eq!(
        fenced::set(&mut conn, key, "stale", 7).await.unwrap(),
        Fenced::Refused { stored: 8 }
    );
    assert_eq!(
        fenced::get::<_, String>(&mut conn, key).await.unwrap(),
        Some(("c".to_owned(), 8))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applications_command_on_the_clients_connection_fails_at_most_once() {
    let mut server = RedisServer::start();
    let c = client(&server.url()).await;
    let mut conn = c.connection();
    let mut set = redis::cmd("SET");
    set.arg("plain").arg("1");
    assert_eq!(
        answered_within_two(&mut conn, &set).await,
        redis::Value::Okay
    );
    restart(&mut server);
    let mut incr = redis::cmd("INCR");
    incr.arg("plain");
    // Never sent twice by the connection: at most one failure, and then it is answered.
    assert_eq!(
        answered_within_two(&mut conn, &incr).await,
        redis::Value::Int(1)
    );
    let mut pipe = redis::pipe();
    pipe.atomic().incr("plain", 1).get("plain");
    let (n, text): (i64, String) = pipe.query_async(&mut conn).await.unwrap();
    assert_eq!((n, text.as_str()), (2, "2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keyed_connection_of_primaries_works_again_after_a_restart() {
    let mut server = RedisServer::start();
    let primaries = LockClient::builder(&server.url())
        .connect_primaries()
        .await
        .unwrap();
    let mut keyed = primaries.keyed_connection();
    let mut exists = redis::cmd("EXISTS");
    exists.arg("lock:nothing");
    assert_eq!(
        answered_within_two(&mut keyed, &exists).await,
        redis::Value::Int(0)
    );
    restart(&mut server);
    assert_eq!(
        answered_within_two(&mut keyed, &exists).await,
        redis::Value::Int(0)
    );
    // And it stays healed.
    assert_eq!(
        exists.query_async::<i64>(&mut keyed).await.unwrap(),
        0,
        "the connection was replaced once"
    );
}

/// The paths of one client after a failover, each used once: records, owner descriptions,
/// and a fenced write on the client's connection (which sends once more itself).
async fn every_path_answers(c: &LockClient, name: &str, owner: &str) {
    c.records()
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("records().get after the failover: {e}"));
    c.owner_description(owner)
        .await
        .unwrap_or_else(|e| panic!("owner_description after the failover: {e}"));
    let mut conn = c.connection();
    let key = format!("{{{name}}}:result");
    assert_eq!(
        fenced::set(&mut conn, &key, "after", 9).await.unwrap(),
        Fenced::Written
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_sentinel_every_path_follows_a_failover() {
    let mut group = blocking(SentinelGroup::start);
    let c = LockClient::builder_sentinel(group.sentinel_urls(), group.master_name())
        .owner_description("billing-7")
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let owner = format!("{}:1", c.client_id());
    // Each path used once before, so each has a connection to the old primary.
    every_path_answers(&c, "order:1", &owner).await;
    blocking(|| group.kill_primary_and_wait_failover());
    every_path_answers(&c, "order:1", &owner).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_every_path_follows_a_promoted_replica() {
    let mut cluster = blocking(RedisCluster::start);
    let c = LockClient::builder_cluster(cluster.primary_urls())
        .owner_description("billing-7")
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let owner = format!("{}:1", c.client_id());
    // A name whose slot the first primary owns: the one the failover moves.
    let name = (0..100_000)
        .map(|i| format!("order:{i}"))
        .find(|n| cluster.node_for_key(&format!("lock:{{{n}}}")) == 0)
        .expect("some name hashes to every primary");
    every_path_answers(&c, &name, &owner).await;
    blocking(|| cluster.failover(0));
    every_path_answers(&c, &name, &owner).await;
}
