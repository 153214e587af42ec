//! lock-tower's `RateLimitLayer` against a real redis-server (through axum, over real HTTP and
//! with `oneshot`) and on lock-core's in-memory backend on a paused clock: `429` with
//! `Retry-After`, a problem document and the RateLimit fields; the fields on allowed
//! responses; one limit per key with each extractor; tiers; failing closed and open on a
//! frozen server; missing and bad keys; settings that cannot work.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use lock_core::testing::MemoryServer;
use lock_core::{LockClient, Quota};
use lock_tests::RedisServer;
use lock_tests::fixtures::{client, client_with_lease};
use lock_tower::{
    Header, KeyExtractor, PathParam, PathSegment, QueryParam, QuotaPolicy, RateLimitLayer,
    header_value,
};
use tokio::time::Instant;
use tower::ServiceExt;
use web::{App, http, problem, within};

mod web;

const MINUTE: Duration = Duration::from_secs(60);

/// The layer's events, `debug` and above, from every test of this binary: a test picks its
/// own by a field value unique to it.
fn layer_logs() -> &'static lock_tests::logs::Everything {
    lock_tests::logs::everything_at(&["lock_tower"], tracing::Level::DEBUG)
}

/// A handler that only says it ran.
async fn ran() -> &'static str {
    "ran"
}

/// `handler` on `path` behind `layer`.
fn routed<K, Q>(path: &str, layer: RateLimitLayer<K, Q>) -> Router
where
    K: KeyExtractor<Body> + Send + Sync + 'static,
    Q: QuotaPolicy<Body> + Send + Sync + 'static,
{
    Router::new().route(path, get(ran).route_layer(layer))
}

/// A GET of `uri` with `headers`.
fn request(uri: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut req = Request::builder().uri(uri);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.body(Body::empty()).unwrap()
}

/// The status and headers of `router`'s answer to `req`.
async fn send(router: &Router, req: Request<Body>) -> (StatusCode, HeaderMap) {
    let res = within("a request", 10, router.clone().oneshot(req))
        .await
        .unwrap();
    let (parts, body) = res.into_parts();
    body.collect().await.unwrap();
    (parts.status, parts.headers)
}

