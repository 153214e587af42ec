//! Storage: one [`Db`] over sqlx's `Any` driver, so the same code and the same migration run
//! on SQLite (the default: a file in a data directory, WAL mode) and on PostgreSQL
//! (`DATABASE_URL=postgres://...`).
//!
//! The SQL is kept portable: `$1`-style parameters (SQLite reads them as numbered
//! parameters), `BIGINT` and `TEXT` (and one `BYTEA`, a BLOB in SQLite), ids and times made by
//! the app, no `RETURNING`, one upsert (`ON CONFLICT … DO UPDATE … WHERE`, which both have,
//! for idempotency records), no aggregates that PostgreSQL types as `NUMERIC`.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{AnyPool, Row};

use lock_core::fenced::Fenced;

use crate::idempotency::InTransaction;
use crate::model::{
    NewOrder, Order, OrderId, OrderStatus, Sale, SaleId, SaleStats, UserId, format_ms,
};

/// The migrations, embedded in the binary: `(version, description, SQL)`.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "schema", include_str!("../migrations/0001_schema.sql")),
    (
        2,
        "instances",
        include_str!("../migrations/0002_instances.sql"),
    ),
    (
        3,
        "idempotency",
        include_str!("../migrations/0003_idempotency.sql"),
    ),
];

/// Which database a [`Db`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite, in WAL mode.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// The URL of the SQLite database `flash-sale.db` in `dir` (created if missing).
pub fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}?mode=rwc", dir.join("flash-sale.db").display())
}

/// A pool of connections to the shop's database.
#[derive(Debug, Clone)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
}

/// How [`Db::write_purchase`] writes the sale's new stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StockWrite {
    /// Only while the sale's fence is this fencing token (the stock is kept here).
    Fenced(i64),
    /// Whatever is there (locks disabled: the control that oversells).
    Unconditional,
    /// Only downwards: the stock is kept in Redis, and this is its copy (a late copy never
    /// raises it). Never refused.
    Copy,
}

/// What [`Db::write_purchase`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The order and the new stock were written, together.
    Written,
    /// Nothing was written: the sale's fence had moved past the writer's token.
    Fenced,
    /// Nothing was written: the request's idempotency record was refused (a newer holder of
    /// its key recorded first).
    RecordFenced,
}

/// What [`Db::apply_payment`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentWrite {
    /// The payment was recorded and the order marked paid, together.
    Applied,
    /// Nothing was written: the order was no longer reserved (paid meanwhile).
    NotReserved,
    /// Nothing was written: the request's idempotency record was refused.
    RecordFenced,
}

