//! `flash-sale demo`: the whole story in one command.
//!
//! Starts a private `redis-server` (unless `REDIS_URL` is set), a SQLite database in a
//! temporary directory, and `instances` `serve` processes of this binary on free loopback
//! ports; creates a sale; fires the load at the instances; checks the invariants in the
//! database; prints the report and a `RESULT` line; stops everything it started. Everything
//! it started is owned by a value whose `Drop` stops it, so an error, a panic or Ctrl-C
//! (which drops the demo's future, see `main`) leaves no process behind.

// The demo's whole job is to print its report.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use lock_tests::RedisServer;

use crate::cluster::{Instance, InstanceOptions, log_tail};
use crate::db::{Db, sqlite_url};
use crate::invariants::Invariants;
use crate::load::{self, LoadOptions};
use crate::model::SaleId;
use crate::serve::BoxError;

/// How to run the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// This binary, to start the instances with.
    pub bin: PathBuf,
    /// How many `serve` processes.
    pub instances: usize,
    /// The sale's stock.
    pub stock: i64,
    /// Purchase requests.
    pub buyers: usize,
    /// Share of requests that repeat an earlier buyer.
    pub duplicate_rate: f64,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Take the locks (`--no-lock` turns them off).
    pub locking: bool,
    /// Freeze one instance inside the stock critical section past its lease.
    pub stall_holder: bool,
    /// The lock clients' watchdog lease.
    pub lease: Duration,
    /// The reservation step inside the critical section.
    pub work: Duration,
    /// Use this database instead of a temporary SQLite file.
    pub database_url: Option<String>,
    /// Seed of the load plan.
    pub seed: u64,
}

