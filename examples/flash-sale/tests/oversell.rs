//! Several instances, one Redis, one database: the sale never oversells, no buyer gets two
//! orders, every paid order is paid once — checked in the database. On SQLite always, on
//! PostgreSQL when `DATABASE_URL` is set. Plus the control runs: without the locks the same
//! load breaks the invariants (and `flash-sale load` says so with its exit code), and a
//! holder frozen past its lease has its write refused by the fencing check.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Database, Env, Setup, StockStore, bin, buy, create_sale, postgres_url};
use flash_sale::invariants::Invariants;
use flash_sale::model::SaleId;

/// Runs `flash-sale load` against `env`'s instances; returns (success, stdout, sale id).
fn run_load(env: &Env, buyers: usize, stock: i64) -> (bool, String, SaleId) {
    let out = Command::new(bin())
        .arg("load")
        .arg("--targets")
        .arg(env.urls().join(","))
        .args(["--buyers", &buyers.to_string()])
        .args(["--stock", &stock.to_string()])
        .args(["--concurrency", "32", "--duplicate-rate", "0.2"])
        .args(["--max-seconds", "120"])
        .arg("--database-url")
        .arg(&env.database_url)
        .output()
        .expect("run flash-sale load");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let sale = stdout
        .split_whitespace()
        .find(|w| w.starts_with(SaleId::PREFIX))
        .map(|w| w.trim_end_matches(','))
        .and_then(|w| SaleId::parse(w).ok())
        .unwrap_or_else(|| panic!("no sale id in the load's output:\n{stdout}\n{stderr}"));
    (out.status.success(), format!("{stdout}\n{stderr}"), sale)
}

async fn three_instances_never_oversell(database: Database, stock_in: StockStore) {
    let env = Env::start(Setup {
        instances: 3,
        database,
        stock_in,
        ..Setup::default()
    })
    .await;
    let (ok, output, sale) = run_load(&env, 1000, 50);
    assert!(ok, "the load tool found a violation:\n{output}");
    let result = output
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line:\n{output}"));
    assert!(
        result.contains("instances=3 stock=50 sold=50 oversold=0 duplicate_orders=0 requests=1000"),
        "{result}"
    );
    // The test's own look at the database.
    let inv = Invariants::check(&env.db, &sale).await.unwrap();
    assert_eq!(inv.sold, 50, "{inv:?}");
    assert_eq!(inv.stock_left, 0, "{inv:?}");
    assert_eq!(inv.oversold, 0, "{inv:?}");
    assert_eq!(inv.duplicate_orders, 0, "{inv:?}");
    assert_eq!(
        inv.paid_orders, 50,
        "every accepted order was paid: {inv:?}"
    );
    assert_eq!((inv.paid_twice, inv.payment_mismatches), (0, 0), "{inv:?}");
    assert!(inv.violations().is_empty(), "{inv:?}");
    if stock_in == StockStore::Redis {
        assert_eq!(redis_stock(&env, &sale).await, Some(0));
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_three_instances_never_oversell() {
    three_instances_never_oversell(Database::Sqlite, StockStore::Sql).await;
}

/// The same load with the stock kept in Redis and taken by a guarded update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_never_oversell_with_the_stock_in_redis() {
    three_instances_never_oversell(Database::Sqlite, StockStore::Redis).await;
}

/// The sale's stock counter in the test's Redis.
async fn redis_stock(env: &Env, sale: &SaleId) -> Option<i64> {
    let client = lock_core::LockClient::connect(&env.redis.url())
        .await
        .unwrap();
    flash_sale::stock::read(&client, sale).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_three_instances_never_oversell() {
    if postgres_url("postgres_three_instances_never_oversell").is_none() {
        return;
    }
    three_instances_never_oversell(Database::Postgres, StockStore::Sql).await;
}

/// The control: the same load without locks (and a wider read-then-write window) oversells
/// or duplicates, and the load tool exits non-zero. Shows the check can fail.
async fn without_locks_the_invariants_break(stock_in: StockStore) {
    let env = Env::start(Setup {
        instances: 3,
        locking: false,
        work: Duration::from_millis(20),
        stock_in,
        ..Setup::default()
    })
    .await;
    let (ok, output, sale) = run_load(&env, 300, 20);
    assert!(!ok, "the load tool should have exited non-zero:\n{output}");
    let inv = Invariants::check(&env.db, &sale).await.unwrap();
    assert!(
        inv.oversold > 0 || inv.duplicate_orders > 0,
        "no race showed: {inv:?}"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_locks_the_invariants_break_and_load_says_so() {
    without_locks_the_invariants_break(StockStore::Sql).await;
}

/// The control with the stock in Redis: a hand-written read-modify-write of the counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_locks_a_redis_counter_oversells() {
    without_locks_the_invariants_break(StockStore::Redis).await;
}

/// A holder frozen (SIGSTOP) inside the stock critical section past its lease: another
/// instance takes the lock and sells; when the frozen one wakes up, its write is refused (by
/// the fence in the database, or by the guarded take in Redis) and nothing of it is written.
/// With the stock in Redis the sale has one unit: the last unit is sold once.
async fn a_stalled_holder_cannot_write_stale_stock(stock_in: StockStore, stock: i64) {
    let lease = Duration::from_millis(1500);
    let mut env = Env::start(Setup {
        instances: 2,
        lease,
        stall_first: true,
        stock_in,
        ..Setup::default()
    })
    .await;
    let (a, b) = (env.url(0), env.url(1));
    let sale = create_sale(&a, stock).await;

    // Instance A's purchase stops at the stall point, holding the stock lock.
    let stalled = tokio::spawn({
        let (a, sale) = (a.clone(), sale.clone());
        async move { buy(&a, &sale, "frozen").await }
    });
    let line = env.instances[0]
        .next_stall(Duration::from_secs(20))
        .await
        .expect("instance A reached its stall point");
    let token_a: i64 = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("token="))
        .and_then(|t| t.parse().ok())
        .expect("token in the stall line");
    env.instances[0].pause().unwrap();

    // B waits for the lock (up to 5 s) and gets it once A's lease has run out.
    let (status, order_b) = buy(&b, &sale, "bob").await;
    assert_eq!(status, 201, "{order_b}");
    assert!(order_b["fence"].as_i64().unwrap() > token_a);

    env.instances[0].resume().unwrap();
    env.instances[0].release_stall().unwrap();
    let (status, body) = stalled.await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "stale_lock", "{body}");

    let id = SaleId::parse(&sale).unwrap();
    let inv = Invariants::check(&env.db, &id).await.unwrap();
    assert_eq!(
        (inv.sold, inv.stock_left, inv.stale_writes_rejected),
        (1, stock - 1, 1),
        "{inv:?}"
    );
    assert!(inv.violations().is_empty(), "{inv:?}");
    if stock_in == StockStore::Redis {
        assert_eq!(redis_stock(&env, &id).await, Some(stock - 1));
    }
    // The frozen buyer can simply retry: it gets a unit if one is left.
    let (status, _) = buy(&a, &sale, "frozen").await;
    assert_eq!(status, if stock > 1 { 201 } else { 410 });
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holder_cannot_write_stale_stock_in_the_database() {
    a_stalled_holder_cannot_write_stale_stock(StockStore::Sql, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holder_cannot_sell_the_last_unit_in_redis_twice() {
    a_stalled_holder_cannot_write_stale_stock(StockStore::Redis, 1).await;
}
