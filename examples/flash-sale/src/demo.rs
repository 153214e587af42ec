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
use std::time::Duration;

use lock_tests::RedisServer;

use crate::cluster::{Instance, InstanceOptions, log_tail};
use crate::db::{Db, sqlite_url};
use crate::invariants::Invariants;
use crate::limits::Limits;
use crate::load::{self, LoadOptions, LoadReport};
use crate::model::SaleId;
use crate::serve::BoxError;
use crate::stock::StockStore;
use crate::telemetry::{self, Scrape};

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
    /// Limit rates (`--no-limit` turns the limits off).
    pub limiting: bool,
    /// The bot's purchase attempts next to the load ([`crate::greedy`]).
    pub bot_attempts: usize,
    /// The scraper's polls next to the load.
    pub scraper_requests: usize,
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
    /// Where the sale's stock is kept (`--stock-in`; see [`crate::stock`]).
    pub stock_in: StockStore,
}

/// Runs the demo; `Ok(true)` when it showed what it should.
pub async fn run(options: DemoOptions) -> Result<bool, BoxError> {
    let mode = match (options.locking, options.stall_holder, options.limiting) {
        (false, _, true) => "locks OFF (--no-lock)",
        (false, _, false) => "locks OFF (--no-lock), rate limits OFF (--no-limit)",
        (true, false, true) => "locks on",
        (true, false, false) => "locks on, rate limits OFF (--no-limit)",
        (true, true, _) => "locks on, one holder stalls past its lease (--stall-holder)",
    };
    println!(
        "flash-sale demo: {} instances, one Redis, one database; {mode}; stock kept in {}",
        options.instances,
        match options.stock_in {
            StockStore::Sql => "the database",
            StockStore::Redis => "Redis (--stock-in redis)",
        }
    );
    let (_redis, redis_url) = redis()?;
    // The database: a SQLite file in a temporary directory (removed when `dir` drops).
    let dir = tempfile::Builder::new()
        .prefix("flash-sale-demo-")
        .tempdir()?;
    let database_url = database_url(&options, dir.path());
    let db = Db::connect(&database_url, 4).await?;
    db.migrate().await?;
    let mut instances = start_instances(&options, &redis_url, &database_url, dir.path()).await?;
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

    let mut stall_notes = Vec::new();
    let report = run_load(
        &options,
        &mut instances,
        &targets,
        &sale_id,
        &mut stall_notes,
    )
    .await?;
    let sale = SaleId::parse(&sale_id).map_err(|e| e.detail)?;
    let inv = Invariants::check(&db, &sale).await?;
    print_report(&options, &report, &inv, &stall_notes);
    let redis_stock_ok = check_redis_stock(&options, &redis_url, &sale, &inv).await?;
    // The instances' own figures, before they stop: each is a process with its recorder.
    let scrape = scrape_all(&http, &targets).await;
    for line in metrics_report(&scrape.0, scrape.1, targets.len()) {
        println!("{line}");
    }
    let ok = verdict(&options, &report, &inv) && redis_stock_ok;
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

    println!("{}", result_line(&options, &report, &inv));
    Ok(ok)
}

/// With the stock in Redis (`--stock-in redis`): whether the counter there agrees with the
/// database's copy of it (both are what the orders left), saying so. `Ok(true)` without it.
async fn check_redis_stock(
    options: &DemoOptions,
    redis_url: &str,
    sale: &SaleId,
    inv: &Invariants,
) -> Result<bool, BoxError> {
    if options.stock_in != StockStore::Redis {
        return Ok(true);
    }
    let client = lock_core::LockClient::connect(redis_url).await?;
    let left = crate::stock::read(&client, sale)
        .await
        .map_err(|e| e.to_string())?;
    let ok = left == Some(inv.stock_left);
    println!(
        "  {}  stock in Redis: {} left, the database's copy {}",
        if ok || !options.locking {
            "ok  "
        } else {
            "FAIL"
        },
        left.map_or_else(|| "no counter".to_owned(), |n| n.to_string()),
        inv.stock_left
    );
    Ok(ok || !options.locking)
}

