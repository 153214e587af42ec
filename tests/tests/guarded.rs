//! Guarded updates (`lock_core::update`): the state under the lock. A holder that stalled past
//! its lease reads the stock, the next holder reads it too, and the stale one writes after the
//! new one's read: the guarded update is refused (`NotHeld`) and the stock is exact. The same
//! race with `fenced::get` + `fenced::set` stays here as the counter-example (both writes are
//! `Written`: two units sold from a stock of one). A guarded update resent after its reply was
//! lost applies once. In memory (both mutex protocols: scripts, and Valkey 9's native one,
//! whose lock key holds only the owner id), and on a real `redis-server`.

use std::time::Duration;

use lock_core::fenced::{self, Claim, Counted, Fenced};
use lock_core::testing::MemoryServer;
use lock_core::{LockClient, LockError, LockGuard, MutexProtocol, Updated};
use lock_tests::{RedisCluster, RedisServer};
use redis::AsyncCommands;

const LEASE: Duration = Duration::from_secs(1);

fn cmd(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd
}

/// Waits (yielding, on the paused clock) until `args` answers `want` on `server`: a late
/// reply's first send was applied. Then replies are on time again.
async fn once_applied(server: &MemoryServer, args: &[&str], want: &str) {
    loop {
        let now: Option<String> = redis::from_redis_value(server.command(&cmd(args))).unwrap();
        if now.as_deref() == Some(want) {
            break;
        }
        tokio::task::yield_now().await;
    }
    server.delay_replies(Duration::ZERO);
}

/// A string key of an in-memory server (None when missing).
fn get(server: &MemoryServer, key: &str) -> Option<String> {
    redis::from_redis_value(server.command(&cmd(&["GET", key]))).unwrap()
}

/// The fields of a hash of an in-memory server.
fn fields(server: &MemoryServer, key: &str) -> Vec<String> {
    let all: Vec<String> =
        redis::from_redis_value(server.command(&cmd(&["HGETALL", key]))).unwrap();
    all.into_iter().step_by(2).collect()
}

/// Two instances of a service on one in-memory server, speaking `protocol`.
async fn two_instances(protocol: MutexProtocol) -> (MemoryServer, LockClient, LockClient) {
    let server = MemoryServer::new();
    let a = server
        .builder()
        .mutex_protocol(protocol)
        .build()
        .await
        .unwrap();
    let b = server
        .builder()
        .mutex_protocol(protocol)
        .build()
        .await
        .unwrap();
    (server, a, b)
}

/// Holder A (a fixed lease) reads the stock, is cut off until its lease has run out, B takes
/// the lock and reads the stock: returns both guards and what each read. A is reachable again.
async fn stalled_holder(
    server: &MemoryServer,
    (a, b): (&LockClient, &LockClient),
    stock: &str,
) -> (LockGuard, i64, LockGuard, i64) {
    let guard_a = a.lock("item:42").lease(LEASE).await.unwrap();
    let read_a: i64 = a.connection().get(stock).await.unwrap();
    assert!(server.set_client_reachable(a, false));
    tokio::time::sleep(LEASE * 2).await;
    let guard_b = b.lock("item:42").wait(LEASE).await.unwrap();
    let read_b: i64 = b.connection().get(stock).await.unwrap();
    assert!(server.set_client_reachable(a, true));
    (guard_a, read_a, guard_b, read_b)
}

