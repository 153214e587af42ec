//! Owner descriptions against a real redis-server: recorded under the client's own key,
//! looked up from an owner id by another client, refreshed by the watchdog while the client
//! lives, gone after it is dropped; bad descriptions refused by `build()`.

use std::time::Duration;

use lock_core::{LockClient, LockError};
use lock_tests::RedisServer;
use lock_tests::fixtures::{assert_clean, client, eventually};
use tokio::time::Instant;

/// A client on `url` with `description` and a watchdog lease of `lease`.
async fn described(url: &str, description: &str, lease: Duration) -> LockClient {
    LockClient::builder(url)
        .owner_description(description)
        .watchdog_lease(lease)
        .build()
        .await
        .unwrap()
}

/// The key a client's description is recorded under (DESIGN.md, "Keys").
fn key_of(client: &LockClient) -> String {
    format!("lock:client:{}", client.client_id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_reads_the_description_of_a_holder() {
    let server = RedisServer::start();
    let holder = described(
        &server.url(),
        "billing@web-3 pid 4242",
        Duration::from_secs(30),
    )
    .await;
    let plain = client(&server.url()).await;
    let operator = client(&server.url()).await;

    let guard = holder.lock("order:42").await.unwrap();
    let info = operator.mutex("order:42").info().await.unwrap();
    let owner = info.owner.clone().unwrap();
    assert!(owner.starts_with(holder.client_id()), "{owner}");
    assert_eq!(
        operator.owner_description(&owner).await.unwrap().as_deref(),
        Some("billing@web-3 pid 4242")
    );
    // A bare client id works too; a permit id (`<owner>:<k>`) names the same client.
    assert_eq!(
        operator
            .owner_description(holder.client_id())
            .await
            .unwrap()
            .as_deref(),
        Some("billing@web-3 pid 4242")
    );
    let permits = holder.semaphore("exports", 3).acquire(2).await.unwrap();
    let sem = operator.semaphore("exports", 3).info().await.unwrap();
    for permit in &sem.holder_owners {
        assert_eq!(
            operator.owner_description(permit).await.unwrap().as_deref(),
            Some("billing@web-3 pid 4242"),
            "{permit}"
        );
    }

    // Without a description: nothing written, nothing found.
    let other = plain.lock("order:43").await.unwrap();
    let owner = plain.mutex("order:43").info().await.unwrap().owner.unwrap();
    assert_eq!(operator.owner_description(&owner).await.unwrap(), None);
    assert!(server.keys(&key_of(&plain)).is_empty());

    // Not an owner id, or a value no client could have written: None, never an error.
    for odd in ["", "c:1", "not-hex-not-hex-not-hex-not-hex-:1", "{x}"] {
        assert_eq!(
            operator.owner_description(odd).await.unwrap(),
            None,
            "{odd:?}"
        );
    }
    let forged = "0123456789abcdef0123456789abcdef";
    server.cmd(&[
        "SET",
        &format!("lock:client:{forged}"),
        "\u{1b}[2Jgotcha",
        "PX",
        "60000",
    ]);
    assert_eq!(operator.owner_description(forged).await.unwrap(), None);
    server.cmd(&["DEL", &format!("lock:client:{forged}")]);

    guard.unlock().await.unwrap();
    other.unlock().await.unwrap();
    permits.unlock().await.unwrap();
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_description_is_refused_by_build() {
    let server = RedisServer::start();
    let long = "x".repeat(129);
    for bad in ["", "two\nlines", "\u{1b}[31mred", long.as_str()] {
        let err = LockClient::builder(&server.url())
            .owner_description(bad)
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                LockError::InvalidOption {
                    option: "owner_description",
                    ..
                }
            ),
            "{bad:?}: {err:?}"
        );
    }
    // Nothing was written.
    assert_eq!(server.dbsize(), 0);
    let longest = "é".repeat(64);
    let ok = described(&server.url(), &longest, Duration::from_secs(30)).await;
    assert_eq!(
        ok.owner_description(ok.client_id()).await.unwrap(),
        Some(longest)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_outlives_its_ttl_while_the_client_lives_and_expires_after() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(300);
    let ttl = lease * 3;
    let c = described(&server.url(), "short-lived", lease).await;
    let key = key_of(&c);
    let pttl = |key: &str| -> i64 { server.cmd(&["PTTL", key]).parse().unwrap() };
    let first = pttl(&key);
    assert!(0 < first && first <= ttl.as_millis() as i64, "{first}");
    // For three times its time to live the key stays, with a time to live that never runs
    // low: the watchdog refreshes it every period (lease / 3).
    let until = Instant::now() + ttl * 3;
    while Instant::now() < until {
        let left = pttl(&key);
        assert!(
            left > (ttl - lease).as_millis() as i64 / 2,
            "the record ran low: {left} ms"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(server.cmd(&["GET", &key]), "short-lived");
    // Dropped: no refresh any more, and the key expires on its own.
    drop(c);
    eventually("the description expired", || server.keys(&key).is_empty()).await;
}
