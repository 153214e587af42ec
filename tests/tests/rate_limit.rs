//! Rate limits (`lock_core::rate_limit`) against real redis-server processes and the
//! in-memory backend: what GCRA allows (a burst, then the rate, never more than `burst +
//! rate × elapsed` across instances), on one key and on a thousand, on a Cluster; what a
//! restart and a frozen server cost; bad input refused before anything is sent.
//!
//! Every load loop is bounded in count and in time. Nothing asserts on how fast a decision
//! is: the bounds are on how many requests were let in, measured against the time that
//! passed (on the wall clock for real servers, tokio's paused clock for the memory server).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::testing::MemoryServer;
use lock_core::{LockClient, LockError, Quota, RateLimit};
use lock_tests::fixtures::client_with_lease;
use lock_tests::{RedisCluster, RedisServer};
use tokio::time::Instant;

const SECOND: Duration = Duration::from_secs(1);

async fn client(server: &RedisServer) -> LockClient {
    client_with_lease(&server.url(), Duration::from_secs(10)).await
}

/// How many times the server ran a script or function so far.
fn script_calls(server: &RedisServer) -> u64 {
    let stats = server.cmd(&["INFO", "commandstats"]);
    stats
        .lines()
        .filter(|l| {
            ["cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:"]
                .iter()
                .any(|c| l.starts_with(c))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Sends `check`s on `limits` (one per instance, `tasks` tasks each), one every `every` per
/// task, until `run` has passed or `max` requests per task were sent. Returns how many were
/// allowed, how many were sent, and the time from before the first to after the last.
async fn overload(
    limits: &[RateLimit],
    tasks: usize,
    every: Duration,
    run: Duration,
    max: u64,
) -> (u64, u64, Duration) {
    let (allowed, sent) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let deadline = start + run;
    let mut joins = Vec::new();
    for limit in limits {
        for _ in 0..tasks {
            let (limit, allowed, sent) = (limit.clone(), allowed.clone(), sent.clone());
            joins.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                for _ in 0..max {
                    tick.tick().await;
                    if Instant::now() >= deadline {
                        break;
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    if limit.check().await.unwrap().is_allowed() {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for join in joins {
        join.await.unwrap();
    }
    let elapsed = start.elapsed();
    (
        allowed.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed),
        elapsed,
    )
}

/// The most GCRA lets through in `elapsed`: `burst + rate × elapsed`, + 1 for the boundary.
fn bound(quota: Quota, elapsed: Duration) -> u64 {
    let steady = elapsed.as_micros() / quota.interval().as_micros();
    u64::from(quota.burst_size()) + u64::try_from(steady).unwrap() + 1
}

// ---------------------------------------------------------------------------------------------
// What GCRA answers

#[tokio::test]
async fn a_burst_then_the_rate_with_what_is_left_and_when_to_come_back() {
    let server = RedisServer::start();
    let c = client(&server).await;
    // One permit a minute, up to 3 at once: nothing comes back during the test.
    let limit = c
        .rate_limit("buyer:1")
        .per(Duration::from_secs(60), 1)
        .burst(3);
    for left in [2, 1, 0] {
        let d = limit.check().await.unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), left);
        assert_eq!(d.retry_after(), Duration::ZERO);
        assert_eq!(d.burst(), 3);
        assert_eq!(d.interval(), Duration::from_secs(60));
    }
    let limited = limit.check().await.unwrap();
    assert!(!limited.is_allowed());
    assert_eq!(limited.remaining(), 0);
    assert!(
        limited.retry_after() > Duration::from_secs(50),
        "{limited:?}"
    );
    assert!(
        limited.retry_after() <= Duration::from_secs(60),
        "{limited:?}"
    );
    assert!(
        limited.reset_after() > Duration::from_secs(170),
        "{limited:?}"
    );
    // A refused request took nothing: the key says the same after it.
    let peek = limit.peek().await.unwrap();
    assert!(!peek.is_allowed());
    assert_eq!(peek.remaining(), 0);
    let stored = limit.info().await.unwrap().expect("state written");
    assert_eq!((stored.remaining(), stored.burst()), (0, 3));
    // The state is one small string in the name's hash slot, expiring when a full burst is back.
    let key = limit.key().unwrap();
    assert_eq!(key, "lock:{buyer:1}:rate");
    let ttl: u64 = server.cmd(&["PTTL", &key]).parse().unwrap();
    assert!(ttl > 170_000 && ttl <= 180_000, "{ttl}");
    assert!(server.cmd(&["GET", &key]).len() <= 41);
}

#[tokio::test]
async fn several_permits_at_once_peek_and_info() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let limit = c.rate_limit("api:key:7").per(Duration::from_secs(60), 10);
    assert_eq!(limit.info().await.unwrap(), None, "nothing stored yet");
    let peek = limit.peek().await.unwrap();
    assert!(peek.is_allowed());
    assert_eq!(peek.remaining(), 10);
    assert_eq!(server.dbsize(), 0, "a peek writes nothing");
    assert_eq!(limit.check_n(7).await.unwrap().remaining(), 3);
    let refused = limit.check_n(4).await.unwrap();
    assert!(!refused.is_allowed());
    assert_eq!(
        refused.remaining(),
        3,
        "all or nothing: the 3 free stay free"
    );
    assert_eq!(limit.check_n(3).await.unwrap().remaining(), 0);
    // info reads with the quota the state was written with, whatever this handle's is.
    let other = c.rate_limit("api:key:7");
    let seen = other.info().await.unwrap().expect("state written");
    assert_eq!((seen.burst(), seen.remaining()), (10, 0));
    assert_eq!(seen.interval(), Duration::from_secs(6));
    // Its old name, kept for one release, answers the same.
    #[allow(deprecated)]
    let old = other.inspect().await.unwrap().expect("state written");
    assert_eq!((old.burst(), old.remaining()), (10, 0));
}

#[tokio::test]
async fn a_key_that_holds_something_else_is_a_wrongtype_error() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.cmd(&["SET", "lock:{x}:rate", "not a rate limit"]);
    let limit = c.rate_limit("x").per(SECOND, 1);
    let foreign = limit.check().await;
    assert!(
        matches!(&foreign, Err(LockError::Redis(e)) if e.to_string().contains("WRONGTYPE")),
        "{foreign:?}"
    );
    assert_eq!(server.cmd(&["GET", "lock:{x}:rate"]), "not a rate limit");
}

// ---------------------------------------------------------------------------------------------
// Accuracy across processes

/// Three instances (clients), one key, a burst of concurrent requests, then a steady overload
/// (twelve times the rate) for 30 s: never more than `burst + rate × elapsed + 1`, and within
/// 5 % of the rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_one_key_never_more_than_the_rate() {
    let server = RedisServer::start();
    let quota = Quota::per(SECOND, 100).burst(20);
    let mut limits = Vec::new();
    for _ in 0..3 {
        limits.push(client(&server).await.rate_limit("sale:item:1").quota(quota));
    }
    // The burst: 60 requests at once, 20 let in.
    let mut burst = Vec::new();
    for k in 0..60 {
        let limit = limits[k % 3].clone();
        burst.push(tokio::spawn(async move {
            limit.check().await.unwrap().is_allowed()
        }));
    }
    let mut first = 0;
    for b in burst {
        first += u64::from(b.await.unwrap());
    }
    assert!(
        (20..=21).contains(&first),
        "{first} of a burst of 60 let in"
    );
    // The steady overload: 6 tasks, one request every 5 ms each (1,200/s against 100/s).
    let run = Duration::from_secs(30);
    let (allowed, sent, elapsed) = overload(&limits, 2, Duration::from_millis(5), run, 7_000).await;
    let most = bound(quota.burst(1), elapsed);
    assert!(
        allowed <= most,
        "{allowed} let in over {elapsed:?}: more than {most}"
    );
    let steady = 100.0 * elapsed.as_secs_f64();
    assert!(
        allowed as f64 >= 0.95 * steady,
        "{allowed} of {sent} let in over {elapsed:?}: under 95 % of {steady}"
    );
}

/// A thousand keys at once, each with the same quota and its own overload: each holds the
/// bound on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_keys_each_hold_the_bound() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let quota = Quota::per(SECOND, 5).burst(3);
    let start = Instant::now();
    let mut keys = Vec::new();
    for k in 0..1_000 {
        let limits = [
            a.rate_limit(format!("user:{k}")).quota(quota),
            b.rate_limit(format!("user:{k}")).quota(quota),
        ];
        keys.push(tokio::spawn(async move {
            // 3 rounds of 6 requests, 400 ms apart: 18 requests against at most 3 + 5 × 0.8 + 1.
            let mut allowed = 0;
            for round in 0..3 {
                if round > 0 {
                    tokio::time::sleep(Duration::from_millis(400)).await;
                }
                for k in 0..6 {
                    allowed += u64::from(limits[k % 2].check().await.unwrap().is_allowed());
                }
            }
            allowed
        }));
    }
    let mut counts = Vec::new();
    for key in keys {
        counts.push(key.await.unwrap());
    }
    let most = bound(quota, start.elapsed());
    assert!(counts.iter().all(|&n| n <= most), "over {most}: {counts:?}");
    assert!(
        counts.iter().all(|&n| n >= 3),
        "every key let its burst in: {counts:?}"
    );
    // One small string per key and nothing else (a key whose full burst is back is gone).
    let keys = server.keys("*");
    assert!(
        keys.len() <= 1_000 && keys.iter().all(|k| k.ends_with(":rate")),
        "{keys:?}"
    );
}

#[tokio::test]
async fn on_a_cluster_the_state_lives_in_the_names_slot() {
    let cluster = RedisCluster::start();
    let c = LockClient::builder_cluster(cluster.primary_urls())
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    for name in ["a", "b", "c", "order:42", "user:7"] {
        let limit = c.rate_limit(name).per(Duration::from_secs(60), 2);
        assert!(limit.check().await.unwrap().is_allowed());
        assert!(limit.check().await.unwrap().is_allowed());
        assert!(!limit.check().await.unwrap().is_allowed());
        let key = limit.key().unwrap();
        let node = cluster.node(cluster.node_for_key(&key));
        assert_eq!(node.cmd(&["EXISTS", &key]), "1", "{key} on its slot's node");
    }
}

// ---------------------------------------------------------------------------------------------
// Faults and bad input

/// A restart that loses the state lets at most one more burst in, and nothing blocks.
#[tokio::test]
async fn a_restart_costs_at_most_one_burst_and_never_blocks() {
    let mut server = RedisServer::start();
    let c = client(&server).await;
    let limit = c
        .rate_limit("lottery:draw")
        .per(Duration::from_secs(3600), 1)
        .burst(2);
    assert_eq!(take_all(&limit).await, 2);
    server.restart();
    // The first calls after the restart may fail while the client reconnects (a decision
    // whose connection broke is never sent again: its error, `broken pipe`, is the caller's);
    // none waits longer than its bound, and then the limit answers again.
    let mut allowed = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match limit.check().await {
            Ok(d) if d.is_allowed() => allowed += 1,
            Ok(_) => break,
            Err(e) if e.is_unavailable() => {}
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < deadline, "the limit never answered again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(allowed, 2, "the lost state costs one burst, no more");
}

/// Takes permits until one is refused; how many were let in (at most 100).
async fn take_all(limit: &RateLimit) -> u32 {
    for n in 0..100 {
        if !limit.check().await.unwrap().is_allowed() {
            return n;
        }
    }
    panic!("never limited");
}

/// A frozen server: each decision ends in the response timeout, with a typed error for the
/// caller's fail mode.
#[tokio::test]
async fn a_frozen_server_answers_a_timeout() {
    let mut server = RedisServer::start();
    let c = client(&server).await;
    let limit = c.rate_limit("frozen").per(SECOND, 10);
    assert!(limit.check().await.unwrap().is_allowed());
    server.pause();
    let started = Instant::now();
    let frozen = limit.check().await;
    let waited = started.elapsed();
    server.resume();
    assert!(
        matches!(
            frozen,
            Err(LockError::ResponseTimeout(_) | LockError::Unavailable { .. })
        ),
        "{frozen:?}"
    );
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    assert!(limit.check().await.unwrap().is_allowed());
}

#[tokio::test]
async fn bad_quotas_names_and_counts_are_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let before = script_calls(&server);
    fn refused<T: std::fmt::Debug>(r: Result<T, LockError>) -> &'static str {
        match r {
            Err(LockError::InvalidOption { option, .. }) => option,
            other => panic!("{other:?}"),
        }
    }
    // No `.per(..)`: the option to call is named, not a rate of 0 never written.
    assert_eq!(refused(c.rate_limit("a").check().await), "per");
    assert_eq!(refused(c.rate_limit("a").burst(3).validate()), "per");
    // `validate` answers what the first check would, without sending anything.
    assert_eq!(
        refused(c.rate_limit("a").per(SECOND, 1).burst(0).validate()),
        "burst"
    );
    assert!(c.rate_limit("a").per(SECOND, 1).validate().is_ok());
    assert!(matches!(
        c.rate_limit("").per(SECOND, 1).validate(),
        Err(LockError::InvalidName { .. })
    ));
    assert_eq!(
        refused(c.rate_limit("a").per(SECOND, 0).check().await),
        "rate"
    );
    assert_eq!(
        refused(c.rate_limit("a").per(Duration::ZERO, 1).check().await),
        "period"
    );
    assert_eq!(
        refused(c.rate_limit("a").per(SECOND, 1).burst(0).check().await),
        "burst"
    );
    let long = c
        .rate_limit("a")
        .per(Duration::from_secs(86_400), 1)
        .burst(31);
    assert_eq!(refused(long.check().await), "burst");
    let limit = c.rate_limit("a").per(SECOND, 5);
    assert_eq!(refused(limit.check_n(6).await), "n");
    assert_eq!(refused(limit.check_n(0).await), "n");
    let bad_name = c.rate_limit("").per(SECOND, 5).check().await;
    assert!(
        matches!(bad_name, Err(LockError::InvalidName { .. })),
        "{bad_name:?}"
    );
    assert_eq!(script_calls(&server), before, "nothing was sent");
    assert_eq!(server.dbsize(), 0);
}

