//! Shared set-up for the flash-sale suites: a private redis-server, a fresh database (a
//! SQLite file in a temporary directory, or a fresh schema in `DATABASE_URL`'s PostgreSQL)
//! and `serve` processes of the binary under test. Everything is stopped on drop.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::time::Duration;

use flash_sale::cluster::{Instance, InstanceOptions};
use flash_sale::db::{Db, sqlite_url};
pub use flash_sale::stock::StockStore;
use lock_tests::RedisServer;
use serde_json::Value;
use tempfile::TempDir;

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    Sqlite,
    Postgres,
}

/// Says on stderr why a test skips. Written to the stream itself, not with `eprintln!`, so
/// the test harness does not swallow it.
pub fn skip(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}

/// The PostgreSQL URL from `DATABASE_URL`, or `None` with the reason printed.
pub fn postgres_url(test: &str) -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if url.starts_with("postgres") => Some(url),
        _ => {
            skip(
                test,
                "DATABASE_URL is not set to a postgres:// URL \
                 (.ci/run sets it when PostgreSQL answers on 127.0.0.1:5432)",
            );
            None
        }
    }
}

pub struct Env {
    pub instances: Vec<Instance>,
    pub db: Db,
    pub database_url: String,
    pub redis: RedisServer,
    pub dir: TempDir,
    pg_schema: Option<(Db, String)>,
}

pub struct Setup {
    pub instances: usize,
    pub database: Database,
    pub locking: bool,
    /// Limit rates (false: `--no-limit`).
    pub limiting: bool,
    pub lease: Duration,
    pub work: Duration,
    pub stall_first: bool,
    /// Arm the first instance's stop after a recorded commit (`--crash-after-commit`).
    pub crash_first: bool,
    /// Let the instances create the demo sale on the empty database.
    pub demo_sale: bool,
    /// Where the sales' stock is kept (`serve --stock-in`).
    pub stock_in: StockStore,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            instances: 1,
            database: Database::Sqlite,
            locking: true,
            limiting: true,
            lease: Duration::from_secs(5),
            work: Duration::from_millis(2),
            stall_first: false,
            crash_first: false,
            demo_sale: false,
            stock_in: StockStore::Sql,
        }
    }
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_flash-sale"))
}

impl Env {
    pub async fn start(setup: Setup) -> Env {
        lock_tests::init_tracing();
        let redis = RedisServer::start();
        let dir = tempfile::Builder::new()
            .prefix("flash-sale-test-")
            .tempdir()
            .expect("tempdir");
        let (database_url, pg_schema) = match setup.database {
            Database::Sqlite => (sqlite_url(dir.path()), None),
            Database::Postgres => {
                let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
                let admin = Db::connect(&base, 1)
                    .await
                    .expect("connect to DATABASE_URL");
                let schema = lock_tests::unique_name("fs_test").replace('-', "_");
                sqlx::query(&format!("CREATE SCHEMA {schema}"))
                    .execute(admin.pool())
                    .await
                    .expect("create schema");
                let sep = if base.contains('?') { '&' } else { '?' };
                let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
                (url, Some((admin, schema)))
            }
        };
        let db = Db::connect(&database_url, 4).await.expect("connect");
        db.migrate().await.expect("migrate");
        let mut instances = Vec::new();
        for i in 0..setup.instances {
            instances.push(
                Instance::start(&InstanceOptions {
                    bin: bin(),
                    redis_url: redis.url(),
                    database_url: database_url.clone(),
                    locking: setup.locking,
                    limiting: setup.limiting,
                    lease: setup.lease,
                    work: setup.work,
                    stall_once: setup.stall_first && i == 0,
                    crash_after_commit: setup.crash_first && i == 0,
                    log: dir.path().join(format!("instance-{i}.log")),
                    name: Some(format!("instance-{i}")),
                    demo_sale: setup.demo_sale,
                    stock_in: setup.stock_in,
                })
                .await
                .expect("start instance"),
            );
        }
        Env {
            instances,
            db,
            database_url,
            redis,
            dir,
            pg_schema,
        }
    }

    pub fn url(&self, i: usize) -> String {
        self.instances[i].url().to_owned()
    }

    pub fn urls(&self) -> Vec<String> {
        self.instances.iter().map(|i| i.url().to_owned()).collect()
    }

    /// Stops the instances and drops the PostgreSQL schema, if any.
    pub async fn finish(mut self) {
        for instance in self.instances.drain(..) {
            instance.shutdown(Duration::from_secs(3)).await;
        }
        self.db.close().await;
        if let Some((admin, schema)) = self.pg_schema.take() {
            sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(admin.pool())
                .await
                .expect("drop schema");
            admin.close().await;
        }
    }
}

/// An HTTP client for tests (never through a proxy: the instances are on loopback).
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// Status and JSON body (Null if none) of a response.
pub async fn read(res: reqwest::Response) -> (u16, Value) {
    let status = res.status().as_u16();
    let body = res.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// Creates a sale and returns its id.
pub async fn create_sale(base: &str, stock: i64) -> String {
    let (status, body) = read(
        http()
            .post(format!("{base}/api/sales"))
            .json(&serde_json::json!({"sku": "T-1", "name": "Test item", "stock": stock, "price_cents": 500}))
            .send()
            .await
            .expect("POST /api/sales"),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().expect("id").to_owned()
}

/// `POST /api/sales/{sale}/orders` as `user`.
pub async fn buy(base: &str, sale: &str, user: &str) -> (u16, Value) {
    read(
        http()
            .post(format!("{base}/api/sales/{sale}/orders"))
            .header("x-user-id", user)
            .send()
            .await
            .expect("POST orders"),
    )
    .await
}
