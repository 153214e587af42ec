//! The HTTP API (axum) and the storefront page.
//!
//! | route | what | answers |
//! |---|---|---|
//! | `GET /` | the storefront page | `200` HTML |
//! | `POST /api/sales` | create a sale (`sku`, `name`, `stock`, optional `price_cents`, `per_user_limit`, `starts_at`, `ends_at`) | `201`, `400` |
//! | `GET /api/sales` | the 100 most recent sales | `200` |
//! | `GET /api/sales/{sale_id}` | one sale | `200`, `400`, `404` |
//! | `GET /api/sales/{sale_id}/stats` | its numbers, from the database | `200`, `400`, `404` |
//! | `POST /api/sales/{sale_id}/orders` | buy one item; buyer id in `X-User-Id`, optionally an `Idempotency-Key` | `201`, `400`, `404`, `409` (already ordered, double click, not started, key in use), `410` (sold out, ended), `422` (key reused), `429` (the buyer's or the client's rate limit: retry after `Retry-After`), `503` (busy: retry) |
//! | `GET /api/orders/{order_id}` | one order | `200`, `400`, `404` |
//! | `POST /api/orders/{order_id}/pay` | payment callback `{"payment_ref": "..."}`, idempotent; optionally an `Idempotency-Key` | `200`, `400`, `404`, `409` (paid by another payment), `422` (key reused) |
//! | `GET /api/sales/{sale_id}/lock` | the sale's stock lock and recent rejections, for the lock panel ([`crate::panel`]) | `200`, `400`, `404`, `503` |
//! | `GET /api/instance` | this instance: name, lock client id, URL | `200` |
//! | `GET /metrics` | Prometheus text ([`crate::telemetry`]) | `200` |
//!
//! Errors are JSON problem documents with a `code` (see [`crate::error`]).
//!
//! # Locks on the routes
//!
//! * `POST /api/sales/{sale_id}/orders` goes through a `lock-tower` [`DistributedLockLayer`]
//!   keyed on the buyer per sale (`buyer:<sale_id>:<user_id>`), with no wait: a double click,
//!   on any instance, is answered `409 lock_busy` at once instead of queueing for the sale's
//!   stock lock. The purchase inside takes that stock lock (see [`crate::shop`]).
//! * `POST /api/orders/{order_id}/pay` goes through one keyed on the order
//!   (`order:<order_id>`) that waits up to 2 s, so a replayed callback waits for the first and
//!   then gets its answer.
//!
//! Both layers let requests with a malformed id through unlocked
//! ([`MissingKey::PassThrough`]) so the handler answers them with its own `400`.
//!
//! # Rate limits
//!
//! Between the idempotency layer and the buyer lock, the purchase route has the per-buyer rate
//! limit; the whole API (payment callbacks excepted) has the per-client one, inside the
//! rejection counter: see [`crate::limits`]. Both answer `429` with `Retry-After`.
//!
//! # Idempotency keys
//!
//! Outside those layers, an [`IdempotencyLayer`] on each route answers the retries of a request
//! with an `Idempotency-Key` with its first answer (see [`crate::idempotency`]): purchases'
//! keys are scoped by the buyer (`X-User-Id`, prefix `idem:orders:`) and a duplicate gets `409`
//! at once while the first runs; payments' keys by the order (`idem:pay:`) and a duplicate waits
//! up to 2 s for the first answer. The records are in the database, and the purchase and the
//! payment write theirs in their own transaction.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::middleware;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use http::header::{CACHE_CONTROL, HeaderName, HeaderValue, LOCATION};
use http::{HeaderMap, Request, StatusCode};
use lock_tower::{
    DistributedLockLayer, Header, Idempotency, IdempotencyLayer, KeyExtractor, LeaseLost,
    MissingKey, PathParam, Rejection, header_value,
};
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ErrorCode};
use crate::idempotency::{JsonAnswer, Recorder, SqlRecordStore};
use crate::limits;
use crate::model::{NewSale, Order, OrderId, PaymentCallback, PaymentResult, SaleId, UserId};
use crate::panel::{self, Panel};
use crate::shop::Shop;

