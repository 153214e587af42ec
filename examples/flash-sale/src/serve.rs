//! `flash-sale serve`: one instance of the shop.

use std::io::{BufRead, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockClient;
use tokio::sync::watch;

use crate::db::Db;
use crate::idempotency::SqlRecordStore;
use crate::limits::Limits;
use crate::model::{NewSale, now_ms};
use crate::panel::{Me, Panel};
use crate::shop::{CrashHook, Shop, ShopOptions, StallHook};
use crate::stock::StockStore;

/// Any error of the commands, for `main` to print.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How to run one instance.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address to listen on.
    pub host: IpAddr,
    /// Port to listen on (0: a free one; the chosen one is printed).
    pub port: u16,
    /// The database URL (`sqlite://...` or `postgres://...`).
    pub database_url: String,
    /// The Redis URL.
    pub redis_url: String,
    /// Take the locks.
    pub locking: bool,
    /// The rate limits' quotas; None: no rate limits (`--no-limit`).
    pub limits: Option<Limits>,
    /// The lock client's watchdog lease.
    pub lease: Duration,
    /// The reservation step inside the critical section.
    pub work: Duration,
    /// Arm the test-only stall point.
    pub stall_once: bool,
    /// Arm the test-only stop after a recorded commit (see [`CrashHook`]).
    pub crash_after_commit: bool,
    /// Exit when stdin closes, and read `resume` lines for the stall point.
    pub supervised: bool,
    /// Database connections of this instance.
    pub db_connections: u32,
    /// This instance's name on the lock panel (default `flash-sale@ADDR`).
    pub name: Option<String>,
    /// Create [`demo_sale`] when the database has no sale, so that the storefront opens with
    /// something to buy and a lock to show (`serve --no-demo-sale` turns it off; the demo's
    /// and the tests' instances create their own sales).
    pub demo_sale: bool,
    /// Where the sales' stock is kept (`--stock-in`; see [`crate::stock`]).
    pub stock_in: StockStore,
}

/// The sale a `serve` instance opens with on an empty database: 100 items, one per buyer,
/// open for a day from the start.
pub fn demo_sale() -> NewSale {
    NewSale {
        sku: "DEMO-SNEAKER-1".to_owned(),
        name: "Demo sale: limited sneakers".to_owned(),
        stock: 100,
        price_cents: 4_900,
        per_user_limit: Some(1),
        starts_at: None,
        ends_at: None,
    }
}

/// Creates [`demo_sale`] if the database has no sale. Run under the migration lock, so that
/// instances starting together create one between them.
async fn seed_demo_sale(shop: &Shop) -> Result<(), BoxError> {
    if !shop.db().list_sales().await?.is_empty() {
        return Ok(());
    }
    let sale = shop
        .create_sale(demo_sale())
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(sale = %sale.id, "the database had no sale: created the demo sale");
    Ok(())
}

/// Migrates the database under a Redis lock, so that instances starting together take turns,
/// and (`demo_sale`) creates the demo sale on an empty database under the same lock.
async fn migrate(shop: &Shop, demo_sale: bool) -> Result<(), BoxError> {
    let guard = shop
        .locks()
        .lock("flash-sale:migrate")
        .wait(Duration::from_secs(60))
        .await?;
    shop.db()
        .migrate()
        .await
        .map_err(|e| format!("cannot migrate the database: {e}"))?;
    if demo_sale {
        seed_demo_sale(shop)
            .await
            .map_err(|e| format!("cannot create the demo sale: {e}"))?;
    }
    guard.unlock().await?;
    Ok(())
}

