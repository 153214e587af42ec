//! The shop's business logic, and the locks it runs under.
//!
//! # The purchase
//!
//! Buying one item is a multi-step business transaction, the kind one SQL statement does not
//! express: is the sale open, has this buyer reached the sale's per-person limit, is stock
//! left, reserve the item (a call to another service), then write the order and the new
//! stock. Run by several instances at once it oversells: two buyers read "1 left", both
//! write "0 left", two orders exist for one item. So it runs under the sale's stock lock,
//! `#[distributed_lock(key = "sale:{sale_id}:stock")]`, shared by every instance through
//! Redis.
//!
//! A lock with a lease cannot stop a holder that stalls past its lease (a long pause, a
//! frozen VM) from waking up and writing after the next holder. The fencing token stops its
//! write at the database:
//!
//! 1. **claim**: `UPDATE sales SET fence = $token WHERE id = $sale AND fence < $token` — the
//!    sale now belongs to this token, and to no older one;
//! 2. **read** the sale and the buyer's orders, **reserve** the item;
//! 3. **write**, in one transaction, `UPDATE sales SET stock = $new WHERE id = $sale AND
//!    fence = $token` and the order — or nothing, if a newer holder has claimed the sale since.
//!
//! Claiming before reading (rather than only checking `fence < token` at the write) also
//! refuses the late write when it lands between a newer holder's read and its write: the
//! newer holder claimed first, so the stale token no longer matches. Refused writes are
//! recorded in `stale_writes` and answered `503 stale_lock` (nothing was written: retry).
//!
//! # Payments
//!
//! A payment callback may be delivered twice, at once or later. `POST /api/orders/{id}/pay`
//! runs under the order's lock (the `lock-tower` layer in [`crate::api`]), so a replay waits
//! for the first delivery and then finds the order paid by the same reference: it is answered
//! `200` with `applied: false` (`replay_caught_by: "found_paid"`) and charges nothing. The
//! write itself is conditional (`... WHERE status = 'reserved'`) as a second line of defence:
//! without the lock (`--no-lock`) replays race the first callback, and that write is what
//! refuses them (`replay_caught_by: "conditional_write"`).

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::StatusCode;
use lock_core::{HeldLock, LockClient, distributed_lock};
use tokio::sync::Notify;

use crate::db::{Db, PaymentWrite, StockWrite, WriteOutcome};
use crate::error::ApiError;
use crate::idempotency::{Recorded, Recorder, ToRecord, record_fenced};
use crate::limits::Limits;
use crate::model::{
    NewOrder, NewSale, Order, OrderId, OrderStatus, PaymentCallback, PaymentResult, ReplayCheck,
    SaleId, SaleStats, SaleView, UserId, format_ms, now_ms,
};
use crate::stock::{self, StockStore, Taken};

/// How a [`Shop`] runs.
#[derive(Debug, Clone)]
pub struct ShopOptions {
    /// Take the locks (`false` only to show what they prevent: `--no-lock`).
    pub locking: bool,
    /// The rate limits' quotas ([`crate::limits`]); None: no rate limits (`--no-limit`).
    pub limits: Option<Limits>,
    /// How long the reservation step inside the critical section takes (a call to a
    /// warehouse or payment service in a real shop).
    pub work: Duration,
    /// Where the sales' stock is kept ([`crate::stock`]; `--stock-in`, the database by
    /// default).
    pub stock_in: StockStore,
    /// The test-only stall point, if armed: see [`StallHook`].
    pub stall: Option<Arc<StallHook>>,
    /// The test-only stop after a recorded commit, if armed: see [`CrashHook`].
    pub crash: Option<Arc<CrashHook>>,
}

impl Default for ShopOptions {
    fn default() -> Self {
        Self {
            locking: true,
            limits: Some(Limits::default()),
            work: Duration::from_millis(2),
            stock_in: StockStore::Sql,
            stall: None,
            crash: None,
        }
    }
}

/// A test-only pause inside the stock critical section, for `demo --stall-holder`.
///
/// The first purchase that reaches the point between its lock check and its stock write
/// prints `STALL-POINT pid=<pid> sale=<id> token=<token>` on stdout and waits for
/// [`StallHook::resume`]. The supervisor then freezes the whole process (`kill -STOP`) for
/// longer than the lock's lease, so its watchdog cannot renew the lock and another instance
/// takes it; after `kill -CONT` and the resume, the stale write meets the fencing check.
#[derive(Debug)]
pub struct StallHook {
    armed: AtomicBool,
    resume: Notify,
}

