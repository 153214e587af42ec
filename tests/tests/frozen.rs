//! A frozen server (`SIGSTOP`: a long fork, a swap storm or a silently dropped network, as a
//! client sees it): every public call gives up within its bound, alone and 64 at once, and
//! nothing that is not safe to repeat is sent twice.
//!
//! The bound (DESIGN.md, *Connections*): a call's response timeout, counted from when it was
//! asked, on a warm pool; plus the connect timeout when it must open a connection. Here every
//! pool is warm (each path is used once before the freeze), so the bound is the response
//! timeout. The check allows 10 % or 150 ms over it, whichever is more (this machine's
//! scheduling under a parallel build), which is still far below what the old send path took
//! (3.5–7 times the timeout: an inline heal, a reconnection and a resend, one caller after
//! another). Each check also asserts the call did wait for the timeout, so a call that
//! returned early for another reason cannot pass.
//!
//! The twin on the in-memory backend (tokio's paused clock, `delay_replies`) is exact.

use std::future::IntoFuture;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures_util::future::join_all;
use lock_core::fenced;
use lock_core::testing::MemoryServer;
use lock_core::{LockClient, LockError, Quota, redis};
use lock_tests::fixtures::blocking;
use lock_tests::{RedisCluster, RedisServer, SentinelGroup};
use lock_tower::{DistributedLockLayer, IdempotencyLayer, PathParam, RateLimitLayer};
use tokio::time::Instant;
use tower::ServiceExt;

const RESPONSE: Duration = Duration::from_millis(200);

/// What a bound may be overrun by here: 10 %, at least 150 ms.
fn slack(bound: Duration) -> Duration {
    (bound / 10).max(Duration::from_millis(150))
}

/// Runs `call`, asserting it ends within `bound` (+ [`slack`]) and not before `bound` less
/// 10 % (it waited for the frozen server); returns its result.
async fn within<T>(what: &str, bound: Duration, call: impl IntoFuture<Output = T>) -> T {
    let started = Instant::now();
    let result = call.await;
    let took = started.elapsed();
    assert!(
        took <= bound + slack(bound),
        "{what}: took {took:?}, bound {bound:?}"
    );
    assert!(
        took >= bound - bound / 10,
        "{what}: took {took:?}, less than the bound {bound:?}: did the server freeze?"
    );
    result
}

/// The error of a call that gave up on a frozen server.
fn gave_up<T: std::fmt::Debug>(what: &str, result: Result<T, LockError>) -> LockError {
    match result {
        Err(e) if e.is_unavailable() => e,
        other => panic!("{what}: expected a timeout, got {other:?}"),
    }
}

async fn client(url: &str, response: Duration) -> LockClient {
    LockClient::builder(url)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(response)
        .build()
        .await
        .unwrap()
}

fn freeze(server: &mut RedisServer) {
    tokio::task::block_in_place(|| server.pause());
}

fn thaw(server: &mut RedisServer) {
    tokio::task::block_in_place(|| server.resume());
}

/// Every public path of `c`, once: each must answer while the server is up, and give up
/// within `bound` while it is frozen.
async fn every_path(c: &LockClient, bound: Duration, frozen: bool) {
    macro_rules! path {
        ($what:literal, $call:expr) => {{
            let result = if frozen {
                within($what, bound, $call).await
            } else {
                $call.await
            };
            match (frozen, result) {
                (true, result) => {
                    gave_up($what, result);
                }
                (false, Err(e)) => panic!("{}: {e}", $what),
                (false, Ok(_)) => {}
            }
        }};
    }
    path!("try_lock", c.try_lock("frozen:mutex"));
    path!("lock().wait", c.lock("frozen:mutex").wait(bound));
    path!("mutex.info", c.mutex("frozen:mutex").info());
    path!("mutex.force_unlock", c.mutex("frozen:mutex").force_unlock());
    path!("fair try_lock", c.fair_lock("frozen:fair").try_lock());
    path!("fair info", c.fair_lock("frozen:fair").info());
    path!("try_write", c.read_write_lock("frozen:rw").try_write());
    path!("try_read", c.read_write_lock("frozen:rw").try_read());
    path!("rw info", c.read_write_lock("frozen:rw").info());
    path!("try_acquire", c.semaphore("frozen:sem", 3).try_acquire(1));
    path!("semaphore info", c.semaphore("frozen:sem", 3).info());
    path!(
        "multi try_lock",
        c.multi_lock(["frozen:m1", "frozen:m2"]).try_lock()
    );
    path!("records get", c.records().get("frozen:record"));
    path!(
        "records put",
        c.records()
            .put("frozen:record", b"v", 1, Duration::from_secs(60))
    );
    path!(
        "rate check",
        c.rate_limit("frozen:rate")
            .per(Duration::from_secs(1), 1_000)
            .check()
    );
    let owner = format!("{}:1", c.client_id());
    path!("owner_description", c.owner_description(&owner));
    let mut conn = c.connection();
    let fenced_set = async { fenced::set(&mut conn, "frozen:fenced", "v", 1).await };
    path!("fenced set", fenced_set);
}