/// Runs the demo; `Ok(true)` when it showed what it should.
pub async fn run(options: DemoOptions) -> Result<bool, BoxError> {
    let mode = match (options.locking, options.stall_holder) {
        (false, _) => "locks OFF (--no-lock)",
        (true, false) => "locks on",
        (true, true) => "locks on, one holder stalls past its lease (--stall-holder)",
    };
    println!(
        "flash-sale demo: {} instances, one Redis, one database; {mode}",
        options.instances
    );

    // Redis: REDIS_URL, or a private redis-server stopped when `_redis` drops.
    let (_redis, redis_url) = match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("  redis      REDIS_URL (not started by the demo)");
            (None, url)
        }
        Err(_) => {
            let found = Command::new("redis-server")
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !found {
                return Err(
                    "redis-server is not installed: install it (scripts/demo.sh does: \
                            scripts/ensure-redis.sh) or set REDIS_URL"
                        .into(),
                );
            }
            let server = RedisServer::start();
            println!(
                "  redis      {} (private redis-server, pid {})",
                server.url(),
                server.pid()
            );
            let url = server.url();
            (Some(server), url)
        }
    };

    // The database: a SQLite file in a temporary directory (removed when `dir` drops).
    let dir = tempfile::Builder::new()
        .prefix("flash-sale-demo-")
        .tempdir()?;
    let database_url = match &options.database_url {
        Some(url) => {
            println!("  database   --database-url");
            url.clone()
        }
        None => {
            let url = sqlite_url(dir.path());
            println!("  database   {url} (SQLite, WAL)");
            url
        }
    };
    let db = Db::connect(&database_url, 4).await?;
    db.migrate().await?;

    // The instances, killed when `instances` drops.
    let mut instances: Vec<Instance> = Vec::new();
    for i in 0..options.instances {
        let instance = Instance::start(&InstanceOptions {
            bin: options.bin.clone(),
            redis_url: redis_url.clone(),
            database_url: database_url.clone(),
            locking: options.locking,
            lease: options.lease,
            work: options.work,
            stall_once: options.stall_holder && i == 0,
            log: dir.path().join(format!("instance-{}.log", i + 1)),
        })
        .await?;
        println!(
            "  instance {} {} (pid {})",
            i + 1,
            instance.url(),
            instance.pid()
        );
        instances.push(instance);
    }
    let targets: Vec<String> = instances.iter().map(|i| i.url().to_owned()).collect();

    let http = load::http_client(Duration::from_secs(10), 4);
    let sale_id = load::create_sale(&http, &targets[0], options.stock).await?;
    let duplicates = ((options.buyers as f64) * options.duplicate_rate).round() as usize;
    println!(
        "sale {sale_id}: {} items; {} purchase requests ({} buyers + {} repeats on another \
         instance), {} at a time",
        options.stock,
        options.buyers,
        options.buyers - duplicates.min(options.buyers),
        duplicates,
        options.concurrency,
    );

    let load_options = LoadOptions {
        targets: targets.clone(),
        sale_id: sale_id.clone(),
        buyers: options.buyers,
        concurrency: options.concurrency,
        duplicate_rate: options.duplicate_rate,
        pay: true,
        seed: options.seed,
        request_timeout: Duration::from_secs(20),
        max_duration: Duration::from_secs(90),
        progress: true,
    };
    let mut stall_notes = Vec::new();
    let report = if options.stall_holder {
        let (first, _) = instances.split_at_mut(1);
        let staller = stall(&mut first[0], options.lease, &mut stall_notes);
        let (report, stalled) = tokio::join!(load::run(&load_options), staller);
        stalled?;
        report
    } else {
        load::run(&load_options).await
    };

    println!("load:");
    for line in report.lines() {
        println!("{line}");
    }
    for note in &stall_notes {
        println!("{note}");
    }
    let sale = SaleId::parse(&sale_id).map_err(|e| e.detail)?;
    let inv = Invariants::check(&db, &sale).await?;
    println!("invariants (read from the database):");
    for (ok, line) in inv.lines() {
        println!("  {}  {line}", if ok { "ok  " } else { "FAIL" });
    }
    println!(
        "  fencing: {} stale write(s) refused by the database",
        inv.stale_writes_rejected
    );
    let violated = !inv.violations().is_empty();
    let ok = if !options.locking {
        if violated {
            println!(
                "without the locks the invariants broke, as expected: this is what the locks prevent"
            );
        } else {
            println!(
                "without the locks the race did not show this time (it needs overlapping purchases)"
            );
        }
        true
    } else if options.stall_holder && inv.stale_writes_rejected == 0 {
        println!("FAIL: the stalled holder's write should have been refused by the fence");
        false
    } else {
        !violated && report.not_sent == 0
    };
    if !ok {
        for instance in &instances {
            eprintln!(
                "--- {} log tail ---\n{}",
                instance.url(),
                log_tail(instance.log(), 3000)
            );
        }
    }

    // Stop the instances gracefully, then the rest drops in reverse order.
    for instance in instances {
        instance.shutdown(Duration::from_secs(3)).await;
    }
    db.close().await;

    let mut result = format!(
        "RESULT instances={} stock={} sold={} oversold={} duplicate_orders={} requests={} rps={:.0} p99_ms={:.0}",
        options.instances,
        options.stock,
        inv.sold,
        inv.oversold,
        inv.duplicate_orders,
        report.requests,
        report.rps(),
        report.p99_ms
    );
    if options.stall_holder {
        result.push_str(&format!(
            " stale_writes_rejected={}",
            inv.stale_writes_rejected
        ));
    }
    println!("{result}");
    Ok(ok)
}

/// Waits for instance 1 to reach its stall point inside the stock critical section, freezes
/// it past its lease, then lets it go on.
async fn stall(
    instance: &mut Instance,
    lease: Duration,
    notes: &mut Vec<String>,
) -> Result<(), BoxError> {
    let Some(line) = instance.next_stall(Duration::from_secs(30)).await else {
        return Err("instance 1 never reached its stall point".into());
    };
    let token = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("token="))
        .unwrap_or("?")
        .to_owned();
    instance.pause()?;
    let frozen = lease + Duration::from_millis(1500);
    tokio::time::sleep(frozen).await;
    instance.resume()?;
    instance.release_stall()?;
    notes.push(format!(
        "stall: instance 1 (pid {}) held the stock lock with fencing token {token} and was \
         frozen (kill -STOP) inside the critical section for {:.1} s, past its {:.1} s lease; \
         the other instances took the lock meanwhile; then kill -CONT",
        instance.pid(),
        frozen.as_secs_f64(),
        lease.as_secs_f64()
    ));
    Ok(())
}
