//! lock-tower's `IdempotencyLayer` and lock-core's records against a real redis-server, real
//! axum servers on loopback ports and a real HTTP client: a key's request runs once across two
//! instances (its duplicates get `409` while it runs, its stored response byte for byte after),
//! another request with the key gets `422`, scopes keep clients apart, a failed handler and a
//! lost lock store nothing (the late write refused by the fence), a response too large stores
//! a "completed, not replayable" marker (its retries `409`, never run again), bad
//! keys get `400` problems, a Redis outage `503` unless the layer fails open; and the records
//! themselves: fenced, next to the lock (in its slot on a Cluster), expiring, with and without
//! Lua.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::{CONTENT_TYPE, LOCATION};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use lock_core::fenced::{self, Fenced, MAX_TOKEN};
use lock_core::{HeldLock, LockError};
use lock_tests::RedisServer;
use lock_tests::fixtures::{client, eventually, lock_keys};
use lock_tower::{FailMode, Header, Idempotency, IdempotencyLayer, LeaseLost};
use tokio::sync::{mpsc, watch};
use tracing::Level;
use web::{App, http, problem, within};

mod web;

/// What the handlers share with the test.
struct Probe {
    /// Handlers that started.
    runs: AtomicUsize,
    /// Handlers dropped before they answered.
    cancelled: AtomicUsize,
    /// Closed (true): handlers wait at it.
    gate: watch::Sender<bool>,
    /// Each handler's run number, once it has started (and, for `fenced_write`'s first run,
    /// once its lock is lost).
    entered: mpsc::UnboundedSender<usize>,
    entered_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<usize>>,
    /// The next handler answers `500`.
    fail_next: std::sync::atomic::AtomicBool,
    /// The next handler answers `409` with `Retry-After` (as a lock layer inside would).
    busy_next: std::sync::atomic::AtomicBool,
    /// The Redis of `fenced_write`'s resource.
    redis_url: String,
}

