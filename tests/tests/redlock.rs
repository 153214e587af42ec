//! RedLock over five (or three) real redis-server processes: quorum with nodes killed, a node
//! restarted empty, validity against slow nodes (fault proxy), mutual exclusion checked with
//! shared state, watchdog renewal, a renewal short of a majority (at risk), loss of the
//! majority, cancellation, configuration checks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::RedLockBuilder;
use lock_core::{Guard, LeaseState, LockClient, LockError, RedLock};
use lock_tests::fixtures::{client_with_lease, eventually, lock_keys};
use lock_tests::{FaultProxy, RedisServer, unique_name};
use rand::Rng;
use tokio::time::{Instant, timeout};

const BOUND: Duration = Duration::from_secs(10);

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

async fn clients(urls: &[String]) -> Vec<LockClient> {
    let mut out = Vec::new();
    for url in urls {
        out.push(client_with_lease(url, Duration::from_secs(30)).await);
    }
    out
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

/// A RedLock on `urls` with fast retries and a per-node timeout generous enough for a loaded
/// CI machine (the tests about slow nodes set their own), configured further by `f`.
async fn redlock_with(
    urls: &[String],
    f: impl FnOnce(RedLockBuilder) -> RedLockBuilder,
) -> RedLock {
    let builder = RedLock::builder(clients(urls).await)
        .retry_delay(Duration::from_millis(5), Duration::from_millis(20))
        .node_timeout(Duration::from_millis(500));
    f(builder).build().unwrap()
}

async fn redlock(urls: &[String]) -> RedLock {
    redlock_with(urls, |b| b).await
}

fn drift(lease: Duration) -> Duration {
    lease.mul_f64(RedLock::DEFAULT_DRIFT_FACTOR) + RedLock::DRIFT_MARGIN
}

/// The held-lock key of `name` on `server`, if any.
fn held_on(server: &RedisServer, name: &str) -> bool {
    lock_keys(server).contains(&format!("lock:{{{name}}}"))
}

async fn eventually_clean(servers: &[&RedisServer]) {
    for (i, s) in servers.iter().enumerate() {
        eventually(&format!("no lock held on live node {i}"), || {
            lock_keys(s).is_empty()
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_grant_exclude_and_release() {
    let s = servers(5);
    let a = redlock(&urls(&s)).await;
    let b = redlock(&urls(&s)).await;
    assert_eq!((a.len(), a.quorum()), (5, 3));
    let name = unique_name("rl");

    let g = a.lock(&name).wait(BOUND).await.unwrap();
    assert!(g.is_held());
    assert_eq!(g.held_nodes(), 5);
    assert!(s.iter().all(|s| held_on(s, &name)));
    let tokens = g.node_tokens().to_vec();
    assert!(tokens.iter().all(Option::is_some));
    assert_eq!(
        Some(g.max_node_token()),
        tokens.iter().flatten().copied().max()
    );
    // No single RedLock number is a fencing token: every view says so.
    assert_eq!(Guard::fencing_token(&g), None);
    assert_eq!(g.held_lock().fencing_token(), None);
    assert!(g.remaining() > Duration::from_secs(25) && g.remaining() <= Duration::from_secs(30));

    assert!(b.try_lock(&name).await.unwrap().is_none());
    let err = b
        .lock(&name)
        .wait(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    // The contender's attempts left nothing of its own behind.
    assert!(s.iter().all(|s| lock_keys(s).len() == 1));

    assert!(g.unlock().await.unwrap());
    eventually_clean(&s.iter().collect::<Vec<_>>()).await;

    // The next holder's token is higher on every node (each node counts on).
    let g2 = b.lock(&name).wait(BOUND).await.unwrap();
    for (old, new) in tokens.iter().zip(g2.node_tokens()) {
        assert!(new.unwrap() > old.unwrap(), "{old:?} -> {new:?}");
    }
    drop(g2);
    eventually_clean(&s.iter().collect::<Vec<_>>()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_with_two_of_five_nodes_killed() {
    let mut s = servers(5);
    let a = redlock(&urls(&s)).await;
    let b = redlock(&urls(&s)).await;
    s[0].kill();
    s[3].kill();
    let name = unique_name("rl");

    let g = a.lock(&name).wait(BOUND).await.unwrap();
    assert_eq!(g.held_nodes(), 3);
    assert_eq!(
        g.node_tokens()
            .iter()
            .map(Option::is_some)
            .collect::<Vec<_>>(),
        [false, true, true, false, true]
    );
    assert!(b.try_lock(&name).await.unwrap().is_none());
    // Extension and watchdog renewal get by with three too.
    g.extend(Duration::from_secs(20)).await.unwrap();
    assert_eq!(g.held_nodes(), 3);
    assert!(g.unlock().await.unwrap());

    let g = b
        .try_lock(&name)
        .lease(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert!(g.unlock().await.unwrap());
    eventually_clean(&[&s[1], &s[2], &s[4]]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_cleanly_with_three_of_five_nodes_killed() {
    let mut s = servers(5);
    let a = redlock(&urls(&s)).await;
    for i in [0, 2, 4] {
        s[i].kill();
    }
    let name = unique_name("rl");
    let live = [&s[1], &s[3]];

    let started = Instant::now();
    let err = a
        .lock(&name)
        .wait(Duration::from_millis(400))
        .await
        .unwrap_err();
    assert!(
        matches!(err, LockError::Unavailable { .. }) && err.is_unavailable(),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    // Without a wait an outage is reported at once rather than retried forever.
    let err = timeout(BOUND, a.lock(&name)).await.unwrap().unwrap_err();
    assert!(matches!(err, LockError::Unavailable { .. }), "{err:?}");
    let err = a.try_lock(&name).await.unwrap_err();
    assert!(matches!(err, LockError::Unavailable { .. }), "{err:?}");
    // The two nodes that granted it each time were released.
    eventually_clean(&live).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_node_plus_two_dead_is_a_timeout_and_the_holder_is_untouched() {
    let mut s = servers(5);
    let a = redlock(&urls(&s)).await;
    s[0].kill();
    s[1].kill();
    let name = unique_name("rl");
    // Someone holds the plain lock of that name on node 2.
    let other = client_with_lease(&s[2].url(), Duration::from_secs(30)).await;
    let foreign = other
        .lock(&name)
        .lease(Duration::from_secs(30))
        .await
        .unwrap();
    let before = s[2].cmd(&["GET", &format!("lock:{{{name}}}")]);

    let err = a
        .lock(&name)
        .wait(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    assert!(a.try_lock(&name).await.unwrap().is_none());
    assert_eq!(s[2].cmd(&["GET", &format!("lock:{{{name}}}")]), before);
    assert!(foreign.is_held());
    eventually_clean(&[&s[3], &s[4]]).await;
    assert!(foreign.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_restarted_empty_do_not_give_the_lock_away() {
    let mut s = servers(5);
    let a = redlock_with(&urls(&s), |b| b.watchdog_lease(Duration::from_millis(900))).await;
    let b = redlock(&urls(&s)).await;
    let name = unique_name("rl");
    let g = a.lock(&name).wait(BOUND).await.unwrap();
    assert_eq!(g.held_nodes(), 5);

    // A minority loses its data.
    s[0].restart();
    s[1].restart();
    assert!(!held_on(&s[0], &name) && !held_on(&s[1], &name));
    for _ in 0..5 {
        assert!(b.try_lock(&name).await.unwrap().is_none());
    }
    let err = b
        .lock(&name)
        .wait(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    assert!(g.is_held());

    // The holder's renewals take the restarted nodes back.
    let (s0, s1) = (&s[0], &s[1]);
    eventually("the restarted nodes are the holder's again", || {
        held_on(s0, &name) && held_on(s1, &name)
    })
    .await;
    eventually("renewals confirm all five", || g.held_nodes() == 5).await;
    assert!(b.try_lock(&name).await.unwrap().is_none());
    assert!(g.is_held());
    assert!(g.unlock().await.unwrap());
    eventually_clean(&s.iter().collect::<Vec<_>>()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_slower_than_the_node_timeout_are_left_out_and_undone() {
    let s = servers(5);
    let p3 = FaultProxy::start(s[3].addr()).await;
    let p4 = FaultProxy::start(s[4].addr()).await;
    let mut u = urls(&s);
    u[3] = p3.url();
    u[4] = p4.url();
    let a = redlock_with(&u, |b| b.node_timeout(Duration::from_millis(300))).await;
    p3.delay(Duration::from_millis(600));
    p4.delay(Duration::from_millis(600));
    let name = unique_name("rl");
    let lease = Duration::from_secs(5);

    let started = Instant::now();
    let g = a.try_lock(&name).lease(lease).await.unwrap().unwrap();
    let took = started.elapsed();
    assert_eq!(g.held_nodes(), 3);
    assert_eq!(&g.node_tokens()[3..], &[None, None]);
    // Waiting for the slow nodes' timeouts is part of the elapsed time.
    assert!(took >= Duration::from_millis(300));
    assert!(g.validity() <= lease - Duration::from_millis(300) - drift(lease));
    assert!(g.remaining() <= lease - took.min(Duration::from_millis(300)) - drift(lease));
    // The late acquisitions on the slow nodes are undone once their answers arrive.
    let (s3, s4) = (&s[3], &s[4]);
    eventually("late grants on the slow nodes are undone", || {
        !held_on(s3, &name) && !held_on(s4, &name)
    })
    .await;
    assert!(g.is_held());
    assert!(g.unlock().await.unwrap());
    eventually_clean(&s.iter().collect::<Vec<_>>()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_shrinks_with_the_time_the_nodes_take() {
    let s = servers(5);
    let mut proxies = Vec::new();
    for server in &s {
        proxies.push(FaultProxy::start(server.addr()).await);
    }
    let u: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let a = redlock_with(&u, |b| b.node_timeout(Duration::from_secs(2))).await;
    for p in &proxies {
        p.delay(Duration::from_millis(60));
    }
    let name = unique_name("rl");

    // Every answer takes at least two delays (request and reply): 120 ms of the lease.
    let lease = Duration::from_secs(2);
    let g = a.try_lock(&name).lease(lease).await.unwrap().unwrap();
    assert_eq!(g.held_nodes(), 5);
    assert!(
        g.validity() <= lease - Duration::from_millis(120) - drift(lease),
        "{:?}",
        g.validity()
    );
    assert!(g.unlock().await.unwrap());

    // With a lease the round trips eat whole, a quorum that says yes is refused, and
    // released everywhere.
    let lease = Duration::from_millis(100);
    let err = a.try_lock(&name).lease(lease).await.unwrap_err();
    assert!(
        matches!(err, LockError::ResponseTimeout(took) if took >= Duration::from_millis(120)),
        "{err:?}"
    );
    let err = a
        .lock(&name)
        .lease(lease)
        .wait(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::ResponseTimeout(_)), "{err:?}");
    eventually_clean(&s.iter().collect::<Vec<_>>()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_redlocks_exclude_each_other_on_shared_state() {
    const TASKS_PER_REDLOCK: usize = 3;
    const ROUNDS: usize = 8;
    let s = servers(5);
    let name = unique_name("rl");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let rl = redlock(&urls(&s)).await;
        for _ in 0..TASKS_PER_REDLOCK {
            let (rl, name, counter, inside) =
                (rl.clone(), name.clone(), counter.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let g = rl
                        .lock(&name)
                        .lease(Duration::from_secs(10))
                        .wait(Duration::from_secs(30))
                        .await
                        .unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    // Read, pause, write: lost updates if two ever overlap.
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(g.unlock().await.unwrap());
                }
            }));
        }
    }
    for t in tasks {
        timeout(Duration::from_secs(120), t).await.unwrap().unwrap();
    }
    assert_eq!(
        counter.load(Ordering::SeqCst),
        (2 * TASKS_PER_REDLOCK * ROUNDS) as u64
    );
    eventually_clean(&s.iter().collect::<Vec<_>>()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_it_past_several_leases() {
    let s = servers(5);
    let lease = Duration::from_millis(300);
    let a = redlock_with(&urls(&s), |b| b.watchdog_lease(lease)).await;
    let b = redlock(&urls(&s)).await;
    let name = unique_name("rl");
    let g = a.lock(&name).wait(BOUND).await.unwrap();
    let lost = g.lost();
    tokio::pin!(lost);
    // Four leases: held only if renewed.
    let held_for = tokio::time::sleep(4 * lease);
    tokio::select! {
        _ = &mut lost => panic!("lost while the watchdog should renew it"),
        _ = held_for => {}
    }
    assert!(g.is_held());
    assert!(g.remaining() > Duration::ZERO && g.remaining() <= lease);
    assert!(b.try_lock(&name).await.unwrap().is_none());
    for server in &s {
        let pttl: i64 = server
            .cmd(&["PTTL", &format!("lock:{{{name}}}")])
            .parse()
            .unwrap();
        assert!(pttl > 0 && pttl <= 300, "{pttl}");
    }
    assert!(g.unlock().await.unwrap());
    timeout(BOUND, lost)
        .await
        .expect("lost() resolves on release");
    eventually_clean(&s.iter().collect::<Vec<_>>()).await;
}

/// A renewal that reaches too few nodes (three of five stopped) puts the lock at risk while
/// it is still held; one that reaches a majority again clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_short_of_a_majority_is_at_risk_until_one_reaches_it() {
    let mut s = servers(5);
    let a = redlock_with(&urls(&s), |b| b.watchdog_lease(Duration::from_secs(4))).await;
    let name = unique_name("rl");
    let g = a.lock(&name).wait(BOUND).await.unwrap();
    let mut watch = g.watch_lease();
    let at_risk = g.at_risk();
    for server in &mut s[..3] {
        server.pause();
    }
    timeout(BOUND, at_risk)
        .await
        .expect("a renewal falls short");
    assert!(g.is_held(), "at risk, still held");
    assert_eq!(g.lease_state(), LeaseState::AtRisk);
    assert_eq!(watch.changed().await, LeaseState::AtRisk);
    for server in &mut s[..3] {
        server.resume();
    }
    let state = timeout(BOUND, watch.changed())
        .await
        .expect("a renewal reaches a majority again");
    assert_eq!(state, LeaseState::Held);
    assert!(g.is_held());
    assert!(g.unlock().await.unwrap());
    eventually_clean(&s.iter().collect::<Vec<_>>()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_majority_fires_lost() {
    let mut s = servers(5);
    let a = redlock_with(&urls(&s), |b| b.watchdog_lease(Duration::from_millis(600))).await;
    let name = unique_name("rl");
    let g = a.lock(&name).wait(BOUND).await.unwrap();
    let lost = g.lost();
    for i in [0, 1, 2] {
        s[i].kill();
    }
    timeout(BOUND, lost)
        .await
        .expect("lost() fires once no majority renews it");
    assert!(!g.is_held());
    assert_eq!(g.remaining(), Duration::ZERO);
    let err = g.extend(Duration::from_secs(1)).await.unwrap_err();
    assert!(matches!(err, LockError::Lost { .. }), "{err:?}");
    assert!(!g.unlock().await.unwrap());
    eventually_clean(&[&s[3], &s[4]]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extension_needs_a_majority() {
    let mut s = servers(5);
    let a = redlock(&urls(&s)).await;
    let name = unique_name("rl");
    let g = a
        .try_lock(&name)
        .lease(Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    s[0].kill();
    s[1].kill();
    g.extend(Duration::from_secs(4)).await.unwrap();
    assert_eq!(g.held_nodes(), 3);
    assert!(g.remaining() > Duration::from_secs(3));
    s[2].kill();
    let err = g.extend(Duration::from_secs(8)).await.unwrap_err();
    assert!(matches!(err, LockError::Unavailable { .. }), "{err:?}");
    // Still held on its last confirmed validity, which then runs out.
    assert!(g.is_held());
    assert!(g.remaining() <= Duration::from_secs(4));
    timeout(BOUND, g.lost())
        .await
        .expect("lost() fires at the end of the validity");
    assert!(!g.is_held());
    drop(g);
    eventually_clean(&[&s[3], &s[4]]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extension_finds_the_lock_gone_on_a_majority() {
    let s = servers(3);
    let a = redlock(&urls(&s)).await;
    let name = unique_name("rl");
    let g = a
        .try_lock(&name)
        .lease(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    // An operator frees two of the three nodes, and someone takes one of them.
    for server in &s[..2] {
        let c = client_with_lease(&server.url(), Duration::from_secs(30)).await;
        assert!(c.mutex(&name).force_unlock().await.unwrap());
    }
    let thief = client_with_lease(&s[0].url(), Duration::from_secs(30)).await;
    let t = thief
        .lock(&name)
        .lease(Duration::from_secs(5))
        .await
        .unwrap();
    let err = g.extend(Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(err, LockError::Lost { .. }), "{err:?}");
    assert!(!g.is_held());
    timeout(BOUND, g.lost()).await.unwrap();
    assert!(!g.unlock().await.unwrap());
    assert!(t.unlock().await.unwrap());
    eventually_clean(&s.iter().collect::<Vec<_>>()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquisitions_and_guards_leave_nothing() {
    let s = servers(5);
    let a = redlock(&urls(&s)).await;
    let name = unique_name("rl");
    for _ in 0..30 {
        let cut = Duration::from_micros(rand::rng().random_range(0..3000));
        // Cut off at a random point; whatever completes (a guard or, on a loaded machine, an
        // error) is dropped at once.
        let _ = timeout(cut, a.lock(&name).lease(Duration::from_secs(30))).await;
    }
    eventually_clean(&s.iter().collect::<Vec<_>>()).await;
    // A dropped guard is released in the background, renewal included.
    let g = a.lock(&name).wait(BOUND).await.unwrap();
    let lost = g.lost();
    drop(g);
    timeout(BOUND, lost).await.unwrap();
    eventually_clean(&s.iter().collect::<Vec<_>>()).await;
    // And the next holder gets it at once.
    let g = a.try_lock(&name).await.unwrap().expect("free again");
    drop(g);
    eventually_clean(&s.iter().collect::<Vec<_>>()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_is_checked() {
    let s = servers(4);
    let u = urls(&s);
    let c = clients(&u).await;
    for n in [0, 1, 2] {
        let err = RedLock::new(c[..n].to_vec()).unwrap_err();
        assert!(
            matches!(
                err,
                LockError::InvalidOption {
                    option: "clients",
                    ..
                }
            ),
            "{err:?}"
        );
    }
    // Even N is accepted (with a warning).
    let four = RedLock::new(c.clone()).unwrap();
    assert_eq!(four.quorum(), 3);
    let three = || RedLock::builder(c[..3].to_vec());
    let bad = [
        three().node_timeout(Duration::ZERO).build(),
        three()
            .retry_delay(Duration::from_millis(2), Duration::from_millis(1))
            .build(),
        three().drift_factor(0.5).build(),
        three().drift_factor(f64::NAN).build(),
        three().watchdog_lease(Duration::from_millis(1)).build(),
    ];
    for result in bad {
        let err = result.unwrap_err();
        assert!(matches!(err, LockError::InvalidOption { .. }), "{err:?}");
    }
    let rl = three().build().unwrap();
    let err = rl.try_lock("bad name").await.unwrap_err();
    assert!(matches!(err, LockError::InvalidName { .. }), "{err:?}");
    let err = rl
        .lock("x")
        .lease(Duration::from_millis(1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LockError::InvalidOption {
                option: "lease",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(format!("{rl:?}").contains("quorum: 2"));

    // Distinct servers pass the check and keep no probe keys.
    four.check_distinct().await.unwrap();
    for server in &s {
        eventually("no probe key left", || {
            // The native protocol's fencing counter stays, by design.
            server.keys("*").iter().all(|k| k.starts_with("lock:fence"))
        })
        .await;
    }
    // Two clients on one server (under two addresses: direct and through a proxy) are caught.
    let alias = FaultProxy::start(s[1].addr()).await;
    let mut dup = c[..3].to_vec();
    dup.push(client_with_lease(&alias.url(), Duration::from_secs(30)).await);
    let err = RedLock::new(dup)
        .unwrap()
        .check_distinct()
        .await
        .unwrap_err();
    match err {
        LockError::InvalidOption {
            option: "clients",
            reason,
        } => {
            assert!(reason.contains("1 and 3"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    for server in &s {
        eventually("no probe key left", || {
            // The native protocol's fencing counter stays, by design.
            server.keys("*").iter().all(|k| k.starts_with("lock:fence"))
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_debug_shows_no_owner() {
    let s = servers(3);
    let a = redlock(&urls(&s)).await;
    let g = a.try_lock("dbg").await.unwrap().unwrap();
    let text = format!("{g:?}");
    assert!(text.contains("RedLockGuard") && text.contains("dbg") && text.contains("held: true"));
    for server in &s {
        let value = server.cmd(&["GET", "lock:{dbg}"]);
        let owner = value.split('|').next().unwrap();
        assert!(!owner.is_empty() && !text.contains(owner), "{text}");
    }
    assert!(g.unlock().await.unwrap());
}
