//! `flash-sale`: the flash-sale app (`serve`), its load tool (`load`) and the demo (`demo`).
//!
//! ```text
//! flash-sale demo                  # everything, start to finish, ends with a RESULT line
//! flash-sale demo --no-lock        # the same without the locks: what they prevent
//! flash-sale demo --no-limit       # the same without the rate limits: what they prevent
//! flash-sale demo --stall-holder   # one instance freezes inside the critical section
//! flash-sale serve --port 8080     # one instance (REDIS_URL, DATABASE_URL or --data-dir)
//! flash-sale load --targets http://127.0.0.1:8080,http://127.0.0.1:8081 --buyers 5000
//! ```
#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use flash_sale::db::{Db, sqlite_url};
use flash_sale::demo::{self, DemoOptions};
use flash_sale::invariants::Invariants;
use flash_sale::limits::{BUYER_QUOTA, CLIENT_QUOTA, Limits};
use flash_sale::load::{self, LoadOptions};
use flash_sale::model::SaleId;
use flash_sale::serve::{self, BoxError, ServeOptions};
use flash_sale::stock::StockStore;

#[derive(Debug, Parser)]
#[command(
    name = "flash-sale",
    version,
    about = "A flash sale that never oversells, across several instances"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Runs one instance of the shop's HTTP server (the API and the storefront page at /).
    Serve(ServeArgs),
    /// Fires buyers at running instances, reports, then checks the invariants in the database.
    Load(LoadArgs),
    /// Starts Redis (unless REDIS_URL is set), a temporary SQLite database and 3 instances,
    /// sells a sale of 100 items to 5,000 requests, checks, reports, and stops everything.
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
struct DbArgs {
    /// The database: `postgres://...` or `sqlite://path?mode=rwc` (default: SQLite in --data-dir).
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Where the SQLite database lives when no database URL is given.
    #[arg(long, default_value = "data")]
    data_dir: PathBuf,
}

