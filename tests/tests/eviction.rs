//! The eviction check at connect: a server whose `maxmemory-policy` can evict lock keys is
//! reported (and logged), `noeviction` is safe, and a user who may not run `CONFIG` still
//! builds a client, with the risk unknown.

use lock_core::{EvictionRisk, LockClient};
use lock_tests::RedisServer;

#[tokio::test]
async fn a_policy_that_evicts_is_reported() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let client = LockClient::connect(&server.url()).await.unwrap();
    assert_eq!(
        client.eviction_risk(),
        &EvictionRisk::Evicts {
            policy: "allkeys-lru".to_owned()
        }
    );
    assert!(client.eviction_risk().evicts());
    assert!(client.eviction_risk().to_string().contains("allkeys-lru"));

    let server = RedisServer::start_with(&["--maxmemory-policy", "volatile-ttl"]);
    let client = LockClient::connect(&server.url()).await.unwrap();
    assert!(client.eviction_risk().evicts(), "lock keys all have a TTL");
}

#[tokio::test]
async fn noeviction_is_safe() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let client = LockClient::connect(&server.url()).await.unwrap();
    assert_eq!(client.eviction_risk(), &EvictionRisk::None);
}

#[tokio::test]
async fn a_user_without_config_builds_with_the_risk_unknown() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    server.cmd(&[
        "ACL", "SETUSER", "locks", "on", ">secret", "~*", "&*", "+@all", "-config",
    ]);
    let url = server
        .url()
        .replacen("redis://", "redis://locks:secret@", 1);
    let client = LockClient::connect(&url).await.unwrap();
    assert_eq!(client.eviction_risk(), &EvictionRisk::Unknown);
    // The client works as usual.
    let guard = client.lock("order:1").await.unwrap();
    guard.unlock().await.unwrap();
}