/// The storefront page: static HTML, CSS and JavaScript, embedded in the binary.
pub const INDEX_HTML: &str = include_str!("page/index.html");

/// The lock key of a purchase request: `<sale_id>:<user_id>`, if both are well-formed.
fn buyer_key(req: &Request<Body>) -> Option<String> {
    let sale = PathParam::new("sale_id").extract(req)?;
    let user = header_value(req, "x-user-id")?;
    (SaleId::parse(&sale).is_ok() && UserId::is_valid(&user)).then(|| format!("{sale}:{user}"))
}

/// The lock key of a payment callback: the order id, if well-formed.
fn order_key(req: &Request<Body>) -> Option<String> {
    PathParam::new("order_id")
        .extract(req)
        .filter(|id| OrderId::parse(id).is_ok())
}

/// How long an idempotency record is kept.
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 3600);

/// The idempotency layer of a route: records in the app's database, scoped by `scope`, under
/// `prefix`, waiting up to `wait` for a key's first request to finish.
fn idempotency<Sc>(
    shop: &Shop,
    prefix: &str,
    scope: Sc,
    wait: Duration,
) -> IdempotencyLayer<Sc, fn(Rejection) -> Response> {
    IdempotencyLayer::new(shop.locks().clone())
        .store(SqlRecordStore::new(shop.db().pool().clone()))
        .prefix(prefix)
        .scope(scope)
        .ttl(IDEMPOTENCY_TTL)
        .wait(wait)
        .on_rejection(tagged_rejection as fn(Rejection) -> Response)
}

/// A lock layer's rejection: its default problem document, with its code in the extensions
/// for the rejection counter.
fn tagged_rejection(rejection: Rejection) -> Response {
    let mut response = rejection.to_response::<Body>();
    response
        .extensions_mut()
        .insert(ErrorCode(rejection.kind().code()));
    response
}

/// The app's router, with the panel's routes and its rejection counter. With locking off
/// (`--no-lock`) the routes have no lock layers.
pub fn router(shop: Arc<Shop>, panel: Arc<Panel>) -> Router {
    let mut orders = post(create_order);
    let mut pay = post(pay_order);
    if shop.locking() {
        let locks = shop.locks().clone();
        orders = orders.route_layer(
            DistributedLockLayer::new(locks.clone(), buyer_key)
                .prefix("buyer:")
                .missing_key(MissingKey::PassThrough)
                // The purchase inside is fenced at the database; the buyer lock only turns
                // double clicks away, so a lost buyer lock need not cut a purchase in two.
                .on_lease_lost(LeaseLost::Continue)
                .on_rejection(tagged_rejection),
        );
        pay = pay.route_layer(
            DistributedLockLayer::new(locks, order_key)
                .prefix("order:")
                .wait(Duration::from_secs(2))
                .missing_key(MissingKey::PassThrough)
                .on_rejection(tagged_rejection),
        );
        // Outside the locks: a replay needs none of them. A purchase's key is its buyer's; a
        // payment callback's is its order's, and a replay that comes while the first callback
        // runs waits for its answer (as for the order lock).
        let buyer = Header::new(HeaderName::from_static("x-user-id"));
        // The per-buyer rate limit, between them: a key's replay costs no attempt, and an
        // attempt over the quota takes no lock.
        orders = orders.route_layer(middleware::from_fn_with_state(
            shop.clone(),
            limits::per_buyer,
        ));
        orders = orders.route_layer(idempotency(&shop, "idem:orders:", buyer, Duration::ZERO));
        let order = PathParam::new("order_id");
        pay = pay.route_layer(idempotency(
            &shop,
            "idem:pay:",
            order,
            Duration::from_secs(2),
        ));
    } else {
        orders = orders.route_layer(middleware::from_fn_with_state(
            shop.clone(),
            limits::per_buyer,
        ));
    }
    let per_client = middleware::from_fn_with_state(shop.clone(), limits::per_client);
    Router::new()
        .route("/", get(index))
        .route("/healthz", get(|| async { "ok" }))
        .route("/api/sales", get(list_sales).post(create_sale))
        .route("/api/sales/{sale_id}", get(get_sale))
        .route("/api/sales/{sale_id}/stats", get(sale_stats))
        .route("/api/sales/{sale_id}/orders", orders)
        .route("/api/orders/{order_id}", get(get_order))
        .route("/api/orders/{order_id}/pay", pay)
        .fallback(not_found)
        .with_state(shop)
        .merge(panel::routes(panel.clone()))
        .layer(per_client)
        .layer(middleware::from_fn_with_state(panel, panel::track))
}

