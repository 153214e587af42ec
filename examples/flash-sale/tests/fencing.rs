//! The fencing protocol at the database, without servers: claim with `fence < token`, write
//! with `fence = token`. A stale holder's write is refused even when it lands between a newer
//! holder's read and its write. On SQLite (a temporary file) and on PostgreSQL (a fresh
//! schema, dropped afterwards).
//!
//! PostgreSQL: `FLASH_SALE_PG_URL`, else `DATABASE_URL` when it is a `postgres://` URL, else
//! `postgres://postgres@127.0.0.1:5432/test`. The PostgreSQL tests skip (saying so on stderr)
//! only when neither variable is set and nothing listens on 127.0.0.1:5432 (connection
//! refused); any other failure to connect fails them.

use std::io::{ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use flash_sale::db::{Backend, Db, StockWrite, WriteOutcome, sqlite_url};
use flash_sale::invariants::Invariants;
use flash_sale::model::{NewOrder, NewSale, OrderId, Sale, SaleId, UserId, now_ms};

/// Tokens as lock-core issues them: about 1.8·10^15 (server microseconds), beyond 2^32 and
/// well within BIGINT and Lua's 2^53.
const TOKEN: i64 = 1_795_495_349_059_494;

const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

fn order(sale: &SaleId, user: &str, token: i64) -> NewOrder {
    NewOrder {
        id: OrderId::generate(),
        sale_id: sale.clone(),
        user_id: UserId::parse(Some(user)).unwrap(),
        fence: token,
        created_at: now_ms(),
    }
}

fn sale(stock: i64) -> Sale {
    NewSale {
        sku: "F-1".into(),
        name: "Fenced".into(),
        stock,
        price_cents: 0,
        per_user_limit: None,
        starts_at: None,
        ends_at: None,
    }
    .validate(now_ms())
    .unwrap()
}

/// Holder A claims and reads, stalls; holder B (a greater token) claims and reads; A writes
/// between B's read and B's write: refused. B's write goes through; no stale claim succeeds.
async fn stale_write_between_a_newer_read_and_write(db: &Db) {
    let sale = sale(5);
    db.insert_sale(&sale).await.unwrap();
    let id = sale.id.clone();
    let (a, b) = (TOKEN, TOKEN + 10);

    // Holder A claims and reads 5, then stalls past its lease.
    assert!(db.claim_fence(&id, a).await.unwrap());
    let seen_by_a = db.sale(&id).await.unwrap().unwrap().stock;
    // Holder B claims and reads 5.
    assert!(db.claim_fence(&id, b).await.unwrap());
    let seen_by_b = db.sale(&id).await.unwrap().unwrap().stock;
    // A wakes up and writes between B's read and B's write: refused, nothing written.
    assert_eq!(
        db.write_purchase(
            &order(&id, "a", a),
            seen_by_a - 1,
            StockWrite::Fenced(a),
            None
        )
        .await
        .unwrap(),
        WriteOutcome::Fenced
    );
    // B's write goes through, on the stock it read.
    assert_eq!(
        db.write_purchase(
            &order(&id, "b", b),
            seen_by_b - 1,
            StockWrite::Fenced(b),
            None
        )
        .await
        .unwrap(),
        WriteOutcome::Written
    );
    // A stale holder cannot claim back, and a claim with the current token is refused too
    // (`<`, not `<=`: two holders can never both hold a claim with one token).
    assert!(!db.claim_fence(&id, TOKEN + 5).await.unwrap());
    assert!(!db.claim_fence(&id, b).await.unwrap());
    assert_eq!(db.sale(&id).await.unwrap().unwrap().fence, b);

    let inv = Invariants::check(db, &id).await.unwrap();
    assert_eq!((inv.sold, inv.stock_left), (1, 4));
    assert!(inv.violations().is_empty(), "{inv:?}");
}

/// Claims with 16 tokens at once, in a shuffled order, on separate connections: the greatest
/// always wins (it is above every fence anyone can set), the fence ends at it, and a write
/// with any other token is refused.
async fn concurrent_claims_end_with_the_greatest_token(db: &Db) {
    let sale = sale(3);
    db.insert_sale(&sale).await.unwrap();
    let id = sale.id.clone();
    let mut tokens: Vec<i64> = (0..16).map(|i| TOKEN + 100 + i).collect();
    // A fixed shuffle: the greatest token is neither first nor last.
    tokens.swap(15, 7);
    tokens.reverse();
    let claims: Vec<_> = tokens
        .iter()
        .map(|&t| {
            let (db, id) = (db.clone(), id.clone());
            tokio::spawn(async move { (t, db.claim_fence(&id, t).await.unwrap()) })
        })
        .collect();
    let greatest = TOKEN + 115;
    for claim in claims {
        let (token, claimed) = claim.await.unwrap();
        if token == greatest {
            assert!(claimed, "the greatest token's claim was refused");
        }
    }
    assert_eq!(db.sale(&id).await.unwrap().unwrap().fence, greatest);
    assert_eq!(
        db.write_purchase(
            &order(&id, "late", greatest - 1),
            2,
            StockWrite::Fenced(greatest - 1),
            None
        )
        .await
        .unwrap(),
        WriteOutcome::Fenced
    );
    assert_eq!(
        db.write_purchase(
            &order(&id, "holder", greatest),
            2,
            StockWrite::Fenced(greatest),
            None
        )
        .await
        .unwrap(),
        WriteOutcome::Written
    );
}

// ---------------------------------------------------------------------------------------------
// SQLite

async fn sqlite() -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&sqlite_url(dir.path()), 4).await.unwrap();
    db.migrate().await.unwrap();
    (dir, db)
}

