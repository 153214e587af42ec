//! What an instance shows about itself and its locks: `GET /metrics` (Prometheus text),
//! `GET /api/instance`, and `GET /api/sales/{sale_id}/lock`, the storefront's lock panel.
//!
//! The lock panel reads the sale's stock lock from Redis ([`lock_core::Mutex::info`]): free or
//! held, by whom, with which fencing token and lease left, and whether a waiter asked to be
//! told of its release (`contended`). The holder is an owner id, `<client id>:<holder>`; each
//! instance records its lock client's id with its name in the database at start
//! (`instances`), so the panel names the instance that holds the lock. The last fencing token
//! is the sale's `fence` in the database: the highest token that claimed its stock, which
//! stays when the lock is free.
//!
//! Every API request answered with an error passes through [`track`], which counts it in
//! `flash_sale_rejections_total{route,status,code}` and, for purchases, keeps the sale's
//! recent rejections on this instance for the panel.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Path, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use http::Method;
use http::header::{CONTENT_TYPE, HeaderValue};
use lock_tower::idempotency::IDEMPOTENT_REPLAYED;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;

use crate::error::{ApiError, ErrorCode};
use crate::model::{SaleId, format_ms, now_ms};
use crate::shop::{Shop, StockQueue};
use crate::telemetry;

/// How many sales' rejections an instance keeps for the panel (the least recently rejected
/// sale is forgotten first).
const SALES_KEPT: usize = 64;
/// How many recent rejections of a sale the panel lists.
const RECENT_KEPT: usize = 8;

/// This instance, as the panel names it.
#[derive(Debug, Clone, Serialize)]
pub struct Me {
    /// Its name (`serve --name`, default `flash-sale@ADDR`).
    pub name: String,
    /// Its lock client's id: the part before `:` of every owner id it writes.
    pub client_id: String,
    /// Its base URL.
    pub url: String,
}

/// The state of the panel's routes and of [`track`].
#[derive(Debug)]
pub struct Panel {
    shop: Arc<Shop>,
    me: Me,
    metrics: &'static PrometheusHandle,
    rejections: Mutex<Rejections>,
    names: Mutex<HashMap<String, String>>,
}

impl Panel {
    /// The panel of instance `me`, whose recorder's handle is `metrics`.
    pub fn new(shop: Arc<Shop>, me: Me, metrics: &'static PrometheusHandle) -> Self {
        Self {
            shop,
            me,
            metrics,
            rejections: Mutex::new(Rejections::default()),
            names: Mutex::new(HashMap::new()),
        }
    }

