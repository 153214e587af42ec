//! Restricted ACL users connect and lock: the usual application user (`+@all -@dangerous`,
//! which refuses `INFO`), the documented line without `+info` and `+command|info`, and the
//! previous release's documented line. The capability probe at connect goes on without what
//! the ACL refuses and says so in one `info` line; on Valkey 9 a user with `COMMAND INFO` and
//! the native commands still gets the native protocol, one without it the scripts.
//! Each test runs on a current-thread runtime, so the client's events are its thread's.

use std::cell::RefCell;
use std::time::Duration;

use lock_core::{LockClient, MutexProtocol};
use lock_tests::fixtures::{blocking, expected_protocol, native_server};
use lock_tests::logs::Captured;
use lock_tests::{RedisCluster, RedisServer};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// lock-core's crate docs, where the ACL lines are written.
const DOCS: &str = include_str!("../../lock-core/src/lib.rs");

/// The documented data-node line of the release before the capability probe (git history of
/// README.md), which had neither `+info` nor `+command|info`.
const PREVIOUS_RELEASE: &str = "ACL SETUSER locks reset on >CHANGE-ME ~lock:* &lock:* +ping \
    +fcall +function|load +subscribe +unsubscribe +publish +get +set +del +exists +pexpire \
    +pttl +time +hget +hset +hdel +hgetall +zadd +zcard +zrange +zrangebyscore +zrem \
    +zremrangebyscore +zscore";

thread_local! {
    /// The events of the test running on this thread.
    static CAPTURED: RefCell<Vec<Captured>> = const { RefCell::new(Vec::new()) };
}

/// Collects every event into the emitting thread's buffer.
struct Collector;

impl<S: Subscriber> Layer<S> for Collector {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let captured = Captured::of(event);
        CAPTURED.with(|c| c.borrow_mut().push(captured));
    }
}

/// Starts capturing this thread's events afresh (the collector is the binary's global
/// subscriber: a per-thread one would race with other threads over cached interest).
fn capture() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Collector))
            .expect("the only subscriber of this test binary");
    });
    CAPTURED.with(|c| c.borrow_mut().clear());
}

/// The `info` and `warn` messages of lock-core captured on this thread since [`capture`].
fn said() -> Vec<String> {
    CAPTURED.with(|c| {
        c.borrow()
            .iter()
            .filter(|e| e.level <= Level::INFO && e.target.starts_with("lock_core"))
            .filter_map(|e| e.field("message").map(str::to_owned))
            .collect()
    })
}

/// The lines about the capability probe's refused commands.
fn probe_lines() -> Vec<String> {
    said()
        .into_iter()
        .filter(|m| m.contains("INFO") || m.contains("TIME") || m.contains("EXEC"))
        .collect()
}

/// The documented data-node line, as arguments.
fn documented() -> Vec<String> {
    let line = DOCS
        .lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .find(|l| l.starts_with("ACL SETUSER locks reset on >CHANGE-ME ~"))
        .expect("lock-core's docs have the data-node ACL line");
    line.split_whitespace().map(str::to_owned).collect()
}

/// What the docs add to the data-node line where the mutex speaks the native protocol
/// (`native`: Valkey 9) or the hybrid one (every other test server: Redis 7).
fn protocol_additions(native: bool) -> Vec<String> {
    let after = if native {
        "the native protocol ([`MutexProtocol`]), add `"
    } else {
        "where it speaks the hybrid one, add\n//! `"
    };
    let rules = DOCS
        .split(after)
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .expect("the docs name the protocol's ACL rules");
    rules.split_whitespace().map(str::to_owned).collect()
}

/// Creates `user` (password `secret-<user>`) from an `ACL SETUSER locks …` line, and
/// returns the URL that logs in as it.
fn create_user(server: &RedisServer, line: &[String], user: &str) -> String {
    let password = format!(">secret-{user}");
    let args: Vec<&str> = line
        .iter()
        .map(|a| match a.as_str() {
            "locks" | "app" => user,
            ">CHANGE-ME" => password.as_str(),
            other => other,
        })
        .collect();
    assert_eq!(server.cmd(&args), "OK", "{args:?}");
    server
        .url()
        .replacen("://", &format!("://{user}:secret-{user}@"), 1)
}

async fn build(url: &str) -> LockClient {
    LockClient::builder(url)
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap_or_else(|e| panic!("build() as {url}: {e:?}"))
}

/// Two clients of the user: the first takes a lock, the second is refused it while it is
/// held and gets it once released. Returns the first client.
async fn lock_as(url: &str, name: &str) -> LockClient {
    let a = build(url).await;
    let b = build(url).await;
    take_in_turn(&a, &b, name).await;
    a
}