impl Db {
    /// Connects to `url` (`sqlite://path?mode=rwc` or `postgres://...`) with at most
    /// `max_connections` connections.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Db, sqlx::Error> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            return Err(sqlx::Error::Configuration(
                "the database URL must start with sqlite: or postgres:".into(),
            ));
        };
        let mut options = AnyPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10));
        if backend == Backend::Sqlite {
            options = options.after_connect(|conn, _meta| {
                Box::pin(async move {
                    // Several processes share the file: wait for the write lock rather than
                    // fail, and do not fsync every commit (WAL keeps it consistent).
                    sqlx::query("PRAGMA busy_timeout = 15000")
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query("PRAGMA synchronous = NORMAL")
                        .execute(&mut *conn)
                        .await?;
                    sqlx::query("PRAGMA foreign_keys = ON")
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                })
            });
        }
        let pool = options.connect(url).await?;
        if backend == Backend::Sqlite {
            // Persistent in the file: readers never block the writer, nor the writer readers.
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&pool)
                .await?;
        }
        Ok(Db { pool, backend })
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The connection pool, for queries of your own.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Applies the embedded migrations that are not applied yet. On SQLite sqlx takes no lock
    /// of its own: run it from one process at a time (`serve` does it under a Redis lock).
    pub async fn migrate(&self) -> Result<(), sqlx::migrate::MigrateError> {
        Migrator::new(Embedded).await?.run(&self.pool).await
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Stores a new sale.
    pub async fn insert_sale(&self, sale: &Sale) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO sales (id, sku, name, price_cents, initial_stock, stock, per_user_limit, \
             starts_at, ends_at, fence, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(sale.id.as_str())
        .bind(&sale.sku)
        .bind(&sale.name)
        .bind(sale.price_cents)
        .bind(sale.initial_stock)
        .bind(sale.stock)
        .bind(sale.per_user_limit)
        .bind(sale.starts_at)
        .bind(sale.ends_at)
        .bind(sale.fence)
        .bind(sale.created_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The sale `id`, if it exists.
    pub async fn sale(&self, id: &SaleId) -> Result<Option<Sale>, sqlx::Error> {
        let row = sqlx::query(&format!("SELECT {SALE_COLUMNS} FROM sales WHERE id = $1"))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| sale_from_row(&r)).transpose()
    }

    /// The 100 most recent sales, newest first.
    pub async fn list_sales(&self) -> Result<Vec<Sale>, sqlx::Error> {
        let rows = sqlx::query(&format!(
            "SELECT {SALE_COLUMNS} FROM sales ORDER BY created_at DESC, id LIMIT 100"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(sale_from_row).collect()
    }

    /// Claims the sale's stock for the holder of fencing token `token`: succeeds only if no
    /// holder with a token as high has claimed it (`fence < token`). Returns whether it did.
    pub async fn claim_fence(&self, sale: &SaleId, token: i64) -> Result<bool, sqlx::Error> {
        let done = sqlx::query("UPDATE sales SET fence = $1 WHERE id = $2 AND fence < $1")
            .bind(token)
            .bind(sale.as_str())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records this instance: its lock client's id, its name and its URL (see
    /// `migrations/0002_instances.sql`).
    pub async fn register_instance(
        &self,
        client_id: &str,
        name: &str,
        url: &str,
        started_at: i64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO instances (client_id, name, url, started_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(client_id)
        .bind(name)
        .bind(url)
        .bind(started_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The name of the instance whose lock client has id `client_id`, if it registered.
    pub async fn instance_name(&self, client_id: &str) -> Result<Option<String>, sqlx::Error> {
        sqlx::query("SELECT name FROM instances WHERE client_id = $1")
            .bind(client_id)
            .fetch_optional(&self.pool)
            .await?
            .map(|r| r.try_get("name"))
            .transpose()
    }

    /// How many orders `user` has for `sale`.
    pub async fn count_orders_of(&self, sale: &SaleId, user: &UserId) -> Result<i64, sqlx::Error> {
        sqlx::query("SELECT COUNT(*) FROM orders WHERE sale_id = $1 AND user_id = $2")
            .bind(sale.as_str())
            .bind(user.as_str())
            .fetch_one(&self.pool)
            .await?
            .try_get(0)
    }

    /// Writes a purchase in one transaction: the sale's new stock (as `stock` says), the
    /// order and, for a request with an idempotency key, its `record` — or nothing.
    ///
    /// [`StockWrite::Fenced`]: the stock is written only while the sale's fence is still that
    /// token (`fence = token`, claimed before the stock was read); otherwise
    /// [`WriteOutcome::Fenced`] and nothing is written. [`StockWrite::Unconditional`] (locks
    /// disabled) writes it whatever is there; [`StockWrite::Copy`] only lowers it (the stock
    /// lives in Redis). A refused record is [`WriteOutcome::RecordFenced`].
    pub async fn write_purchase(
        &self,
        order: &NewOrder,
        new_stock: i64,
        stock: StockWrite,
        record: Option<&InTransaction<'_>>,
    ) -> Result<WriteOutcome, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let sql = match stock {
            StockWrite::Fenced(_) => "UPDATE sales SET stock = $1 WHERE id = $2 AND fence = $3",
            StockWrite::Unconditional => "UPDATE sales SET stock = $1 WHERE id = $2",
            StockWrite::Copy => "UPDATE sales SET stock = $1 WHERE id = $2 AND stock > $1",
        };
        let mut update = sqlx::query(sql)
            .bind(new_stock)
            .bind(order.sale_id.as_str());
        if let StockWrite::Fenced(token) = stock {
            update = update.bind(token);
        }
        let updated = update.execute(&mut *tx).await?;
        if updated.rows_affected() != 1 && stock != StockWrite::Copy {
            tx.rollback().await?;
            return Ok(WriteOutcome::Fenced);
        }
        sqlx::query(
            "INSERT INTO orders (id, sale_id, user_id, status, fence, created_at, paid_at) \
             VALUES ($1, $2, $3, $4, $5, $6, NULL)",
        )
        .bind(order.id.as_str())
        .bind(order.sale_id.as_str())
        .bind(order.user_id.as_str())
        .bind(OrderStatus::Reserved.as_str())
        .bind(order.fence)
        .bind(order.created_at)
        .execute(&mut *tx)
        .await?;
        if let Some(record) = record
            && record.put(&mut tx).await? != Fenced::Written
        {
            tx.rollback().await?;
            return Ok(WriteOutcome::RecordFenced);
        }
        tx.commit().await?;
        Ok(WriteOutcome::Written)
    }

    /// Records a write the fencing check refused, and returns the sale's current fence.
    pub async fn record_stale_write(&self, sale: &SaleId, token: i64) -> Result<i64, sqlx::Error> {
        let fence: i64 = sqlx::query("SELECT fence FROM sales WHERE id = $1")
            .bind(sale.as_str())
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?;
        sqlx::query(
            "INSERT INTO stale_writes (id, sale_id, token, fence, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(format!("stale_{}", uuid::Uuid::new_v4().simple()))
        .bind(sale.as_str())
        .bind(token)
        .bind(fence)
        .bind(crate::model::now_ms())
        .execute(&self.pool)
        .await?;
        Ok(fence)
    }

    /// The order `id` and the price of its sale, if it exists.
    pub async fn order(&self, id: &OrderId) -> Result<Option<(Order, i64)>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT o.id, o.sale_id, o.user_id, o.status, o.fence, o.created_at, o.paid_at, \
             s.price_cents FROM orders o JOIN sales s ON s.id = o.sale_id WHERE o.id = $1",
        )
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Ok((order_from_row(&r)?, r.try_get("price_cents")?)))
            .transpose()
    }

    /// The reference and amount of the payment applied to `order`, if any.
    pub async fn payment_of(&self, order: &OrderId) -> Result<Option<(String, i64)>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT payment_ref, amount_cents FROM payments WHERE order_id = $1 \
             ORDER BY created_at, id LIMIT 1",
        )
        .bind(order.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()
    }

    /// Applies a payment at `now` in one transaction: records it, marks the order paid and,
    /// for a request with an idempotency key, writes its `record`, if the order is still
    /// reserved; otherwise nothing is written.
    pub async fn apply_payment(
        &self,
        order: &OrderId,
        payment_ref: &str,
        amount_cents: i64,
        now: i64,
        record: Option<&InTransaction<'_>>,
    ) -> Result<PaymentWrite, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let updated = sqlx::query(
            "UPDATE orders SET status = $1, paid_at = $2 WHERE id = $3 AND status = $4",
        )
        .bind(OrderStatus::Paid.as_str())
        .bind(now)
        .bind(order.as_str())
        .bind(OrderStatus::Reserved.as_str())
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() != 1 {
            tx.rollback().await?;
            return Ok(PaymentWrite::NotReserved);
        }
        sqlx::query(
            "INSERT INTO payments (id, order_id, payment_ref, amount_cents, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(format!("pay_{}", uuid::Uuid::new_v4().simple()))
        .bind(order.as_str())
        .bind(payment_ref)
        .bind(amount_cents)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if let Some(record) = record
            && record.put(&mut tx).await? != Fenced::Written
        {
            tx.rollback().await?;
            return Ok(PaymentWrite::RecordFenced);
        }
        tx.commit().await?;
        Ok(PaymentWrite::Applied)
    }

    /// The sale's numbers, if it exists.
    pub async fn stats(&self, sale: &SaleId) -> Result<Option<SaleStats>, sqlx::Error> {
        let Some(s) = self.sale(sale).await? else {
            return Ok(None);
        };
        let row = sqlx::query(
            "SELECT COUNT(*), COUNT(DISTINCT user_id), \
             COUNT(CASE WHEN status = 'paid' THEN 1 END) FROM orders WHERE sale_id = $1",
        )
        .bind(sale.as_str())
        .fetch_one(&self.pool)
        .await?;
        let stale: i64 = sqlx::query("SELECT COUNT(*) FROM stale_writes WHERE sale_id = $1")
            .bind(sale.as_str())
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?;
        Ok(Some(SaleStats {
            sale_id: s.id.to_string(),
            initial_stock: s.initial_stock,
            stock: s.stock,
            orders: row.try_get(0)?,
            buyers: row.try_get(1)?,
            paid: row.try_get(2)?,
            fence: s.fence,
            stale_writes_rejected: stale,
        }))
    }
}

const SALE_COLUMNS: &str = "id, sku, name, price_cents, initial_stock, stock, per_user_limit, \
                            starts_at, ends_at, fence, created_at";

fn sale_from_row(r: &AnyRow) -> Result<Sale, sqlx::Error> {
    let id: String = r.try_get("id")?;
    Ok(Sale {
        id: SaleId::parse(&id).map_err(|e| sqlx::Error::Decode(e.detail.into()))?,
        sku: r.try_get("sku")?,
        name: r.try_get("name")?,
        price_cents: r.try_get("price_cents")?,
        initial_stock: r.try_get("initial_stock")?,
        stock: r.try_get("stock")?,
        per_user_limit: r.try_get("per_user_limit")?,
        starts_at: r.try_get("starts_at")?,
        ends_at: r.try_get("ends_at")?,
        fence: r.try_get("fence")?,
        created_at: r.try_get("created_at")?,
    })
}

fn order_from_row(r: &AnyRow) -> Result<Order, sqlx::Error> {
    let status: String = r.try_get("status")?;
    let created_at: i64 = r.try_get("created_at")?;
    let paid_at: Option<i64> = r.try_get("paid_at")?;
    Ok(Order {
        id: r.try_get("id")?,
        sale_id: r.try_get("sale_id")?,
        user_id: r.try_get("user_id")?,
        status: OrderStatus::from_db(&status).ok_or_else(|| {
            sqlx::Error::Decode(format!("unknown order status {status:?}").into())
        })?,
        fence: r.try_get("fence")?,
        created_at: format_ms(created_at),
        paid_at: paid_at.map(format_ms),
    })
}

/// The embedded migrations as a sqlx migration source.
#[derive(Debug)]
struct Embedded;

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(
        self,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send + 's>> {
        Box::pin(async {
            Ok(MIGRATIONS
                .iter()
                .map(|&(version, description, sql)| {
                    Migration::new(
                        version,
                        description.into(),
                        MigrationType::Simple,
                        sql.into(),
                        false,
                    )
                })
                .collect())
        })
    }
}