#[tokio::test]
async fn a_stale_write_between_a_newer_read_and_write_is_refused() {
    let (_dir, db) = sqlite().await;
    stale_write_between_a_newer_read_and_write(&db).await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_on_sqlite_end_with_the_greatest_token() {
    let (_dir, db) = sqlite().await;
    concurrent_claims_end_with_the_greatest_token(&db).await;
    db.close().await;
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

/// Says on stderr why a test skips (written to the stream itself: the test harness does not
/// capture it).
fn skip(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}

/// The PostgreSQL URL to test against, or `None` (with the reason printed) when no variable
/// names one and the default server refuses connections.
fn postgres_url(test: &str) -> Option<String> {
    if let Ok(url) = std::env::var("FLASH_SALE_PG_URL") {
        return Some(url);
    }
    if let Ok(url) = std::env::var("DATABASE_URL")
        && url.starts_with("postgres")
    {
        return Some(url);
    }
    let default = SocketAddr::from((Ipv4Addr::LOCALHOST, 5432));
    match TcpStream::connect_timeout(&default, Duration::from_secs(3)) {
        Ok(_) => Some(DEFAULT_PG_URL.to_owned()),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
            skip(
                test,
                &format!(
                    "PostgreSQL is not running: {default} refused the connection, and neither \
                     FLASH_SALE_PG_URL nor DATABASE_URL names a server. THE POSTGRESQL \
                     FENCING TEST DID NOT RUN; set FLASH_SALE_PG_URL=postgres://... to run it"
                ),
            );
            None
        }
        Err(e) => panic!(
            "PostgreSQL at {default}: {e} (set FLASH_SALE_PG_URL to the server to test against)"
        ),
    }
}

/// Runs `scenario` on a fresh schema of the PostgreSQL server (unless the test skips), and
/// drops the schema afterwards, also when the scenario fails.
async fn on_postgres<F, Fut>(test: &str, scenario: F)
where
    F: FnOnce(Db) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(base) = postgres_url(test) else {
        return;
    };
    let admin = Db::connect(&base, 1)
        .await
        .unwrap_or_else(|e| panic!("connect to PostgreSQL ({base}): {e}"));
    assert_eq!(
        admin.backend(),
        Backend::Postgres,
        "{base} is not PostgreSQL"
    );
    let schema = lock_tests::unique_name("fence_test").replace('-', "_");
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(admin.pool())
        .await
        .expect("create schema");
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
    let outcome = async {
        let db = Db::connect(&url, 4).await.expect("connect to the schema");
        db.migrate().await.expect("migrate");
        let run = tokio::spawn(scenario(db.clone())).await;
        db.close().await;
        run
    }
    .await;
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(admin.pool())
        .await
        .expect("drop schema");
    admin.close().await;
    match outcome {
        Ok(()) => {}
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("the scenario did not finish: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_stale_write_between_a_newer_read_and_write_is_refused() {
    on_postgres(
        "postgres_a_stale_write_between_a_newer_read_and_write_is_refused",
        |db| async move { stale_write_between_a_newer_read_and_write(&db).await },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_claims_end_with_the_greatest_token() {
    on_postgres(
        "postgres_concurrent_claims_end_with_the_greatest_token",
        |db| async move { concurrent_claims_end_with_the_greatest_token(&db).await },
    )
    .await;
}