/// `a` takes `name`, `b` is refused it while it is held and gets it once released.
async fn take_in_turn(a: &LockClient, b: &LockClient, name: &str) {
    let held = a.try_lock(name).await.unwrap().expect("a free lock");
    assert!(b.try_lock(name).await.unwrap().is_none(), "held by a");
    assert!(held.unlock().await.unwrap());
    let again = b.try_lock(name).await.unwrap().expect("released by a");
    assert!(again.unlock().await.unwrap());
}

/// The usual application user's line, as lock-core's docs and the guide (production chapter) show it.
fn application_user() -> Vec<String> {
    let line = DOCS
        .lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .find(|l| l.starts_with("ACL SETUSER app on"))
        .expect("lock-core's docs show the application user's line");
    assert!(
        include_str!("../../guide/src/production.md").contains(line),
        "the guide's production chapter differs"
    );
    assert!(line.ends_with("+@all -@dangerous"), "{line}");
    line.split_whitespace().map(str::to_owned).collect()
}

/// The usual application user: every command but the `@dangerous` ones (`INFO`, `CONFIG`,
/// `ROLE` …). `COMMAND INFO` answers, so on Valkey 9 the mutex is native.
#[tokio::test]
async fn an_application_user_without_dangerous_commands_connects_and_locks() {
    let server = RedisServer::start();
    let url = create_user(&server, &application_user(), "app");
    capture();
    let client = lock_as(&url, "app").await;
    let caps = client.server_capabilities();
    assert!(caps.server.starts_with("unknown"), "{caps}");
    assert_eq!(
        caps.mutex_protocol,
        expected_protocol(native_server(&server)),
        "{caps}"
    );
    assert!(caps.wait && caps.sharded_pubsub, "{caps}");
    let lines = probe_lines();
    // Two clients built: one line each.
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains("INFO refused"), "{lines:?}");
    assert!(!lines[0].contains("COMMAND INFO refused"), "{lines:?}");
}

/// The documented line without `+info`: with `+command|info` and the protocol's documented
/// additions, the mutex is still native on Valkey 9, and hybrid on Redis 7.
#[tokio::test]
async fn without_info_the_native_protocol_is_found_by_command_info() {
    let server = RedisServer::start();
    let mut line: Vec<String> = documented().into_iter().filter(|a| a != "+info").collect();
    let native = native_server(&server);
    line.extend(protocol_additions(native));
    let url = create_user(&server, &line, "no-info");
    capture();
    let client = lock_as(&url, "no-info").await;
    let caps = client.server_capabilities();
    assert!(caps.server.starts_with("unknown"), "{caps}");
    assert_eq!(caps.native_compare, native, "{caps}");
    assert_eq!(caps.mutex_protocol, expected_protocol(native), "{caps}");
}

/// The documented line without `+info` and `+command|info` (with the native commands where
/// the server has them): the client keeps to the scripts, and says so once per build.
#[tokio::test]
async fn without_info_and_command_info_the_scripts_are_used() {
    let server = RedisServer::start();
    let mut line: Vec<String> = documented()
        .into_iter()
        .filter(|a| a != "+info" && a != "+command|info")
        .collect();
    if native_server(&server) {
        line.extend(protocol_additions(true));
    }
    let url = create_user(&server, &line, "minimal");
    capture();
    let client = lock_as(&url, "minimal").await;
    let caps = client.server_capabilities();
    assert!(caps.server.starts_with("unknown"), "{caps}");
    assert_eq!(caps.mutex_protocol, MutexProtocol::Scripted, "{caps}");
    assert!(!caps.native_compare && caps.scripting, "{caps}");
    assert!(caps.wait && caps.sharded_pubsub, "assumed present: {caps}");
    let lines = probe_lines();
    assert_eq!(lines.len(), 2, "one line per build: {lines:?}");
    assert!(lines[0].contains("COMMAND INFO refused"), "{lines:?}");
    assert!(lines[0].contains("scripts are used"), "{lines:?}");
}

/// The documented line without the native or hybrid protocol's additions (`+multi +exec`
/// …): the probe finds `EXEC` refused, so the mutex speaks the scripts on either server and
/// locks (a refused `MULTI` inside the acquisition's pipeline is never sent), says why once
/// per build, and pinning a transaction protocol fails at build, typed.
#[tokio::test]
async fn without_transactions_the_scripts_are_used() {
    let server = RedisServer::start();
    let url = create_user(&server, &documented(), "no-multi");
    capture();
    let client = lock_as(&url, "no-multi").await;
    let caps = client.server_capabilities();
    assert_eq!(caps.mutex_protocol, MutexProtocol::Scripted, "{caps}");
    let lines = probe_lines();
    assert!(lines[0].contains("EXEC refused"), "{lines:?}");
    let pinned = LockClient::builder(&url)
        .mutex_protocol(MutexProtocol::Hybrid)
        .build()
        .await;
    assert!(
        matches!(pinned, Err(lock_core::LockError::Unsupported { .. })),
        "{pinned:?}"
    );
}

