//! `lock-tower` against a real redis-server and real axum servers on loopback ports, driven by
//! a real HTTP client: exclusion per key, concurrency across keys, busy/bad-key/unavailable
//! answers, the lock's lifetime (streaming bodies, dropped connections, lost leases) and each
//! key extractor.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use bytes::Bytes;
use http::{HeaderName, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use lock_core::{HeldLock, LockClient};
use lock_tests::fixtures::{assert_clean, client, client_with_lease, eventually, lock_keys};
use lock_tests::logs::{Captured, Everything};
use lock_tests::{FaultProxy, RedisServer};
use lock_tower::{
    DistributedLockLayer, FailMode, Header, KeyExtractor, LeaseLost, MissingKey, PathParam,
    PathSegment, QueryParam, Rejection, RejectionKind, Release, header_value,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Barrier, Notify, mpsc};
use tokio::time::{Instant, timeout};
use tower::{ServiceBuilder, ServiceExt};
use tracing::Level;
use web::{App, http, problem, within};

mod web;

/// The layer's events, `debug` and above, from every test of this binary: a test picks its
/// own by a field value unique to it (a lock name, a parameter name).
fn layer_logs() -> &'static Everything {
    lock_tests::logs::everything_at(&["lock_tower"], Level::DEBUG)
}

/// A handler that only says it ran.
async fn ran() -> &'static str {
    "ran"
}

/// Counts requests inside a critical section and any overlap between them.
#[derive(Default)]
struct Overlap {
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    tokens: Mutex<Vec<u64>>,
}

