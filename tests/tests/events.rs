//! The `tracing` events operators rely on, captured per test thread by this binary's subscriber
//! (each test runs on a current-thread runtime, so its background work emits there too):
//! one event per request the tower layer rejects (`debug` for a 409 busy, which a service
//! expects; `info` for a 503 unavailable), one `warn` per lost lock, one `warn` per 10 s for
//! undos that fail (with how many were suppressed), one `warn` when a held lock's renewal
//! fails (at risk) and one `info` when a later one succeeds, nothing above `debug` for an
//! uncontended acquisition and release.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use lock_tests::RedisServer;
use lock_tests::fixtures::client_with_lease;
use lock_tests::logs::Captured;
use lock_tower::{DistributedLockLayer, PathSegment};
use tower::{ServiceBuilder, ServiceExt};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

thread_local! {
    /// The events of the test running on this thread.
    static CAPTURED: std::cell::RefCell<Vec<Captured>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The events captured on this thread so far (each test runs on its own thread, and a
/// current-thread runtime runs its background work there too).
struct Events;

impl Events {
    fn take(&self) -> Vec<Captured> {
        CAPTURED.with(|c| std::mem::take(&mut *c.borrow_mut()))
    }
}

/// Collects every event into the emitting thread's buffer.
struct Collector;

impl<S: Subscriber> Layer<S> for Collector {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let captured = Captured::of(event);
        CAPTURED.with(|c| c.borrow_mut().push(captured));
    }
}

/// Starts capturing this thread's events afresh. The collector is the test binary's global
/// subscriber (a per-thread `set_default` would race with other threads over the callsites'
/// cached interest).
fn capture() -> Events {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Collector))
            .expect("the only subscriber of this test binary");
    });
    Events.take();
    Events
}

fn at(events: &[Captured], level: Level) -> Vec<&Captured> {
    events.iter().filter(|e| e.level == level).collect()
}

fn request(path: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method("POST")
        .uri(path)
        .body(Full::default())
        .unwrap()
}

#[tokio::test]
async fn each_rejected_request_is_one_event_debug_when_expected_info_otherwise() {
    let mut server = RedisServer::start();
    let client = client_with_lease(&server.url(), Duration::from_secs(30)).await;
    let svc = ServiceBuilder::new()
        .layer(
            DistributedLockLayer::new(client.clone(), PathSegment::new(0))
                .prefix("t:")
                .wait(Duration::ZERO)
                .acquire_timeout(Duration::from_secs(2)),
        )
        .service_fn(|_req: Request<Full<Bytes>>| async move {
            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::new())))
        });
    let holder = client.lock("t:job").await.unwrap();

    let events = capture();
    let res = svc.clone().oneshot(request("/job")).await.unwrap();
    assert_eq!(res.status(), 409);
    let busy = events.take();
    let rejected: Vec<_> = busy.iter().filter(|e| e.field("code").is_some()).collect();
    assert_eq!(rejected.len(), 1, "one event for the 409: {busy:#?}");
    assert_eq!(rejected[0].level, Level::DEBUG, "a busy lock is expected");
    assert!(at(&busy, Level::INFO).is_empty(), "{busy:#?}");
    let info = &rejected[0].fields;
    assert_eq!(info["status"], "409");
    assert_eq!(info["code"], "lock_busy");
    assert_eq!(info["lock"], "t:job");
    assert_eq!(
        info["error"], "lock `t:job` is held by another request (busy: a single attempt, no wait)",
        "a single try found it busy; it did not time out"
    );
    let lease: u64 = info["holder_lease_ms"].parse().unwrap();
    assert!(lease > 0 && lease <= 30_000, "the holder's lease: {info:?}");
    assert!(at(&busy, Level::WARN).is_empty() && at(&busy, Level::ERROR).is_empty());

    holder.unlock().await.unwrap();
    server.kill();
    events.take();
    let res = svc.clone().oneshot(request("/job")).await.unwrap();
    assert_eq!(res.status(), 503);
    let down = events.take();
    let infos: Vec<_> = at(&down, Level::INFO)
        .into_iter()
        .filter(|e| e.target.starts_with("lock_tower"))
        .collect();
    assert_eq!(infos.len(), 1, "one info event for the 503: {down:#?}");
    assert_eq!(infos[0].fields["status"], "503");
    assert_eq!(infos[0].fields["code"], "lock_unavailable");
    assert!(infos[0].fields.contains_key("error"));
}

#[tokio::test]
async fn a_lost_lock_is_one_warn_and_the_uncontended_path_stays_at_debug() {
    let server = RedisServer::start();
    let client = client_with_lease(&server.url(), Duration::from_millis(300)).await;
    let events = capture();

    let guard = client.lock("order:1").await.unwrap();
    guard.unlock().await.unwrap();
    let quiet = events.take();
    assert!(
        quiet.iter().all(|e| e.level >= Level::DEBUG),
        "nothing above debug on the uncontended path: {quiet:#?}"
    );
    let debug: Vec<_> = quiet
        .iter()
        .filter_map(|e| e.fields.get("message"))
        .collect();
    assert!(
        debug.iter().any(|m| *m == "lock acquired") && debug.iter().any(|m| *m == "lock released"),
        "{quiet:#?}"
    );

    let guard = client.lock("order:1").await.unwrap();
    let token = guard.fencing_token();
    server.cmd(&["DEL", "lock:{order:1}"]);
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the watchdog finds the key gone");
    drop(guard);
    let lost = events.take();
    let warns: Vec<_> = at(&lost, Level::WARN)
        .into_iter()
        .filter(|e| {
            e.fields
                .get("message")
                .is_some_and(|m| m == "distributed lock lost")
        })
        .collect();
    assert_eq!(warns.len(), 1, "one warn per loss: {lost:#?}");
    let warn = &warns[0].fields;
    assert_eq!(warn["lock"], "order:1");
    assert_eq!(warn["reason"], "deleted");
    assert_eq!(warn["fencing_token"], token.to_string());
    assert!(warn.contains_key("held_for"), "{warn:?}");
}