/// The load's report, the invariants, and what stopped what.
fn print_report(
    options: &DemoOptions,
    report: &LoadReport,
    inv: &Invariants,
    stall_notes: &[String],
) {
    println!("load:");
    for line in report.lines() {
        println!("{line}");
    }
    for note in stall_notes {
        println!("{note}");
    }
    println!("invariants (read from the database):");
    for (ok, line) in inv.lines() {
        println!("  {}  {line}", if ok { "ok  " } else { "FAIL" });
    }
    println!(
        "  fencing: {} stale write(s) refused {}",
        inv.stale_writes_rejected,
        match options.stock_in {
            StockStore::Sql => "by the database",
            StockStore::Redis => "by the guarded take in Redis",
        }
    );
    for line in who_stopped_what(options.locking, report, inv) {
        println!("{line}");
    }
    for line in limits_report(options.limiting, report, Limits::default()) {
        println!("{line}");
    }
}

/// Redis: `REDIS_URL`, or a private redis-server, stopped when the returned server drops.
fn redis() -> Result<(Option<RedisServer>, String), BoxError> {
    Ok(match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("  redis      REDIS_URL (not started by the demo)");
            (None, url)
        }
        Err(_) => {
            // The binary the harness starts: REDIS_SERVER_BIN, or redis-server on the PATH.
            let binary = lock_tests::server_binary();
            if !lock_tests::server_binary_runs(&binary) {
                return Err(format!(
                    "{binary} does not run: install redis-server (scripts/demo.sh does: \
                     scripts/ensure-redis.sh), point REDIS_SERVER_BIN at a Redis-compatible \
                     server, or set REDIS_URL"
                )
                .into());
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
    })
}

/// The database: `--database-url`, or a SQLite file in `dir`.
fn database_url(options: &DemoOptions, dir: &std::path::Path) -> String {
    match &options.database_url {
        Some(url) => {
            println!("  database   --database-url");
            url.clone()
        }
        None => {
            let url = sqlite_url(dir);
            println!("  database   {url} (SQLite, WAL)");
            url
        }
    }
}