async fn index() -> Response {
    let mut response = Html(INDEX_HTML).into_response();
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

async fn not_found() -> ApiError {
    ApiError::not_found("not_found", "no such route".to_owned())
}

fn parse_json<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!("the body must be a JSON object of the documented shape: {e}"),
        )
    })
}

async fn list_sales(State(shop): State<Arc<Shop>>) -> Result<Response, ApiError> {
    Ok(Json(shop.list_sales().await?).into_response())
}

async fn create_sale(State(shop): State<Arc<Shop>>, body: Bytes) -> Result<Response, ApiError> {
    let new: NewSale = parse_json(&body)?;
    let sale = shop.create_sale(new).await?;
    let location = HeaderValue::try_from(format!("/api/sales/{}", sale.id))
        .map_err(|e| ApiError::internal(&e))?;
    Ok((StatusCode::CREATED, [(LOCATION, location)], Json(sale)).into_response())
}

async fn get_sale(
    State(shop): State<Arc<Shop>>,
    Path(sale_id): Path<String>,
) -> Result<Response, ApiError> {
    let id = SaleId::parse(&sale_id)?;
    Ok(Json(shop.sale(&id).await?).into_response())
}

async fn sale_stats(
    State(shop): State<Arc<Shop>>,
    Path(sale_id): Path<String>,
) -> Result<Response, ApiError> {
    let id = SaleId::parse(&sale_id)?;
    Ok(Json(shop.stats(&id).await?).into_response())
}

/// The answer to a purchase: `201` with the order and its `Location`.
fn created(order: &Order) -> Result<JsonAnswer, ApiError> {
    let location = format!("/api/orders/{}", order.id);
    JsonAnswer::new(StatusCode::CREATED, Some(location), order)
}

async fn create_order(
    State(shop): State<Arc<Shop>>,
    Path(sale_id): Path<String>,
    headers: HeaderMap,
    idem: Option<Extension<Idempotency>>,
) -> Result<Response, ApiError> {
    let id = SaleId::parse(&sale_id)?;
    let user = headers
        .get("x-user-id")
        .map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let user = UserId::parse(user)?;
    let recorder = idem
        .as_ref()
        .map(|Extension(idem)| Recorder::new(idem, created));
    shop.buy(&id, &user, recorder).await?.respond(created)
}

async fn get_order(
    State(shop): State<Arc<Shop>>,
    Path(order_id): Path<String>,
) -> Result<Response, ApiError> {
    let id = OrderId::parse(&order_id)?;
    Ok(Json(shop.order(&id).await?).into_response())
}

/// The answer to a payment callback: `200` with the result.
fn paid(result: &PaymentResult) -> Result<JsonAnswer, ApiError> {
    JsonAnswer::new(StatusCode::OK, None, result)
}

async fn pay_order(
    State(shop): State<Arc<Shop>>,
    Path(order_id): Path<String>,
    idem: Option<Extension<Idempotency>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = OrderId::parse(&order_id)?;
    let callback: PaymentCallback = parse_json(&body)?;
    let recorder = idem
        .as_ref()
        .map(|Extension(idem)| Recorder::new(idem, paid));
    shop.pay(&id, &callback, recorder).await?.respond(paid)
}