/// An acquisition that failed after it was sent is undone; when the undo cannot be sent
/// either, its warning says why (the Redis error itself, not only "Redis command failed").
#[tokio::test]
async fn an_undo_that_fails_says_why() {
    let server = RedisServer::start();
    let client = client_with_lease(&server.url(), Duration::from_secs(30)).await;
    // A value lock-core did not write, where the lock would be: both the acquisition and its
    // undo are refused by Redis.
    server.cmd(&["HSET", "lock:{foreign}", "f", "v"]);
    let events = capture();
    let err = client.lock("foreign").await.unwrap_err();
    assert!(
        matches!(err, lock_core::LockError::Redis(_)) && err.to_string().contains("WRONGTYPE"),
        "the error says what Redis said: {err}"
    );
    let mut seen = Vec::new();
    let undo = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            seen.extend(events.take());
            if let Some(undo) = seen.iter().find(|e| {
                e.field("message")
                    .is_some_and(|m| m.starts_with("could not undo"))
            }) {
                return undo.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the undo's failure is logged");
    assert_eq!(undo.level, Level::WARN);
    assert_eq!(undo.field("lock"), Some("foreign"));
    let error = undo.field("error").unwrap_or_default();
    assert!(
        error.starts_with("Redis command failed: ") && error.contains("WRONGTYPE"),
        "{undo:?}"
    );
    assert_eq!(server.cmd(&["HGET", "lock:{foreign}", "f"]), "v");
}

/// Undos that fail one after another (every request of an outage) are one `warn` per 10 s
/// per client, not one each; the next line says how many were left out.
#[tokio::test]
async fn undos_that_keep_failing_are_one_warning_per_period() {
    let server = RedisServer::start();
    let client = client_with_lease(&server.url(), Duration::from_secs(30)).await;
    server.cmd(&["HSET", "lock:{foreign}", "f", "v"]);
    let events = capture();
    // Each failed acquisition's undo runs in the background holding the name's turn, so
    // the sixth acquisition starts after the first five undos have failed.
    for _ in 0..6 {
        let err = client.lock("foreign").await.unwrap_err();
        assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    }
    let undo_failed = |e: &&Captured| {
        e.field("message")
            .is_some_and(|m| m.starts_with("could not undo"))
    };
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while !seen.iter().any(|e| undo_failed(&e)) {
            seen.extend(events.take());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the first undo's failure is logged");
    let warnings: Vec<_> = seen.iter().filter(undo_failed).collect();
    assert_eq!(
        warnings.len(),
        1,
        "one line for five or six failed undos: {warnings:#?}"
    );
    assert_eq!(warnings[0].level, Level::WARN);
    assert_eq!(
        warnings[0].field("suppressed"),
        Some("0"),
        "the first line of the period"
    );
}

/// A held lock whose renewal fails says so once (`warn`, while it is still held), and once
/// more (`info`) when a later renewal succeeds.
#[tokio::test]
async fn a_lock_at_risk_is_one_warn_and_its_recovery_one_info() {
    let mut server = RedisServer::start();
    let client = client_with_lease(&server.url(), Duration::from_secs(3)).await;
    let guard = client.lock("at-risk").await.unwrap();
    let mut watch = guard.watch_lease();
    let events = capture();
    server.pause();
    let state = tokio::time::timeout(Duration::from_secs(10), watch.changed())
        .await
        .expect("a renewal fails while the server is stopped");
    assert_eq!(state, lock_core::LeaseState::AtRisk);
    server.resume();
    let state = tokio::time::timeout(Duration::from_secs(10), watch.changed())
        .await
        .expect("a renewal succeeds once it answers again");
    assert_eq!(state, lock_core::LeaseState::Held);
    let seen = events.take();
    let about = |level, start: &str| -> Vec<Captured> {
        at(&seen, level)
            .into_iter()
            .filter(|e| e.field("lock") == Some("at-risk"))
            .filter(|e| e.field("message").is_some_and(|m| m.starts_with(start)))
            .cloned()
            .collect()
    };
    let warns = about(Level::WARN, "lock renewal failed; the lock is at risk");
    assert_eq!(warns.len(), 1, "one warn per episode: {seen:#?}");
    assert!(warns[0].field("remaining").is_some() && warns[0].field("error").is_some());
    let infos = about(Level::INFO, "lock renewal succeeded again");
    assert_eq!(infos.len(), 1, "{seen:#?}");
    assert!(guard.unlock().await.unwrap());
}