impl StallHook {
    /// An armed hook: it stops the first purchase that reaches it.
    pub fn new() -> Self {
        Self {
            armed: AtomicBool::new(true),
            resume: Notify::new(),
        }
    }

    /// Lets the stopped purchase go on (or the next one to reach the hook, if none waits).
    pub fn resume(&self) {
        self.resume.notify_one();
    }

    async fn reached(&self, sale: &SaleId, token: Option<i64>) {
        if self.armed.swap(false, Ordering::SeqCst) {
            {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(
                    out,
                    "STALL-POINT pid={} sale={sale} token={}",
                    std::process::id(),
                    token.unwrap_or(0)
                );
                let _ = out.flush();
            }
            self.resume.notified().await;
        }
    }
}

impl Default for StallHook {
    fn default() -> Self {
        Self::new()
    }
}

/// A test-only stop right after a purchase or a payment committed its business rows with its
/// idempotency record, before it answers (`serve --crash-after-commit`).
///
/// The first write that reaches it prints `COMMITTED pid=<pid> key=<record key>` on stdout and
/// never answers; the supervisor kills the process there (`SIGKILL`), to show that the retry
/// of the request is replayed from the record, not applied again.
#[derive(Debug)]
pub struct CrashHook {
    armed: AtomicBool,
}

impl CrashHook {
    /// An armed hook: it stops the first recorded write that reaches it.
    pub fn new() -> Self {
        Self {
            armed: AtomicBool::new(true),
        }
    }

    async fn reached(&self, key: &str) {
        if self.armed.swap(false, Ordering::SeqCst) {
            {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "COMMITTED pid={} key={key}", std::process::id());
                let _ = out.flush();
            }
            std::future::pending::<()>().await;
        }
    }
}

impl Default for CrashHook {
    fn default() -> Self {
        Self::new()
    }
}

/// The shop: sales, purchases and payments over one database and one lock client.
#[derive(Debug, Clone)]
pub struct Shop {
    db: Db,
    locks: LockClient,
    options: ShopOptions,
    queues: Arc<Queues>,
}

/// The purchases of one sale on this instance that are at its stock lock, now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StockQueue {
    /// Waiting for the lock.
    pub waiting: usize,
    /// Holding it (0 or 1 with the locks on).
    pub holding: usize,
}

/// [`StockQueue`]s by sale; a sale with nobody at its lock has no entry.
#[derive(Debug, Default)]
struct Queues(Mutex<HashMap<String, StockQueue>>);

impl Queues {
    fn change(&self, sale: &str, change: impl FnOnce(&mut StockQueue)) {
        let mut sales = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let queue = sales.entry(sale.to_owned()).or_default();
        change(queue);
        if *queue == StockQueue::default() {
            sales.remove(sale);
        }
    }

    fn of(&self, sale: &str) -> StockQueue {
        let sales = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        sales.get(sale).copied().unwrap_or_default()
    }
}

/// A purchase at a sale's stock lock, counted in [`Shop::stock_lock_queue`] while it lives
/// (also when cancelled): waiting until [`Queued::holding`], then holding.
struct Queued {
    queues: Arc<Queues>,
    sale: String,
    holding: AtomicBool,
}

impl Queued {
    fn new(queues: &Arc<Queues>, sale: &SaleId) -> Self {
        queues.change(sale.as_str(), |q| q.waiting += 1);
        Self {
            queues: queues.clone(),
            sale: sale.as_str().to_owned(),
            holding: AtomicBool::new(false),
        }
    }

    /// The purchase got the lock.
    fn holding(&self) {
        if !self.holding.swap(true, Ordering::Relaxed) {
            self.queues.change(&self.sale, |q| {
                q.waiting -= 1;
                q.holding += 1;
            });
        }
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        let holding = *self.holding.get_mut();
        self.queues.change(&self.sale, |q| {
            if holding {
                q.holding -= 1;
            } else {
                q.waiting -= 1;
            }
        });
    }
}

