//! The invariants of a sale, checked straight in the database (never through the API).

use sqlx::Row;

use crate::db::Db;
use crate::model::SaleId;

/// What the database says about one sale, and the invariants it must keep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invariants {
    /// Stock at creation.
    pub initial_stock: i64,
    /// Stock left.
    pub stock_left: i64,
    /// Orders placed.
    pub sold: i64,
    /// Orders beyond the stock that existed: `sold − initial_stock`, when positive.
    pub oversold: i64,
    /// Orders minus the stock they took: `sold − (initial_stock − stock_left)`; not zero when
    /// stock updates were lost (or stock was taken without an order).
    pub stock_mismatch: i64,
    /// Orders beyond the per-person limit, over all buyers.
    pub duplicate_orders: i64,
    /// Buyers with more orders than the limit.
    pub buyers_over_limit: i64,
    /// Orders marked paid.
    pub paid_orders: i64,
    /// Orders with more than one payment.
    pub paid_twice: i64,
    /// Orders marked paid without a payment, or with a payment but not marked paid.
    pub payment_mismatches: i64,
    /// Stock writes refused by the fencing check.
    pub stale_writes_rejected: i64,
}

impl Invariants {
    /// Reads the numbers of sale `sale` from the database.
    pub async fn check(db: &Db, sale: &SaleId) -> Result<Invariants, sqlx::Error> {
        let pool = db.pool();
        let s = sqlx::query("SELECT initial_stock, stock, per_user_limit FROM sales WHERE id = $1")
            .bind(sale.as_str())
            .fetch_optional(pool)
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
        let (initial_stock, stock_left, limit): (i64, i64, i64) =
            (s.try_get(0)?, s.try_get(1)?, s.try_get(2)?);
        let count = |sql: &'static str| async move {
            sqlx::query(sql)
                .bind(sale.as_str())
                .fetch_one(pool)
                .await?
                .try_get::<i64, _>(0)
        };
        let sold = count("SELECT COUNT(*) FROM orders WHERE sale_id = $1").await?;
        let over = sqlx::query(
            "SELECT user_id, COUNT(*) FROM orders WHERE sale_id = $1 \
             GROUP BY user_id HAVING COUNT(*) > $2",
        )
        .bind(sale.as_str())
        .bind(limit)
        .fetch_all(pool)
        .await?;
        let mut duplicate_orders = 0;
        for row in &over {
            duplicate_orders += row.try_get::<i64, _>(1)? - limit;
        }
        let paid_orders =
            count("SELECT COUNT(*) FROM orders WHERE sale_id = $1 AND status = 'paid'").await?;
        let paid_twice = count(
            "SELECT COUNT(*) FROM (SELECT p.order_id FROM payments p \
             JOIN orders o ON o.id = p.order_id WHERE o.sale_id = $1 \
             GROUP BY p.order_id HAVING COUNT(*) > 1) twice",
        )
        .await?;
        let payment_mismatches = count(
            "SELECT COUNT(*) FROM orders o WHERE o.sale_id = $1 AND \
             ((o.status = 'paid' AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.order_id = o.id)) \
             OR (o.status <> 'paid' AND EXISTS (SELECT 1 FROM payments p WHERE p.order_id = o.id)))",
        )
        .await?;
        let stale_writes_rejected =
            count("SELECT COUNT(*) FROM stale_writes WHERE sale_id = $1").await?;
        Ok(Invariants {
            initial_stock,
            stock_left,
            sold,
            oversold: (sold - initial_stock).max(0),
            stock_mismatch: sold - (initial_stock - stock_left),
            duplicate_orders,
            buyers_over_limit: over.len() as i64,
            paid_orders,
            paid_twice,
            payment_mismatches,
            stale_writes_rejected,
        })
    }

    /// The invariants, each with whether it holds and a line saying so.
    pub fn lines(&self) -> Vec<(bool, String)> {
        let expected = self.initial_stock - self.stock_left;
        vec![
            (
                self.sold == expected,
                format!(
                    "orders ({}) == initial stock ({}) - stock left ({})",
                    self.sold, self.initial_stock, self.stock_left
                ),
            ),
            (
                self.oversold == 0,
                format!(
                    "orders ({}) <= initial stock ({}) [oversold={}]",
                    self.sold, self.initial_stock, self.oversold
                ),
            ),
            (
                self.stock_left >= 0,
                format!("stock never negative (left: {})", self.stock_left),
            ),
            (
                self.duplicate_orders == 0,
                format!(
                    "no buyer over the per-person limit [duplicate_orders={}, \
                     buyers_over_limit={}]",
                    self.duplicate_orders, self.buyers_over_limit
                ),
            ),
            (
                self.paid_twice == 0 && self.payment_mismatches == 0,
                format!(
                    "every paid order paid once ({} paid, {} paid twice, {} mismatched)",
                    self.paid_orders, self.paid_twice, self.payment_mismatches
                ),
            ),
        ]
    }

    /// The invariants that do not hold, as lines; empty when all hold.
    pub fn violations(&self) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|(ok, _)| !ok)
            .map(|(_, line)| line)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_name_what_broke() {
        let good = Invariants {
            initial_stock: 100,
            stock_left: 0,
            sold: 100,
            paid_orders: 100,
            ..Invariants::default()
        };
        assert!(good.violations().is_empty());
        // Lost stock updates: 130 orders, stock written down to 0 from stale reads.
        let oversold = Invariants {
            sold: 130,
            oversold: 30,
            stock_mismatch: 30,
            ..good.clone()
        };
        assert_eq!(
            oversold.violations().len(),
            2,
            "{:?}",
            oversold.violations()
        );
        let twice = Invariants {
            duplicate_orders: 1,
            buyers_over_limit: 1,
            paid_twice: 1,
            ..good
        };
        assert_eq!(twice.violations().len(), 2, "{:?}", twice.violations());
    }

    #[test]
    fn the_limit_line_counts_the_buyers_over_it_not_all_buyers() {
        let fine = Invariants::default();
        let (ok, line) = &fine.lines()[3];
        assert!(ok);
        // It once said `buyers=0` beside a sale of 4,000 buyers.
        assert!(
            line.contains("buyers_over_limit=0") && !line.contains(" buyers=0"),
            "{line}"
        );
    }
}