impl Probe {
    fn new(server: &RedisServer) -> Arc<Probe> {
        let (entered, entered_rx) = mpsc::unbounded_channel();
        Arc::new(Probe {
            runs: AtomicUsize::new(0),
            cancelled: AtomicUsize::new(0),
            gate: watch::Sender::new(false),
            entered,
            entered_rx: tokio::sync::Mutex::new(entered_rx),
            fail_next: false.into(),
            busy_next: false.into(),
            redis_url: server.url(),
        })
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    fn close(&self) {
        self.gate.send_replace(true);
    }

    fn open(&self) {
        self.gate.send_replace(false);
    }

    async fn pass_gate(&self) {
        let mut gate = self.gate.subscribe();
        let _ = gate.wait_for(|closed| !closed).await;
    }

    /// The run number of the next handler to enter.
    async fn entered(&self) -> usize {
        let next = async { self.entered_rx.lock().await.recv().await.unwrap() };
        within("a handler to enter", 20, next).await
    }
}

/// Counts a handler dropped before it answered.
struct Armed(Arc<Probe>, bool);

impl Drop for Armed {
    fn drop(&mut self) {
        if self.1 {
            self.0.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The handler: counts its run, waits at the gate, answers `201` with a body unique to the
/// run (a random nonce in it) and three headers, two of them kept by the layer's default.
async fn charge(
    State(probe): State<Arc<Probe>>,
    idem: Option<Extension<Idempotency>>,
    body: Bytes,
) -> Response {
    let run = probe.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let mut armed = Armed(probe.clone(), true);
    let _ = probe.entered.send(run);
    probe.pass_gate().await;
    armed.1 = false;
    if probe.fail_next.swap(false, Ordering::SeqCst) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "failed").into_response();
    }
    if probe.busy_next.swap(false, Ordering::SeqCst) {
        let retry = [(axum::http::header::RETRY_AFTER, "1")];
        return (StatusCode::CONFLICT, retry, "busy").into_response();
    }
    let token = idem.map(|Extension(idem)| idem.fencing_token());
    let nonce: u64 = rand::random();
    let body = format!(
        "{{\"run\":{run},\"token\":{},\"nonce\":{nonce},\"echo\":{:?}}}",
        token.unwrap_or(0),
        String::from_utf8_lossy(&body)
    );
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(LOCATION, format!("/charges/{run}").parse().unwrap());
    headers.insert("x-extra", HeaderValue::from_static("not kept"));
    (StatusCode::CREATED, headers, body).into_response()
}

/// A 4 KiB body.
async fn big(State(probe): State<Arc<Probe>>) -> Vec<u8> {
    probe.runs.fetch_add(1, Ordering::SeqCst);
    vec![b'x'; 4096]
}

/// Writes the resource `resource` in Redis, fenced by the key's token; the first run waits
/// for its lock to be lost, says so, and waits at the gate first.
async fn fenced_write(
    State(probe): State<Arc<Probe>>,
    Extension(idem): Extension<Idempotency>,
    Extension(lock): Extension<HeldLock>,
) -> String {
    let run = probe.runs.fetch_add(1, Ordering::SeqCst) + 1;
    if run == 1 {
        lock.lost().await;
        let _ = probe.entered.send(run);
        probe.pass_gate().await;
    }
    let redis = lock_core::redis::Client::open(probe.redis_url.as_str()).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    let token = idem.fencing_token();
    match fenced::set(&mut conn, "resource", format!("run {run}"), token).await {
        Ok(Fenced::Written) => format!("run {run} wrote with {token}"),
        Ok(Fenced::Refused { stored }) => format!("run {run} refused: {stored} wrote"),
        Err(e) => format!("run {run} failed: {e}"),
    }
}

/// The app of an unscoped `layer`: `POST /charges` (and `GET`), `POST /other`, `POST /big`,
/// `POST /fenced`.
fn app(layer: IdempotencyLayer, probe: &Arc<Probe>) -> Router {
    Router::new()
        .route("/charges", post(charge).get(charge))
        .route("/other", post(charge))
        .route("/big", post(big))
        .route("/fenced", post(fenced_write))
        .route_layer(layer)
        .with_state(probe.clone())
}

async fn send(url: String, key: &str, body: &'static str) -> reqwest::Response {
    http()
        .post(url)
        .header("idempotency-key", key)
        .body(body)
        .send()
        .await
        .unwrap()
}

/// A layer's rejection with `status`: its problem `code` and `Retry-After`.
async fn rejected(res: reqwest::Response, status: StatusCode) -> (String, Option<String>) {
    let (got, retry_after, body) = problem(res).await;
    assert_eq!(got, status, "{body}");
    (
        body["code"].as_str().unwrap_or_default().to_owned(),
        retry_after,
    )
}

/// The status of `request`, sent as it is (without a key, say).
async fn status_of(request: reqwest::RequestBuilder) -> u16 {
    request.send().await.unwrap().status().as_u16()
}

/// Status, the headers asked for, and the body of a response.
async fn read(res: reqwest::Response) -> (u16, Vec<Option<String>>, Bytes) {
    let names = ["idempotent-replayed", "location", "content-type", "x-extra"];
    let headers = names
        .iter()
        .map(|n| {
            res.headers()
                .get(*n)
                .map(|v| v.to_str().unwrap().to_owned())
        })
        .collect();
    (res.status().as_u16(), headers, res.bytes().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_runs_once_across_two_instances_and_is_replayed_byte_for_byte() {
    let server = RedisServer::start();
    let probe = Probe::new(&server);
    let apps = [
        App::serve(app(
            IdempotencyLayer::new(client(&server.url()).await),
            &probe,
        ))
        .await,
        App::serve(app(
            IdempotencyLayer::new(client(&server.url()).await),
            &probe,
        ))
        .await,
    ];
    probe.close();
    let first = tokio::spawn(send(apps[0].url("/charges"), "k-1", "amount=5"));
    assert_eq!(probe.entered().await, 1);

    // Its duplicates, on both instances, while it runs: 409 at once, with Retry-After: the
    // holder's remaining lease (the default 30 s watchdog lease, renewed every 10 s), rounded
    // up, and the body's retry_after_ms the same value.
    let duplicates = (0..8).map(|i| send(apps[i % 2].url("/charges"), "k-1", "amount=5"));
    for res in within("duplicates", 30, futures_util::future::join_all(duplicates)).await {
        let (status, retry_after, body) = problem(res).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert_eq!(body["code"], "idempotency_key_in_use");
        let secs: u64 = retry_after.expect("Retry-After").parse().unwrap();
        assert!((19..=30).contains(&secs), "the holder's lease: {secs} s");
        assert_eq!(body["retry_after_ms"], secs * 1000, "{body}");
    }
    probe.open();
    let (status, headers, original) = read(first.await.unwrap()).await;
    assert_eq!(status, 201);
    assert_eq!(headers[0], None, "the first answer is not a replay");
    assert_eq!(headers[3].as_deref(), Some("not kept"));

    // After it: its response, from both instances, byte for byte, the kept headers only.
    for i in 0..4 {
        let (status, replayed, body) =
            read(send(apps[i % 2].url("/charges"), "k-1", "amount=5").await).await;
        assert_eq!(status, 201);
        assert_eq!(replayed[0].as_deref(), Some("true"));
        assert_eq!(
            replayed[1..3],
            headers[1..3],
            "Location and Content-Type kept"
        );
        assert_eq!(replayed[3], None, "x-extra is not kept");
        assert_eq!(body, original, "byte for byte");
    }
    assert_eq!(probe.runs(), 1, "the handler ran once");
    // The record is where lock-core's docs say, with the layer's time to live.
    let key = "lock:{idem::k-1}:record";
    let ttl: i64 = server.cmd(&["PTTL", key]).parse().unwrap();
    assert!(ttl > 23 * 3600 * 1000 && ttl <= 24 * 3600 * 1000, "{ttl}");
    assert!(
        lock_keys(&server).is_empty(),
        "the key's lock was given back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_duplicate_is_replayed_the_first_response() {
    let server = RedisServer::start();
    let probe = Probe::new(&server);
    let layer = IdempotencyLayer::new(client(&server.url()).await).wait(Duration::from_secs(20));
    let app = App::serve(app(layer, &probe)).await;
    probe.close();
    let first = tokio::spawn(send(app.url("/charges"), "k-wait", "x"));
    assert_eq!(probe.entered().await, 1);
    let duplicate = tokio::spawn(send(app.url("/charges"), "k-wait", "x"));
    probe.open();
    let (_, _, original) = read(first.await.unwrap()).await;
    let (status, headers, body) = read(duplicate.await.unwrap()).await;
    assert_eq!((status, headers[0].as_deref()), (201, Some("true")));
    assert_eq!(body, original);
    assert_eq!(probe.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_request_with_the_key_is_422_and_scopes_keep_clients_apart() {
    let server = RedisServer::start();
    let probe = Probe::new(&server);
    let c = client(&server.url()).await;
    let unscoped = App::serve(app(IdempotencyLayer::new(c.clone()), &probe)).await;
    assert_eq!(send(unscoped.url("/charges"), "k", "a").await.status(), 201);
    for (path, body) in [("/charges", "b"), ("/other", "a")] {
        let res = send(unscoped.url(path), "k", body).await;
        let (code, _) = rejected(res, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert_eq!(code, "idempotency_key_reused", "{path} {body}");
    }
    assert_eq!(probe.runs(), 1);

    let by_client = IdempotencyLayer::new(c)
        .prefix("scoped:")
        .scope(Header::new(HeaderName::from_static("x-client")));
    let scoped = Router::new()
        .route("/charges", post(charge))
        .route_layer(by_client)
        .with_state(probe.clone());
    let scoped = App::serve(scoped).await;
    let as_client = |client: &'static str, body: &'static str| {
        let url = scoped.url("/charges");
        async move {
            let req = http()
                .post(url)
                .header("idempotency-key", "k")
                .header("x-client", client);
            req.body(body).send().await.unwrap()
        }
    };
    let (status, _, alice) = read(as_client("alice", "a").await).await;
    assert_eq!(status, 201);
    // Bob's "k" is not Alice's: another body is no reuse, and it runs.
    let (status, headers, _) = read(as_client("bob", "b").await).await;
    assert_eq!((status, headers[0].as_deref()), (201, None));
    let (_, headers, again) = read(as_client("alice", "a").await).await;
    assert_eq!((headers[0].as_deref(), again), (Some("true"), alice));
    assert_eq!(probe.runs(), 3);
    let res = http()
        .post(scoped.url("/charges"))
        .header("idempotency-key", "k");
    let (code, _) = rejected(res.send().await.unwrap(), StatusCode::BAD_REQUEST).await;
    assert_eq!(code, "idempotency_scope_missing");
    assert_eq!(probe.runs(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_busy_handler_stores_nothing_and_its_retry_runs() {
    let server = RedisServer::start();
    let probe = Probe::new(&server);
    let app = App::serve(app(
        IdempotencyLayer::new(client(&server.url()).await),
        &probe,
    ))
    .await;
    // A 5xx, and an answer that says when to retry: neither is final.
    for (next, status) in [(&probe.fail_next, 500), (&probe.busy_next, 409)] {
        next.store(true, Ordering::SeqCst);
        let res = send(app.url("/charges"), "k-fail", "x").await;
        assert_eq!(res.status(), status);
        assert_eq!(server.cmd(&["EXISTS", "lock:{idem::k-fail}:record"]), "0");
    }
    let (status, headers, first) = read(send(app.url("/charges"), "k-fail", "x").await).await;
    assert_eq!(
        (status, headers[0].as_deref()),
        (201, None),
        "the retry ran"
    );
    let (_, headers, replay) = read(send(app.url("/charges"), "k-fail", "x").await).await;
    assert_eq!((headers[0].as_deref(), replay), (Some("true"), first));
    assert_eq!(probe.runs(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_stores_nothing_and_the_late_write_is_fenced() {
    let server = RedisServer::start();
    let probe = Probe::new(&server);
    let c = client(&server.url()).await;
    // A lease that runs out while the first run waits; it goes on (Continue) and writes late.
    let layer = IdempotencyLayer::new(c.clone())
        .fixed_lease(Duration::from_secs(2))
        .on_lease_lost(LeaseLost::Continue);
    let app = App::serve(app(layer, &probe)).await;
    probe.close();
    let first = tokio::spawn(send(app.url("/fenced"), "k-lost", ""));
    assert_eq!(probe.entered().await, 1, "the first run saw its lock lost");
    eventually("the first run's lease ran out in Redis", || {
        lock_keys(&server).is_empty()
    })
    .await;
    let second = send(app.url("/fenced"), "k-lost", "")
        .await
        .text()
        .await
        .unwrap();
    let token: u64 = second
        .strip_prefix("run 2 wrote with ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{second}"));
    probe.open();
    // The first answers (Continue), its late write refused by the resource's fence, and it
    // stores nothing.
    let late = first.await.unwrap().text().await.unwrap();
    assert_eq!(late, format!("run 1 refused: {token} wrote"));
    let (_, headers, replay) = read(send(app.url("/fenced"), "k-lost", "").await).await;
    assert_eq!(headers[0].as_deref(), Some("true"));
    assert_eq!(
        replay,
        second.as_bytes(),
        "the retry's response, not the late one"
    );
    let record = c.records().get("idem::k-lost").await.unwrap().unwrap();
    assert_eq!(record.token(), token);
    // The record refuses the older token too.
    let older = c
        .records()
        .put("idem::k-lost", b"late", token - 1, Duration::from_secs(60))
        .await;
    assert_eq!(older.unwrap(), Fenced::Refused { stored: token });
    assert_eq!(probe.runs(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_aborts_the_handler_and_its_retry_runs() {
    let server = RedisServer::start();
    let probe = Probe::new(&server);
    let layer =
        IdempotencyLayer::new(client(&server.url()).await).fixed_lease(Duration::from_secs(1));
    let app = App::serve(app(layer, &probe)).await;
    probe.close();
    let res = send(app.url("/charges"), "k-abort", "x").await;
    let (code, retry_after) = rejected(res, StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(
        (code.as_str(), retry_after.as_deref()),
        ("lock_lost", Some("1"))
    );
    assert_eq!(
        probe.cancelled.load(Ordering::SeqCst),
        1,
        "the handler was cancelled"
    );
    assert_eq!(server.cmd(&["EXISTS", "lock:{idem::k-abort}:record"]), "0");
    probe.open();
    let (status, headers, _) = read(send(app.url("/charges"), "k-abort", "x").await).await;
    assert_eq!(
        (status, headers[0].as_deref()),
        (201, None),
        "the retry ran"
    );
    assert_eq!(probe.runs(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_and_missing_keys_are_400_problems_that_never_reach_the_handler() {
    let server = RedisServer::start();
    let probe = Probe::new(&server);
    let layer = IdempotencyLayer::new(client(&server.url()).await).require_for([Method::POST]);
    let app = App::serve(app(layer, &probe)).await;
    let long = vec![b'k'; 256];
    let bad: [&[u8]; 6] = [b"", &long, b"a\tb", b"caf\xe9", b"\"a\"b\"", b"\"\""];
    for raw in bad {
        let value = HeaderValue::from_bytes(raw).unwrap();
        let res = http()
            .post(app.url("/charges"))
            .header("idempotency-key", value);
        let (status, _, body) = problem(res.send().await.unwrap()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{raw:?}");
        assert_eq!(body["code"], "idempotency_key_invalid", "{raw:?}");
        assert!(!body.to_string().contains("caf"), "the key is not repeated");
    }
    let twice = http()
        .post(app.url("/charges"))
        .header("idempotency-key", "a")
        .header("idempotency-key", "b");
    let (code, _) = rejected(twice.send().await.unwrap(), StatusCode::BAD_REQUEST).await;
    assert_eq!(code, "idempotency_key_invalid");
    let keyless = http().post(app.url("/charges")).send().await.unwrap();
    let (code, _) = rejected(keyless, StatusCode::BAD_REQUEST).await;
    assert_eq!(code, "idempotency_key_missing");
    assert_eq!(probe.runs(), 0);
    // The longest key is fine, and a method the key is not required for runs without one.
    let longest = String::from_utf8(vec![b'k'; 255]).unwrap();
    assert_eq!(send(app.url("/charges"), &longest, "").await.status(), 201);
    assert_eq!(status_of(http().get(app.url("/charges"))).await, 201);
    assert_eq!(probe.runs(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_structured_field_string_key_is_the_same_key_as_the_bare_token() {
    let server = RedisServer::start();
    let probe = Probe::new(&server);
    let layer = IdempotencyLayer::new(client(&server.url()).await);
    let app = App::serve(app(layer, &probe)).await;
    // The draft's form, RFC 8941's sf-string: the quotes are not part of the key.
    let (status, replayed, _) = read(send(app.url("/charges"), "\"8e03978e\"", "x").await).await;
    assert_eq!((status, replayed[0].as_deref()), (201, None));
    let (status, replayed, _) = read(send(app.url("/charges"), "8e03978e", "x").await).await;
    assert_eq!((status, replayed[0].as_deref()), (201, Some("true")));
    // Escapes: `\"` and `\\` stand for `"` and `\`.
    let escaped = r#""a\"b\\c""#;
    assert_eq!(send(app.url("/charges"), escaped, "x").await.status(), 201);
    let (_, replayed, _) = read(send(app.url("/charges"), r#"a"b\c"#, "x").await).await;
    assert_eq!(replayed[0].as_deref(), Some("true"));
    assert_eq!(probe.runs(), 2);
    // Its record is where `record_key` says, the name lockctl takes.
    let name = lock_tower::idempotency::record_key("idem:", None, "8e03978e").unwrap();
    assert_eq!(name, "idem::8e03978e");
    assert_eq!(
        server.cmd(&["EXISTS", &format!("lock:{{{name}}}:record")]),
        "1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limits_are_413_or_answered_but_not_stored() {
    let logs = lock_tests::logs::everything(&["lock_tower"]);
    let server = RedisServer::start();
    let probe = Probe::new(&server);
    let layer = IdempotencyLayer::new(client(&server.url()).await)
        .max_request_body(16)
        .max_record_body(1031);
    let app = App::serve(app(layer, &probe)).await;
    let res = send(app.url("/charges"), "k-in", "seventeen bytes!!").await;
    let (code, _) = rejected(res, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert_eq!(code, "request_body_too_large");
    assert_eq!(
        send(app.url("/charges"), "k-in", "sixteen bytes!!!")
            .await
            .status(),
        201
    );
    assert_eq!(probe.runs(), 1);

    // A response over max_record_body: answered whole, and a "completed, not replayable"
    // marker stored, so a retry is 409 and never runs the handler again.
    let (status, headers, body) = read(send(app.url("/big"), "k-out", "").await).await;
    assert_eq!((status, headers[0].as_deref()), (200, None));
    assert_eq!(body.len(), 4096);
    assert!(body.iter().all(|&b| b == b'x'));
    assert_eq!(probe.runs(), 2);
    for _ in 0..2 {
        let res = send(app.url("/big"), "k-out", "").await;
        let (status, retry_after, body) = problem(res).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert_eq!(body["code"], "idempotency_response_not_replayable");
        assert_eq!(retry_after, None, "retrying never helps");
        assert!(body["detail"].as_str().unwrap().contains("200"), "{body}");
    }
    assert_eq!(probe.runs(), 2, "never a second run");
    // Another request with the key is still 422, not the marker's answer.
    let res = send(app.url("/big"), "k-out", "other body").await;
    assert_eq!(
        rejected(res, StatusCode::UNPROCESSABLE_ENTITY).await.0,
        "idempotency_key_reused"
    );
    let warned =
        logs.picked(|e| e.level == Level::WARN && e.field("max_record_body") == Some("1031"));
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        lock_keys(&server).is_empty(),
        "the key's lock was given back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_503_unless_the_layer_fails_open() {
    let mut server = RedisServer::start();
    let probe = Probe::new(&server);
    let closed = App::serve(app(
        IdempotencyLayer::new(client(&server.url()).await),
        &probe,
    ))
    .await;
    let open_layer = IdempotencyLayer::new(client(&server.url()).await).fail_mode(FailMode::Open);
    let open = App::serve(app(open_layer, &probe)).await;
    server.kill();
    let res = send(closed.url("/charges"), "k-down", "x").await;
    let (code, retry_after) = rejected(res, StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(
        (code.as_str(), retry_after.as_deref()),
        ("idempotency_store_unavailable", Some("1"))
    );
    assert_eq!(probe.runs(), 0);
    // Failing open runs it, unrecorded; a request without a key never needed Redis.
    assert_eq!(
        send(open.url("/charges"), "k-down", "x").await.status(),
        201
    );
    assert_eq!(status_of(http().post(closed.url("/charges"))).await, 201);
    assert_eq!(probe.runs(), 2);
    // Restarted on the same port, the closed layer answers the next key at once, though
    // nothing else on its client (no lock layer, no lock call) repaired its connections.
    tokio::task::block_in_place(|| server.restart());
    assert_eq!(
        send(closed.url("/charges"), "k-back", "x").await.status(),
        201
    );
    assert_eq!(probe.runs(), 3);
}

/// The rule of a record's put, on `name`: refused from an older token, accepted from an equal
/// or greater one, and among concurrent writers the greatest token's value stands.
async fn fenced_puts(records: &lock_core::record::Records, name: &str) {
    let ttl = Duration::from_secs(60);
    let put = |value: &'static [u8], token| records.put(name, value, token, ttl);
    assert_eq!(put(b"first", 5).await.unwrap(), Fenced::Written);
    let read = records.get(name).await.unwrap().unwrap();
    assert_eq!((read.token(), read.value()), (5, &b"first"[..]));
    assert_eq!(
        put(b"stale", 4).await.unwrap(),
        Fenced::Refused { stored: 5 }
    );
    assert_eq!(put(b"again", 5).await.unwrap(), Fenced::Written);
    let puts = (6..23).map(|token| async move {
        records
            .put(name, token.to_string().as_bytes(), token, ttl)
            .await
    });
    for put in futures_util::future::join_all(puts).await {
        put.unwrap();
    }
    let read = records.get(name).await.unwrap().unwrap();
    assert_eq!((read.token(), read.value()), (22, &b"22"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_fenced_next_to_their_lock_and_expire() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let records = c.records();
    let ttl = Duration::from_secs(60);
    assert_eq!(records.key("order:7").unwrap(), "lock:{order:7}:record");
    assert!(records.get("order:7").await.unwrap().is_none());
    fenced_puts(&records, "order:7").await;
    assert_eq!(server.cmd(&["GET", "lock:{order:7}:record"]), "22:22");
    let short = Duration::from_millis(50);
    assert_eq!(
        records.put("order:7", b"newer", 23, short).await.unwrap(),
        Fenced::Written
    );
    eventually("the record expired", || {
        server.cmd(&["EXISTS", "lock:{order:7}:record"]) == "0"
    })
    .await;
    assert!(records.get("order:7").await.unwrap().is_none());

    // Bad input is typed, before anything is sent; what no put wrote is not misread.
    for (result, what) in [
        (records.put("a b", b"", 1, ttl).await, "name"),
        (records.put("n", b"", MAX_TOKEN + 1, ttl).await, "token"),
        (records.put("n", b"", 1, Duration::ZERO).await, "ttl"),
    ] {
        assert!(
            matches!(
                result,
                Err(LockError::InvalidName { .. } | LockError::InvalidOption { .. })
            ),
            "{what}: {result:?}"
        );
    }
    server.cmd(&["SET", "lock:{garbage}:record", "not a record"]);
    assert!(matches!(
        records.get("garbage").await,
        Err(LockError::UnexpectedReply(_))
    ));
    assert!(records.put("garbage", b"x", 1, ttl).await.is_err());
    server.cmd(&["HSET", "lock:{hash}:record", "a", "b"]);
    assert!(records.get("hash").await.is_err());
    assert!(records.put("hash", b"x", 1, ttl).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_work_without_lua_through_the_native_compare_and_set() {
    // Lua unloaded at run time: Valkey 9.1 keeps it in a module.
    let server = RedisServer::start_with(&["--enable-module-command", "local"]);
    if server.cmd(&["COMMAND", "INFO", "DELIFEQ"]).is_empty()
        || server.cmd(&["COMMAND", "INFO", "DELIFEQ"]) == "(nil)"
    {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED records_work_without_lua_through_the_native_compare_and_set: the test \
             server has no SET … IFEQ (Valkey 9.0 or later; run with REDIS_SERVER_BIN set to \
             scripts/ensure-valkey.sh's valkey-server)"
        );
        return;
    }
    assert_eq!(server.cmd(&["MODULE", "UNLOAD", "lua"]), "OK");
    let c = client(&server.url()).await;
    assert!(!c.server_capabilities().scripting);
    fenced_puts(&c.records(), "n").await;
    let ttl_left: i64 = server.cmd(&["PTTL", "lock:{n}:record"]).parse().unwrap();
    assert!(ttl_left > 0, "{ttl_left}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_records_live_in_their_locks_slot_and_requests_are_replayed() {
    let cluster = lock_tests::fixtures::blocking(|| lock_tests::RedisCluster::start_with(3, 0));
    let c = lock_core::LockClient::builder_cluster(cluster.primary_urls())
        .build()
        .await
        .unwrap();
    // A name on each primary: its record is a key of that primary.
    for node in cluster.primaries() {
        let name = (0..100_000)
            .map(|i| format!("rec-{i}"))
            .find(|n| cluster.node_for_key(&format!("lock:{{{n}}}")) == node)
            .unwrap();
        fenced_puts(&c.records(), &name).await;
        let key = format!("lock:{{{name}}}:record");
        assert_eq!(cluster.node(node).cmd(&["EXISTS", &key]), "1", "{key}");
    }
    // The layer on the cluster: the key's lock and record in one slot.
    let probe = Probe::new(cluster.node(0));
    let app = App::serve(app(IdempotencyLayer::new(c), &probe)).await;
    let (status, headers, first) = read(send(app.url("/charges"), "k-cluster", "x").await).await;
    assert_eq!((status, headers[0].as_deref()), (201, None));
    let (_, headers, again) = read(send(app.url("/charges"), "k-cluster", "x").await).await;
    assert_eq!((headers[0].as_deref(), again), (Some("true"), first));
    assert_eq!(probe.runs(), 1);
}

/// The idempotency module's docs, whose *Status codes* table is checked against the layer.
const IDEMPOTENCY_DOCS: &str = include_str!("../../lock-tower/src/idempotency/mod.rs");

/// The problem codes a docs table lists: the backticked words of column `column` of the
/// table under the heading `heading` (a rustdoc `//!` table).
fn table_codes(docs: &str, heading: &str, column: usize) -> std::collections::BTreeSet<String> {
    let section = docs
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no {heading:?} in the docs"));
    section
        .lines()
        .map(|line| line.trim_start_matches("//!").trim())
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        // Not the header and its separator.
        .skip(2)
        .filter_map(|row| row.split('|').nth(column + 1).map(str::to_owned))
        .flat_map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .filter(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The problem code of a response, if it is a problem document.
async fn code_of(res: reqwest::Response) -> Option<String> {
    let body: serde_json::Value = res.json().await.ok()?;
    body["code"].as_str().map(str::to_owned)
}

/// Answers of layers on a working Redis: bad keys and scopes, bodies, a reused key, a key in
/// use, a response too large to keep, a lost lease, a setting that cannot work.
async fn answers_with_redis_up(server: &RedisServer, seen: &mut Vec<Option<String>>) {
    let probe = Probe::new(server);
    let c = client(&server.url()).await;
    let layer = IdempotencyLayer::new(c.clone())
        .require_for([Method::POST])
        .max_request_body(16)
        .max_record_body(1024);
    let short = IdempotencyLayer::new(c.clone()).fixed_lease(Duration::from_secs(1));
    let short = App::serve(app(short, &probe)).await;
    let broken = App::serve(app(
        IdempotencyLayer::new(c.clone()).ttl(Duration::ZERO),
        &probe,
    ))
    .await;
    let app = App::serve(app(layer, &probe)).await;
    let by_client =
        IdempotencyLayer::new(c).scope(Header::new(HeaderName::from_static("x-client")));
    let scoped = Router::new()
        .route("/charges", post(charge))
        .route_layer(by_client)
        .with_state(probe.clone());
    let scoped = App::serve(scoped).await;
    seen.push(code_of(http().post(app.url("/charges")).send().await.unwrap()).await);
    seen.push(code_of(send(app.url("/charges"), "", "x").await).await);
    seen.push(code_of(send(scoped.url("/charges"), "k", "x").await).await);
    seen.push(code_of(send(app.url("/charges"), "k-big-req", "seventeen bytes!!").await).await);
    send(app.url("/charges"), "k-used", "a").await;
    probe.entered().await;
    seen.push(code_of(send(app.url("/charges"), "k-used", "b").await).await);
    send(app.url("/big"), "k-big", "").await;
    seen.push(code_of(send(app.url("/big"), "k-big", "").await).await);
    seen.push(code_of(send(broken.url("/charges"), "k", "x").await).await);
    // A duplicate while the first runs (a renewed lease), and a run that outlives its 1 s
    // fixed lease (aborted when it is lost, without waiting for the gate).
    probe.close();
    let first = tokio::spawn(send(app.url("/charges"), "k-slow", "x"));
    probe.entered().await;
    seen.push(code_of(send(app.url("/charges"), "k-slow", "x").await).await);
    let lost = tokio::spawn(send(short.url("/charges"), "k-lost", "x"));
    probe.entered().await;
    seen.push(code_of(within("the lease to run out", 20, lost).await.unwrap()).await);
    probe.open();
    seen.push(code_of(first.await.unwrap()).await);
}

/// Answers of layers whose Redis is down: the default store (on the lock's Redis), and a store
/// on another Redis that still answers.
async fn answers_with_redis_down(seen: &mut Vec<Option<String>>) {
    let mut server = RedisServer::start();
    let store_server = RedisServer::start();
    let probe = Probe::new(&server);
    let c = client(&server.url()).await;
    let store = lock_tower::LockClientStore::new(&client(&store_server.url()).await);
    let default_store = App::serve(app(IdempotencyLayer::new(c.clone()), &probe)).await;
    let own_store = App::serve(app(IdempotencyLayer::new(c).store(store), &probe)).await;
    server.kill();
    seen.push(code_of(send(default_store.url("/charges"), "k-down", "x").await).await);
    seen.push(code_of(send(own_store.url("/charges"), "k-down", "x").await).await);
}

/// The answer to a request whose body fails while the layer reads it, through the layer as a
/// tower service (over HTTP no client would see it: the one that sent the body is gone).
async fn answer_to_a_failing_body(c: lock_core::LockClient) -> Option<String> {
    use http_body_util::BodyExt;
    use tower::{Layer, ServiceExt};

    let handler = tower::service_fn(|_: axum::extract::Request| async {
        Ok::<_, std::convert::Infallible>(Response::new(axum::body::Body::empty()))
    });
    let service = IdempotencyLayer::new(c).layer(handler);
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from_static(b"x")),
        Err(std::io::Error::other("connection reset")),
    ];
    let body = axum::body::Body::from_stream(futures_util::stream::iter(chunks));
    let request = axum::http::Request::post("/charges")
        .header("idempotency-key", "k-fail")
        .body(body)
        .unwrap();
    let response = service.oneshot(request).await.unwrap();
    let bytes = response.into_body().collect().await.ok()?.to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    problem["code"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_code_table_lists_every_answer_of_the_layer_and_only_those() {
    let listed = table_codes(IDEMPOTENCY_DOCS, "# Status codes", 2);
    assert!(listed.contains("idempotency_key_in_use"), "{listed:?}");
    let server = RedisServer::start();
    let mut seen = Vec::new();
    answers_with_redis_up(&server, &mut seen).await;
    seen.push(answer_to_a_failing_body(client(&server.url()).await).await);
    answers_with_redis_down(&mut seen).await;
    let seen: std::collections::BTreeSet<String> = seen.into_iter().flatten().collect();
    assert_eq!(
        seen, listed,
        "the docs' table (right) and the layer's answers (left) differ"
    );
}