#[tokio::test(start_paused = true)]
async fn a_stalled_holders_read_modify_write_is_refused_and_the_stock_is_exact() {
    for protocol in [MutexProtocol::Scripted, MutexProtocol::Native] {
        let (server, a, b) = two_instances(protocol).await;
        let stock = "stock:{item:42}";
        server.command(&cmd(&["SET", stock, "1"]));
        let (guard_a, read_a, guard_b, read_b) = stalled_holder(&server, (&a, &b), stock).await;
        assert_eq!((read_a, read_b), (1, 1), "{protocol:?}");
        // A writes after B's read, as a holder that stalled between its read and its write.
        let late = guard_a
            .update()
            .set(stock, (read_a - 1).to_string())
            .hset("orders:{item:42}", "a", "paid")
            .send()
            .await
            .unwrap();
        assert_eq!(late, Updated::NotHeld, "{protocol:?}");
        assert!(
            !guard_a.is_held(),
            "{protocol:?}: the guard learns it lost the lock"
        );
        let sold = guard_b
            .update()
            .set(stock, (read_b - 1).to_string())
            .hset("orders:{item:42}", "b", "paid")
            .send()
            .await
            .unwrap();
        assert_eq!(
            sold,
            Updated::Applied { values: vec![1, 1] },
            "{protocol:?}"
        );
        assert_eq!(get(&server, stock).as_deref(), Some("0"), "{protocol:?}");
        assert_eq!(fields(&server, "orders:{item:42}"), ["b"], "{protocol:?}");
        guard_b.unlock().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn every_operation_of_a_stale_holder_is_refused() {
    let (server, a, b) = two_instances(MutexProtocol::Scripted).await;
    let stock = "stock:{item:42}";
    server.command(&cmd(&["SET", stock, "5"]));
    server.command(&cmd(&["HSET", "h", "n", "1"]));
    server.command(&cmd(&["SET", "gone", "x"]));
    let (guard_a, _, guard_b, _) = stalled_holder(&server, (&a, &b), stock).await;
    let held_a = guard_a.held_lock();
    let late = [
        held_a.update().take(stock, 1, 0),
        held_a.update().add(stock, -1),
        held_a.update().set("k", "v"),
        held_a.update().delete("gone"),
        held_a.update().hset("h", "m", "v"),
        held_a.update().hadd("h", "n", 1),
        held_a.update().expire("gone", Duration::from_millis(1)),
    ];
    for update in late {
        let what = format!("{update:?}");
        assert_eq!(update.send().await.unwrap(), Updated::NotHeld, "{what}");
    }
    assert_eq!(get(&server, stock).as_deref(), Some("5"));
    assert_eq!(get(&server, "k"), None);
    assert_eq!(get(&server, "gone").as_deref(), Some("x"));
    assert_eq!(fields(&server, "h"), ["n"]);
    // The current holder's take goes through; the same from a view of its lock too.
    let taken = guard_b.update().take(stock, 2, 0).send().await.unwrap();
    assert_eq!(taken, Updated::Applied { values: vec![3] });
    let again = guard_b
        .held_lock()
        .update()
        .take(stock, 1, 0)
        .send()
        .await
        .unwrap();
    assert_eq!(again, Updated::Applied { values: vec![2] });
    drop(guard_a);
    guard_b.unlock().await.unwrap();
}

/// The counter-example: the same race with a fenced whole-value write. Both writes are
/// `Written` (A's token is lower than B's, but A writes first): two units are sold from a
/// stock of one. This is why the guarded update exists.
#[tokio::test(start_paused = true)]
async fn counter_example_fenced_set_does_not_protect_a_read_modify_write() {
    let (server, a, b) = two_instances(MutexProtocol::Scripted).await;
    let stock = "fenced-stock:{item:42}";
    let mut conn = a.connection();
    assert_eq!(
        fenced::set(&mut conn, stock, 1, 1).await.unwrap(),
        Fenced::Written
    );
    let guard_a = a.lock("item:42").lease(LEASE).await.unwrap();
    let (read_a, _) = fenced::get::<_, i64>(&mut conn, stock)
        .await
        .unwrap()
        .unwrap();
    assert!(server.set_client_reachable(&a, false));
    tokio::time::sleep(LEASE * 2).await;
    let guard_b = b.lock("item:42").wait(LEASE).await.unwrap();
    let mut conn_b = b.connection();
    let (read_b, _) = fenced::get::<_, i64>(&mut conn_b, stock)
        .await
        .unwrap()
        .unwrap();
    assert!(server.set_client_reachable(&a, true));
    let written_a = fenced::set(&mut conn, stock, read_a - 1, guard_a.fencing_token()).await;
    let written_b = fenced::set(&mut conn_b, stock, read_b - 1, guard_b.fencing_token()).await;
    let sold = [written_a.unwrap(), written_b.unwrap()]
        .into_iter()
        .filter(|w| *w == Fenced::Written)
        .count();
    assert_eq!(sold, 2, "both holders sold the last unit");
    guard_b.unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_take_below_its_floor_applies_nothing_of_its_update() {
    let server = MemoryServer::new();
    let client = server.client().await.unwrap();
    let guard = client.lock("item:7").await.unwrap();
    let stock = guard.key_in_slot("stock:").unwrap();
    assert_eq!(stock, "stock:{item:7}");
    server.command(&cmd(&["SET", &stock, "2"]));
    let update = || {
        guard
            .update()
            .hadd("sales", "item:7", 1)
            .take(&stock, 2, 1)
            .set("receipt", "r")
    };
    let refused = update().send().await.unwrap();
    assert_eq!(refused, Updated::NotEnough { op: 1, left: 2 });
    assert_eq!(get(&server, &stock).as_deref(), Some("2"));
    assert!(fields(&server, "sales").is_empty());
    assert_eq!(get(&server, "receipt"), None);
    // Two takes in one update are checked together: 2 - 1 - 1 < 1.
    let two = guard
        .update()
        .take(&stock, 1, 1)
        .take(&stock, 1, 1)
        .send()
        .await
        .unwrap();
    assert_eq!(two, Updated::NotEnough { op: 1, left: 1 });
    // A missing counter counts as 0; a floor below 0 lets it go negative (a backorder).
    let owed = guard.update().take("missing", 3, -5).send().await.unwrap();
    assert_eq!(owed, Updated::Applied { values: vec![-3] });
    assert!(guard.is_held());
    guard.unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_update_resent_after_its_reply_was_lost_applies_once() {
    let server = MemoryServer::new();
    let client = server.client().await.unwrap();
    let guard = client.lock("item:9").await.unwrap();
    server.command(&cmd(&["SET", "stock:{item:9}", "5"]));
    // The first send is applied at once and its reply is late past the response timeout (1 s):
    // the client sends it once more, with replies on time again.
    server.delay_replies(Duration::from_secs(5));
    let update = guard.update().take("stock:{item:9}", 1, 0).send();
    let watch = once_applied(&server, &["GET", "stock:{item:9}"], "4");
    let (updated, ()) = tokio::join!(update, watch);
    assert_eq!(updated.unwrap(), Updated::Applied { values: vec![4] });
    assert_eq!(
        get(&server, "stock:{item:9}").as_deref(),
        Some("4"),
        "taken once"
    );
    // The next update is a new one.
    let next = guard
        .update()
        .take("stock:{item:9}", 1, 0)
        .send()
        .await
        .unwrap();
    assert_eq!(next, Updated::Applied { values: vec![3] });
    guard.unlock().await.unwrap();
}

/// The first send of A's take is applied and its reply comes too late; before A sends it once
/// more, the lock passes to B, whose own update replaces the record of A's. A's repeat finds
/// neither its record nor its lock: whether the first send was applied cannot be known, so it
/// is `OutcomeUnknown`, never `NotHeld` (which says nothing was applied: here it was).
#[tokio::test(start_paused = true)]
async fn a_repeat_after_the_lock_passed_on_is_an_unknown_outcome_not_not_held() {
    let (server, a, b) = two_instances(MutexProtocol::Scripted).await;
    let guard = a.lock("item:8").await.unwrap();
    server.command(&cmd(&["SET", "stock:{item:8}", "5"]));
    server.delay_replies(Duration::from_secs(5));
    let update = guard.update().take("stock:{item:8}", 1, 0).send();
    let next_holder = async {
        once_applied(&server, &["GET", "stock:{item:8}"], "4").await;
        assert_eq!(server.evict_lock("item:8"), 1);
        let b_guard = b.lock("item:8").await.unwrap();
        let taken = b_guard.update().take("stock:{item:8}", 1, 0).send().await;
        assert_eq!(taken.unwrap(), Updated::Applied { values: vec![3] });
        b_guard
    };
    let (updated, b_guard) = tokio::join!(update, next_holder);
    let err = updated.unwrap_err();
    assert!(matches!(err, LockError::OutcomeUnknown { .. }), "{err}");
    assert!(err.to_string().contains("item:8"), "{err}");
    assert!(!guard.is_held(), "the repeat found the lock another's");
    assert_eq!(
        get(&server, "stock:{item:8}").as_deref(),
        Some("3"),
        "A's first send and B's take, once each"
    );
    b_guard.unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lock_deleted_under_its_holder_makes_the_guard_lost() {
    let server = MemoryServer::new();
    let client = server.client().await.unwrap();
    let guard = client.lock("item:3").await.unwrap();
    let lost = guard.lost();
    assert!(server.evict_lock("item:3") > 0);
    let updated = guard.update().set("k", "v").send().await.unwrap();
    assert_eq!(updated, Updated::NotHeld);
    assert!(!guard.is_held());
    tokio::time::timeout(Duration::from_millis(1), lost)
        .await
        .expect("lost() resolved");
    assert_eq!(get(&server, "k"), None);
}

#[tokio::test(start_paused = true)]
async fn kinds_without_one_owner_cannot_update_and_a_fair_or_write_lock_can() {
    let server = MemoryServer::new();
    let client = server.client().await.unwrap();
    let read = client.read_write_lock("doc").read().await.unwrap();
    let err = read
        .held_lock()
        .update()
        .set("k", "v")
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LockError::Unsupported {
                feature: "guarded update",
                ..
            }
        ),
        "{err}"
    );
    drop(read);
    let write = client.read_write_lock("doc").write().await.unwrap();
    let done = write.update().add("n", 2).send().await.unwrap();
    assert_eq!(done, Updated::Applied { values: vec![2] });
    write.unlock().await.unwrap();
    let fair = client.fair_lock("queue").lock().await.unwrap();
    let done = fair
        .update()
        .add("n", 3)
        .expire("n", Duration::from_secs(9))
        .send()
        .await;
    assert_eq!(done.unwrap(), Updated::Applied { values: vec![5, 1] });
    fair.unlock().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// On Redis

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_holder_whose_lease_ran_out_cannot_sell_the_last_unit() {
    let server = RedisServer::start();
    let a = LockClient::connect(&server.url()).await.unwrap();
    let b = LockClient::connect(&server.url()).await.unwrap();
    let stock = "stock:{item:42}";
    server.cmd(&["SET", stock, "1"]);
    let short = Duration::from_millis(300);
    let guard_a = a.lock("item:42").lease(short).await.unwrap();
    let read_a: i64 = a.connection().get(stock).await.unwrap();
    // A stalls past its fixed lease: B takes the lock and reads.
    let guard_b = b
        .lock("item:42")
        .wait(Duration::from_secs(5))
        .await
        .unwrap();
    let read_b: i64 = b.connection().get(stock).await.unwrap();
    assert_eq!((read_a, read_b), (1, 1));
    let late = guard_a
        .update()
        .set(stock, (read_a - 1).to_string())
        .hset("orders:{item:42}", "a", "paid")
        .send()
        .await
        .unwrap();
    assert_eq!(late, Updated::NotHeld);
    let sold = guard_b
        .update()
        .set(stock, (read_b - 1).to_string())
        .hset("orders:{item:42}", "b", "paid")
        .send()
        .await
        .unwrap();
    assert_eq!(sold, Updated::Applied { values: vec![1, 1] });
    assert_eq!(server.cmd(&["GET", stock]), "0");
    assert_eq!(server.cmd(&["HEXISTS", "orders:{item:42}", "a"]), "0");
    assert_eq!(server.cmd(&["HEXISTS", "orders:{item:42}", "b"]), "1");
    // Takes on Redis: bounded, typed.
    let none = guard_b.update().take(stock, 1, 0).send().await.unwrap();
    assert_eq!(none, Updated::NotEnough { op: 0, left: 0 });
    // A counter of the wrong type fails before anything is written.
    let wrong = guard_b
        .update()
        .set("first", "1")
        .take("orders:{item:42}", 1, -10)
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(&wrong, LockError::Redis(e) if e.to_string().contains("WRONGTYPE")),
        "{wrong}"
    );
    server.cmd(&["SET", "text", "abc"]);
    let text = guard_b.update().add("text", 1).send().await.unwrap_err();
    assert!(
        text.to_string().contains("does not hold an integer"),
        "{text}"
    );
    assert_eq!(server.cmd(&["EXISTS", "first"]), "0");
    guard_b.unlock().await.unwrap();
    drop(guard_a);
}

// ---------------------------------------------------------------------------------------------
// Fenced updates for data anywhere (`fenced::claim`, `write_claimed`, `add`, `take`)

/// Claims `key` for `token` and reads its value: the claim must be granted on a key that holds
/// one.
async fn claimed(conn: &mut lock_core::Connection, key: &str, token: u64) -> i64 {
    match fenced::claim::<_, i64>(conn, key, token).await.unwrap() {
        Claim::Claimed { value: Some(value) } => value,
        other => panic!("the claim of {key} with token {token}: {other:?}"),
    }
}

/// The same race with a claim before the read: the stale holder's claim came first, the newer
/// holder's claim raised the fence, so the stale write is refused; one unit sold.
#[tokio::test(start_paused = true)]
async fn a_stale_claim_cannot_write_after_a_newer_one() {
    let (server, a, b) = two_instances(MutexProtocol::Scripted).await;
    let stock = "claimed-stock";
    let (mut conn_a, mut conn_b) = (a.connection(), b.connection());
    assert_eq!(
        fenced::set(&mut conn_a, stock, 1, 1).await.unwrap(),
        Fenced::Written
    );
    let guard_a = a.lock("item:42").lease(LEASE).await.unwrap();
    let token_a = guard_a.fencing_token();
    let read_a = claimed(&mut conn_a, stock, token_a).await;
    assert!(server.set_client_reachable(&a, false));
    tokio::time::sleep(LEASE * 2).await;
    let guard_b = b.lock("item:42").wait(LEASE).await.unwrap();
    let token_b = guard_b.fencing_token();
    let read_b = claimed(&mut conn_b, stock, token_b).await;
    assert!(server.set_client_reachable(&a, true));
    let late = fenced::write_claimed(&mut conn_a, stock, read_a - 1, token_a).await;
    assert_eq!(late.unwrap(), Fenced::Refused { stored: token_b });
    let sold = fenced::write_claimed(&mut conn_b, stock, read_b - 1, token_b).await;
    assert_eq!(sold.unwrap(), Fenced::Written);
    assert_eq!(
        fenced::get::<_, i64>(&mut conn_b, stock).await.unwrap(),
        Some((0, token_b))
    );
    // A claim with the stale token is refused too, and a write to a key never claimed.
    let again = fenced::claim::<_, i64>(&mut conn_a, stock, token_a)
        .await
        .unwrap();
    assert_eq!(again, Claim::Refused { stored: token_b });
    let unclaimed = fenced::write_claimed(&mut conn_b, "never-claimed", 1, token_b).await;
    assert_eq!(unclaimed.unwrap(), Fenced::Refused { stored: 0 });
    guard_b.unlock().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn fenced_counters_refuse_a_lower_token_and_a_take_below_the_floor() {
    let server = MemoryServer::new();
    let client = server.client().await.unwrap();
    let mut conn = client.connection();
    let c = "fenced-counter";
    assert_eq!(
        fenced::add(&mut conn, c, 3, 10).await.unwrap(),
        Counted::Applied { value: 3 }
    );
    assert_eq!(
        fenced::take(&mut conn, c, 2, 0, 10).await.unwrap(),
        Counted::Applied { value: 1 }
    );
    assert_eq!(
        fenced::take(&mut conn, c, 2, 0, 11).await.unwrap(),
        Counted::NotEnough { left: 1 }
    );
    assert_eq!(
        fenced::take(&mut conn, c, 1, 0, 12).await.unwrap(),
        Counted::Applied { value: 0 }
    );
    assert_eq!(
        fenced::add(&mut conn, c, 5, 11).await.unwrap(),
        Counted::Refused { stored: 12 }
    );
    assert_eq!(
        fenced::get::<_, i64>(&mut conn, c).await.unwrap(),
        Some((0, 12))
    );
    let err = fenced::take(&mut conn, c, 1 << 54, 0, 12)
        .await
        .unwrap_err();
    assert!(
        matches!(err, LockError::InvalidOption { option: "n", .. }),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fenced_take_resent_after_a_late_reply_applies_once() {
    let server = MemoryServer::new();
    let client = server.client().await.unwrap();
    let mut conn = client.connection();
    let c = "fenced-stock";
    fenced::add(&mut conn, c, 5, 1).await.unwrap();
    let mut watcher = client.connection();
    server.delay_replies(Duration::from_secs(5));
    let take = fenced::take(&mut conn, c, 1, 0, 1);
    let value = ["HGET", c, "value"];
    let (taken, ()) = tokio::join!(take, once_applied(&server, &value, "4"));
    assert_eq!(taken.unwrap(), Counted::Applied { value: 4 });
    assert_eq!(
        fenced::get::<_, i64>(&mut watcher, c).await.unwrap(),
        Some((4, 1)),
        "taken once"
    );
}

/// A fenced take whose reply is late, followed by another take of the same counter before its
/// repeat: the repeat cannot tell whether the first was applied (the counter keeps only its
/// last update's id) and applies nothing: `OutcomeUnknown`, not a second take.
#[tokio::test(start_paused = true)]
async fn a_fenced_take_repeated_after_another_update_is_an_unknown_outcome() {
    let server = MemoryServer::new();
    let client = server.client().await.unwrap();
    let mut conn = client.connection();
    let mut other = client.connection();
    let c = "fenced-stock-2";
    fenced::add(&mut conn, c, 5, 1).await.unwrap();
    server.delay_replies(Duration::from_secs(5));
    let take = fenced::take(&mut conn, c, 1, 0, 1);
    let another = async {
        once_applied(&server, &["HGET", c, "value"], "4").await;
        fenced::take(&mut other, c, 1, 0, 1).await.unwrap()
    };
    let (taken, second) = tokio::join!(take, another);
    assert_eq!(second, Counted::Applied { value: 3 });
    let err = taken.unwrap_err();
    assert!(matches!(err, LockError::OutcomeUnknown { .. }), "{err}");
    assert_eq!(
        fenced::get::<_, i64>(&mut other, c).await.unwrap(),
        Some((3, 1)),
        "each take applied once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_fenced_claims_and_counters_follow_the_same_rules() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let mut conn = client.connection();
    let first = client.lock("acct").await.unwrap();
    let old = first.fencing_token();
    first.unlock().await.unwrap();
    let second = client.lock("acct").await.unwrap();
    let new = second.fencing_token();
    assert!(new > old);
    let claimed = fenced::claim::<_, String>(&mut conn, "acct:data", new)
        .await
        .unwrap();
    assert_eq!(claimed, Claim::Claimed { value: None });
    let stale = fenced::write_claimed(&mut conn, "acct:data", "old", old)
        .await
        .unwrap();
    assert_eq!(stale, Fenced::Refused { stored: new });
    let written = fenced::write_claimed(&mut conn, "acct:data", "new", new)
        .await
        .unwrap();
    assert_eq!(written, Fenced::Written);
    assert_eq!(server.cmd(&["HGET", "acct:data", "value"]), "new");
    assert_eq!(
        fenced::add(&mut conn, "acct:n", 2, new).await.unwrap(),
        Counted::Applied { value: 2 }
    );
    assert_eq!(
        fenced::take(&mut conn, "acct:n", 1, 0, old).await.unwrap(),
        Counted::Refused { stored: new }
    );
    assert_eq!(
        fenced::take(&mut conn, "acct:n", 3, 0, new).await.unwrap(),
        Counted::NotEnough { left: 2 }
    );
    second.unlock().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// On a Cluster

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_keys_in_the_locks_slot_work_and_a_key_elsewhere_is_a_typed_error() {
    let cluster = RedisCluster::start();
    let client = LockClient::builder_cluster(cluster.primary_urls())
        .build()
        .await
        .unwrap();
    let guard = client.lock("item:42").await.unwrap();
    let stock = guard.key_in_slot("stock:").unwrap();
    assert_eq!(
        RedisCluster::slot_of(&stock),
        RedisCluster::slot_of("lock:{item:42}")
    );
    let elsewhere = (0..)
        .map(|i| format!("other-{i}"))
        .find(|k| RedisCluster::slot_of(k) != RedisCluster::slot_of(&stock))
        .unwrap();
    let err = guard
        .update()
        .add(&stock, 1)
        .set(&elsewhere, "x")
        .send()
        .await
        .unwrap_err();
    match &err {
        LockError::InvalidOption { option, reason } => {
            assert_eq!(*option, "update");
            assert!(reason.contains(&elsewhere), "{reason}");
        }
        other => panic!("not a typed error: {other}"),
    }
    let node = cluster.node(cluster.node_for_key(&stock));
    assert_eq!(node.cmd(&["EXISTS", &stock]), "0", "nothing was sent");
    let done = guard
        .update()
        .add(&stock, 5)
        .take(&stock, 2, 0)
        .send()
        .await;
    assert_eq!(done.unwrap(), Updated::Applied { values: vec![5, 3] });
    assert_eq!(node.cmd(&["GET", &stock]), "3");
    guard.unlock().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// The script's check itself

/// `guarded_update.lua` (after the prelude, as it is sent) checks the fencing token as well
/// as the owner id: the same owner with another token (an earlier hold of the same owner id)
/// is refused.
#[tokio::test(start_paused = true)]
async fn the_script_checks_the_token_as_well_as_the_owner() {
    const SCRIPT: &str = concat!(
        include_str!("../../lock-core/src/wire/scripts/prelude.lua"),
        include_str!("../../lock-core/src/wire/scripts/guarded_update.lua")
    );
    let server = MemoryServer::new();
    let scripted = server.builder().mutex_protocol(MutexProtocol::Scripted);
    let client = scripted.build().await.unwrap();
    let guard = client.lock("item:5").await.unwrap();
    let token = guard.fencing_token().to_string();
    let value = get(&server, "lock:{item:5}").unwrap();
    let owner = value.split('|').next().unwrap().to_owned();
    assert_eq!(value, format!("{owner}|1|{token}||"));
    let update = |token: &str, seq: &str| {
        let mut eval = cmd(&[
            "EVAL",
            SCRIPT,
            "3",
            "lock:{item:5}",
            "lock:{item:5}:updated",
        ]);
        eval.arg("n").arg(&owner).arg(token).arg(seq).arg(60_000);
        eval.arg("add").arg(1).arg("").arg("");
        let reply: Vec<i64> = redis::from_redis_value(server.command(&eval)).unwrap();
        reply
    };
    let earlier = (guard.fencing_token() - 1).to_string();
    assert_eq!(
        update(&earlier, "1"),
        [0],
        "another token of the same owner"
    );
    assert_eq!(update(&format!("{token}0"), "2"), [0], "a token it starts");
    assert_eq!(update(&token, "3"), [1, 1]);
    assert_eq!(
        update(&token, "3"),
        [1, 1],
        "a repeat answers what it applied"
    );
    assert_eq!(update(&token, "4"), [1, 2]);
    guard.unlock().await.unwrap();
}
