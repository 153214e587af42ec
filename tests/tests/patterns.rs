//! The patterns users write, as first-class features, against a real redis-server: a lock
//! kept for a minimum time (`hold_at_least`), a locked block in one call (`run`,
//! `TryLockRequest::run`), leader election (`Leader`, `Term`, `events`), and fenced writes at the resource
//! (`fenced::set`, `fenced::get`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use lock_core::fenced::{self, Fenced};
use lock_core::{LeaderEvent, LockError};
use lock_tests::RedisServer;
use lock_tests::fixtures::{
    assert_clean, client, client_with_lease, eventually, lock_keys, native,
};
use tokio::time::Instant;

fn pttl(server: &RedisServer, name: &str) -> i64 {
    server
        .cmd(&["PTTL", &format!("lock:{{{name}}}")])
        .parse()
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// hold_at_least

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_released_before_its_minimum_hold_stays_taken_until_then() {
    let server = RedisServer::start();
    let (a, b) = (client(&server.url()).await, client(&server.url()).await);
    let min_hold = Duration::from_millis(1500);
    let granted = Instant::now();
    let guard = a
        .try_lock("period")
        .hold_at_least(min_hold)
        .await
        .unwrap()
        .unwrap();
    let token = guard.fencing_token();
    assert!(guard.unlock().await.unwrap(), "still held until now");
    // Taken, by nobody's hold: it expires at the end of the minimum hold, not before.
    assert!(b.try_lock("period").await.unwrap().is_none());
    let left = pttl(&server, "period");
    assert!(left > 0 && left <= 1500, "PTTL {left}");
    let info = b.mutex("period").info().await.unwrap();
    // The native protocol keeps no token in the key; its holder's is gone with its guard.
    let kept = if native(&b) { None } else { Some(token) };
    assert!(info.held && info.fencing_token == kept);
    // Free once the minimum hold is over; the next holder's token is greater.
    let next = b
        .lock("period")
        .wait(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(granted.elapsed() >= min_hold, "{:?}", granted.elapsed());
    assert!(next.fencing_token() > token);
    next.unlock().await.unwrap();
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_keeps_its_minimum_hold_and_a_late_release_frees_at_once() {
    let server = RedisServer::start();
    let (a, b) = (client(&server.url()).await, client(&server.url()).await);
    // Dropped (released in the background): kept too.
    let guard = a
        .lock("dropped")
        .hold_at_least(Duration::from_secs(20))
        .await
        .unwrap();
    drop(guard);
    eventually("the background release ran", || {
        let left = pttl(&server, "dropped");
        left > 0 && left <= 20_000
    })
    .await;
    assert!(b.try_lock("dropped").await.unwrap().is_none());
    // Released after its minimum hold: freed at once.
    let guard = a
        .lock("late")
        .hold_at_least(Duration::from_millis(50))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    guard.unlock().await.unwrap();
    assert!(b.try_lock("late").await.unwrap().is_some());
    server.cmd(&["DEL", "lock:{dropped}"]);
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minimum_hold_longer_than_the_lease_or_on_a_fair_lock_is_refused() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let err = c
        .lock("x")
        .lease(Duration::from_secs(10))
        .hold_at_least(Duration::from_secs(11))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LockError::InvalidOption {
                option: "hold_at_least",
                ..
            }
        ),
        "{err:?}"
    );
    let err = c
        .try_lock("x")
        .hold_at_least(Duration::from_secs(31 * 24 * 3600))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidOption { .. }), "{err:?}");
    // Nothing was sent, nothing is held.
    assert!(lock_keys(&server).is_empty());
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// run, and run on a single try

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_returns_the_body_and_releases_a_single_try_skips_a_busy_lock() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let other = client(&server.url()).await;
    let (token, held) = c
        .lock("block")
        .run(|held| async move { (held.fencing_token(), held.is_held()) })
        .await
        .unwrap();
    assert!(token.is_some() && held);
    assert!(
        lock_keys(&server).is_empty(),
        "released when the body returned"
    );

    let blocker = other.lock("block").await.unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let skipped = c
        .try_lock("block")
        .run(|_| async move { flag.store(true, Ordering::SeqCst) })
        .await
        .unwrap();
    assert!(skipped.is_none() && !ran.load(Ordering::SeqCst));
    blocker.unlock().await.unwrap();
    assert_eq!(
        c.try_lock("block").run(|_| async { 7 }).await.unwrap(),
        Some(7)
    );
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_aborts_the_body_when_the_lock_is_lost() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    let started = Instant::now();
    let err = c
        .lock("short")
        .lease(Duration::from_millis(300))
        .run(|_| async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            flag.store(true, Ordering::SeqCst);
        })
        .await
        .unwrap_err();
    assert!(err.is_lost(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(!finished.load(Ordering::SeqCst), "the body ran to its end");
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// Leader election

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_the_next_term_is_greater() {
    let server = RedisServer::start();
    let (a, b) = (client(&server.url()).await, client(&server.url()).await);
    let term = a.leader("sched").campaign().await.unwrap();
    assert!(term.is_leader());
    assert!(b.leader("sched").try_campaign().await.unwrap().is_none());
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.leader("sched").campaign().await }
    });
    let first = term.number();
    assert!(term.step_down().await.unwrap());
    let next = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(next.is_leader() && next.number() > first);
    drop(next);
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_is_told_why_and_the_events_campaign_again() {
    let server = RedisServer::start();
    let c = client_with_lease(&server.url(), Duration::from_millis(600)).await;
    let mut events = Box::pin(c.leader("events").events());
    async fn next(
        events: &mut (impl futures_util::Stream<Item = Result<LeaderEvent, LockError>> + Unpin),
    ) -> Result<LeaderEvent, LockError> {
        tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an event in time")
            .expect("the stream never ends")
    }
    let Ok(LeaderEvent::Elected { term: first, held }) = next(&mut events).await else {
        panic!("expected Elected");
    };
    assert!(held.is_held());
    // Someone deletes the lock: the watchdog finds it gone.
    server.cmd(&["DEL", "lock:{events}"]);
    match next(&mut events).await {
        Ok(LeaderEvent::Deposed { term, reason }) => {
            assert_eq!(term, first);
            assert!(reason.contains("gone"), "{reason}");
        }
        other => panic!("expected Deposed, got {other:?}"),
    }
    assert!(!held.is_held());
    // Nobody else campaigns: elected again, in a new term.
    match next(&mut events).await {
        Ok(LeaderEvent::Elected { term, .. }) => assert!(term > first),
        other => panic!("expected Elected, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Fenced writes

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_refuses_a_lower_token_and_accepts_an_equal_one() {
    let server = RedisServer::start();
    let redis = lock_core::redis::Client::open(server.url()).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    // A missing key accepts any token.
    assert_eq!(
        fenced::set(&mut conn, "report", "v10", 10).await.unwrap(),
        Fenced::Written
    );
    // The same holder writes again.
    assert_eq!(
        fenced::set(&mut conn, "report", "v10b", 10).await.unwrap(),
        Fenced::Written
    );
    // A newer holder.
    assert_eq!(
        fenced::set(&mut conn, "report", "v20", 20).await.unwrap(),
        Fenced::Written
    );
    // The stale one wakes up: refused, nothing written.
    assert_eq!(
        fenced::set(&mut conn, "report", "stale", 15).await.unwrap(),
        Fenced::Refused { stored: 20 }
    );
    let read: Option<(String, u64)> = fenced::get(&mut conn, "report").await.unwrap();
    assert_eq!(read, Some(("v20".to_owned(), 20)));
    let missing: Option<(String, u64)> = fenced::get(&mut conn, "nothing").await.unwrap();
    assert_eq!(missing, None);
    // Tokens as lock-core issues them (~1.8e15) compare exactly; above 2^53 is refused.
    let big = 1_800_000_000_000_001;
    assert_eq!(
        fenced::set(&mut conn, "big", "a", big).await.unwrap(),
        Fenced::Written
    );
    assert_eq!(
        fenced::set(&mut conn, "big", "b", big - 1).await.unwrap(),
        Fenced::Refused { stored: big }
    );
    let err = fenced::set(&mut conn, "big", "c", (1 << 53) + 1)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        LockError::InvalidOption {
            option: "token",
            ..
        }
    ));
    // A key of another type is an error, not a write.
    server.cmd(&["SET", "plain", "x"]);
    assert!(fenced::set(&mut conn, "plain", "v", 1).await.is_err());
    assert_eq!(server.cmd(&["GET", "plain"]), "x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_is_refused_at_the_resource_with_real_tokens() {
    let server = RedisServer::start();
    let c = client(&server.url()).await;
    let redis = lock_core::redis::Client::open(server.url()).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    // The first holder's lease runs out while it stalls; the next holder writes.
    let stale = c
        .lock("res")
        .lease(Duration::from_millis(100))
        .await
        .unwrap();
    let stale_token = stale.fencing_token();
    let fresh = c.lock("res").wait(Duration::from_secs(5)).await.unwrap();
    assert!(fresh.fencing_token() > stale_token);
    let written = fenced::set(&mut conn, "res:value", "fresh", fresh.fencing_token())
        .await
        .unwrap();
    assert_eq!(written, Fenced::Written);
    let refused = fenced::set(&mut conn, "res:value", "stale", stale_token)
        .await
        .unwrap();
    assert_eq!(
        refused,
        Fenced::Refused {
            stored: fresh.fencing_token()
        }
    );
    assert!(!stale.unlock().await.unwrap());
    fresh.unlock().await.unwrap();
}