// ---------------------------------------------------------------------------------------------
// The in-memory backend, on tokio's paused clock

/// On the paused clock the bound is exact: three instances, a burst, then 30 s of steady
/// overload, and one permit per interval.
#[tokio::test(start_paused = true)]
async fn on_the_memory_backend_under_a_paused_clock_the_count_is_exact() {
    let server = MemoryServer::new();
    let quota = Quota::per(SECOND, 10).burst(5);
    let mut limits = Vec::new();
    for _ in 0..3 {
        limits.push(server.client().await.unwrap().rate_limit("k").quota(quota));
    }
    let a = limits[0].clone();
    let mut allowed = u64::from(take_all(&a).await);
    assert_eq!(allowed, 5, "the burst, at once");
    // The memory server's clock is tokio's: it stands still at a paused instant.
    let retry = limits[1].check().await.unwrap().retry_after();
    assert!(
        retry <= Duration::from_millis(100) && retry > Duration::from_micros(99_900),
        "{retry:?}"
    );
    // Then 30 s of one request every 3 ms from each instance: 30,000 requests, 30 × the rate.
    for _ in 0..10_000u32 {
        tokio::time::sleep(Duration::from_millis(3)).await;
        for limit in &limits {
            allowed += u64::from(limit.check().await.unwrap().is_allowed());
        }
    }
    // The burst, then one permit per 100 ms, each taken by the first request at or after it
    // is due (a late request does not lose the permit's credit): due at 100, ..., 30,000 ms,
    // the last one taken by the last round, at exactly 30,000 ms (the server's clock is
    // tokio's, not ahead of it or behind).
    assert_eq!(allowed, 5 + 300);
    // A thousand keys on the same clock: each lets its burst in, then nothing.
    let c = server.client().await.unwrap();
    for k in 0..1_000 {
        let limit = c.rate_limit(format!("user:{k}")).quota(quota);
        assert_eq!(take_all(&limit).await, 5);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        server
            .keys()
            .iter()
            .filter(|k| k.ends_with(":rate"))
            .count(),
        0,
        "state expires"
    );
}