/// Installs the metrics recorder, connects, migrates (under a Redis lock, so instances
/// starting together take turns; under the same lock, creates the demo sale on an empty
/// database unless told not to), records this instance (name and lock client id) in the
/// database, prints `LISTENING http://ADDR` on stdout and serves until Ctrl-C, SIGTERM or
/// (supervised) the end of stdin.
pub async fn serve(options: ServeOptions) -> Result<(), BoxError> {
    // First, so that the lock client's metrics, if lock-core records any, are recorded.
    let metrics = crate::telemetry::install();
    let db = Db::connect(&options.database_url, options.db_connections)
        .await
        .map_err(|e| format!("cannot open the database: {e}"))?;
    let locks = LockClient::builder(&options.redis_url)
        .watchdog_lease(options.lease)
        .metric_label(lock_family)
        .pool_size(32)
        .build()
        .await
        .map_err(|e| format!("cannot use Redis at the given URL (--redis-url / REDIS_URL): {e}"))?;
    let stall = options.stall_once.then(|| Arc::new(StallHook::new()));
    let shop = Arc::new(Shop::new(
        db.clone(),
        locks,
        ShopOptions {
            locking: options.locking,
            limits: options.limits,
            work: options.work,
            stock_in: options.stock_in,
            stall: stall.clone(),
            crash: options
                .crash_after_commit
                .then(|| Arc::new(CrashHook::new())),
        },
    ));
    migrate(&shop, options.demo_sale).await?;
    purge_idempotency_records(&db);
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(options.host, options.port))
        .await
        .map_err(|e| format!("cannot listen on {}:{}: {e}", options.host, options.port))?;
    let addr = listener.local_addr()?;
    let me = Me {
        name: options
            .name
            .clone()
            .unwrap_or_else(|| format!("flash-sale@{addr}")),
        client_id: shop.locks().client_id().to_owned(),
        url: format!("http://{addr}"),
    };
    db.register_instance(&me.client_id, &me.name, &me.url, now_ms())
        .await
        .map_err(|e| format!("cannot record this instance in the database: {e}"))?;
    tracing::info!(name = %me.name, client_id = %me.client_id, "instance recorded");
    let panel = Arc::new(Panel::new(shop.clone(), me, metrics));
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "LISTENING http://{addr}")?;
        out.flush()?;
    }
    tracing::info!(%addr, locking = options.locking, limits = ?options.limits, "serving");

    let (stop_tx, mut stop_rx) = watch::channel(false);
    if options.supervised {
        watch_stdin(stop_tx.clone(), stall);
    }
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let shutdown = async move {
        let _ = stop_rx.wait_for(|stop| *stop).await;
    };
    // TCP_NODELAY: for a streaming body the lock layer sends the last frame only once the
    // lock is released, so the response may leave in two writes; with Nagle on, the second
    // one can wait for the client's delayed ACK (~40 ms). (This app's small JSON bodies are
    // read under the lock and sent in one piece, but a server should not depend on that.)
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    // With the peer's address: the per-client rate limit's key when a request names no client.
    let app = crate::api::router(shop, panel).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    db.close().await;
    Ok(())
}

/// Deletes expired idempotency records once a minute, for as long as the runtime runs.
fn purge_idempotency_records(db: &Db) {
    let store = SqlRecordStore::new(db.pool().clone());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(60));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            match store.purge_expired().await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(n, "expired idempotency records deleted"),
                Err(error) => {
                    tracing::warn!(%error, "could not delete expired idempotency records")
                }
            }
        }
    });
}

/// The `family` label of a lock's metrics: which of the app's locks it is (the names
/// themselves are unbounded).
pub fn lock_family(name: &str) -> Option<&'static str> {
    if name.starts_with("sale:") && name.ends_with(":stock") {
        Some("stock")
    } else if name.starts_with("buyer:") {
        Some("buyer")
    } else if name.starts_with("order:") {
        Some("order")
    } else if name.starts_with("idem:") {
        Some("idempotency")
    } else if name == "flash-sale:migrate" {
        Some("migrate")
    } else {
        None
    }
}

/// Reads stdin on a thread of its own (so it never holds up the runtime's shutdown): each
/// `resume` line releases the stall point; the end of stdin stops the server.
fn watch_stdin(stop: watch::Sender<bool>, stall: Option<Arc<StallHook>>) {
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if line.trim() == "resume"
                && let Some(hook) = &stall
            {
                hook.resume();
            }
        }
        let _ = stop.send(true);
    });
}

/// Resolves on Ctrl-C or SIGTERM; returns the signal's name.
pub async fn shutdown_signal() -> &'static str {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        () = term => "SIGTERM",
    }
}