impl DbArgs {
    fn url(&self) -> Result<String, BoxError> {
        match &self.database_url {
            Some(url) => Ok(url.clone()),
            None => {
                std::fs::create_dir_all(&self.data_dir).map_err(|e| {
                    format!(
                        "cannot create the data directory {}: {e}",
                        self.data_dir.display()
                    )
                })?;
                Ok(sqlite_url(&self.data_dir))
            }
        }
    }
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Port to listen on (0: any free port; the chosen address is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    #[command(flatten)]
    db: DbArgs,
    /// The Redis server shared by the instances.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Take no locks (to show what they prevent; never in production).
    #[arg(long)]
    no_lock: bool,
    #[command(flatten)]
    limits: LimitArgs,
    /// Lease of the locks, renewed every third of it while held (milliseconds).
    #[arg(long, default_value_t = 10_000)]
    lease_ms: u64,
    /// How long the reservation step inside the purchase's critical section takes (ms).
    #[arg(long, default_value_t = 2)]
    work_ms: u64,
    /// Database connections of this instance.
    #[arg(long, default_value_t = 8)]
    db_connections: u32,
    /// This instance's name on the storefront's lock panel (default: flash-sale@ADDR).
    #[arg(long)]
    name: Option<String>,
    /// Do not create the demo sale (100 items) that an instance otherwise creates when the
    /// database has no sale.
    #[arg(long)]
    no_demo_sale: bool,
    /// Where the sales' stock is kept: `sql` (the database, written with the fencing token)
    /// or `redis` (a counter beside the lock, taken with a guarded update).
    #[arg(long, value_enum, default_value_t = StockStore::Sql)]
    stock_in: StockStore,
    /// Test only: stop the first purchase at its stall point until a `resume` line on stdin.
    #[arg(long, hide = true)]
    stall_once: bool,
    /// Test only: never answer the first purchase or payment that commits its idempotency
    /// record (it prints `COMMITTED ...` on stdout), for a supervisor to kill the instance.
    #[arg(long, hide = true)]
    crash_after_commit: bool,
    /// Exit when stdin closes (for a supervising process).
    #[arg(long, hide = true)]
    supervised: bool,
}

/// The rate limits' options of `serve`.
#[derive(Debug, Args)]
struct LimitArgs {
    /// No rate limits (to show what they prevent).
    #[arg(long)]
    no_limit: bool,
    /// Purchase attempts per second per buyer (the per-buyer rate limit).
    #[arg(long, default_value_t = BUYER_QUOTA.rate())]
    buyer_rate: u32,
    /// Purchase attempts one buyer may make at once.
    #[arg(long, default_value_t = BUYER_QUOTA.burst_size())]
    buyer_burst: u32,
    /// API requests per second per client (the per-client rate limit).
    #[arg(long, default_value_t = CLIENT_QUOTA.rate())]
    client_rate: u32,
    /// API requests one client may make at once.
    #[arg(long, default_value_t = CLIENT_QUOTA.burst_size())]
    client_burst: u32,
}

impl LimitArgs {
    fn limits(&self) -> Result<Option<Limits>, BoxError> {
        if self.no_limit {
            return Ok(None);
        }
        let limits = Limits {
            buyer: lock_core::Quota::per_second(self.buyer_rate).burst(self.buyer_burst),
            client: lock_core::Quota::per_second(self.client_rate).burst(self.client_burst),
        };
        limits.buyer.check()?;
        limits.client.check()?;
        Ok(Some(limits))
    }
}

#[derive(Debug, Args)]
struct LoadArgs {
    /// Base URLs of the instances, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    targets: Vec<String>,
    /// Purchase requests to send (duplicates included).
    #[arg(long, default_value_t = 5000)]
    buyers: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Share of requests that repeat an earlier buyer on another instance (0 to 1).
    #[arg(long, default_value_t = 0.2)]
    duplicate_rate: f64,
    /// The sale to buy from (default: create one with --stock items).
    #[arg(long)]
    sale_id: Option<String>,
    /// Stock of the sale created when no --sale-id is given.
    #[arg(long, default_value_t = 100)]
    stock: i64,
    /// Do not pay the accepted orders.
    #[arg(long)]
    no_pay: bool,
    /// Seed of the request plan.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop sending after this many seconds.
    #[arg(long, default_value_t = 120)]
    max_seconds: u64,
    #[command(flatten)]
    greedy: GreedyArgs,
    #[command(flatten)]
    db: DbArgs,
}

/// The greedy clients sent next to the load (`flash_sale::greedy`).
#[derive(Debug, Args)]
struct GreedyArgs {
    /// Purchase attempts of one bot buyer, one after another, next to the load.
    #[arg(long, default_value_t = 0)]
    bot_attempts: usize,
    /// Polls of the sale's stats by one scraper, one after another, next to the load.
    #[arg(long, default_value_t = 0)]
    scraper_requests: usize,
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Run without the locks, to show what they prevent.
    #[arg(long, conflicts_with = "stall_holder")]
    no_lock: bool,
    /// Run without the rate limits, to show what they prevent.
    #[arg(long)]
    no_limit: bool,
    /// Purchase attempts of one bot buyer, one after another, next to the load.
    #[arg(long, default_value_t = 40)]
    bot_attempts: usize,
    /// Polls of the sale's stats by one scraper, one after another, next to the load.
    #[arg(long, default_value_t = 1000)]
    scraper_requests: usize,
    /// Freeze one instance (SIGSTOP) inside the stock critical section past its lease.
    #[arg(long)]
    stall_holder: bool,
    /// How many instances.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=16))]
    instances: u16,
    /// The sale's stock.
    #[arg(long, default_value_t = 100)]
    stock: i64,
    /// Where the sale's stock is kept: `sql` (the database, written with the fencing token) or
    /// `redis` (a counter beside the lock, taken with a guarded update).
    #[arg(long, value_enum, default_value_t = StockStore::Sql)]
    stock_in: StockStore,
    /// Purchase requests (duplicates included).
    #[arg(long, default_value_t = 5000)]
    buyers: usize,
    /// Share of requests that repeat an earlier buyer on another instance.
    #[arg(long, default_value_t = 0.2)]
    duplicate_rate: f64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Lease of the locks (milliseconds).
    #[arg(long, default_value_t = 2000)]
    lease_ms: u64,
    /// How long the reservation step inside the critical section takes (milliseconds).
    #[arg(long, default_value_t = 2)]
    work_ms: u64,
    /// Use this database instead of a temporary SQLite file (e.g. postgres://...).
    #[arg(long)]
    database_url: Option<String>,
    /// Seed of the request plan.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flash-sale: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let code = runtime.block_on(async {
        let work = async {
            match cli.command {
                Cmd::Serve(args) => run_serve(args).await,
                Cmd::Load(args) => run_load(args).await,
                Cmd::Demo(args) => run_demo(args).await,
            }
        };
        // Ctrl-C or SIGTERM drops `work`, and with it every process it started.
        tokio::select! {
            result = work => match result {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("flash-sale: {e}");
                    ExitCode::from(2)
                }
            },
            signal = serve::shutdown_signal() => {
                eprintln!("flash-sale: interrupted ({signal}); stopped everything it started");
                ExitCode::from(130)
            }
        }
    });
    // Do not wait for stray blocking tasks.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