fn field<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_burst_passes_with_the_fields_then_429_with_retry_after_and_a_problem() {
    let logs = layer_logs();
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    // 3 per minute: one permit every 20 s, 3 at once.
    let layer = RateLimitLayer::new(
        client.clone(),
        PathParam::new("user"),
        Quota::per(MINUTE, 3),
    )
    .prefix("rate:users:");
    let app = App::serve(routed("/users/{user}", layer)).await;
    let http = http();
    // `t`: the next permit, 20 s away after each (not the whole burst, 20, 40 then 60 s).
    for remaining in [2, 1, 0] {
        let res = http.get(app.url("/users/u-1")).send().await.unwrap();
        assert_eq!(res.status(), 200);
        let headers = res.headers().clone();
        assert_eq!(
            headers["ratelimit-policy"], "\"default\";q=3;w=60",
            "the quota: a burst of 3, back in 60 s"
        );
        assert_eq!(
            headers["ratelimit"],
            format!("\"default\";r={remaining};t=20").as_str()
        );
        assert!(headers.get("retry-after").is_none());
        assert_eq!(res.text().await.unwrap(), "ran");
    }
    let res = http.get(app.url("/users/u-1")).send().await.unwrap();
    let headers = res.headers().clone();
    let (status, retry_after, body) = problem(res).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        retry_after.as_deref(),
        Some("20"),
        "the next permit, in 20 s"
    );
    assert_eq!(body["code"], "rate_limited");
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["retry_after_ms"], 20_000);
    assert!(!body.to_string().contains("u-1"), "never repeats the key");
    assert_eq!(headers["ratelimit-policy"], "\"default\";q=3;w=60");
    assert_eq!(
        headers["ratelimit"], "\"default\";r=0;t=20",
        "t is the Retry-After"
    );
    // A limited request took nothing.
    let state = client
        .rate_limit("rate:users:u-1")
        .info()
        .await
        .unwrap()
        .expect("the limit's state");
    assert_eq!(state.remaining(), 0);
    assert!(state.reset_after() <= MINUTE && state.reset_after() > MINUTE - Duration::from_secs(5));
    // Another user has a limit of their own.
    let res = http.get(app.url("/users/u-2")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["ratelimit"], "\"default\";r=2;t=20");
    let rejected = logs.picked(|e| {
        e.field("code") == Some("rate_limited") && e.field("retry_after_ms") == Some("20000")
    });
    assert!(
        rejected.iter().any(|e| e
            .field("message")
            .is_some_and(|m| m.contains("rate limit layer"))),
        "{rejected:?}"
    );
    // A 429 is what a rate limit is for: `debug`, not one `info` line per refused request.
    assert!(
        rejected.iter().all(|e| e.level == tracing::Level::DEBUG),
        "{rejected:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_extractor_gives_each_key_its_own_limit() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let one = Quota::per(MINUTE, 1);
    let path = "/orders/{id}/pay";
    type Sent = (
        &'static str,
        &'static str,
        &'static [(&'static str, &'static str)],
    );
    let cases: Vec<(Router, [Sent; 2])> = vec![
        (
            routed(
                path,
                RateLimitLayer::new(client.clone(), PathParam::new("id"), one).prefix("p:"),
            ),
            [
                ("p:42", "/orders/4%32/pay", &[]),
                ("p:43", "/orders/43/pay", &[]),
            ],
        ),
        (
            routed(
                path,
                RateLimitLayer::new(client.clone(), PathSegment::new(1), one).prefix("s:"),
            ),
            [
                ("s:42", "/orders/42/pay", &[]),
                ("s:43", "/orders/43/pay", &[]),
            ],
        ),
        (
            routed(
                path,
                RateLimitLayer::new(client.clone(), QueryParam::new("q"), one).prefix("q:"),
            ),
            [
                ("q:x-y", "/orders/1/pay?q=x%2Dy", &[]),
                ("q:z", "/orders/1/pay?q=z", &[]),
            ],
        ),
        (
            routed(
                path,
                RateLimitLayer::new(
                    client.clone(),
                    Header::new(http::HeaderName::from_static("x-user-id")),
                    one,
                )
                .prefix("h:"),
            ),
            [
                ("h:u-1", "/orders/1/pay", &[("x-user-id", "u-1")]),
                ("h:u-2", "/orders/1/pay", &[("x-user-id", "u-2")]),
            ],
        ),
        (
            // A closure, under the default prefix.
            routed(
                path,
                RateLimitLayer::new(
                    client.clone(),
                    |req: &Request<Body>| header_value(req, "x-api-key"),
                    one,
                ),
            ),
            [
                ("rate:k-1", "/orders/1/pay", &[("x-api-key", "k-1")]),
                ("rate:k-2", "/orders/1/pay", &[("x-api-key", "k-2")]),
            ],
        ),
    ];
    for (router, [(a, a_uri, a_headers), (b, b_uri, b_headers)]) in cases {
        assert_eq!(
            send(&router, request(a_uri, a_headers)).await.0,
            StatusCode::OK,
            "{a}"
        );
        let (status, headers) = send(&router, request(a_uri, a_headers)).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{a} again");
        assert_eq!(field(&headers, "ratelimit"), Some("\"default\";r=0;t=60"));
        assert_eq!(field(&headers, "retry-after"), Some("60"));
        let (status, headers) = send(&router, request(b_uri, b_headers)).await;
        assert_eq!(status, StatusCode::OK, "{b}: a limit of its own");
        assert_eq!(field(&headers, "ratelimit"), Some("\"default\";r=0;t=60"));
        for name in [a, b] {
            let state = client.rate_limit(name).info().await.unwrap();
            assert_eq!(state.map(|s| s.remaining()), Some(0), "{name} was spent");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiers_get_the_quota_their_request_chooses() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let layer = RateLimitLayer::new(
        client,
        Header::new(http::HeaderName::from_static("x-user")),
        Quota::per(MINUTE, 1),
    )
    .quota_by(
        |req: &Request<Body>| match header_value(req, "x-plan").as_deref() {
            Some("pro") => Quota::per(MINUTE, 10).burst(3),
            _ => Quota::per(MINUTE, 1),
        },
    );
    let router = routed("/search", layer);
    let user = |name: &str, plan: &str| request("/search", &[("x-user", name), ("x-plan", plan)]);
    let (status, headers) = send(&router, user("free-1", "free")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        field(&headers, "ratelimit-policy"),
        Some("\"default\";q=1;w=60")
    );
    assert_eq!(
        send(&router, user("free-1", "free")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    for remaining in [2, 1, 0] {
        let (status, headers) = send(&router, user("pro-1", "pro")).await;
        assert_eq!(status, StatusCode::OK);
        // 10 per minute: one every 6 s, a burst of 3 back in 18 s.
        assert_eq!(
            field(&headers, "ratelimit-policy"),
            Some("\"default\";q=3;w=18")
        );
        assert!(
            field(&headers, "ratelimit")
                .unwrap()
                .starts_with(&format!("\"default\";r={remaining};")),
            "{headers:?}"
        );
    }
    let (status, headers) = send(&router, user("pro-1", "pro")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(field(&headers, "retry-after"), Some("6"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_store_fails_closed_by_default_and_open_when_asked() {
    let mut server = RedisServer::start();
    // Response timeout 500 ms: the bound of a check.
    let client = client_with_lease(&server.url(), Duration::from_secs(2)).await;
    let quota = Quota::per_second(100);
    let router = Router::new()
        .route(
            "/closed/{id}",
            get(ran).route_layer(
                RateLimitLayer::new(client.clone(), PathParam::new("id"), quota)
                    .prefix("closed:")
                    .unavailable_retry_after(Duration::from_secs(3)),
            ),
        )
        .route(
            "/bounded/{id}",
            get(ran).route_layer(
                RateLimitLayer::new(client.clone(), PathParam::new("id"), quota)
                    .prefix("bounded:")
                    .check_timeout(Duration::from_millis(200)),
            ),
        )
        .route(
            "/open/{id}",
            get(ran).route_layer(
                RateLimitLayer::new(client.clone(), PathParam::new("id"), quota)
                    .prefix("open:")
                    .fail_open(),
            ),
        );
    let (status, headers) = send(&router, request("/closed/1", &[])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.contains_key("ratelimit"));

    server.pause();
    for _ in 0..2 {
        let started = Instant::now();
        let res = within(
            "a check on a frozen store",
            10,
            router.clone().oneshot(request("/closed/1", &[])),
        )
        .await
        .unwrap();
        let elapsed = started.elapsed();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(field(res.headers(), "retry-after"), Some("3"));
        assert_eq!(
            field(res.headers(), "content-type"),
            Some("application/problem+json")
        );
        assert!(!res.headers().contains_key("ratelimit"));
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], "lock_unavailable");
        // The client's bounds: a pooled connection (connect timeout 2 s), then the call
        // (response timeout 500 ms).
        assert!(
            elapsed < Duration::from_millis(4000),
            "answered after {elapsed:?}, past the client's bounds"
        );
    }
    let started = Instant::now();
    let (status, _) = send(&router, request("/bounded/1", &[])).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_millis(1500),
        "answered after {elapsed:?}, past the layer's 200 ms bound"
    );
    let (status, headers) = send(&router, request("/open/1", &[])).await;
    assert_eq!(status, StatusCode::OK, "fail open lets it through");
    assert!(!headers.contains_key("ratelimit"), "without a decision");
    server.resume();

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, headers) = send(&router, request("/closed/1", &[])).await;
        if status == StatusCode::OK {
            assert!(headers.contains_key("ratelimit"));
            break;
        }
        assert!(Instant::now() < deadline, "never recovered: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_and_bad_keys_are_400_and_settings_that_cannot_work_500() {
    let logs = layer_logs();
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let by_user = || Header::new(http::HeaderName::from_static("x-user"));
    let router = routed(
        "/a",
        RateLimitLayer::new(client.clone(), by_user(), Quota::per_second(5)),
    );
    let (status, _) = send(&router, request("/a", &[])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let res = router.clone().oneshot(request("/a", &[])).await.unwrap();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["code"], "missing_lock_key");
    let (status, _) = send(&router, request("/a", &[("x-user", "a{b}")])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "braces");
    let (status, headers) = send(&router, request("/a", &[("x-user", "ok")])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.contains_key("ratelimit"));

    // A quota that cannot work, at build: every request answers 500, logged at `error`.
    let bad = routed(
        "/b",
        RateLimitLayer::new(client.clone(), by_user(), Quota::per_second(0)).prefix("zero-rate:"),
    );
    for _ in 0..2 {
        let res = bad
            .clone()
            .oneshot(request("/b", &[("x-user", "u")]))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], "lock_error");
    }
    let errors = logs.picked(|e| {
        e.level == tracing::Level::ERROR
            && e.field("error")
                .is_some_and(|m| m.contains("invalid option `quota`: rate:"))
    });
    assert!(
        !errors.is_empty(),
        "the misconfiguration is logged at error"
    );
    // ... and from `quota_by`, for the requests it gives one to.
    let tiered = routed(
        "/c",
        RateLimitLayer::new(client.clone(), by_user(), Quota::per_second(1)).quota_by(
            |req: &Request<Body>| match header_value(req, "x-user").as_deref() {
                Some("broken") => Quota::per_second(1).burst(0),
                _ => Quota::per_second(1),
            },
        ),
    );
    let (status, _) = send(&tiered, request("/c", &[("x-user", "broken")])).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let (status, _) = send(&tiered, request("/c", &[("x-user", "fine")])).await;
    assert_eq!(status, StatusCode::OK);
    // An empty prefix.
    let empty = routed(
        "/d",
        RateLimitLayer::new(client, by_user(), Quota::per_second(1)).prefix(""),
    );
    let (status, _) = send(&empty, request("/d", &[("x-user", "u")])).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
}

// ---------------------------------------------------------------------------------------------
// The in-memory backend, on tokio's paused clock

/// The whole behaviour on the in-memory backend: what an application's own tests do.
#[tokio::test(start_paused = true)]
async fn on_the_memory_backend_the_limit_comes_back_with_the_clock() {
    let server = MemoryServer::new();
    let client: LockClient = server.client().await.unwrap();
    let router = routed(
        "/users/{user}",
        RateLimitLayer::new(client, PathParam::new("user"), Quota::per_second(2)),
    );
    for remaining in ["1", "0"] {
        let (status, headers) = send(&router, request("/users/7", &[])).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            field(&headers, "ratelimit-policy"),
            Some("\"default\";q=2;w=1")
        );
        assert_eq!(
            field(&headers, "ratelimit"),
            Some(format!("\"default\";r={remaining};t=1").as_str())
        );
    }
    let (status, headers) = send(&router, request("/users/7", &[])).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(field(&headers, "retry-after"), Some("1"));
    assert_eq!(
        send(&router, request("/users/8", &[])).await.0,
        StatusCode::OK
    );
    // One permit every 500 ms.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, headers) = send(&router, request("/users/7", &[])).await;
    assert_eq!(status, StatusCode::OK, "{headers:?}");
    assert_eq!(
        send(&router, request("/users/7", &[])).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The store gone: closed by default.
    server.set_reachable(false);
    assert_eq!(
        send(&router, request("/users/9", &[])).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

/// Per-client limits over real HTTP: the connection's address (`PeerIp`, served with connect
/// info) and the address a trusted proxy recorded (`ForwardedIp`): a client that writes its
/// own `X-Forwarded-For` entries left of the proxy's cannot choose its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_client_address_limits_with_peer_ip_and_forwarded_ip() {
    use lock_tower::{ForwardedIp, PeerIp};
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let one = Quota::per(MINUTE, 1);
    let router = Router::new()
        .route(
            "/peer",
            get(ran).route_layer(RateLimitLayer::new(client.clone(), PeerIp, one).prefix("peer:")),
        )
        .route(
            "/proxied",
            get(ran).route_layer(
                RateLimitLayer::new(client.clone(), ForwardedIp::x_forwarded_for(1), one)
                    .prefix("xff:"),
            ),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = tokio::spawn(async move {
        let app = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
        axum::serve(listener, app).await.unwrap()
    });
    let http = http();
    let get = |path: &str, xff: Option<&str>| {
        let mut req = http.get(format!("http://{addr}{path}"));
        if let Some(xff) = xff {
            req = req.header("x-forwarded-for", xff);
        }
        req.send()
    };
    assert_eq!(get("/peer", None).await.unwrap().status(), 200);
    assert_eq!(get("/peer", None).await.unwrap().status(), 429);
    let state = client.rate_limit("peer:127.0.0.1").info().await.unwrap();
    assert_eq!(
        state.map(|s| s.remaining()),
        Some(0),
        "keyed by the peer's IP"
    );
    // The proxy appended 198.51.100.7; whatever the client wrote before it is ignored.
    let proxied = |spoofed: &str| format!("{spoofed}198.51.100.7");
    assert_eq!(
        get("/proxied", Some(&proxied(""))).await.unwrap().status(),
        200
    );
    assert_eq!(
        get("/proxied", Some(&proxied("10.9.9.9, ")))
            .await
            .unwrap()
            .status(),
        429,
        "the same client, whatever it wrote"
    );
    assert_eq!(
        get("/proxied", Some("198.51.100.8"))
            .await
            .unwrap()
            .status(),
        200,
        "another client, a limit of its own"
    );
    // No header: no key, 400.
    assert_eq!(get("/proxied", None).await.unwrap().status(), 400);
    serving.abort();
}

/// With `fail_local`, a store that cannot be reached does not mean `503` (or no limit): each
/// instance limits on its own, with the same quota, `429`s and fields.
#[tokio::test(start_paused = true)]
async fn fail_local_limits_in_the_instance_while_the_store_is_down() {
    let server = MemoryServer::new();
    let client: LockClient = server.client().await.unwrap();
    let quota = Quota::per_second(1).burst(2);
    let router = Router::new()
        .route(
            "/local/{user}",
            get(ran).route_layer(
                RateLimitLayer::new(client.clone(), PathParam::new("user"), quota)
                    .prefix("local:")
                    .fail_local(),
            ),
        )
        .route(
            "/closed/{user}",
            get(ran).route_layer(
                RateLimitLayer::new(client, PathParam::new("user"), quota).prefix("closed:"),
            ),
        );
    server.set_reachable(false);
    assert_eq!(
        send(&router, request("/closed/7", &[])).await.0,
        StatusCode::SERVICE_UNAVAILABLE,
        "without it: fail closed"
    );
    for remaining in ["1", "0"] {
        let (status, headers) = send(&router, request("/local/7", &[])).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            field(&headers, "ratelimit"),
            Some(format!("\"default\";r={remaining};t=1").as_str())
        );
    }
    let (status, headers) = send(&router, request("/local/7", &[])).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "the burst is spent here"
    );
    assert_eq!(field(&headers, "retry-after"), Some("1"));
    assert_eq!(
        send(&router, request("/local/8", &[])).await.0,
        StatusCode::OK
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        send(&router, request("/local/7", &[])).await.0,
        StatusCode::OK
    );
    // Back: the store decides again (it never saw the local permits).
    server.set_reachable(true);
    for _ in 0..2 {
        assert_eq!(
            send(&router, request("/local/7", &[])).await.0,
            StatusCode::OK
        );
    }
    assert_eq!(
        send(&router, request("/local/7", &[])).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// `t` is when quota is available again: the next permit, so on a `429` it says what
/// `Retry-After` says, on a quota where the whole burst comes back later (1 per 3 s, burst 2:
/// the burst is back in 6 s, the next permit in 3 s).
#[tokio::test(start_paused = true)]
async fn t_agrees_with_retry_after_when_the_burst_comes_back_later() {
    let client = LockClient::in_memory().await.unwrap();
    let quota = Quota::per(Duration::from_secs(3), 1).burst(2);
    let router = routed(
        "/users/{user}",
        RateLimitLayer::new(client, PathParam::new("user"), quota),
    );
    for remaining in ["1", "0"] {
        let (status, headers) = send(&router, request("/users/7", &[])).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            field(&headers, "ratelimit"),
            Some(format!("\"default\";r={remaining};t=3").as_str())
        );
        // 1 per 3 s over the 6 s a burst of 2 takes to come back: 2 per 6 s, the rate.
        assert_eq!(
            field(&headers, "ratelimit-policy"),
            Some("\"default\";q=2;w=6")
        );
    }
    let (status, headers) = send(&router, request("/users/7", &[])).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(field(&headers, "retry-after"), Some("3"));
    assert_eq!(field(&headers, "ratelimit"), Some("\"default\";r=0;t=3"));
    // And a client that waits exactly `t` seconds is let in.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        send(&router, request("/users/7", &[])).await.0,
        StatusCode::OK
    );
}

/// The README's pattern, where the wait is exactly the `Retry-After`: 1 per second (burst 2),
/// refused, sleep exactly 1 s, allowed. The memory server's `TIME` is exactly tokio's time (it used to
/// run 1 µs ahead per call at a paused instant, and fall back when the clock moved: a 429).
#[tokio::test(start_paused = true)]
async fn sleeping_exactly_retry_after_on_the_memory_backend_gets_the_permit() {
    let client = LockClient::in_memory().await.unwrap();
    // A burst of 2, so the limit's key outlives the wait (its time to live is the full
    // burst's 2 s): the permit must come from the clock, not from a key that expired.
    let quota = Quota::per_second(1).burst(2);
    let limited = RateLimitLayer::new(client, PathParam::new("user"), quota);
    let router = routed("/users/{user}", limited);
    // Other traffic at the same paused instant first: the server's clock must not run
    // ahead of tokio's (it did, 1 µs per call, and fell back to tokio's after the sleep).
    for other in 0..20 {
        send(&router, request(&format!("/users/other-{other}"), &[])).await;
    }
    for _ in 0..2 {
        let (status, _) = send(&router, request("/users/7", &[])).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, headers) = send(&router, request("/users/7", &[])).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(field(&headers, "retry-after"), Some("1"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (status, headers) = send(&router, request("/users/7", &[])).await;
    assert_eq!(status, StatusCode::OK, "{headers:?}");
}

/// `RateLimit-Policy` says the real rate over its window, and the burst as a policy of its
/// own when it is not the window's quota: 50 per second with a burst of 10 is not 10 per
/// second.
#[tokio::test(start_paused = true)]
async fn the_policy_says_the_rate_and_the_burst_apart() {
    let client = LockClient::in_memory().await.unwrap();
    let cases = [
        (
            Quota::per_second(50).burst(10),
            "\"default\";q=50;w=1, \"burst\";q=10",
        ),
        (Quota::per_second(10).burst(20), "\"default\";q=20;w=2"),
        (
            Quota::per(Duration::from_millis(500), 3),
            "\"default\";q=6;w=1, \"burst\";q=3",
        ),
        (Quota::per(MINUTE, 3), "\"default\";q=3;w=60"),
    ];
    for (i, (quota, policy)) in cases.into_iter().enumerate() {
        let router = routed(
            "/users/{user}",
            RateLimitLayer::new(client.clone(), PathParam::new("user"), quota)
                .prefix(format!("policy{i}:")),
        );
        let (status, headers) = send(&router, request("/users/7", &[])).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(field(&headers, "ratelimit-policy"), Some(policy), "{quota}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parameter_the_route_lacks_is_500_and_pass_through_skips_the_limit() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let one = Quota::per(MINUTE, 1);
    // The layer looks for `user`, the route declares `id`: the server's fault.
    let mismatched = routed(
        "/items/{id}",
        RateLimitLayer::new(client.clone(), PathParam::new("user"), one),
    );
    let res = mismatched
        .clone()
        .oneshot(request("/items/1", &[]))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["code"], "lock_key_not_in_route");
    // Requests without a key pass, unlimited and without the fields; those with one do not.
    let passing = routed(
        "/feed",
        RateLimitLayer::new(
            client,
            Header::new(http::HeaderName::from_static("x-user")),
            one,
        )
        .missing_key(lock_tower::MissingKey::PassThrough),
    );
    for _ in 0..3 {
        let (status, headers) = send(&passing, request("/feed", &[])).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!headers.contains_key("ratelimit"));
    }
    let keyed = || request("/feed", &[("x-user", "u")]);
    assert_eq!(send(&passing, keyed()).await.0, StatusCode::OK);
    assert_eq!(
        send(&passing, keyed()).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}