impl Overlap {
    async fn run(&self, lock: Option<&HeldLock>, hold: Duration) {
        if self.inside.fetch_add(1, Ordering::SeqCst) > 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(lock) = lock {
            assert!(lock.is_held());
            self.tokens
                .lock()
                .unwrap()
                .push(lock.fencing_token().expect("a mutex has a fencing token"));
        }
        tokio::time::sleep(hold).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

fn overlap_app(client: LockClient, state: Arc<Overlap>) -> Router {
    let locked = {
        let state = state.clone();
        move |Extension(lock): Extension<HeldLock>| async move {
            state.run(Some(&lock), Duration::from_millis(30)).await;
            lock.name().to_owned()
        }
    };
    let unlocked = move || async move {
        state.run(None, Duration::from_millis(200)).await;
        "unlocked"
    };
    Router::new()
        .route(
            "/orders/{order_id}/pay",
            post(locked).route_layer(
                DistributedLockLayer::new(client, PathParam::new("order_id"))
                    .prefix("order:")
                    .wait(Duration::from_secs(20)),
            ),
        )
        .route("/unlocked/{order_id}", post(unlocked))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_is_serialized_across_instances() {
    let server = RedisServer::start();
    let state = Arc::new(Overlap::default());
    // Two instances of the service, each with its own lock client, sharing the resource.
    let apps = [
        App::serve(overlap_app(client(&server.url()).await, state.clone())).await,
        App::serve(overlap_app(client(&server.url()).await, state.clone())).await,
    ];
    let http = http();

    // The overlap detector works: without the lock, concurrent requests do overlap.
    let unlocked = (0..4).map(|i| http.post(apps[i % 2].url("/unlocked/42")).send());
    for res in within(
        "unlocked requests",
        20,
        futures_util::future::join_all(unlocked),
    )
    .await
    {
        assert_eq!(res.unwrap().status(), 200);
    }
    assert!(
        state.overlaps.swap(0, Ordering::SeqCst) > 0,
        "the control never overlapped"
    );

    const N: usize = 10;
    let requests = (0..N).map(|i| http.post(apps[i % 2].url("/orders/42/pay")).send());
    let responses = within(
        "locked requests",
        30,
        futures_util::future::join_all(requests),
    )
    .await;
    for res in responses {
        let res = res.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(res.text().await.unwrap(), "order:42");
    }
    assert_eq!(
        state.overlaps.load(Ordering::SeqCst),
        0,
        "two requests overlapped"
    );
    let mut tokens = state.tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), N);
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(
        tokens.len(),
        N,
        "every holder got a fencing token of its own"
    );
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_keys_run_concurrently() {
    let server = RedisServer::start();
    // Each handler waits for the other one: both succeed only if they run at the same time.
    let barrier = Arc::new(Barrier::new(2));
    let handler = move || async move {
        match timeout(Duration::from_secs(10), barrier.wait()).await {
            Ok(_) => StatusCode::OK,
            Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    };
    let layer = DistributedLockLayer::new(client(&server.url()).await, PathParam::new("id"))
        .wait(Duration::from_secs(20));
    let app =
        App::serve(Router::new().route("/orders/{id}", post(handler).route_layer(layer))).await;
    let http = http();
    let (a, b) = within(
        "two keys at once",
        20,
        futures_util::future::join(
            http.post(app.url("/orders/1")).send(),
            http.post(app.url("/orders/2")).send(),
        ),
    )
    .await;
    assert_eq!(a.unwrap().status(), 200);
    assert_eq!(b.unwrap().status(), 200);
    assert_clean(&server).await;
}

/// A handler that holds its lock until told to finish.
#[derive(Clone)]
struct Gate {
    entered: mpsc::Sender<()>,
    finish: Arc<Notify>,
}

impl Gate {
    fn new() -> (Gate, mpsc::Receiver<()>) {
        let (entered, rx) = mpsc::channel(16);
        let finish = Arc::new(Notify::new());
        (Gate { entered, finish }, rx)
    }

    async fn pass(&self) -> &'static str {
        self.entered.send(()).await.unwrap();
        self.finish.notified().await;
        "done"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_key_gets_409_with_retry_after_and_a_problem_body() {
    let server = RedisServer::start();
    // A 2 s watchdog lease keeps the holder's TTL (and so Retry-After) small and known.
    let client = client_with_lease(&server.url(), Duration::from_secs(2)).await;
    let (gate, mut entered) = Gate::new();
    let layer = |c: &LockClient| {
        DistributedLockLayer::new(c.clone(), PathParam::new("id")).prefix("order:")
    };
    let slow = {
        let gate = gate.clone();
        move || async move { gate.pass().await }
    };
    let custom = |rejection: Rejection| -> Response {
        assert_eq!(rejection.kind(), RejectionKind::Busy);
        (
            StatusCode::TOO_MANY_REQUESTS,
            format!("busy, retry in {:?}", rejection.retry_after().unwrap()),
        )
            .into_response()
    };
    let router = Router::new()
        .route("/orders/{id}", post(slow).route_layer(layer(&client)))
        .route(
            "/locked/{id}",
            post(|| async { "ok" }).route_layer(layer(&client).busy_status(StatusCode::LOCKED)),
        )
        .route(
            "/custom/{id}",
            post(|| async { "ok" }).route_layer(layer(&client).on_rejection(custom)),
        )
        .route(
            "/capped/{id}",
            post(|| async { "ok" })
                .route_layer(layer(&client).max_retry_after(Duration::from_millis(300))),
        );
    let app = App::serve(router).await;
    let http = http();

    let holder = tokio::spawn(http.post(app.url("/orders/7")).send());
    within("the holder's handler", 10, entered.recv())
        .await
        .unwrap();

    let started = Instant::now();
    let (status, retry_after, body) =
        problem(http.post(app.url("/orders/7")).send().await.unwrap()).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "fail fast by default"
    );
    assert_eq!(status, StatusCode::CONFLICT);
    let retry_after: u64 = retry_after.expect("Retry-After").parse().unwrap();
    assert!(
        (1..=2).contains(&retry_after),
        "Retry-After {retry_after} from a 2 s lease"
    );
    assert_eq!(body["code"], "lock_busy");
    // The header and the body say one value.
    assert_eq!(body["retry_after_ms"], retry_after * 1000, "{body}");
    assert!(
        !body.to_string().contains("order:7"),
        "the key is not echoed"
    );

    let (status, _, _) = problem(http.post(app.url("/locked/7")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::LOCKED);
    let (_, retry_after, body) =
        problem(http.post(app.url("/capped/7")).send().await.unwrap()).await;
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(
        body["retry_after_ms"], 1000,
        "the 300 ms cap, rounded up as the header is"
    );
    let res = http.post(app.url("/custom/7")).send().await.unwrap();
    assert_eq!(res.status(), 429);
    assert!(res.text().await.unwrap().starts_with("busy, retry in"));

    // Another key is free meanwhile.
    assert_eq!(
        http.post(app.url("/locked/8"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    gate.finish.notify_one();
    let res = within("the holder's response", 10, holder)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "done");
    // The lock was given back before the holder's response ended.
    assert_eq!(
        http.post(app.url("/locked/7"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_oversized_and_control_char_keys_get_400() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let name = |lock: Option<Extension<HeldLock>>| async move {
        lock.map_or_else(
            || "unlocked".to_owned(),
            |Extension(lock)| lock.name().to_owned(),
        )
    };
    let router = Router::new()
        .route(
            "/h",
            get(name).route_layer(
                DistributedLockLayer::new(
                    client.clone(),
                    Header::new(HeaderName::from_static("x-user-id")),
                )
                .prefix("user:")
                .max_key_len(16),
            ),
        )
        .route(
            "/p/{id}",
            get(name).route_layer(DistributedLockLayer::new(
                client.clone(),
                PathParam::new("id"),
            )),
        )
        .route(
            "/q",
            get(name).route_layer(DistributedLockLayer::new(
                client.clone(),
                QueryParam::new("order"),
            )),
        )
        .route(
            "/pass",
            get(name).route_layer(
                DistributedLockLayer::new(
                    client.clone(),
                    Header::new(HeaderName::from_static("x-user-id")),
                )
                .missing_key(MissingKey::PassThrough),
            ),
        );
    let app = App::serve(router).await;
    let http = http();

    let bad = [
        (http.get(app.url("/h")), "missing_lock_key", "does not say"),
        (
            http.get(app.url("/h")).header("x-user-id", "x".repeat(17)),
            "invalid_lock_key",
            "longer than 16 bytes",
        ),
        (
            http.get(app.url("/h")).header("x-user-id", ""),
            "invalid_lock_key",
            "empty",
        ),
        (
            http.get(app.url("/h")).header("x-user-id", "a b"),
            "invalid_lock_key",
            "whitespace",
        ),
        (
            http.get(app.url("/h")).header("x-user-id", "a{b}"),
            "invalid_lock_key",
            "`{`",
        ),
        (
            http.get(app.url("/p/a%01b")),
            "invalid_lock_key",
            "control character",
        ),
        (
            http.get(app.url("/p/a%0Ab")),
            "invalid_lock_key",
            "control character",
        ),
        (
            http.get(app.url("/q?order=a%7Fb")),
            "invalid_lock_key",
            "control character",
        ),
        (http.get(app.url("/q?order=")), "invalid_lock_key", "empty"),
        (
            http.get(app.url("/q?other=1")),
            "missing_lock_key",
            "does not say",
        ),
        (
            http.get(app.url(&format!("/p/{}", "y".repeat(129)))),
            "invalid_lock_key",
            "longer than 128 bytes",
        ),
    ];
    for (request, code, detail) in bad {
        let (status, retry_after, body) = problem(request.send().await.unwrap()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(retry_after, None);
        assert_eq!(body["code"], code, "{body}");
        assert!(body["detail"].as_str().unwrap().contains(detail), "{body}");
    }
    assert!(server.keys("*").is_empty(), "bad keys never reach Redis");

    // Good keys, for contrast, and the pass-through policy.
    let text = |r: reqwest::RequestBuilder| async move {
        let res = r.send().await.unwrap();
        (res.status().as_u16(), res.text().await.unwrap())
    };
    assert_eq!(
        text(http.get(app.url("/h")).header("x-user-id", "u-1")).await,
        (200, "user:u-1".into())
    );
    assert_eq!(
        text(http.get(app.url("/p/%C3%A9t%C3%A9"))).await,
        (200, "http:été".into())
    );
    assert_eq!(
        text(http.get(app.url("/q?order=4%32"))).await,
        (200, "http:42".into())
    );
    assert_eq!(
        text(http.get(app.url("/pass"))).await,
        (200, "unlocked".into())
    );
    assert_eq!(
        text(http.get(app.url("/pass")).header("x-user-id", "u-2")).await,
        (200, "http:u-2".into())
    );
    // Unmatched routes stay 404: `route_layer` runs only on a match.
    assert_eq!(
        http.get(app.url("/nowhere")).send().await.unwrap().status(),
        404
    );
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_gives_503_within_the_bound_and_recovers_after_restart() {
    let mut server = RedisServer::start();
    let client = client_with_lease(&server.url(), Duration::from_secs(2)).await;
    let router = Router::new()
        .route(
            "/closed/{id}",
            post(|lock: Option<Extension<HeldLock>>| async move {
                if lock.is_some() { "locked" } else { "unlocked" }
            })
            .route_layer(
                DistributedLockLayer::new(client.clone(), PathParam::new("id"))
                    .wait(Duration::from_secs(10))
                    .acquire_timeout(Duration::from_secs(1))
                    .unavailable_retry_after(Duration::from_secs(3)),
            ),
        )
        .route(
            "/open/{id}",
            post(|lock: Option<Extension<HeldLock>>| async move {
                if lock.is_some() { "locked" } else { "unlocked" }
            })
            .route_layer(
                DistributedLockLayer::new(client.clone(), PathParam::new("id"))
                    .acquire_timeout(Duration::from_secs(1))
                    .fail_mode(FailMode::Open),
            ),
        );
    let app = App::serve(router).await;
    let http = http();
    let res = http.post(app.url("/closed/1")).send().await.unwrap();
    assert_eq!(res.text().await.unwrap(), "locked");

    server.kill();
    for _ in 0..3 {
        let started = Instant::now();
        let res = within(
            "a request while Redis is down",
            10,
            http.post(app.url("/closed/1")).send(),
        )
        .await
        .unwrap();
        let elapsed = started.elapsed();
        let (status, retry_after, body) = problem(res).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry_after.as_deref(), Some("3"));
        assert_eq!(body["code"], "lock_unavailable");
        assert!(
            elapsed < Duration::from_millis(2500),
            "answered after {elapsed:?}, past the 1 s bound"
        );
    }
    // Fail open runs the handler without the lock.
    let res = within("fail open", 10, http.post(app.url("/open/1")).send())
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "unlocked");

    server.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let res = within(
            "a request after the restart",
            10,
            http.post(app.url("/closed/1")).send(),
        )
        .await
        .unwrap();
        if res.status() == 200 {
            assert_eq!(res.text().await.unwrap(), "locked");
            break;
        }
        assert_eq!(res.status(), 503);
        assert!(
            Instant::now() < deadline,
            "never recovered after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let res = http.post(app.url("/open/1")).send().await.unwrap();
    assert_eq!(res.text().await.unwrap(), "locked");
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_body_keeps_the_lock_until_its_last_chunk() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let checker = lock_tests::fixtures::client(&server.url()).await;
    // Each streaming request takes the next receiver: the test feeds its body chunk by chunk.
    let feeds: Arc<Mutex<Vec<mpsc::Receiver<Bytes>>>> = Arc::default();
    let stream = {
        let feeds = feeds.clone();
        move || async move {
            let rx = feeds.lock().unwrap().pop().expect("a feed per request");
            let chunks = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv()
                    .await
                    .map(|chunk| (Ok::<_, Infallible>(chunk), rx))
            });
            Body::from_stream(chunks)
        }
    };
    let layer = DistributedLockLayer::new(client, PathParam::new("id")).prefix("export:");
    let router = Router::new()
        .route(
            "/export/{id}",
            get(stream.clone()).route_layer(layer.clone()),
        )
        .route(
            "/early/{id}",
            get(stream).route_layer(layer.release(Release::AfterHandler)),
        )
        .route(
            "/try/{id}",
            get(|| async { "ok" }).route_layer(
                DistributedLockLayer::new(checker.clone(), PathParam::new("id")).prefix("export:"),
            ),
        );
    let app = App::serve(router).await;
    let http = http();

    let (tx, rx) = mpsc::channel(4);
    feeds.lock().unwrap().push(rx);
    tx.send(Bytes::from_static(b"first,")).await.unwrap();
    let mut res = within(
        "the response head",
        10,
        http.get(app.url("/export/1")).send(),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    let first = within("the first chunk", 10, res.chunk())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], b"first,");
    // Mid-stream: the handler has returned long ago, the lock is still held.
    assert!(checker.mutex("export:1").info().await.unwrap().held);
    assert_eq!(
        http.get(app.url("/try/1")).send().await.unwrap().status(),
        409
    );
    tx.send(Bytes::from_static(b"second")).await.unwrap();
    assert!(checker.mutex("export:1").info().await.unwrap().held);
    drop(tx);
    let mut rest = Vec::new();
    while let Some(chunk) = within("the rest of the body", 10, res.chunk())
        .await
        .unwrap()
    {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(rest, b"second");
    // The lock was released before the body's end reached the client.
    assert!(!checker.mutex("export:1").info().await.unwrap().held);
    assert_eq!(
        http.get(app.url("/try/1")).send().await.unwrap().status(),
        200
    );

    // Release::AfterHandler: the body streams without the lock.
    let (tx, rx) = mpsc::channel(4);
    feeds.lock().unwrap().push(rx);
    tx.send(Bytes::from_static(b"early")).await.unwrap();
    let mut res = within(
        "the response head",
        10,
        http.get(app.url("/early/2")).send(),
    )
    .await
    .unwrap();
    let first = within("the first chunk", 10, res.chunk())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], b"early");
    assert!(!checker.mutex("export:2").info().await.unwrap().held);
    drop(tx);
    assert_eq!(within("the end", 10, res.chunk()).await.unwrap(), None);
    assert_clean(&server).await;
}

/// Sets its flag when dropped: shows a handler future was cancelled.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_client_connection_mid_handler_releases_the_lock() {
    let server = RedisServer::start();
    // The default 30 s watchdog lease: only the release on drop can free the lock in time.
    let client = client(&server.url()).await;
    let checker = lock_tests::fixtures::client(&server.url()).await;
    let (entered_tx, mut entered) = mpsc::channel(4);
    let dropped = Arc::new(AtomicBool::new(false));
    let handler = {
        let dropped = dropped.clone();
        move || async move {
            let _flag = DropFlag(dropped);
            entered_tx.send(()).await.unwrap();
            std::future::pending::<()>().await;
            "never"
        }
    };
    let layer = DistributedLockLayer::new(client, PathParam::new("id")).prefix("order:");
    let app =
        App::serve(Router::new().route("/orders/{id}", post(handler).route_layer(layer))).await;

    // A raw connection, so closing it is unambiguous.
    let mut conn = tokio::net::TcpStream::connect(app.addr()).await.unwrap();
    conn.write_all(b"POST /orders/9 HTTP/1.1\r\nhost: test\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    within("the handler", 10, entered.recv()).await.unwrap();
    assert!(checker.mutex("order:9").info().await.unwrap().held);
    let started = Instant::now();
    drop(conn);

    eventually("the handler cancelled", || dropped.load(Ordering::SeqCst)).await;
    eventually("the lock released", || lock_keys(&server).is_empty()).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "released by the drop, not by the lease"
    );
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lease_aborts_the_handler_with_503_or_lets_it_finish() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let dropped = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let slow = {
        let (dropped, finished) = (dropped.clone(), finished.clone());
        move || async move {
            let _flag = DropFlag(dropped);
            tokio::time::sleep(Duration::from_secs(5)).await;
            finished.store(true, Ordering::SeqCst);
            "finished"
        }
    };
    let watching = |Extension(lock): Extension<HeldLock>| async move {
        tokio::time::sleep(Duration::from_millis(600)).await;
        format!("held={}", lock.is_held())
    };
    // A fixed 200 ms lease, never renewed: both handlers outlive it.
    let layer = DistributedLockLayer::new(client, PathParam::new("id"))
        .fixed_lease(Duration::from_millis(200));
    let router = Router::new()
        .route("/abort/{id}", post(slow).route_layer(layer.clone()))
        .route(
            "/continue/{id}",
            post(watching).route_layer(layer.on_lease_lost(LeaseLost::Continue)),
        );
    let app = App::serve(router).await;
    let http = http();

    let started = Instant::now();
    let res = within(
        "the aborted request",
        10,
        http.post(app.url("/abort/1")).send(),
    )
    .await
    .unwrap();
    let elapsed = started.elapsed();
    let (status, retry_after, body) = problem(res).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["code"], "lock_lost");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert!(
        elapsed < Duration::from_secs(3),
        "aborted after {elapsed:?}"
    );
    assert!(dropped.load(Ordering::SeqCst), "the handler was cancelled");
    assert!(!finished.load(Ordering::SeqCst));

    let res = within(
        "the continued request",
        10,
        http.post(app.url("/continue/2")).send(),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "held=false");
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_requests_on_one_key_never_find_it_busy() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let json = |Extension(lock): Extension<HeldLock>| async move {
        axum::Json(serde_json::json!({ "token": lock.fencing_token() }))
    };
    let layer = DistributedLockLayer::new(client, PathParam::new("id"));
    let router = Router::new()
        .route("/after-body/{id}", post(json).route_layer(layer.clone()))
        .route(
            "/after-handler/{id}",
            post(json).route_layer(layer.release(Release::AfterHandler)),
        );
    let app = App::serve(router).await;
    let http = http();
    for path in ["/after-body/5", "/after-handler/5"] {
        let mut last = 0;
        for _ in 0..25 {
            let res = http.post(app.url(path)).send().await.unwrap();
            assert_eq!(
                res.status(),
                200,
                "{path}: a finished request still held the lock"
            );
            let token = res.json::<serde_json::Value>().await.unwrap()["token"]
                .as_u64()
                .unwrap();
            assert!(token > last, "fencing tokens increase");
            last = token;
        }
    }
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_extractor_locks_its_name_through_oneshot() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    async fn name(Extension(lock): Extension<HeldLock>) -> String {
        lock.name().to_owned()
    }
    fn routed<K>(layer: DistributedLockLayer<K>) -> Router
    where
        K: KeyExtractor<Body> + Send + Sync + 'static,
    {
        Router::new().route("/orders/{id}/pay", get(name).route_layer(layer))
    }
    let request = |uri: &str| {
        Request::builder()
            .uri(uri)
            .header("x-user-id", "u-3")
            .body(Body::empty())
            .unwrap()
    };
    async fn text(router: Router, req: Request<Body>) -> String {
        let res = router.oneshot(req).await.unwrap();
        assert_eq!(res.status(), 200);
        String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }
    let cases = [
        (
            routed(DistributedLockLayer::new(client.clone(), PathParam::new("id")).prefix("p:")),
            "p:42",
        ),
        (
            routed(DistributedLockLayer::new(client.clone(), PathSegment::new(1)).prefix("s:")),
            "s:42",
        ),
        (
            routed(DistributedLockLayer::new(client.clone(), QueryParam::new("q")).prefix("q:")),
            "q:x-y",
        ),
    ];
    for (router, expected) in cases {
        assert_eq!(
            text(router, request("/orders/4%32/pay?q=x%2Dy")).await,
            expected
        );
    }
    let header = Router::new().route(
        "/orders/{id}/pay",
        get(name).route_layer(DistributedLockLayer::new(
            client.clone(),
            Header::new(HeaderName::from_static("x-user-id")),
        )),
    );
    assert_eq!(text(header, request("/orders/1/pay")).await, "http:u-3");
    let closure = Router::new().route(
        "/orders/{id}/pay",
        get(name).route_layer(DistributedLockLayer::new(
            client.clone(),
            |req: &Request<Body>| {
                header_value(req, "x-user-id").map(|user| format!("{user}/{}", req.method()))
            },
        )),
    );
    assert_eq!(
        text(closure, request("/orders/1/pay")).await,
        "http:u-3/GET"
    );

    // Plain tower, no axum: any body type, and the inner error type is kept.
    #[derive(Debug, PartialEq)]
    struct MyError;
    let svc = ServiceBuilder::new()
        .layer(DistributedLockLayer::new(client.clone(), PathSegment::new(0)).prefix("t:"))
        .service_fn(|req: Request<Full<Bytes>>| async move {
            let lock = req.extensions().get::<HeldLock>().cloned();
            match lock {
                Some(lock) if req.uri().path() != "/fail" => Ok(http::Response::new(Full::new(
                    Bytes::from(lock.name().to_owned()),
                ))),
                _ => Err(MyError),
            }
        });
    let res = svc
        .clone()
        .oneshot(
            Request::builder()
                .uri("/job")
                .body(Full::default())
                .unwrap(),
        )
        .await
        .unwrap();
    // A small body was read in full under the lock, and the lock given back before the
    // response was handed on (so it goes out in one write).
    assert!(!res.body().holds_lock());
    assert!(!client.mutex("t:job").info().await.unwrap().held);
    assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), "t:job");
    // A body larger than the buffer limit streams, keeping the lock until its last frame.
    let big = ServiceBuilder::new()
        .layer(DistributedLockLayer::new(client.clone(), PathSegment::new(0)).prefix("t:"))
        .service_fn(|_req: Request<Full<Bytes>>| async move {
            let size = usize::try_from(lock_tower::lock::BUFFER_LIMIT).unwrap() + 1;
            Ok::<_, MyError>(http::Response::new(Full::new(Bytes::from(vec![
                b'x';
                size
            ]))))
        });
    let res = big
        .oneshot(
            Request::builder()
                .uri("/big")
                .body(Full::default())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(res.body().holds_lock());
    assert!(client.mutex("t:big").info().await.unwrap().held);
    let len = res.into_body().collect().await.unwrap().to_bytes().len();
    assert_eq!(len as u64, lock_tower::lock::BUFFER_LIMIT + 1);
    assert!(!client.mutex("t:big").info().await.unwrap().held);
    let err = svc
        .clone()
        .oneshot(
            Request::builder()
                .uri("/fail")
                .body(Full::default())
                .unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(err, MyError);
    let res = svc
        .oneshot(Request::builder().uri("/").body(Full::default()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["code"], "invalid_lock_key");
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_requests_queue_until_the_holder_finishes() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let (gate, mut entered) = Gate::new();
    let slow = {
        let gate = gate.clone();
        move || async move { gate.pass().await }
    };
    let layer = DistributedLockLayer::new(client, PathParam::new("id"));
    let router = Router::new()
        .route("/slow/{id}", post(slow).route_layer(layer.clone()))
        .route(
            "/wait/{id}",
            post(|| async { "waited" }).route_layer(layer.clone().wait(Duration::from_secs(10))),
        )
        .route(
            "/short/{id}",
            post(|| async { "waited" }).route_layer(layer.wait(Duration::from_millis(300))),
        );
    let app = App::serve(router).await;
    let http = http();
    let holder = tokio::spawn(http.post(app.url("/slow/1")).send());
    within("the holder", 10, entered.recv()).await.unwrap();

    let started = Instant::now();
    let (status, _, _) = problem(http.post(app.url("/short/1")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "waited before giving up"
    );

    let waiter = tokio::spawn(http.post(app.url("/wait/1")).send());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the waiter waits for the holder");
    gate.finish.notify_one();
    assert_eq!(
        within("the holder", 10, holder)
            .await
            .unwrap()
            .unwrap()
            .status(),
        200
    );
    let res = within("the waiter", 10, waiter).await.unwrap().unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "waited");
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_is_released_before_the_last_byte_reaches_the_client() {
    // The layer's client reaches Redis through a proxy that delays every packet, so a release
    // still under way when the response ends would be seen by the direct checker.
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let client = client(&proxy.url()).await;
    let checker = lock_tests::fixtures::client(&server.url()).await;
    proxy.delay(Duration::from_millis(100));
    let layer = DistributedLockLayer::new(client, PathParam::new("id"));
    let router = Router::new()
        .route(
            "/body/{id}",
            get(|| async { "0123456789" }).route_layer(layer.clone()),
        )
        .route(
            "/handler/{id}",
            get(|| async { "0123456789" }).route_layer(layer.release(Release::AfterHandler)),
        );
    let app = App::serve(router).await;
    for (path, name) in [("/body/1", "http:1"), ("/handler/2", "http:2")] {
        // A raw connection: the check runs as soon as the last byte has arrived.
        let mut conn = tokio::net::TcpStream::connect(app.addr()).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut received = Vec::new();
        let mut buf = [0u8; 1024];
        while !received.ends_with(b"0123456789") {
            let n = within("the response", 10, conn.read(&mut buf))
                .await
                .unwrap();
            assert!(
                n > 0,
                "closed early: {:?}",
                String::from_utf8_lossy(&received)
            );
            received.extend_from_slice(&buf[..n]);
        }
        assert!(received.starts_with(b"HTTP/1.1 200"));
        assert!(
            !checker.mutex(name).info().await.unwrap().held,
            "{path}: still locked after the response"
        );
    }
    proxy.pass();
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_re_enters_the_request_lock_and_finds_it() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let handler_client = c.clone();
    let router = Router::new().route(
        "/orders/{order_id}",
        post(move |Extension(held): Extension<HeldLock>| {
            let c = handler_client.clone();
            async move {
                // The request's lock is this handler's: visible, and re-entered without waiting.
                let current = lock_core::current_lock(held.name()).expect("the request's lock");
                assert_eq!(current.fencing_token(), held.fencing_token());
                let again = c.lock(held.name()).wait(Duration::ZERO).await.unwrap();
                let count = again.hold_count();
                assert!(again.unlock().await.unwrap());
                // A spawned task is another holder: it finds the lock busy.
                let other = tokio::spawn({
                    let (c, name) = (c.clone(), held.name().to_owned());
                    async move { c.try_lock(name).await.unwrap().is_none() }
                });
                format!("{count} {}", other.await.unwrap())
            }
        })
        .route_layer(
            DistributedLockLayer::new(c.clone(), PathParam::new("order_id")).prefix("order:"),
        ),
    );
    let app = App::serve(router).await;
    let res = within("request", 10, http().post(app.url("/orders/7")).send())
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert_eq!(res.text().await.unwrap(), "2 true");
    assert!(!c.mutex("order:7").info().await.unwrap().held);
    assert_clean(&server).await;
}

/// How many handlers run at once, and the most that ever did.
#[derive(Default)]
struct Concurrency {
    inside: AtomicUsize,
    most: AtomicUsize,
}

impl Concurrency {
    async fn hold(&self, for_: Duration) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(for_).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_let_at_most_n_requests_per_key_run_across_instances() {
    let server = RedisServer::start();
    let running = Arc::new(Concurrency::default());
    let together = Arc::new(Barrier::new(2));
    let app = |client: LockClient| {
        let (running, together) = (running.clone(), together.clone());
        let export = move |Extension(lock): Extension<HeldLock>, uri: http::Uri| async move {
            assert_eq!(lock.fencing_token(), None, "permits have no fencing token");
            if uri.query() == Some("together") {
                // Two requests of one key get here at the same time, or neither returns.
                if timeout(Duration::from_secs(10), together.wait())
                    .await
                    .is_err()
                {
                    return StatusCode::REQUEST_TIMEOUT;
                }
            }
            running.hold(Duration::from_millis(40)).await;
            StatusCode::OK
        };
        Router::new().route(
            "/exports/{tenant}",
            post(export).route_layer(
                DistributedLockLayer::new(client, PathParam::new("tenant"))
                    .prefix("export:")
                    .permits(2)
                    .wait(Duration::from_secs(20)),
            ),
        )
    };
    let apps = [
        App::serve(app(client(&server.url()).await)).await,
        App::serve(app(client(&server.url()).await)).await,
    ];
    let http = http();

    // Two requests of one key, one per instance, run together: it is not a mutex.
    let both = (0..2).map(|i| http.post(apps[i].url("/exports/a?together")).send());
    for res in within("two together", 20, futures_util::future::join_all(both)).await {
        assert_eq!(res.unwrap().status(), 200);
    }

    // Twelve at once, across both instances: never more than two inside.
    running.most.store(0, Ordering::SeqCst);
    let many = (0..12).map(|i| http.post(apps[i % 2].url("/exports/a")).send());
    for res in within("twelve requests", 30, futures_util::future::join_all(many)).await {
        assert_eq!(res.unwrap().status(), 200);
    }
    let most = running.most.load(Ordering::SeqCst);
    assert!(most <= 2, "{most} requests of one key ran at once");
    assert_eq!(most, 2, "the permits were used");

    // While two hold the key's permits, a third that does not wait is turned away.
    let apps_busy = App::serve(
        Router::new().route(
            "/exports/{tenant}",
            post(|| async { "ok" }).route_layer(
                DistributedLockLayer::new(client(&server.url()).await, PathParam::new("tenant"))
                    .prefix("export:")
                    .permits(2),
            ),
        ),
    )
    .await;
    let c = client(&server.url()).await;
    let sem = c.semaphore("export:b", 2);
    let (p1, p2) = (sem.acquire(1).await.unwrap(), sem.acquire(1).await.unwrap());
    let (status, retry_after, body) =
        problem(http.post(apps_busy.url("/exports/b")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(retry_after.is_some());
    assert_eq!(body["code"], "lock_permits_in_use", "{body}");
    assert_eq!(
        body["detail"], "all 2 permits for this resource are in use",
        "not \"another request holds the lock\""
    );
    p1.unlock().await.unwrap();
    let ok = http.post(apps_busy.url("/exports/b")).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    p2.unlock().await.unwrap();
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_lets_reads_overlap_and_writes_run_alone() {
    let server = RedisServer::start();
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let conflicts = Arc::new(AtomicUsize::new(0));
    let together = Arc::new(Barrier::new(2));
    let app = |client: LockClient| {
        let (r, w, bad, together) = (
            readers.clone(),
            writers.clone(),
            conflicts.clone(),
            together.clone(),
        );
        let read = move |Extension(lock): Extension<HeldLock>, uri: http::Uri| {
            let (r, w, bad, together) = (r.clone(), w.clone(), bad.clone(), together.clone());
            async move {
                assert_eq!(lock.fencing_token(), None, "readers have no fencing token");
                r.fetch_add(1, Ordering::SeqCst);
                if w.load(Ordering::SeqCst) > 0 {
                    bad.fetch_add(1, Ordering::SeqCst);
                }
                let status = if uri.query() == Some("together")
                    && timeout(Duration::from_secs(10), together.wait())
                        .await
                        .is_err()
                {
                    StatusCode::REQUEST_TIMEOUT
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    StatusCode::OK
                };
                r.fetch_sub(1, Ordering::SeqCst);
                status
            }
        };
        let (r, w, bad) = (readers.clone(), writers.clone(), conflicts.clone());
        let write = move |Extension(lock): Extension<HeldLock>| async move {
            assert!(lock.fencing_token().is_some(), "writers are fenced");
            if w.fetch_add(1, Ordering::SeqCst) > 0 || r.load(Ordering::SeqCst) > 0 {
                bad.fetch_add(1, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            w.fetch_sub(1, Ordering::SeqCst);
            StatusCode::OK
        };
        Router::new().route(
            "/docs/{id}",
            get(read).put(write).route_layer(
                DistributedLockLayer::new(client, PathParam::new("id"))
                    .prefix("doc:")
                    .read_write()
                    .wait(Duration::from_secs(20)),
            ),
        )
    };
    let apps = [
        App::serve(app(client(&server.url()).await)).await,
        App::serve(app(client(&server.url()).await)).await,
    ];
    let http = http();

    // Two GETs of one document, one per instance, are inside at the same time.
    let both = (0..2).map(|i| http.get(apps[i].url("/docs/7?together")).send());
    for res in within("two readers", 20, futures_util::future::join_all(both)).await {
        assert_eq!(res.unwrap().status(), 200);
    }

    // Reads and writes mixed, across both instances: a writer is always alone.
    let mixed = (0..16).map(|i| {
        let url = apps[i % 2].url("/docs/7");
        if i % 3 == 0 {
            http.put(url).send()
        } else {
            http.get(url).send()
        }
    });
    for res in within("mixed requests", 30, futures_util::future::join_all(mixed)).await {
        assert_eq!(res.unwrap().status(), 200);
    }
    assert_eq!(conflicts.load(Ordering::SeqCst), 0, "a writer overlapped");
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_that_cannot_work_answers_500_and_never_panics() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let routes = [
        (
            "/prefix/{id}",
            DistributedLockLayer::new(c.clone(), PathParam::new("id")).prefix(""),
        ),
        (
            // lock-core's prefix rule (`validate_prefix`): no braces.
            "/braces/{id}",
            DistributedLockLayer::new(c.clone(), PathParam::new("id")).prefix("a{b}:"),
        ),
        (
            "/lease/{id}",
            DistributedLockLayer::new(c.clone(), PathParam::new("id"))
                .fixed_lease(Duration::from_millis(1)),
        ),
        (
            "/permits/{id}",
            DistributedLockLayer::new(c.clone(), PathParam::new("id")).permits(0),
        ),
    ];
    let mut router = Router::new();
    for (path, layer) in routes {
        router = router.route(path, post(|| async { "ran" }).route_layer(layer));
    }
    let app = App::serve(router).await;
    for (path, option) in [
        ("/prefix/1", "prefix"),
        ("/braces/1", "prefix"),
        ("/lease/1", "lease"),
        ("/permits/1", "permits"),
    ] {
        let (status, _, body) = problem(http().post(app.url(path)).send().await.unwrap()).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{path}");
        assert_eq!(body["code"], "lock_error", "{path} ({option})");
    }
    assert!(lock_keys(&server).is_empty());
}

/// Every layer's `validate` gives, before any request, the error a setting that cannot work
/// would answer each request with, naming the option; a layer of good settings validates.
#[tokio::test]
async fn each_layer_validates_its_settings_at_start_up() {
    use lock_core::{LockError, Quota};
    use lock_tower::{IdempotencyLayer, RateLimitLayer};
    let c = LockClient::in_memory().await.unwrap();
    let option = |r: Result<(), LockError>| match r {
        Err(LockError::InvalidOption { option, .. }) => option,
        other => panic!("{other:?}"),
    };
    let lock = || DistributedLockLayer::new(c.clone(), PathParam::new("id"));
    assert!(lock().validate().is_ok());
    assert_eq!(option(lock().prefix("").validate()), "prefix");
    assert_eq!(option(lock().prefix("a{b}:").validate()), "prefix");
    assert_eq!(
        option(lock().fixed_lease(Duration::from_millis(1)).validate()),
        "lease"
    );
    assert_eq!(option(lock().permits(0).validate()), "permits");
    // A later good value mends it.
    assert!(lock().permits(0).permits(3).validate().is_ok());
    let rate = |q| RateLimitLayer::new(c.clone(), PathParam::new("id"), q);
    assert!(rate(Quota::per_second(5)).validate().is_ok());
    assert_eq!(option(rate(Quota::per_second(0)).validate()), "quota");
    assert_eq!(
        option(rate(Quota::per_second(5)).prefix("").validate()),
        "prefix"
    );
    let idem = || IdempotencyLayer::new(c.clone());
    assert!(idem().validate().is_ok());
    assert_eq!(option(idem().prefix("").validate()), "prefix");
    assert_eq!(option(idem().ttl(Duration::ZERO).validate()), "ttl");
    assert_eq!(
        option(idem().fixed_lease(Duration::from_millis(1)).validate()),
        "lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_keys_locks_ids_that_break_the_rules_by_their_digest() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let name = |Extension(lock): Extension<HeldLock>| async move { lock.name().to_owned() };
    let layer = |hash: bool| {
        DistributedLockLayer::new(
            c.clone(),
            Header::new(HeaderName::from_static("x-payment-id")),
        )
        .prefix("pay:")
        .hash_keys(hash)
    };
    let app = App::serve(
        Router::new()
            .route("/hashed", post(name).route_layer(layer(true)))
            .route("/plain", post(name).route_layer(layer(false))),
    )
    .await;
    let http = http();
    let send = |path: &str, id: &str| http.post(app.url(path)).header("x-payment-id", id).send();
    // An external id with a space and braces: refused as it is, locked by its digest when hashed.
    let external = "txn {2026} 00042";
    let (status, _, body) = problem(send("/plain", external).await.unwrap()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["code"], "invalid_lock_key");
    let hashed = send("/hashed", external)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(hashed.starts_with("pay:sha256:") && hashed.len() == "pay:sha256:".len() + 64);
    assert_eq!(
        send("/hashed", external)
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        hashed
    );
    // A valid id keeps its own name.
    assert_eq!(
        send("/hashed", "42").await.unwrap().text().await.unwrap(),
        "pay:42"
    );
    // The hashed name excludes like any other: held elsewhere, the request is turned away.
    let held = c.lock(hashed.clone()).await.unwrap();
    let (status, _, _) = problem(send("/hashed", external).await.unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    held.unlock().await.unwrap();
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_follows_how_long_requests_hold_the_lock() {
    let server = RedisServer::start();
    // A 30 s watchdog lease: the holder's remaining lease says nothing about when it is done.
    let c = client(&server.url()).await;
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let handler = {
        let (entered, release) = (entered.clone(), release.clone());
        move |uri: http::Uri| {
            let (entered, release) = (entered.clone(), release.clone());
            async move {
                if uri.query() == Some("hold") {
                    entered.notify_one();
                    release.notified().await;
                } else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                "done"
            }
        }
    };
    let app = App::serve(Router::new().route(
        "/jobs/{id}",
        post(handler).route_layer(DistributedLockLayer::new(c.clone(), PathParam::new("id"))),
    ))
    .await;
    let http = http();
    // Requests that hold their lock about 200 ms each.
    for i in 0..3 {
        let res = http
            .post(app.url(&format!("/jobs/warm-{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
    }
    // One holds a lock until told; a second request for the key is told to come back soon.
    let holding = tokio::spawn({
        let http = http.clone();
        let url = app.url("/jobs/7?hold");
        async move { http.post(url).send().await.unwrap().status() }
    });
    within("the holder entered", 10, entered.notified()).await;
    let (status, retry_after, body) =
        problem(http.post(app.url("/jobs/7")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        retry_after.as_deref(),
        Some("1"),
        "rounded up to a whole second"
    );
    assert_eq!(
        body["retry_after_ms"], 1000,
        "the recent 200 ms holds (not the 30 s lease), rounded up as the header is: {body}"
    );
    release.notify_one();
    assert_eq!(within("the holder", 10, holding).await.unwrap(), 200);
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_param_the_route_lacks_answers_500_and_is_logged_once_per_route() {
    let logs = layer_logs();
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    // One layer on three routes, two of which lack its parameter (a misconfiguration: no
    // request to them can have the key), and a pass-through layer on a fourth.
    let layer = DistributedLockLayer::new(c.clone(), PathParam::new("mismatched_order_id"))
        .prefix("mismatch:");
    let pass = DistributedLockLayer::new(c.clone(), PathParam::new("mismatched_order_id"))
        .missing_key(MissingKey::PassThrough);
    let app = App::serve(
        Router::new()
            .route("/mismatch/orders/{id}", post(ran))
            .route("/mismatch/carts/{cart}/items/{item}", post(ran))
            .route("/mismatch/fits/{mismatched_order_id}", post(ran))
            .route_layer(layer)
            .route("/mismatch/pass/{id}", post(ran).route_layer(pass)),
    )
    .await;
    let http = http();

    for path in [
        "/mismatch/orders/1",
        "/mismatch/orders/2",
        "/mismatch/orders/1",
        "/mismatch/carts/1/items/2",
        "/mismatch/carts/3/items/4",
    ] {
        let (status, retry_after, body) =
            problem(http.post(app.url(path)).send().await.unwrap()).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{path}: {body}");
        assert_eq!(body["code"], "lock_key_not_in_route", "{path}: {body}");
        assert_eq!(retry_after, None, "retrying does not help");
        assert!(
            !body.to_string().contains("mismatched_order_id"),
            "the configuration is not shown to the client: {body}"
        );
    }
    // The route that has the parameter locks; a value that is not UTF-8 is still the
    // request's fault; the pass-through layer runs the handler unlocked.
    let res = http.post(app.url("/mismatch/fits/7")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let not_utf8 = http
        .post(app.url("/mismatch/fits/%ff"))
        .send()
        .await
        .unwrap();
    let (status, _, body) = problem(not_utf8).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["code"], "missing_lock_key");
    let res = http.post(app.url("/mismatch/pass/7")).send().await.unwrap();
    assert_eq!(res.status(), 200);

    let errors = logs.picked(|e| e.field("parameter") == Some("mismatched_order_id"));
    assert!(
        errors.iter().all(|e| e.level == Level::ERROR),
        "{errors:#?}"
    );
    let mut routes: Vec<&str> = errors.iter().filter_map(|e| e.field("route")).collect();
    routes.sort_unstable();
    assert_eq!(
        routes,
        [
            "/mismatch/carts/{cart}/items/{item}",
            "/mismatch/orders/{id}"
        ],
        "one error per route, naming it: {errors:#?}"
    );
    let rejected = logs.picked(|e| e.field("code") == Some("lock_key_not_in_route"));
    assert_eq!(
        rejected.len(),
        5,
        "one info per rejected request: {rejected:#?}"
    );
    assert!(
        rejected
            .iter()
            .all(|e| e.level == Level::INFO && e.field("status") == Some("500"))
    );
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_busy_answer_retries_after_the_wait_or_a_second_not_the_lease() {
    let server = RedisServer::start();
    // The default 30 s watchdog lease: the holder's remaining lease says nothing about when
    // it will be done, and no request of these layers has released a lock yet.
    let c = client(&server.url()).await;
    let layer = || DistributedLockLayer::new(c.clone(), PathParam::new("id")).prefix("first:");
    let app = App::serve(
        Router::new()
            .route("/once/{id}", post(ran).route_layer(layer()))
            .route(
                "/waits/{id}",
                post(ran).route_layer(layer().wait(Duration::from_millis(1500))),
            ),
    )
    .await;
    let http = http();
    let holder = c.lock("first:7").await.unwrap();

    let (status, retry_after, body) =
        problem(http.post(app.url("/once/7")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(retry_after.as_deref(), Some("1"), "not the 5 s cap: {body}");
    assert_eq!(body["retry_after_ms"], 1000);
    // A layer that waits suggests coming back after another such wait.
    let (status, retry_after, body) =
        problem(http.post(app.url("/waits/7")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        retry_after.as_deref(),
        Some("2"),
        "1.5 s rounded up: {body}"
    );
    assert_eq!(body["retry_after_ms"], 2000, "the header's value: {body}");

    holder.unlock().await.unwrap();
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_rejection_is_logged_as_busy_not_as_timed_out() {
    let logs = layer_logs();
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let app = App::serve(
        Router::new()
            .route(
                "/busy/{id}",
                post(ran).route_layer(
                    DistributedLockLayer::new(c.clone(), PathParam::new("id")).prefix("busy-log:"),
                ),
            )
            .route(
                "/busy-waits/{id}",
                post(ran).route_layer(
                    DistributedLockLayer::new(c.clone(), PathParam::new("id"))
                        .prefix("busy-log:")
                        .wait(Duration::from_millis(100)),
                ),
            )
            .route(
                "/busy-permit/{id}",
                post(ran).route_layer(
                    DistributedLockLayer::new(c.clone(), PathParam::new("id"))
                        .prefix("busy-permit:")
                        .permits(1),
                ),
            ),
    )
    .await;
    let http = http();
    let holder = c.lock("busy-log:7").await.unwrap();
    let permit = c.semaphore("busy-permit:7", 1).acquire(1).await.unwrap();
    for path in ["/busy/7", "/busy-waits/7", "/busy-permit/7"] {
        let res = http.post(app.url(path)).send().await.unwrap();
        assert_eq!(res.status(), 409, "{path}");
    }
    let logged = |lock: &str| -> Vec<Captured> {
        logs.picked(|e| e.field("lock") == Some(lock) && e.field("status") == Some("409"))
    };
    let errors = |events: &[Captured]| -> Vec<String> {
        events.iter().map(|e| e.fields["error"].clone()).collect()
    };
    let mut mutex = errors(&logged("busy-log:7"));
    mutex.sort_unstable();
    assert_eq!(
        mutex,
        [
            "lock `busy-log:7` is held by another request (busy for the whole 100ms wait)",
            "lock `busy-log:7` is held by another request (busy: a single attempt, no wait)",
        ]
    );
    assert_eq!(
        errors(&logged("busy-permit:7")),
        ["the only permit of `busy-permit:7` is in use (busy: a single attempt, no wait)"]
    );
    holder.unlock().await.unwrap();
    permit.unlock().await.unwrap();
    assert_clean(&server).await;
}

/// The crate docs, whose table of every situation and its response is checked against the
/// lock layer.
const LOCK_LAYER_DOCS: &str = include_str!("../../lock-tower/src/lib.rs");

/// The kinds a row of that table may name, and their problem codes (from the type itself).
const KINDS: [(&str, RejectionKind); 8] = [
    ("MissingKey", RejectionKind::MissingKey),
    ("KeyNotInRoute", RejectionKind::KeyNotInRoute),
    ("InvalidKey", RejectionKind::InvalidKey),
    ("Busy", RejectionKind::Busy),
    ("PermitsInUse", RejectionKind::PermitsInUse),
    ("Unavailable", RejectionKind::Unavailable),
    ("Lost", RejectionKind::Lost),
    ("Internal", RejectionKind::Internal),
];

/// The problem codes of the kinds the docs' table names in its `RejectionKind` column.
fn listed_codes() -> std::collections::BTreeSet<String> {
    let table = LOCK_LAYER_DOCS
        .split("Every situation and its response:")
        .nth(1)
        .expect("the table of situations");
    table
        .lines()
        .map(|line| line.trim_start_matches("//!").trim())
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cell = row.split('|').nth(2).unwrap_or_default().trim();
            let name = cell.trim_matches('`');
            let (_, kind) = KINDS
                .iter()
                .find(|(n, _)| *n == name)
                .unwrap_or_else(|| panic!("the docs name an unknown kind {cell:?}"));
            kind.code().to_owned()
        })
        .collect()
}

/// What the test's held requests share: the handler says it entered, then waits for release.
#[derive(Default)]
struct Hold {
    entered: Notify,
    release: Notify,
}

/// The app of every answer of the lock layer on a working Redis (`c`).
fn every_answer_app(c: &LockClient, gate: &Arc<Hold>) -> Router {
    let held = {
        let gate = gate.clone();
        move || {
            let gate = gate.clone();
            async move {
                gate.entered.notify_one();
                gate.release.notified().await;
                "held"
            }
        }
    };
    let never = || std::future::pending::<&'static str>();
    let layer =
        |key: PathParam, prefix: &str| DistributedLockLayer::new(c.clone(), key).prefix(prefix);
    let header = Header::new(HeaderName::from_static("x-key"));
    Router::new()
        .route(
            "/h",
            get(ran).route_layer(DistributedLockLayer::new(c.clone(), header)),
        )
        .route(
            "/p/{id}",
            get(ran).route_layer(layer(PathParam::new("nope"), "p:")),
        )
        .route(
            "/busy/{id}",
            get(held.clone()).route_layer(layer(PathParam::new("id"), "b:")),
        )
        .route(
            "/permits/{id}",
            get(held).route_layer(layer(PathParam::new("id"), "n:").permits(1)),
        )
        .route(
            "/lost/{id}",
            get(never).route_layer(
                layer(PathParam::new("id"), "l:").fixed_lease(Duration::from_millis(200)),
            ),
        )
        .route(
            "/bad/{id}",
            get(ran).route_layer(
                layer(PathParam::new("id"), "x:").fixed_lease(Duration::from_millis(1)),
            ),
        )
}

/// The problem code of a response, if it is one of the layer's.
async fn code_of(res: reqwest::Response) -> Option<String> {
    let body: serde_json::Value = res.json().await.ok()?;
    body["code"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_of_situations_lists_every_answer_of_the_layer_and_only_those() {
    let listed = listed_codes();
    assert!(listed.contains("lock_busy"), "{listed:?}");
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let gate = Arc::new(Hold::default());
    let app = App::serve(every_answer_app(&c, &gate)).await;
    let get = |path: &str| http().get(app.url(path)).send();
    let mut seen = vec![
        code_of(get("/h").await.unwrap()).await,
        code_of(
            http()
                .get(app.url("/h"))
                .header("x-key", "a b")
                .send()
                .await
                .unwrap(),
        )
        .await,
        code_of(get("/p/1").await.unwrap()).await,
        code_of(get("/bad/1").await.unwrap()).await,
        code_of(
            within("the lease to run out", 20, get("/lost/1"))
                .await
                .unwrap(),
        )
        .await,
    ];
    for path in ["/busy/1", "/permits/1"] {
        let holder = tokio::spawn(http().get(app.url(path)).send());
        within("the holder to enter", 20, gate.entered.notified()).await;
        seen.push(code_of(get(path).await.unwrap()).await);
        gate.release.notify_one();
        assert_eq!(holder.await.unwrap().unwrap().status(), 200);
    }
    // Redis down (the client was connected, then its server killed).
    let mut down = RedisServer::start();
    let lost_server = client(&down.url()).await;
    let down_app = App::serve(every_answer_app(&lost_server, &gate)).await;
    down.kill();
    seen.push(
        code_of(
            http()
                .get(down_app.url("/h"))
                .header("x-key", "k")
                .send()
                .await
                .unwrap(),
        )
        .await,
    );
    let seen: std::collections::BTreeSet<String> = seen.into_iter().flatten().collect();
    assert_eq!(
        seen, listed,
        "the layer's answers (left) and the docs' table (right) differ"
    );
}