async fn run_serve(args: ServeArgs) -> Result<ExitCode, BoxError> {
    let options = ServeOptions {
        host: args.host,
        port: args.port,
        database_url: args.db.url()?,
        redis_url: args.redis_url,
        locking: !args.no_lock,
        limits: args.limits.limits()?,
        lease: Duration::from_millis(args.lease_ms),
        work: Duration::from_millis(args.work_ms),
        stall_once: args.stall_once,
        crash_after_commit: args.crash_after_commit,
        supervised: args.supervised,
        db_connections: args.db_connections.max(1),
        name: args.name,
        demo_sale: !args.no_demo_sale,
        stock_in: args.stock_in,
    };
    // `serve` handles its own signals (graceful shutdown); the outer select only backs it up.
    serve::serve(options).await?;
    Ok(ExitCode::SUCCESS)
}

async fn run_load(args: LoadArgs) -> Result<ExitCode, BoxError> {
    if !(0.0..=1.0).contains(&args.duplicate_rate) {
        return Err("--duplicate-rate must be between 0 and 1".into());
    }
    let targets: Vec<String> = args
        .targets
        .iter()
        .map(|t| t.trim().trim_end_matches('/').to_owned())
        .filter(|t| !t.is_empty())
        .collect();
    if targets.is_empty() {
        return Err("--targets needs at least one URL".into());
    }
    let db = Db::connect(&args.db.url()?, 2).await?;
    let http = load::http_client(Duration::from_secs(10), 4);
    let sale_id = match args.sale_id {
        Some(id) => id,
        None => load::create_sale(&http, &targets[0], args.stock).await?,
    };
    let sale = SaleId::parse(&sale_id).map_err(|e| e.detail)?;
    println!(
        "load: sale {sale_id}, {} requests ({:.0}% duplicates) at concurrency {} over {} instance(s)",
        args.buyers,
        args.duplicate_rate * 100.0,
        args.concurrency,
        targets.len()
    );
    let report = load::run(&LoadOptions {
        targets: targets.clone(),
        sale_id: sale_id.clone(),
        buyers: args.buyers,
        concurrency: args.concurrency.max(1),
        duplicate_rate: args.duplicate_rate,
        pay: !args.no_pay,
        seed: args.seed,
        request_timeout: Duration::from_secs(20),
        max_duration: Duration::from_secs(args.max_seconds),
        progress: true,
        bot_attempts: args.greedy.bot_attempts,
        scraper_requests: args.greedy.scraper_requests,
    })
    .await;
    for line in report.lines() {
        println!("{line}");
    }
    let inv = Invariants::check(&db, &sale).await?;
    println!("invariants (read from the database):");
    for (ok, line) in inv.lines() {
        println!("  {}  {line}", if ok { "ok  " } else { "FAIL" });
    }
    println!(
        "  fencing: {} stale write(s) refused by the database",
        inv.stale_writes_rejected
    );
    println!(
        "RESULT instances={} stock={} sold={} oversold={} duplicate_orders={} requests={} rps={:.0} p99_ms={:.0}",
        targets.len(),
        inv.initial_stock,
        inv.sold,
        inv.oversold,
        inv.duplicate_orders,
        report.requests,
        report.rps(),
        report.p99_ms
    );
    db.close().await;
    Ok(if inv.violations().is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn run_demo(args: DemoArgs) -> Result<ExitCode, BoxError> {
    if !(0.0..=1.0).contains(&args.duplicate_rate) {
        return Err("--duplicate-rate must be between 0 and 1".into());
    }
    if args.stall_holder && args.instances < 2 {
        return Err(
            "--stall-holder needs at least 2 instances: one to freeze, one to take over".into(),
        );
    }
    let bin = std::env::current_exe()?;
    let ok = demo::run(DemoOptions {
        bin,
        instances: usize::from(args.instances),
        stock: args.stock,
        buyers: args.buyers,
        duplicate_rate: args.duplicate_rate,
        concurrency: args.concurrency.max(1),
        locking: !args.no_lock,
        limiting: !args.no_limit,
        bot_attempts: args.bot_attempts,
        scraper_requests: args.scraper_requests,
        stall_holder: args.stall_holder,
        lease: Duration::from_millis(args.lease_ms),
        work: Duration::from_millis(args.work_ms),
        database_url: args.database_url,
        seed: args.seed,
        stock_in: args.stock_in,
    })
    .await?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
