//! The quick-start demo: 3 lock clients (think: 3 instances of a service) × 16 tasks each
//! increment one counter kept in Redis with a plain GET, a pause, and a SET — a
//! read-modify-write that loses updates when two run at once.
//!
//! First without a lock (updates get lost), then under `lock-core` (none do), then the same
//! with a holder that stalls past its lease, to show the fencing token refusing its late
//! write.
//!
//! ```text
//! cargo run -p quickstart
//! ```
//!
//! Uses `REDIS_URL` when set; otherwise starts a private `redis-server` on a free loopback
//! port and stops it at the end. Its dependencies are lock-core (without its default
//! features) and tokio only, so a fresh clone builds it quickly.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod server;

use std::time::{Duration, Instant};

use lock_core::LockClient;
use lock_core::redis::{self, AsyncCommands};

const CLIENTS: usize = 3;
const TASKS: usize = 16;
const ROUNDS: usize = 5;

#[tokio::main]
async fn main() {
    let server = match std::env::var("REDIS_URL") {
        Ok(_) => None,
        Err(_) => match server::Server::start() {
            Ok(server) => Some(server),
            Err(e) => {
                eprintln!("quickstart: {e}");
                std::process::exit(2);
            }
        },
    };
    let url = std::env::var("REDIS_URL")
        .unwrap_or_else(|_| server.as_ref().map(server::Server::url).unwrap_or_default());
    let redis = redis::Client::open(url.as_str()).expect("REDIS_URL");
    let mut conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let expected = CLIENTS * TASKS * ROUNDS;

    // 1. No lock.
    let _: () = conn.set("demo:counter", 0).await.unwrap();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS * TASKS {
        let mut conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                increment(&mut conn).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let unlocked: usize = conn.get("demo:counter").await.unwrap();
    println!(
        "without a lock: {unlocked} of {expected} increments survived ({:.0?})",
        start.elapsed()
    );

    // 2. Under the lock, from three clients.
    let _: () = conn.set("demo:counter", 0).await.unwrap();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(LockClient::connect(&url).await.expect("lock client"));
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..TASKS {
            let (client, mut conn) = (client.clone(), conn.clone());
            tasks.push(tokio::spawn(async move {
                let mut last_token = 0;
                for _ in 0..ROUNDS {
                    let guard = client
                        .lock("demo:counter")
                        .wait(Duration::from_secs(30))
                        .await
                        .expect("lock");
                    assert!(guard.fencing_token() > last_token);
                    last_token = guard.fencing_token();
                    increment(&mut conn).await;
                    guard.unlock().await.expect("unlock");
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let locked: usize = conn.get("demo:counter").await.unwrap();
    let elapsed = start.elapsed();
    println!(
        "with lock-core: {locked} of {expected} increments survived ({elapsed:.0?}, {:.0} critical sections/s)",
        expected as f64 / elapsed.as_secs_f64()
    );

    // 3. A holder stalls past its fixed lease; the next holder's fencing token wins.
    let a = &clients[0];
    let b = &clients[1];
    let stale = a
        .lock("demo:fenced")
        .lease(Duration::from_millis(200))
        .await
        .unwrap();
    let fresh = b
        .lock("demo:fenced")
        .wait(Duration::from_secs(5))
        .await
        .unwrap();
    let mut store = FencedStore::default();
    let fresh_write = store.write(fresh.fencing_token(), "fresh");
    let stale_write = store.write(stale.fencing_token(), "stale");
    println!(
        "fencing: stalled holder token {} (still held: {}), next holder token {}; \
         the store took the fresh write: {fresh_write}, refused the stale one: {}",
        stale.fencing_token(),
        stale.is_held(),
        fresh.fencing_token(),
        !stale_write
    );
    assert!(fresh_write && !stale_write);
    drop(stale);
    fresh.unlock().await.unwrap();

    println!(
        "RESULT clients={CLIENTS} tasks={} increments={expected} unlocked_survived={unlocked} locked_survived={locked} lost_with_lock={}",
        CLIENTS * TASKS,
        expected - locked
    );
    if locked != expected {
        drop(server); // exit skips destructors: stop the server first
        std::process::exit(1);
    }
}

/// GET, pause, SET: loses updates unless something serialises it.
async fn increment(conn: &mut redis::aio::MultiplexedConnection) {
    let value: usize = conn.get("demo:counter").await.unwrap();
    tokio::time::sleep(Duration::from_micros(300)).await;
    let _: () = conn.set("demo:counter", value + 1).await.unwrap();
}

/// A resource that refuses writes carrying a fencing token not above the highest it has seen.
#[derive(Default)]
struct FencedStore {
    max_token: u64,
    value: Option<&'static str>,
}

impl FencedStore {
    fn write(&mut self, token: u64, value: &'static str) -> bool {
        if token <= self.max_token {
            return false;
        }
        self.max_token = token;
        self.value = Some(value);
        true
    }
}