/// A held lock's release while the server is frozen: `unlock` returns within the bound.
async fn release_while_frozen(c: &LockClient, server: &mut RedisServer, bound: Duration) {
    let guard = c.lock("frozen:held").await.unwrap();
    let fair = c.fair_lock("frozen:held-fair").lock().await.unwrap();
    let permit = c.semaphore("frozen:held-sem", 2).acquire(1).await.unwrap();
    freeze(server);
    let released = within("unlock", bound, guard.unlock()).await;
    assert!(released.is_err(), "{released:?}");
    let released = within("fair unlock", bound, fair.unlock()).await;
    assert!(released.is_err(), "{released:?}");
    let released = within("semaphore unlock", bound, permit.unlock()).await;
    assert!(released.is_err(), "{released:?}");
    thaw(server);
}

/// A server and a client (response timeout [`RESPONSE`]) whose every path was answered once
/// (connections warm, scripts loaded), then the server frozen.
async fn answered_then_frozen() -> (RedisServer, LockClient) {
    let mut server = RedisServer::start();
    let c = client(&server.url(), RESPONSE).await;
    every_path(&c, RESPONSE, false).await;
    freeze(&mut server);
    (server, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_public_call_gives_up_at_its_response_timeout_on_a_frozen_server() {
    let (mut server, c) = answered_then_frozen().await;
    every_path(&c, RESPONSE, true).await;
    thaw(&mut server);
    // Healed in the background meanwhile, or never broken: answered again at once.
    every_path(&c, RESPONSE, false).await;
    release_while_frozen(&c, &mut server, RESPONSE).await;
}

/// On a frozen server: a lock and a record alone, then `many` locks at once, each within
/// `bound` (none queues behind another's heal).
async fn lock_record_and_many(c: &LockClient, bound: Duration, name: &str, many: usize) {
    gave_up(
        "try_lock",
        within("try_lock", bound, c.try_lock(name)).await,
    );
    let records = c.records();
    let get = records.get(name);
    gave_up("records get", within("records get", bound, get).await);
    let tries = (0..many).map(|i| c.try_lock(format!("{name}:{i}")).into_future());
    for result in within("many try_locks at once", bound, join_all(tries)).await {
        gave_up("one of many try_locks", result);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_timeouts_bound_a_call_at_one_second() {
    let mut server = RedisServer::start();
    let c = LockClient::connect(&server.url()).await.unwrap();
    let second = Duration::from_secs(1);
    c.records().get("frozen:a").await.unwrap();
    freeze(&mut server);
    lock_record_and_many(&c, second, "frozen:a", 8).await;
    thaw(&mut server);
    let again = c.try_lock("frozen:a").await.unwrap();
    assert!(again.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_calls_at_once_each_give_up_at_the_bound() {
    let (mut server, c) = answered_then_frozen().await;
    // Acquisitions batch behind the two calls in flight: a queued one's bound counts from
    // when it was asked, not from when its batch goes out.
    let tries = (0..64).map(|i| c.try_lock(format!("frozen:{i}")).into_future());
    for result in within("64 try_locks", RESPONSE, join_all(tries)).await {
        gave_up("try_lock of 64", result);
    }
    let limit = c
        .rate_limit("frozen:rate")
        .per(Duration::from_secs(1), 1_000);
    let checks = (0..64).map(|_| limit.check());
    for result in within("64 rate checks", RESPONSE, join_all(checks)).await {
        gave_up("rate check of 64", result);
    }
    let records = c.records();
    let gets = (0..64).map(|i| {
        let records = &records;
        async move { records.get(&format!("frozen:record:{i}")).await }
    });
    for result in within("64 record gets", RESPONSE, join_all(gets)).await {
        gave_up("records get of 64", result);
    }
    thaw(&mut server);
    // Whatever the frozen server applied late was given back: every name is free again, well
    // before its lease (the default 30 s) could have freed it (20 s: one Valkey-lane run on a
    // loaded machine needed more than 10 s; why is not yet known).
    let other = client(&server.url(), Duration::from_secs(1)).await;
    for i in 0..64 {
        let name = format!("frozen:{i}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while other.mutex(name.as_str()).info().await.unwrap().held {
            assert!(Instant::now() < deadline, "{name} is still held");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A rate decision the slow server applied after its caller gave up is not sent again: one
/// permit is taken, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_decision_that_timed_out_is_applied_once() {
    let mut server = RedisServer::start();
    let c = client(&server.url(), RESPONSE).await;
    let limit = c
        .rate_limit("slow:rate")
        .per(Duration::from_secs(3_600), 10);
    assert_eq!(limit.peek().await.unwrap().remaining(), 10);
    freeze(&mut server);
    // Sent before the freeze ends: applied when the server wakes, answered too late.
    gave_up("check", limit.check().await);
    tokio::time::sleep(RESPONSE).await; // room for a resend, if there were one
    thaw(&mut server);
    let after = limit.check().await.unwrap();
    assert_eq!(
        after.remaining(),
        8,
        "the timed-out decision took one permit and this one another: no resend"
    );
}

/// A watchdog-leased hold is reported lost at its lease's end while the server stays frozen,
/// even with a round of renewals still waiting on it then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_is_lost_at_its_lease_end_while_the_server_stays_frozen() {
    let mut server = RedisServer::start();
    // Renewals every second, each waiting up to a second: the round sent at 2 s is still
    // waiting when the lease ends (at about 3 s).
    let lease = Duration::from_secs(3);
    let c = LockClient::builder(&server.url())
        .watchdog_lease(lease)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let guard = c.lock("frozen:watched").await.unwrap();
    freeze(&mut server);
    let frozen_at = Instant::now();
    let end = guard.remaining();
    tokio::time::timeout(end + Duration::from_millis(100), guard.lost())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "not reported lost {:?} into the freeze (lease end in {end:?})",
                frozen_at.elapsed()
            )
        });
    assert!(
        frozen_at.elapsed() + Duration::from_millis(50) >= end,
        "lost {:?} into the freeze, before its lease's end ({end:?})",
        frozen_at.elapsed()
    );
    assert!(!guard.is_held());
    thaw(&mut server);
}

async fn status(app: &Router, uri: &str, key: Option<&str>) -> StatusCode {
    let mut request = Request::post(uri);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let request = request.body(Body::empty()).unwrap();
    app.clone().oneshot(request).await.unwrap().status()
}

/// The three layers answer `503` (or pass, failing open) within the bound, alone and 64
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layers_answer_within_the_bound_on_a_frozen_server() {
    let mut server = RedisServer::start();
    let c = client(&server.url(), RESPONSE).await;
    let ok = || async { "ok" };
    let quota = Quota::per_second(1_000);
    let app = Router::new()
        .route(
            "/lock/{id}",
            axum::routing::post(ok)
                .route_layer(DistributedLockLayer::new(c.clone(), PathParam::new("id"))),
        )
        .route(
            "/rate/{id}",
            axum::routing::post(ok).route_layer(RateLimitLayer::new(
                c.clone(),
                PathParam::new("id"),
                quota,
            )),
        )
        .route(
            "/open/{id}",
            axum::routing::post(ok).route_layer(
                RateLimitLayer::new(c.clone(), PathParam::new("id"), quota).fail_open(),
            ),
        )
        .route(
            "/idem",
            axum::routing::post(ok).route_layer(IdempotencyLayer::new(c.clone())),
        );
    for uri in ["/lock/1", "/rate/1", "/open/1"] {
        assert_eq!(status(&app, uri, None).await, StatusCode::OK, "{uri}");
    }
    assert_eq!(status(&app, "/idem", Some("k-0")).await, StatusCode::OK);
    freeze(&mut server);
    let cases = [
        ("/lock/", None, StatusCode::SERVICE_UNAVAILABLE),
        ("/rate/", None, StatusCode::SERVICE_UNAVAILABLE),
        ("/open/", None, StatusCode::OK),
        ("/idem", Some("k"), StatusCode::SERVICE_UNAVAILABLE),
    ];
    for (path, key, expected) in cases {
        let uri = |i: usize| match key {
            Some(_) => path.to_owned(),
            None => format!("{path}{i}"),
        };
        let key = |i: usize| key.map(|k| format!("{k}-{i}"));
        let (one, one_key) = (uri(100), key(100));
        let alone = status(&app, &one, one_key.as_deref());
        assert_eq!(within(path, RESPONSE, alone).await, expected, "{path}");
        let many = (0..64).map(|i| {
            let (app, uri, key) = (&app, uri(i), key(i));
            async move { status(app, &uri, key.as_deref()).await }
        });
        for got in within(path, RESPONSE, join_all(many)).await {
            assert_eq!(got, expected, "{path} of 64");
        }
    }
    thaw(&mut server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_sentinel_a_frozen_primary_bounds_every_call() {
    let mut group = blocking(SentinelGroup::start);
    let c = LockClient::builder_sentinel(group.sentinel_urls(), group.master_name())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(RESPONSE)
        .build()
        .await
        .unwrap();
    c.try_lock("frozen:s")
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    c.records().get("frozen:s").await.unwrap();
    // Shorter than the sentinels' down-after (1 s), so no failover comes in between.
    tokio::task::block_in_place(|| group.primary_mut().pause());
    lock_record_and_many(&c, RESPONSE, "frozen:s", 16).await;
    tokio::task::block_in_place(|| group.primary_mut().resume());
}

/// On a Cluster a frozen primary holds only the calls of its own slots, each within the
/// Cluster's bound (the response timeout plus the connect timeout: the cluster connection may
/// open a connection inside any call); the other slots answer at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_frozen_primary_holds_only_its_slots() {
    let mut cluster = blocking(RedisCluster::start);
    let connect = Duration::from_millis(300);
    let c = LockClient::builder_cluster(cluster.urls())
        .connect_timeout(connect)
        .response_timeout(RESPONSE)
        .build()
        .await
        .unwrap();
    let primaries = cluster.primaries();
    let frozen = primaries[0];
    let name_on = |node: usize| {
        (0..)
            .map(|i| format!("frozen:c{i}"))
            .find(|name| cluster.node_for_key(&format!("lock:{{{name}}}")) == node)
            .unwrap()
    };
    let (cold, warm) = (name_on(frozen), name_on(primaries[1]));
    for name in [&cold, &warm] {
        c.try_lock(name.as_str())
            .await
            .unwrap()
            .unwrap()
            .unlock()
            .await
            .unwrap();
    }
    tokio::task::block_in_place(|| cluster.node_mut(frozen).pause());
    let bound = RESPONSE + connect;
    let started = Instant::now();
    let other = c.try_lock(warm.as_str()).await.unwrap();
    assert!(other.is_some(), "another primary's slot answers");
    assert!(
        started.elapsed() < RESPONSE,
        "at once: {:?}",
        started.elapsed()
    );
    drop(other);
    let started = Instant::now();
    let result = c.try_lock(cold.as_str()).await;
    let took = started.elapsed();
    assert!(result.is_err(), "{result:?}");
    assert!(
        took <= bound + slack(bound),
        "took {took:?}, bound {bound:?}"
    );
    tokio::task::block_in_place(|| cluster.node_mut(frozen).resume());
}

/// The in-memory twin, on tokio's paused clock: a reply delayed past the response timeout
/// ends the call exactly at its bound, alone and 64 at once (batched acquisitions
/// included), and a decision is applied once.
#[tokio::test(start_paused = true)]
async fn in_memory_a_delayed_reply_ends_each_call_exactly_at_its_bound() {
    let server = MemoryServer::new();
    let c = server
        .builder()
        .response_timeout(RESPONSE)
        .build()
        .await
        .unwrap();
    let limit = c
        .rate_limit("slow:rate")
        .per(Duration::from_secs(3_600), 10);
    server.delay_replies(Duration::from_secs(10));
    let exact = |what: &str, started: Instant| {
        assert_eq!(started.elapsed(), RESPONSE, "{what}");
    };
    let started = Instant::now();
    gave_up("try_lock", c.try_lock("slow:a").await);
    exact("try_lock", started);
    let started = Instant::now();
    let tries = (0..64).map(|i| c.try_lock(format!("slow:{i}")).into_future());
    for result in join_all(tries).await {
        gave_up("try_lock of 64", result);
    }
    exact("64 try_locks", started);
    let started = Instant::now();
    gave_up("check", limit.check().await);
    exact("check", started);
    server.delay_replies(Duration::ZERO);
    assert_eq!(limit.check().await.unwrap().remaining(), 8, "applied once");
    let mut conn = c.connection();
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
}