/// Without `+ping`: the `PING` that checks a server is reachable at connect is refused, which
/// says the server is there (a refused connection or password would say otherwise); the
/// client connects and locks.
#[tokio::test]
async fn without_ping_the_client_connects_and_locks() {
    let server = RedisServer::start();
    let mut line: Vec<String> = documented().into_iter().filter(|a| a != "+ping").collect();
    line.extend(protocol_additions(native_server(&server)));
    let url = create_user(&server, &line, "noping");
    lock_as(&url, "noping").await;
}

/// The previous release's documented line connects and locks as it did then.
#[tokio::test]
async fn the_previous_releases_documented_line_still_works() {
    let server = RedisServer::start();
    let line: Vec<String> = PREVIOUS_RELEASE
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let url = create_user(&server, &line, "previous");
    let client = lock_as(&url, "previous").await;
    let caps = client.server_capabilities();
    assert_eq!(caps.mutex_protocol, MutexProtocol::Scripted, "{caps}");
    assert!(caps.scripting && caps.functions, "{caps}");
}

/// On a Cluster (every primary refuses `INFO`): the application user, and the documented
/// line with the Cluster's additions but without `+info` and `+command|info` (sharded pub/sub
/// then assumed present, as the Cluster needs it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_users_on_a_cluster_connect_and_lock() {
    let cluster = blocking(|| RedisCluster::start_with(3, 0));
    let mut minimal: Vec<String> = documented()
        .into_iter()
        .filter(|a| a != "+info" && a != "+command|info")
        .collect();
    minimal.extend(
        [
            "+spublish",
            "+ssubscribe",
            "+sunsubscribe",
            "+cluster|slots",
        ]
        .map(str::to_owned),
    );
    for (user, line) in [("app", application_user()), ("minimal", minimal)] {
        let urls: Vec<String> = cluster
            .nodes()
            .iter()
            .map(|node| create_user(node, &line, user))
            .collect();
        let build = || {
            LockClient::builder_cluster(urls.clone())
                .connect_timeout(Duration::from_secs(2))
                .build()
        };
        let (a, b) = (build().await.unwrap(), build().await.unwrap());
        take_in_turn(&a, &b, user).await;
        let caps = a.server_capabilities();
        assert!(
            caps.server.starts_with("unknown") && caps.sharded_pubsub,
            "{caps}"
        );
        // COMMAND INFO finds the native protocol where the user may ask (Valkey 9).
        let native = user == "app" && native_server(cluster.node(0));
        assert_eq!(caps.native_compare, native, "{caps}");
    }
}

/// A guarded update runs as the lock client's user on the application's keys: with the
/// documented line, `~<your keys>` and the commands the docs add for it, a one-unit take
/// works; without the key pattern it is a typed `NoPermission` and nothing is written.
#[tokio::test]
async fn a_guarded_update_needs_the_documented_additions_and_access_to_the_keys() {
    let additions = ["+mget", "+incrby", "+decrby", "+hincrby"];
    assert!(
        DOCS.contains("`+mget` (its one read) and `+incrby +decrby +hincrby`"),
        "the docs name a guarded update's ACL rules"
    );
    let server = RedisServer::start();
    server.cmd(&["SET", "stock:{item:1}", "2"]);
    let mut line = documented();
    // The mutex speaks the native protocol (Valkey 9) or the hybrid one (Redis 7), each with
    // its own documented additions.
    line.extend(protocol_additions(native_server(&server)));
    line.extend(additions.iter().map(|a| a.to_string()));
    let without_keys = create_user(&server, &line, "nokeys");
    line.push("~stock:*".to_owned());
    let with_keys = create_user(&server, &line, "withkeys");

    let client = build(&with_keys).await;
    let guard = client.lock("item:1").await.unwrap();
    let sold = guard
        .update()
        .take("stock:{item:1}", 1, 0)
        .send()
        .await
        .unwrap();
    assert_eq!(sold, lock_core::Updated::Applied { values: vec![1] });
    guard.unlock().await.unwrap();

    let client = build(&without_keys).await;
    let guard = client.lock("item:1").await.unwrap();
    let refused = guard
        .update()
        .take("stock:{item:1}", 1, 0)
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(refused, lock_core::LockError::NoPermission { .. }),
        "{refused:?}"
    );
    guard.unlock().await.unwrap();
    assert_eq!(server.cmd(&["GET", "stock:{item:1}"]), "1");
}