/// The instances, killed when they drop.
async fn start_instances(
    options: &DemoOptions,
    redis_url: &str,
    database_url: &str,
    dir: &std::path::Path,
) -> Result<Vec<Instance>, BoxError> {
    let mut instances: Vec<Instance> = Vec::new();
    for i in 0..options.instances {
        let instance = Instance::start(&InstanceOptions {
            bin: options.bin.clone(),
            redis_url: redis_url.to_owned(),
            database_url: database_url.to_owned(),
            locking: options.locking,
            limiting: options.limiting,
            lease: options.lease,
            work: options.work,
            stall_once: options.stall_holder && i == 0,
            crash_after_commit: false,
            log: dir.join(format!("instance-{}.log", i + 1)),
            name: Some(format!("instance-{}", i + 1)),
            demo_sale: false,
            stock_in: options.stock_in,
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
    Ok(instances)
}

/// Runs the load on sale `sale_id` (with one instance stalled, for `--stall-holder`); notes
/// about the stall go into `stall_notes`.
async fn run_load(
    options: &DemoOptions,
    instances: &mut [Instance],
    targets: &[String],
    sale_id: &str,
    stall_notes: &mut Vec<String>,
) -> Result<LoadReport, BoxError> {
    let load_options = LoadOptions {
        targets: targets.to_vec(),
        sale_id: sale_id.to_owned(),
        buyers: options.buyers,
        concurrency: options.concurrency,
        duplicate_rate: options.duplicate_rate,
        pay: true,
        seed: options.seed,
        request_timeout: Duration::from_secs(20),
        max_duration: Duration::from_secs(90),
        progress: true,
        bot_attempts: options.bot_attempts,
        scraper_requests: options.scraper_requests,
    };
    Ok(if options.stall_holder {
        let (first, _) = instances.split_at_mut(1);
        let staller = stall(&mut first[0], options.lease, stall_notes);
        let (report, stalled) = tokio::join!(load::run(&load_options), staller);
        stalled?;
        report
    } else {
        load::run(&load_options).await
    })
}

/// Whether the demo showed what it should, saying why not (or, without the locks, what broke).
fn verdict(options: &DemoOptions, report: &LoadReport, inv: &Invariants) -> bool {
    let violated = !inv.violations().is_empty();
    if !options.locking {
        if violated {
            println!(
                "without the locks {}, as expected (which lock prevents what: above)",
                what_broke(inv)
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
    }
}

/// The `RESULT` line.
fn result_line(options: &DemoOptions, report: &LoadReport, inv: &Invariants) -> String {
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
    result
}

/// What part of a count the bot's attempts are, when they are any: the summary's rows count
/// every purchase attempt, the plan's and the bot's, as the rate-limit report does.
fn of_them_the_bots(bot: usize) -> String {
    match bot {
        0 => String::new(),
        n => format!(", {n} of them the bot's"),
    }
}

/// With the locks: what each lock or check stopped.
fn what_the_locks_stopped(report: &LoadReport, inv: &Invariants) -> Vec<(&'static str, String)> {
    let taken = inv.initial_stock - inv.stock_left;
    let found_paid = report.replays_found_paid();
    let refused = report.replays_refused_by_write;
    vec![
        (
            "stock lock",
            format!(
                "purchases took turns: {} orders, {taken} items taken from the stock of {}; \
                 {} requests found the sale sold out",
                inv.sold, inv.initial_stock, report.sold_out
            ),
        ),
        (
            "buyer lock",
            format!(
                "{} double clicks answered 409 at once (the buyer's other request held it, \
                 on another instance){}",
                report.lock_busy + report.bot.lock_busy,
                of_them_the_bots(report.bot.lock_busy),
            ),
        ),
        (
            "limit check",
            format!(
                "{} repeats found the buyer's earlier order (read under the stock lock){}",
                report.already_ordered + report.bot.already_ordered,
                of_them_the_bots(report.bot.already_ordered),
            ),
        ),
        (
            "idempotency",
            format!(
                "{} replayed payment callbacks (same Idempotency-Key) answered with the \
                 first callback's stored response, byte for byte, without running again",
                report.replays_from_record
            ),
        ),
        (
            "order lock",
            format!(
                "{found_paid} replayed payments waited for the first callback and found the \
                 order paid"
            ),
        ),
        (
            "database",
            format!(
                "{refused} replays reached the conditional write (status = 'reserved'), the \
                 second line of defence behind the order lock"
            ),
        ),
    ]
}

/// Without the locks (`--no-lock`): what went wrong in each one's absence, and which check, if
/// any, caught it instead.
fn what_broke_without_locks(report: &LoadReport, inv: &Invariants) -> Vec<(&'static str, String)> {
    let taken = inv.initial_stock - inv.stock_left;
    let found_paid = report.replays_found_paid();
    let refused = report.replays_refused_by_write;
    let stock = if inv.oversold > 0 || inv.stock_mismatch != 0 {
        format!(
            "off: purchases interleaved: {} orders for a stock of {} ({} oversold), and the \
             stock went down by only {taken} (writes based on stale reads)",
            inv.sold, inv.initial_stock, inv.oversold
        )
    } else {
        format!(
            "off: no purchases interleaved this time ({} orders, {taken} items taken)",
            inv.sold
        )
    };
    let buyer = if inv.duplicate_orders > 0 {
        format!(
            "off: no double click was turned away (lock busy: {}); {} buyers got {} extra \
             orders, their two requests passing the per-buyer check together (it needs \
             the stock lock too)",
            report.lock_busy, inv.buyers_over_limit, inv.duplicate_orders
        )
    } else {
        format!(
            "off: no double click was turned away (lock busy: {}); no buyer got a second \
             order this time",
            report.lock_busy
        )
    };
    let order = if inv.paid_twice == 0 && inv.payment_mismatches == 0 {
        format!(
            "off: {refused} replayed payments raced the first callback, read the order \
             unpaid and were refused by the database's conditional write (status = \
             'reserved'); {found_paid} found it paid. No order was paid twice: here the \
             database check catches what the lock prevents"
        )
    } else {
        format!(
            "off: {} orders paid twice, their replays racing the first callback",
            inv.paid_twice
        )
    };
    vec![
        ("stock lock", stock),
        ("buyer lock", buyer),
        ("order lock", order),
    ]
}

/// Which lock or check stopped which requests, from the load's answers and the database: with
/// the locks, what each one did; without them (`--no-lock`), what went wrong in its absence and
/// which check, if any, caught it instead.
fn who_stopped_what(locking: bool, report: &LoadReport, inv: &Invariants) -> Vec<String> {
    let mut rows = if locking {
        what_the_locks_stopped(report, inv)
    } else {
        what_broke_without_locks(report, inv)
    };
    if locking && inv.stale_writes_rejected > 0 {
        rows.push((
            "fencing",
            format!(
                "{} stale stock writes refused: a holder that outlived its lease tried to take \
                 stock after the next holder had taken the lock (the fence in the database, \
                 or the guarded take in Redis)",
                inv.stale_writes_rejected
            ),
        ));
    }
    let mut lines = vec![if locking {
        "what stopped what:".to_owned()
    } else {
        "what each lock prevents (all off in this run):".to_owned()
    }];
    for (what, text) in rows {
        lines.extend(wrap(&format!("  {what:<13}"), &text, 96));
    }
    lines
}

/// What answered the purchase attempts (the plan's and the bot's): the rate limits, the
/// locks, the per-buyer check, the stock; and what the rate limits did to the bot and the
/// scraper ([`crate::greedy`]), or, off (`--no-limit`), what got through without them.
fn limits_report(limiting: bool, report: &LoadReport, limits: Limits) -> Vec<String> {
    let (bot, scraper) = (&report.bot, &report.scraper);
    let refused = format!(
        "{} purchase attempts ({} planned, {} by the bot): {} ordered; refused {} by a rate \
         limit (429, before any lock), {} by the buyer lock (409 lock_busy), {} by the \
         per-buyer check under the stock lock (409 already_ordered), {} by the stock (410 \
         sold_out); {} busy (503)",
        report.requests + bot.sent,
        report.requests,
        bot.sent,
        report.accepted + bot.accepted,
        report.rate_limited + bot.rate_limited,
        report.lock_busy + bot.lock_busy,
        report.already_ordered + bot.already_ordered,
        report.sold_out + bot.sold_out,
        report.busy + report.stale,
    );
    let bot_reached = format!(
        "{} ordered, {} already ordered after queueing for the sale's stock lock, {} lock \
         busy, {} sold out",
        bot.accepted, bot.already_ordered, bot.lock_busy, bot.sold_out
    );
    let limited = if limiting {
        format!(
            "the bot's {} attempts in a row: {} refused 429 by its buyer limit ({}), {} reached \
             the purchase ({bot_reached}); the scraper's {} polls: {} served, {} refused 429 by \
             its client limit ({})",
            bot.sent,
            bot.rate_limited,
            limits.buyer,
            bot.reached(),
            scraper.sent,
            scraper.served,
            scraper.rate_limited,
            limits.client
        )
    } else {
        format!(
            "off: all of the bot's {} attempts reached the purchase ({bot_reached}), where its \
             buyer limit ({}) would have let {} through at once; {} of the scraper's {} polls \
             were served, each a database read",
            bot.sent,
            limits.buyer,
            limits.buyer.burst_size(),
            scraper.served,
            scraper.sent,
        )
    };
    let mut lines = vec!["what stopped the purchase attempts:".to_owned()];
    lines.extend(wrap("  attempts     ", &refused, 96));
    lines.extend(wrap("  rate limits  ", &limited, 96));
    lines
}

/// Every instance's `/metrics`, added up, and how many answered.
async fn scrape_all(http: &reqwest::Client, targets: &[String]) -> (Scrape, usize) {
    let mut scrape = Scrape::default();
    let mut answered = 0;
    for target in targets {
        let page = async {
            http.get(format!("{target}/metrics"))
                .send()
                .await?
                .error_for_status()?
                .text()
                .await
        };
        match page.await {
            Ok(text) => {
                scrape.add(Scrape::parse(&text));
                answered += 1;
            }
            Err(e) => tracing::warn!(target, error = %e, "cannot read /metrics"),
        }
    }
    (scrape, answered)
}

/// Milliseconds with one decimal, from seconds.
fn ms(seconds: f64) -> String {
    format!("{:.1} ms", seconds * 1000.0)
}

/// A count for the report (counters are floats in the text format).
fn count(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 {
        value.round() as u64
    } else {
        0
    }
}

/// The report's lines on the locks and the app, from the instances' `/metrics`.
fn metrics_report(scrape: &Scrape, answered: usize, instances: usize) -> Vec<String> {
    let mut lines = vec![format!(
        "metrics (GET /metrics of {answered} of {instances} instances, added up):"
    )];
    let mut rows = if scrape.has("lock_acquisitions_total") {
        lock_rows(scrape)
    } else {
        vec![(
            "locks",
            "figures unavailable: this build's lock-core records no metrics (its `metrics` \
             feature is off)"
                .to_owned(),
        )]
    };
    rows.push((
        "app",
        format!(
            "{} orders, {} units sold, {} payments applied, {} replays answered, {} answered \
             from idempotency records",
            count(scrape.sum(telemetry::ORDERS, &[])),
            count(scrape.sum(telemetry::UNITS_SOLD, &[])),
            count(scrape.sum(telemetry::PAYMENTS, &[("applied", "true")])),
            count(scrape.sum(telemetry::PAYMENTS, &[("applied", "false")])),
            count(scrape.sum(telemetry::IDEMPOTENT_REPLAYS, &[])),
        ),
    ));
    rows.push(("rejections", rejections(scrape)));
    for (what, text) in rows {
        lines.extend(wrap(&format!("  {what:<13}"), &text, 96));
    }
    lines
}

/// The `q`-quantile time to acquire of the acquisitions that got the lock, among those of
/// `filter`.
fn acquire_time(scrape: &Scrape, q: f64, filter: &[(&str, &str)]) -> String {
    let mut filter = filter.to_vec();
    filter.push(("outcome", "acquired"));
    scrape
        .quantile(q, "lock_acquire_duration_seconds", &filter)
        .map_or_else(|| "-".to_owned(), ms)
}

/// The locks' rows of the metrics report: acquisitions, contention, time, losses, by lock.
fn lock_rows(scrape: &Scrape) -> Vec<(&'static str, String)> {
    let mut rows = Vec::new();
    let by_outcome = scrape.sum_by("lock_acquisitions_total", "outcome");
    let total: f64 = by_outcome.values().sum();
    let outcomes: Vec<String> = [
        "acquired",
        "busy",
        "timeout",
        "unavailable",
        "lost",
        "invalid",
    ]
    .iter()
    .map(|o| format!("{o} {}", count(by_outcome.get(*o).copied().unwrap_or(0.0))))
    .collect();
    rows.push((
        "acquisitions",
        format!("{}: {}", count(total), outcomes.join(", ")),
    ));
    let waits = scrape.sum("lock_wait_duration_seconds_count", &[]);
    let wait_p99 = scrape
        .quantile(0.99, "lock_wait_duration_seconds", &[])
        .map_or_else(|| "-".to_owned(), ms);
    rows.push((
        "contention",
        format!(
            "{} busy (a single try found the lock held); {} acquisitions waited for a held lock \
             (p99 wait {wait_p99}); {} waiter wake-ups, {} attempts retried",
            count(by_outcome.get("busy").copied().unwrap_or(0.0)),
            count(waits),
            count(scrape.sum("lock_waiter_wakeups_total", &[])),
            count(scrape.sum("lock_attempts_retried_total", &[])),
        ),
    ));
    let latency = |q, filter: &[(&str, &str)]| acquire_time(scrape, q, filter);
    rows.push((
        "acquire time",
        format!(
            "p99 {} (p50 {}) from request to lock, for the acquisitions that got it",
            latency(0.99, &[]),
            latency(0.5, &[])
        ),
    ));
    let lost = scrape.sum_by("lock_lost_total", "reason");
    let lost_total: f64 = lost.values().sum();
    rows.push((
        "losses",
        if lost_total > 0.0 {
            let reasons: Vec<String> = lost
                .iter()
                .map(|(reason, n)| format!("{reason} {}", count(*n)))
                .collect();
            format!(
                "{} held locks lost while their guard lived ({})",
                count(lost_total),
                reasons.join(", ")
            )
        } else {
            "no held lock was lost".to_owned()
        },
    ));
    if let Some(families) = by_lock(scrape) {
        rows.push(("by lock", families));
    }
    rows
}

/// The metrics report's figures per lock family, if any lock was taken.
fn by_lock(scrape: &Scrape) -> Option<String> {
    let latency = |q, filter: &[(&str, &str)]| acquire_time(scrape, q, filter);
    let mut families = Vec::new();
    for (family, what) in [
        ("stock", "the purchases"),
        ("buyer", "double clicks"),
        ("order", "payment callbacks"),
        ("idempotency", "idempotency keys"),
    ] {
        let only = [("family", family)];
        let outcome = |o| {
            count(scrape.sum(
                "lock_acquisitions_total",
                &[("family", family), ("outcome", o)],
            ))
        };
        if scrape.sum("lock_acquisitions_total", &only) <= 0.0 {
            continue;
        }
        families.push(format!(
            "{family} ({what}): {} acquired, {} busy, {} timed out, {} waited, p99 acquire {}",
            outcome("acquired"),
            outcome("busy"),
            outcome("timeout"),
            count(scrape.sum("lock_wait_duration_seconds_count", &only)),
            latency(0.99, &only),
        ));
    }
    (!families.is_empty()).then(|| families.join("; "))
}

/// The rejections by status and code, added up over the instances.
fn rejections(scrape: &Scrape) -> String {
    let mut rejections: Vec<(String, f64)> = Vec::new();
    for sample in scrape
        .samples()
        .iter()
        .filter(|s| s.name == telemetry::REJECTIONS)
    {
        let key = format!(
            "{} {}",
            sample.label("status").unwrap_or("?"),
            sample.label("code").unwrap_or("?")
        );
        match rejections.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += sample.value,
            None => rejections.push((key, sample.value)),
        }
    }
    rejections.sort_by(|a, b| a.0.cmp(&b.0));
    let rejections: Vec<String> = rejections
        .iter()
        .map(|(k, n)| format!("{k} {}", count(*n)))
        .collect();
    if rejections.is_empty() {
        "none".to_owned()
    } else {
        rejections.join(", ")
    }
}

/// `text` in lines of at most `width` characters (longer words excepted), the first after
/// `first`, the others indented as far.
fn wrap(first: &str, text: &str, width: usize) -> Vec<String> {
    let indent = " ".repeat(first.chars().count());
    let mut lines = Vec::new();
    let mut line = first.to_owned();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::replace(&mut line, indent.clone()));
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    lines.push(line);
    lines
}

/// The invariants the no-lock run broke, in words.
fn what_broke(inv: &Invariants) -> String {
    let mut broke = Vec::new();
    if inv.oversold > 0 || inv.stock_mismatch != 0 || inv.stock_left < 0 {
        broke.push("the sale oversold");
    }
    if inv.duplicate_orders > 0 {
        broke.push("buyers got second orders");
    }
    if inv.paid_twice > 0 || inv.payment_mismatches > 0 {
        broke.push("orders were paid twice");
    }
    broke.join(" and ")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_lines_short_and_indents_the_rest() {
        let lines = wrap("  order lock   ", &"word ".repeat(40), 40);
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{lines:?}");
        assert!(lines[0].starts_with("  order lock   word"));
        assert!(
            lines[1..]
                .iter()
                .all(|l| l.starts_with("               word"))
        );
    }

    #[test]
    fn the_metrics_report_adds_instances_up_or_says_what_is_missing() {
        let page = "\
flash_sale_orders_total 2
flash_sale_units_sold_total 2
flash_sale_payments_total{applied=\"true\"} 2
flash_sale_idempotent_replays_total{route=\"pay\"} 2
flash_sale_rejections_total{route=\"orders\",status=\"409\",code=\"lock_busy\"} 3
lock_acquisitions_total{kind=\"mutex\",family=\"stock\",outcome=\"acquired\"} 10
lock_acquisitions_total{kind=\"mutex\",family=\"buyer\",outcome=\"busy\"} 4
lock_wait_duration_seconds_count{kind=\"mutex\",family=\"stock\"} 6
lock_lost_total{kind=\"mutex\",family=\"stock\",reason=\"expired\"} 1
lock_acquire_duration_seconds_bucket{kind=\"mutex\",family=\"stock\",outcome=\"acquired\",le=\"0.001\"} 5
lock_acquire_duration_seconds_bucket{kind=\"mutex\",family=\"stock\",outcome=\"acquired\",le=\"0.01\"} 10
lock_acquire_duration_seconds_bucket{kind=\"mutex\",family=\"stock\",outcome=\"acquired\",le=\"+Inf\"} 10
";
        let mut scrape = Scrape::parse(page);
        scrape.add(Scrape::parse(page));
        // One line, spaces collapsed: the report wraps its rows.
        let text = metrics_report(&scrape, 2, 3)
            .join(" ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(text.contains("2 of 3 instances"), "{text}");
        assert!(
            text.contains("28: acquired 20, busy 8, timeout 0"),
            "{text}"
        );
        assert!(text.contains("12 acquisitions waited"), "{text}");
        assert!(
            text.contains("2 held locks lost while their guard lived (expired 2)"),
            "{text}"
        );
        assert!(text.contains("p99 9.8 ms"), "{text}");
        assert!(
            text.contains("stock (the purchases): 20 acquired, 0 busy"),
            "{text}"
        );
        assert!(text.contains("12 waited, p99 acquire 9.8 ms"), "{text}");
        assert!(
            text.contains("buyer (double clicks): 0 acquired, 8 busy"),
            "{text}"
        );
        assert!(!text.contains("order ("), "{text}");
        assert!(
            text.contains("4 orders, 4 units sold, 4 payments applied"),
            "{text}"
        );
        assert!(
            text.contains("4 answered from idempotency records"),
            "{text}"
        );
        assert!(text.contains("409 lock_busy 6"), "{text}");
        let text = metrics_report(&Scrape::parse("flash_sale_orders_total 1\n"), 1, 1).join("\n");
        assert!(text.contains("figures unavailable"), "{text}");
        assert!(text.contains("rejections   none"), "{text}");
        assert!(!text.contains("by lock"), "{text}");
    }

    /// The summary's rows and the rate-limit report count the same attempts: a repeat of the
    /// bot's that found its earlier order is in both (it read "limit check 0 repeats found
    /// the buyer's earlier order" beside "1 by the per-buyer check (409 already_ordered)").
    #[test]
    fn the_summary_and_the_limits_report_count_the_same_attempts() {
        let inv = Invariants {
            initial_stock: 100,
            stock_left: 0,
            sold: 100,
            ..Invariants::default()
        };
        let report = LoadReport {
            already_ordered: 0,
            lock_busy: 2,
            bot: crate::greedy::BotReport {
                sent: 40,
                rate_limited: 37,
                accepted: 1,
                already_ordered: 1,
                lock_busy: 1,
                ..Default::default()
            },
            ..LoadReport::default()
        };
        // The report wraps its lines: compare the words.
        let flat = |lines: Vec<String>| {
            lines
                .join(" ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        let summary = flat(who_stopped_what(true, &report, &inv));
        assert!(
            summary.contains(
                "1 repeats found the buyer's earlier order (read under the stock lock), 1 of \
                 them the bot's"
            ),
            "{summary}"
        );
        assert!(summary.contains("3 double clicks"), "{summary}");
        let limits = flat(limits_report(
            true,
            &report,
            crate::limits::Limits::default(),
        ));
        assert!(limits.contains("1 by the per-buyer check"), "{limits}");
        assert!(limits.contains("3 by the buyer lock"), "{limits}");
    }

    #[test]
    fn the_no_lock_run_names_what_broke_and_who_caught_the_replays() {
        let inv = Invariants {
            initial_stock: 100,
            stock_left: 15,
            sold: 4231,
            oversold: 4131,
            stock_mismatch: 4146,
            duplicate_orders: 231,
            buyers_over_limit: 218,
            paid_orders: 4231,
            ..Invariants::default()
        };
        assert_eq!(
            what_broke(&inv),
            "the sale oversold and buyers got second orders"
        );
        let report = LoadReport {
            payments_applied: 4231,
            payments_replayed: 4231,
            replays_refused_by_write: 2566,
            replays_from_record: 1000,
            ..LoadReport::default()
        };
        let text = who_stopped_what(false, &report, &inv).join("\n");
        assert!(text.contains("4131 oversold"), "{text}");
        assert!(text.contains("218 buyers got 231 extra"), "{text}");
        assert!(text.contains("2566 replayed payments"), "{text}");
        assert!(text.contains("conditional write"), "{text}");
        let text = who_stopped_what(true, &report, &inv).join("\n");
        assert!(text.contains("665 replayed payments waited"), "{text}");
        assert!(text.contains("1000 replayed payment callbacks"), "{text}");
    }
}