/// `503 lock_lost`: the purchase's lock was gone before it wrote.
fn lost_before_writing() -> ApiError {
    ApiError::unavailable(
        "lock_lost",
        "the purchase lost its lock before writing; nothing was written: try again".to_owned(),
        Duration::from_secs(1),
    )
}

fn sale_not_found(id: &SaleId) -> ApiError {
    ApiError::not_found("sale_not_found", format!("no sale {id}"))
}

fn order_not_found(id: &OrderId) -> ApiError {
    ApiError::not_found("order_not_found", format!("no order {id}"))
}

impl Shop {
    /// A shop over `db`, locking through `locks`.
    pub fn new(db: Db, locks: LockClient, options: ShopOptions) -> Self {
        Self {
            db,
            locks,
            options,
            queues: Arc::default(),
        }
    }

    /// The name of sale `id`'s stock lock, the one its purchases take.
    pub fn stock_lock_name(id: &SaleId) -> String {
        stock::lock_name(id)
    }

    /// The purchases of sale `id` on this shop waiting for its stock lock or holding it, now.
    pub fn stock_lock_queue(&self, id: &SaleId) -> StockQueue {
        self.queues.of(id.as_str())
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The lock client.
    pub fn locks(&self) -> &LockClient {
        &self.locks
    }

    /// Whether the shop takes its locks.
    pub fn locking(&self) -> bool {
        self.options.locking
    }

    /// The rate limits' quotas, if the shop limits rates.
    pub fn limits(&self) -> Option<Limits> {
        self.options.limits
    }

    /// Creates a sale.
    pub async fn create_sale(&self, new: NewSale) -> Result<SaleView, ApiError> {
        let now = now_ms();
        let sale = new.validate(now)?;
        if self.options.stock_in == StockStore::Redis {
            stock::put(&self.locks, &sale.id, sale.stock).await?;
        }
        self.db.insert_sale(&sale).await?;
        Ok(sale.view(now))
    }

    /// The 100 most recent sales.
    pub async fn list_sales(&self) -> Result<Vec<SaleView>, ApiError> {
        let now = now_ms();
        Ok(self
            .db
            .list_sales()
            .await?
            .iter()
            .map(|s| s.view(now))
            .collect())
    }

    /// One sale, or `404`.
    pub async fn sale(&self, id: &SaleId) -> Result<SaleView, ApiError> {
        let sale = self.db.sale(id).await?.ok_or_else(|| sale_not_found(id))?;
        Ok(sale.view(now_ms()))
    }

    /// A sale's numbers, or `404`.
    pub async fn stats(&self, id: &SaleId) -> Result<SaleStats, ApiError> {
        self.db.stats(id).await?.ok_or_else(|| sale_not_found(id))
    }

    /// One order, or `404`.
    pub async fn order(&self, id: &OrderId) -> Result<Order, ApiError> {
        let (order, _) = self
            .db
            .order(id)
            .await?
            .ok_or_else(|| order_not_found(id))?;
        Ok(order)
    }

    /// Buys one item of sale `sale_id` for `user`: the order, or why not (`404`, `409`,
    /// `410`, `503`). With a `recorder` (a request with an idempotency key), the order's
    /// answer is recorded in the purchase's transaction.
    pub async fn buy(
        &self,
        sale_id: &SaleId,
        user: &UserId,
        recorder: Option<Recorder<'_, Order>>,
    ) -> Result<Recorded<Order>, ApiError> {
        // Outside the lock, the cheap refusals: stock never comes back, so a sale seen sold
        // out (or closed) is final and need not queue for the lock.
        let sale = self
            .db
            .sale(sale_id)
            .await?
            .ok_or_else(|| sale_not_found(sale_id))?;
        sale.check_buyable(now_ms())?;
        if self.options.locking {
            let queued = Queued::new(&self.queues, sale_id);
            // Boxed: the lock's future is deep, and the handler's would otherwise nest it.
            Box::pin(self.buy_locked(sale_id, user, &queued, recorder)).await
        } else {
            self.purchase(sale_id, user, None, recorder).await
        }
    }

    /// The purchase under the sale's stock lock. `on_lost = "continue"`: the body is not cut
    /// at an await when the lease runs out; the fencing token stops its write instead.
    #[distributed_lock(
        key = "sale:{sale_id}:stock",
        client = self.locks,
        wait = "5s",
        on_lost = "continue",
        held = held
    )]
    async fn buy_locked(
        &self,
        sale_id: &SaleId,
        user: &UserId,
        queued: &Queued,
        recorder: Option<Recorder<'_, Order>>,
    ) -> Result<Recorded<Order>, ApiError> {
        queued.holding();
        self.purchase(sale_id, user, Some(&held), recorder).await
    }

    /// The critical section: claim, read, reserve, write. See the module docs.
    async fn purchase(
        &self,
        sale_id: &SaleId,
        user: &UserId,
        lock: Option<&HeldLock>,
        recorder: Option<Recorder<'_, Order>>,
    ) -> Result<Recorded<Order>, ApiError> {
        let token = lock
            .map(|l| {
                let token = l.fencing_token().ok_or_else(|| {
                    ApiError::internal(&"the stock lock is a mutex: it has a fencing token")
                })?;
                i64::try_from(token).map_err(|e| ApiError::internal(&e))
            })
            .transpose()?;
        let in_redis = self.options.stock_in == StockStore::Redis;
        // 1. Claim the sale's stock for this token: refused if a newer holder has. (Stock in
        //    Redis needs no claim: the guarded take in step 5 checks the lock itself.)
        if let Some(token) = token
            && !in_redis
            && !self.db.claim_fence(sale_id, token).await?
        {
            return Err(self.stale(sale_id, token).await);
        }
        // 2. Read: open, the buyer's limit, stock left.
        let sale = self
            .db
            .sale(sale_id)
            .await?
            .ok_or_else(|| sale_not_found(sale_id))?;
        sale.check_buyable(now_ms())?;
        let mine = self.db.count_orders_of(sale_id, user).await?;
        if mine >= sale.per_user_limit {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "already_ordered",
                format!(
                    "buyer {user} already has {mine} order(s) for this sale (limit {})",
                    sale.per_user_limit
                ),
            ));
        }
        // Without the lock, the Redis counter is read here and written back in step 5: the
        // hand-written read-modify-write that oversells.
        let unguarded_read = match (in_redis, lock) {
            (true, None) => Some(self.redis_stock(sale_id).await?),
            _ => None,
        };
        // 3. Reserve the item elsewhere: the read-then-write window.
        if !self.options.work.is_zero() {
            tokio::time::sleep(self.options.work).await;
        }
        // 4. Still ours? A pause can come after this check all the same: the fence (or the
        //    guarded take) catches it.
        if lock.is_some_and(|l| !l.is_held()) {
            return Err(lost_before_writing());
        }
        if let Some(hook) = &self.options.stall {
            hook.reached(sale_id, token).await;
        }
        // 5. Take the unit: in Redis, one guarded step (or, without the lock, the write-back
        //    of what step 2 read); in the database, with the order below.
        let (new_stock, write) = match (in_redis, lock, unguarded_read) {
            (true, Some(held), _) => match stock::take(held, sale_id).await? {
                Taken::Sold { left } => (left, StockWrite::Copy),
                Taken::SoldOut => return Err(ApiError::sold_out()),
                Taken::NotHeld => return Err(self.stale(sale_id, token.unwrap_or(0)).await),
            },
            (true, None, Some(read)) => {
                stock::put(&self.locks, sale_id, read - 1).await?;
                (read - 1, StockWrite::Copy)
            }
            (_, _, _) => match token {
                Some(token) => (sale.stock - 1, StockWrite::Fenced(token)),
                None => (sale.stock - 1, StockWrite::Unconditional),
            },
        };
        // Write the order (and the new stock, or its copy) together, with the request's
        // idempotency record if it has a key — if the sale is still ours.
        let order = NewOrder {
            id: OrderId::generate(),
            sale_id: sale_id.clone(),
            user_id: user.clone(),
            fence: token.unwrap_or(0),
            created_at: now_ms(),
        };
        let view = order.view();
        let record = ToRecord::new(recorder, &view)?;
        let written = self
            .db
            .write_purchase(&order, new_stock, write, record.in_transaction())
            .await;
        // A unit taken in Redis for an order that was not written goes back while the lock
        // is still held.
        if in_redis
            && let Some(held) = lock
            && !matches!(written, Ok(WriteOutcome::Written))
        {
            stock::give_back(held, sale_id).await;
        }
        match written? {
            WriteOutcome::Written => {
                crate::telemetry::order_created(1);
                self.committed(&record).await;
                Ok(record.done(view))
            }
            WriteOutcome::Fenced => Err(self.stale(sale_id, token.unwrap_or(0)).await),
            WriteOutcome::RecordFenced => Err(record_fenced()),
        }
    }

    /// The sale's counter in Redis, without the lock (`--no-lock`): sold out when it has
    /// none left.
    async fn redis_stock(&self, sale_id: &SaleId) -> Result<i64, ApiError> {
        match stock::read(&self.locks, sale_id).await? {
            Some(left) if left > 0 => Ok(left),
            Some(_) => Err(ApiError::sold_out()),
            None => Err(ApiError::internal(&format!(
                "sale {sale_id} has no stock counter in Redis"
            ))),
        }
    }

    /// After a commit: a record written in it is stored (the layer does not store again);
    /// the test-only crash hook stops here.
    async fn committed(&self, record: &ToRecord<'_>) {
        if let Some(record) = record.in_transaction() {
            record.committed();
            if let Some(hook) = &self.options.crash {
                hook.reached(record.key()).await;
            }
        }
    }

    /// Records a write refused by the fencing check and builds the answer.
    async fn stale(&self, sale_id: &SaleId, token: i64) -> ApiError {
        match self.db.record_stale_write(sale_id, token).await {
            Ok(fence) => tracing::warn!(
                sale = %sale_id, token, fence,
                "fencing check refused a stale stock write: the lock had moved on"
            ),
            Err(e) => tracing::error!(sale = %sale_id, token, error = %e,
                "could not record a refused stale write"),
        }
        ApiError::unavailable(
            "stale_lock",
            "this purchase's lock expired while it ran and a newer holder took over; nothing \
             was written: try again"
                .to_owned(),
            Duration::from_secs(1),
        )
    }

    /// Applies a payment callback to an order, once: a replay with the same reference is
    /// answered with `applied: false`; another reference for a paid order is `409`. With a
    /// `recorder` (a callback with an idempotency key), the answer of an applied payment is
    /// recorded in the payment's transaction.
    pub async fn pay(
        &self,
        order_id: &OrderId,
        callback: &PaymentCallback,
        recorder: Option<Recorder<'_, PaymentResult>>,
    ) -> Result<Recorded<PaymentResult>, ApiError> {
        callback.validate()?;
        let (order, price) = self
            .db
            .order(order_id)
            .await?
            .ok_or_else(|| order_not_found(order_id))?;
        // Which check stops a replay: the read below (the order is paid already), or, when
        // the replay runs alongside the first callback, the conditional write.
        let mut caught_by = ReplayCheck::FoundPaid;
        if order.status == OrderStatus::Reserved {
            let now = now_ms();
            let paid = PaymentResult {
                order: Order {
                    status: OrderStatus::Paid,
                    paid_at: Some(format_ms(now)),
                    ..order
                },
                payment_ref: callback.payment_ref.clone(),
                amount_cents: price,
                applied: true,
                replay_caught_by: None,
            };
            let record = ToRecord::new(recorder, &paid)?;
            let write = self.db.apply_payment(
                order_id,
                &callback.payment_ref,
                price,
                now,
                record.in_transaction(),
            );
            match write.await? {
                PaymentWrite::Applied => {
                    crate::telemetry::payment(true);
                    self.committed(&record).await;
                    return Ok(record.done(paid));
                }
                PaymentWrite::RecordFenced => return Err(record_fenced()),
                PaymentWrite::NotReserved => caught_by = ReplayCheck::ConditionalWrite,
            }
        }
        // Paid already (or meanwhile): a replay of the same callback, or another payment.
        let order = self.order(order_id).await?;
        let (paid_ref, amount) = self.db.payment_of(order_id).await?.ok_or_else(|| {
            ApiError::internal(&format!("order {order_id} is paid without a payment"))
        })?;
        if paid_ref == callback.payment_ref {
            crate::telemetry::payment(false);
            Ok(Recorded::without_record(PaymentResult {
                order,
                payment_ref: paid_ref,
                amount_cents: amount,
                applied: false,
                replay_caught_by: Some(caught_by),
            }))
        } else {
            Err(ApiError::new(
                StatusCode::CONFLICT,
                "already_paid",
                format!("order {order_id} was already paid by another payment"),
            ))
        }
    }
}