    /// The name of the instance whose lock client has id `client_id`, if known.
    async fn instance_name(&self, client_id: &str) -> Result<Option<String>, ApiError> {
        if client_id == self.me.client_id {
            return Ok(Some(self.me.name.clone()));
        }
        if let Some(name) = lock(&self.names).get(client_id) {
            return Ok(Some(name.clone()));
        }
        let name = self.shop.db().instance_name(client_id).await?;
        if let Some(name) = &name {
            let mut names = lock(&self.names);
            if names.len() >= 1024 {
                names.clear();
            }
            names.insert(client_id.to_owned(), name.clone());
        }
        Ok(name)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One rejected purchase, for the panel.
#[derive(Debug, Clone, Serialize)]
pub struct RecentRejection {
    /// When (RFC 3339).
    pub at: String,
    /// The HTTP status.
    pub status: u16,
    /// The problem's `code`.
    pub code: &'static str,
}

/// A count of rejected purchases of one status and code.
#[derive(Debug, Clone, Serialize)]
pub struct RejectionCount {
    /// The HTTP status.
    pub status: u16,
    /// The problem's `code`.
    pub code: &'static str,
    /// How many, on this instance.
    pub count: u64,
}

#[derive(Debug, Default)]
struct SaleRejections {
    counts: BTreeMap<(u16, &'static str), u64>,
    recent: VecDeque<RecentRejection>,
    last: u64,
}

/// Rejected purchases by sale, on this instance, for at most [`SALES_KEPT`] sales.
#[derive(Debug, Default)]
struct Rejections {
    sales: HashMap<String, SaleRejections>,
    tick: u64,
}

impl Rejections {
    fn record(&mut self, sale: &str, status: u16, code: &'static str) {
        self.tick += 1;
        if !self.sales.contains_key(sale) && self.sales.len() >= SALES_KEPT {
            let oldest = self
                .sales
                .iter()
                .min_by_key(|(_, s)| s.last)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                self.sales.remove(&oldest);
            }
        }
        let entry = self.sales.entry(sale.to_owned()).or_default();
        entry.last = self.tick;
        *entry.counts.entry((status, code)).or_insert(0) += 1;
        if entry.recent.len() >= RECENT_KEPT {
            entry.recent.pop_back();
        }
        entry.recent.push_front(RecentRejection {
            at: format_ms(now_ms()),
            status,
            code,
        });
    }

    fn of(&self, sale: &str) -> (Vec<RejectionCount>, Vec<RecentRejection>) {
        let Some(s) = self.sales.get(sale) else {
            return (Vec::new(), Vec::new());
        };
        let counts = s
            .counts
            .iter()
            .map(|(&(status, code), &count)| RejectionCount {
                status,
                code,
                count,
            })
            .collect();
        (counts, s.recent.iter().cloned().collect())
    }
}

/// The routes of the panel: `/metrics`, `/api/instance`, `/api/sales/{sale_id}/lock`.
pub fn routes(panel: Arc<Panel>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/api/instance", get(instance))
        .route("/api/sales/{sale_id}/lock", get(sale_lock))
        .with_state(panel)
}

async fn metrics(State(panel): State<Arc<Panel>>) -> Response {
    let mut response = panel.metrics.render().into_response();
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

async fn instance(State(panel): State<Arc<Panel>>) -> Json<Me> {
    Json(panel.me.clone())
}

/// The holder of a lock, as the panel shows it.
#[derive(Debug, Serialize)]
pub struct Holder {
    /// The owner id as stored in Redis.
    pub owner: String,
    /// Its client id (before the `:`).
    pub client_id: String,
    /// The instance whose lock client that is, if it registered.
    pub instance: Option<String>,
}

/// `GET /api/sales/{sale_id}/lock`.
#[derive(Debug, Serialize)]
pub struct LockPanel {
    /// The sale.
    pub sale_id: String,
    /// The lock's name (`sale:<id>:stock`).
    pub lock: String,
    /// Whether this instance takes its locks (`false` with `--no-lock`).
    pub locking: bool,
    /// Whether anyone holds it now.
    pub held: bool,
    /// Who, if held.
    pub holder: Option<Holder>,
    /// The holder's remaining lease (ms), if held.
    pub ttl_ms: Option<u64>,
    /// The holder's fencing token, if held and known here: the lock's key keeps it (the
    /// scripted protocol), or this instance holds the lock. Under the native and hybrid
    /// protocols (Valkey 9, Redis 7) the key keeps only the owner, so another instance sees
    /// `None` and [`fencing_token_at_most`](Self::fencing_token_at_most).
    pub fencing_token: Option<u64>,
    /// An upper bound of the holder's fencing token, if held: the token where it is known,
    /// else the name's fencing counter now (lock-core's `LockInfo::fencing_token_at_most`).
    pub fencing_token_at_most: Option<u64>,
    /// The highest fencing token that claimed the sale's stock (0: none yet).
    pub last_fencing_token: i64,
    /// Whether a waiter asked Redis to be told of the release. lock-core queues an instance's
    /// waiters in-process and only the first of them waits in Redis, and an instance hands the
    /// lock from one of its purchases to the next without it, so purchases can wait here while
    /// this is `false`.
    pub contended: bool,
    /// Whether the lock's protocol marks waiters in Redis at all: the scripted protocol does;
    /// under the native and hybrid protocols (Valkey 9, Redis 7) a release always announces
    /// itself and `contended` stays `false`.
    pub waiter_marks: bool,
    /// Purchases of this sale on this instance waiting for its stock lock or holding it, now
    /// (`waiting_here + holding_here`).
    pub queued_here: usize,
    /// Purchases of this sale on this instance waiting for its stock lock, now.
    pub waiting_here: usize,
    /// Purchases of this sale on this instance holding its stock lock, now (0 or 1).
    pub holding_here: usize,
    /// The waiters in one line, for the storefront's panel: see [`waiters_summary`].
    pub waiters: String,
    /// The instance that answered.
    pub served_by: Me,
    /// Rejected purchases of this sale on this instance, by status and code.
    pub rejections: Vec<RejectionCount>,
    /// The most recent of them, newest first.
    pub recent_rejections: Vec<RecentRejection>,
}

async fn sale_lock(
    State(panel): State<Arc<Panel>>,
    Path(sale_id): Path<String>,
) -> Result<Json<LockPanel>, ApiError> {
    let id = SaleId::parse(&sale_id)?;
    let sale = panel
        .shop
        .db()
        .sale(&id)
        .await?
        .ok_or_else(|| ApiError::not_found("sale_not_found", format!("no sale {id}")))?;
    let name = Shop::stock_lock_name(&id);
    let info = panel.shop.locks().mutex(name.clone()).info().await?;
    let holder = match info.owner {
        Some(owner) => {
            let client_id = owner
                .split_once(':')
                .map_or(owner.as_str(), |(c, _)| c)
                .to_owned();
            let instance = panel.instance_name(&client_id).await?;
            Some(Holder {
                owner,
                client_id,
                instance,
            })
        }
        None => None,
    };
    let (rejections, recent_rejections) = lock(&panel.rejections).of(id.as_str());
    let queue = panel.shop.stock_lock_queue(&id);
    let waiter_marks = panel.shop.locks().server_capabilities().mutex_protocol
        == lock_core::MutexProtocol::Scripted;
    Ok(Json(LockPanel {
        sale_id: id.to_string(),
        lock: name,
        locking: panel.shop.locking(),
        held: info.held,
        holder,
        ttl_ms: info
            .ttl
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        fencing_token: info.fencing_token,
        fencing_token_at_most: info.fencing_token_at_most,
        last_fencing_token: sale.fence,
        contended: info.contended,
        waiter_marks,
        queued_here: queue.waiting + queue.holding,
        waiting_here: queue.waiting,
        holding_here: queue.holding,
        waiters: waiters_summary(info.held, waiter_marks.then_some(info.contended), queue),
        served_by: panel.me.clone(),
        rejections,
        recent_rejections,
    }))
}

/// The panel's waiters line: this instance's purchases at the lock (its own counts), then
/// whether a waiter asked Redis to announce the release (the `contended` flag). lock-core
/// queues an instance's waiters in-process and lets only the first of them wait in Redis (and
/// hands the lock from one purchase of an instance to the next without asking Redis), so
/// purchases waiting here with nobody asking Redis is a normal state, and the line says both
/// facts rather than a "none queued" that reads as a contradiction. `contended` is `None`
/// where the protocol marks no waiter in Redis (the native and hybrid ones).
pub fn waiters_summary(held: bool, contended: Option<bool>, here: StockQueue) -> String {
    let this = match (here.holding > 0, here.waiting) {
        (true, 0) => "this instance holds it, none of its purchases waiting".to_owned(),
        (true, n) => format!("this instance holds it, {n} more of its purchases waiting"),
        (false, 0) => "no purchase of this instance waiting".to_owned(),
        (false, 1) => "1 purchase of this instance waiting".to_owned(),
        (false, n) => format!("{n} purchases of this instance waiting"),
    };
    if !held {
        return this;
    }
    let redis = match contended {
        Some(true) => "a waiter asked Redis to announce the release",
        Some(false) => {
            "no waiter asked Redis to announce the release (an instance's waiters queue \
             in-process; only the first asks Redis)"
        }
        None => "its release is always announced (this lock protocol marks no waiter in Redis)",
    };
    format!("{this}; {redis}")
}

/// Which route a request is, for the rejection counter, and the sale of a purchase.
fn route_of(method: &Method, path: &str) -> (&'static str, Option<String>) {
    if let Some(rest) = path.strip_prefix("/api/sales/")
        && let Some(sale) = rest.strip_suffix("/orders")
        && method == Method::POST
    {
        let sale = SaleId::parse(sale).ok().map(|s| s.as_str().to_owned());
        return ("orders", sale);
    }
    if method == Method::POST && path.starts_with("/api/orders/") && path.ends_with("/pay") {
        return ("pay", None);
    }
    ("other", None)
}

/// Middleware: counts every response with an error status in
/// `flash_sale_rejections_total{route,status,code}` (the `code` of the app's and the lock
/// layer's problem documents; `other` for anything else) and keeps rejected purchases for the
/// panel; counts replayed responses in `flash_sale_idempotent_replays_total{route}`.
pub async fn track(State(panel): State<Arc<Panel>>, request: Request, next: Next) -> Response {
    let (route, sale) = route_of(request.method(), request.uri().path());
    let response = next.run(request).await;
    if response.headers().contains_key(IDEMPOTENT_REPLAYED) {
        telemetry::idempotent_replay(route);
    }
    let status = response.status();
    if status.is_client_error() || status.is_server_error() {
        let code = response
            .extensions()
            .get::<ErrorCode>()
            .map_or("other", |c| c.0);
        telemetry::rejection(route, status.as_u16(), code);
        if let Some(sale) = sale {
            lock(&panel.rejections).record(&sale, status.as_u16(), code);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_are_kept_for_a_bounded_number_of_sales_and_entries() {
        let mut r = Rejections::default();
        for i in 0..(SALES_KEPT + 10) {
            r.record(&format!("s{i}"), 409, "lock_busy");
        }
        assert_eq!(r.sales.len(), SALES_KEPT);
        assert!(r.of("s0").0.is_empty(), "the oldest sale is forgotten");
        for _ in 0..(RECENT_KEPT + 5) {
            r.record("hot", 410, "sold_out");
        }
        r.record("hot", 409, "already_ordered");
        let (counts, recent) = r.of("hot");
        assert_eq!(recent.len(), RECENT_KEPT);
        assert_eq!(recent[0].code, "already_ordered");
        let sold_out = counts.iter().find(|c| c.code == "sold_out").unwrap();
        assert_eq!(sold_out.count, (RECENT_KEPT + 5) as u64);
    }

    #[test]
    fn the_waiters_line_says_both_facts_without_contradiction() {
        let q = |waiting, holding| StockQueue { waiting, holding };
        // The storefront used to say "none queued; 10 purchase(s) ... waiting or holding".
        assert_eq!(
            waiters_summary(true, Some(false), q(9, 1)),
            "this instance holds it, 9 more of its purchases waiting; no waiter asked Redis to \
             announce the release (an instance's waiters queue in-process; only the first asks \
             Redis)"
        );
        assert_eq!(
            waiters_summary(true, Some(true), q(10, 0)),
            "10 purchases of this instance waiting; a waiter asked Redis to announce the release"
        );
        assert_eq!(
            waiters_summary(true, Some(true), q(0, 1)),
            "this instance holds it, none of its purchases waiting; a waiter asked Redis to \
             announce the release"
        );
        assert!(
            waiters_summary(true, Some(false), q(0, 0)).starts_with("no purchase of this instance")
        );
        assert_eq!(
            waiters_summary(false, Some(false), q(1, 0)),
            "1 purchase of this instance waiting"
        );
    }

    #[test]
    fn routes_are_told_apart_and_only_well_formed_sales_are_kept() {
        let sale = SaleId::generate();
        let path = format!("/api/sales/{sale}/orders");
        assert_eq!(
            route_of(&Method::POST, &path),
            ("orders", Some(sale.to_string()))
        );
        assert_eq!(route_of(&Method::GET, &path), ("other", None));
        assert_eq!(
            route_of(&Method::POST, "/api/sales/x/../orders"),
            ("orders", None)
        );
        assert_eq!(
            route_of(&Method::POST, "/api/orders/ord_1/pay"),
            ("pay", None)
        );
    }
}
