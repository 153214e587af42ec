//! The domain: sales, orders, payments, their ids and the rules for user input.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// Milliseconds since the Unix epoch, the unit of every time in the database.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Formats Unix milliseconds as RFC 3339 in UTC (`2025-01-31T12:00:00.000Z`).
pub fn format_ms(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// Parses an RFC 3339 time in UTC (`2025-01-31T12:00:00Z`, fractions allowed) into Unix
/// milliseconds.
pub fn parse_time(field: &'static str, s: &str) -> Result<i64, ApiError> {
    let t = humantime::parse_rfc3339(s).map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!("`{field}` must be an RFC 3339 time in UTC like 2025-01-31T12:00:00Z: {e}"),
        )
    })?;
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| ApiError::bad_request("invalid_body", format!("`{field}` is before 1970")))?;
    Ok(i64::try_from(ms.as_millis()).unwrap_or(i64::MAX))
}

/// Random hex digits for new ids (80 bits).
fn random_suffix() -> String {
    let uuid = uuid::Uuid::new_v4().simple().to_string();
    uuid[..20].to_owned()
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $code:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name(String);

        impl $name {
            /// The prefix every id of this kind starts with.
            pub const PREFIX: &'static str = $prefix;

            /// A new random id.
            pub fn generate() -> Self {
                Self(format!("{}{}", $prefix, random_suffix()))
            }

            /// Checks an id from a request: the prefix and 20 lowercase hex digits, or `400`.
            pub fn parse(s: &str) -> Result<Self, ApiError> {
                let valid = s
                    .strip_prefix($prefix)
                    .is_some_and(|hex| {
                        hex.len() == 20
                            && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                    });
                if valid {
                    Ok(Self(s.to_owned()))
                } else {
                    Err(ApiError::bad_request(
                        $code,
                        format!(
                            "{:?} is not a valid id: expected {}{}",
                            crate::error::shorten(s),
                            $prefix,
                            "followed by 20 hex digits"
                        ),
                    ))
                }
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// A sale's id: `sale_` and 20 hex digits.
    SaleId,
    "sale_",
    "invalid_sale_id"
);
id_type!(
    /// An order's id: `ord_` and 20 hex digits.
    OrderId,
    "ord_",
    "invalid_order_id"
);

/// A buyer's id, from the `X-User-Id` header: 1 to 64 characters among letters, digits and
/// `-_.@`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserId(String);

impl UserId {
    /// Whether `s` is a valid buyer id.
    pub fn is_valid(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'))
    }

    /// Checks a buyer id from a request, or `400`.
    pub fn parse(s: Option<&str>) -> Result<Self, ApiError> {
        match s {
            None => Err(ApiError::bad_request(
                "missing_user_id",
                "the buyer id goes in the X-User-Id header".to_owned(),
            )),
            Some(s) if Self::is_valid(s) => Ok(Self(s.to_owned())),
            Some(s) => Err(ApiError::bad_request(
                "invalid_user_id",
                format!(
                    "{:?} is not a valid buyer id: 1 to 64 letters, digits or -_.@",
                    crate::error::shorten(s)
                ),
            )),
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A limited-stock sale, as stored.
#[derive(Debug, Clone)]
pub struct Sale {
    /// Its id.
    pub id: SaleId,
    /// The product's stock-keeping unit.
    pub sku: String,
    /// The product's name.
    pub name: String,
    /// Price of one item, in cents.
    pub price_cents: i64,
    /// Stock at creation.
    pub initial_stock: i64,
    /// Stock left.
    pub stock: i64,
    /// How many orders one buyer may place.
    pub per_user_limit: i64,
    /// When it opens (Unix ms).
    pub starts_at: i64,
    /// When it closes (Unix ms).
    pub ends_at: i64,
    /// The highest fencing token that claimed the stock.
    pub fence: i64,
    /// When it was created (Unix ms).
    pub created_at: i64,
}

/// Where a sale stands at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SaleStatus {
    /// Not open yet.
    Upcoming,
    /// Open with stock left.
    Open,
    /// Open, no stock left.
    SoldOut,
    /// Closed.
    Ended,
}

impl Sale {
    /// The sale's status at `now` (Unix ms).
    pub fn status(&self, now: i64) -> SaleStatus {
        if now < self.starts_at {
            SaleStatus::Upcoming
        } else if now >= self.ends_at {
            SaleStatus::Ended
        } else if self.stock <= 0 {
            SaleStatus::SoldOut
        } else {
            SaleStatus::Open
        }
    }

    /// `Ok` when a purchase may go on at `now`; otherwise the error the buyer gets.
    pub fn check_buyable(&self, now: i64) -> Result<(), ApiError> {
        match self.status(now) {
            SaleStatus::Open => Ok(()),
            SaleStatus::Upcoming => Err(ApiError::new(
                http::StatusCode::CONFLICT,
                "sale_not_started",
                format!("the sale opens at {}", format_ms(self.starts_at)),
            )),
            SaleStatus::Ended => Err(ApiError::new(
                http::StatusCode::GONE,
                "sale_ended",
                format!("the sale ended at {}", format_ms(self.ends_at)),
            )),
            SaleStatus::SoldOut => Err(ApiError::sold_out()),
        }
    }

    /// The sale as the API shows it.
    pub fn view(&self, now: i64) -> SaleView {
        SaleView {
            id: self.id.to_string(),
            sku: self.sku.clone(),
            name: self.name.clone(),
            price_cents: self.price_cents,
            initial_stock: self.initial_stock,
            stock: self.stock,
            per_user_limit: self.per_user_limit,
            starts_at: format_ms(self.starts_at),
            ends_at: format_ms(self.ends_at),
            status: self.status(now),
        }
    }
}

/// A sale in API responses.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SaleView {
    /// Its id.
    pub id: String,
    /// The product's stock-keeping unit.
    pub sku: String,
    /// The product's name.
    pub name: String,
    /// Price of one item, in cents.
    pub price_cents: i64,
    /// Stock at creation.
    pub initial_stock: i64,
    /// Stock left.
    pub stock: i64,
    /// How many orders one buyer may place.
    pub per_user_limit: i64,
    /// When it opens, RFC 3339.
    pub starts_at: String,
    /// When it closes, RFC 3339.
    pub ends_at: String,
    /// `upcoming`, `open`, `sold_out` or `ended`.
    #[serde(skip_deserializing, default = "default_status")]
    pub status: SaleStatus,
}

fn default_status() -> SaleStatus {
    SaleStatus::Open
}

/// The body of `POST /api/sales`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSale {
    /// The product's stock-keeping unit: 1 to 64 printable characters.
    pub sku: String,
    /// The product's name: 1 to 200 characters.
    pub name: String,
    /// Stock: 0 to 1,000,000.
    pub stock: i64,
    /// Price in cents (default 0).
    #[serde(default)]
    pub price_cents: i64,
    /// Orders one buyer may place, 1 to 100 (default 1).
    #[serde(default)]
    pub per_user_limit: Option<i64>,
    /// Opening time, RFC 3339 UTC (default: now).
    #[serde(default)]
    pub starts_at: Option<String>,
    /// Closing time, RFC 3339 UTC (default: one day after opening).
    #[serde(default)]
    pub ends_at: Option<String>,
}

impl NewSale {
    /// Checks the request and turns it into a sale created at `now`, or `400`.
    pub fn validate(self, now: i64) -> Result<Sale, ApiError> {
        let bad = |detail: &str| ApiError::bad_request("invalid_body", detail.to_owned());
        let sku = self.sku.trim();
        if sku.is_empty() || sku.chars().count() > 64 || sku.chars().any(char::is_control) {
            return Err(bad("`sku` must be 1 to 64 printable characters"));
        }
        let name = self.name.trim();
        if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
            return Err(bad("`name` must be 1 to 200 printable characters"));
        }
        if !(0..=1_000_000).contains(&self.stock) {
            return Err(bad("`stock` must be between 0 and 1000000"));
        }
        if !(0..=100_000_000).contains(&self.price_cents) {
            return Err(bad("`price_cents` must be between 0 and 100000000"));
        }
        let per_user_limit = self.per_user_limit.unwrap_or(1);
        if !(1..=100).contains(&per_user_limit) {
            return Err(bad("`per_user_limit` must be between 1 and 100"));
        }
        let starts_at = match &self.starts_at {
            Some(s) => parse_time("starts_at", s)?,
            None => now,
        };
        let ends_at = match &self.ends_at {
            Some(s) => parse_time("ends_at", s)?,
            None => starts_at.saturating_add(24 * 3600 * 1000),
        };
        if ends_at <= starts_at {
            return Err(bad("`ends_at` must be after `starts_at`"));
        }
        Ok(Sale {
            id: SaleId::generate(),
            sku: sku.to_owned(),
            name: name.to_owned(),
            price_cents: self.price_cents,
            initial_stock: self.stock,
            stock: self.stock,
            per_user_limit,
            starts_at,
            ends_at,
            fence: 0,
            created_at: now,
        })
    }
}

/// An order's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderStatus {
    /// Stock is reserved; waiting for payment.
    Reserved,
    /// Paid.
    Paid,
}

impl OrderStatus {
    /// The status as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            OrderStatus::Reserved => "reserved",
            OrderStatus::Paid => "paid",
        }
    }

    /// Reads a stored status.
    pub fn from_db(s: &str) -> Option<Self> {
        match s {
            "reserved" => Some(OrderStatus::Reserved),
            "paid" => Some(OrderStatus::Paid),
            _ => None,
        }
    }
}

/// One buyer's order of one item of a sale.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    /// Its id.
    pub id: String,
    /// The sale.
    pub sale_id: String,
    /// The buyer.
    pub user_id: String,
    /// `reserved` or `paid`.
    pub status: OrderStatus,
    /// The fencing token of the stock lock it was written under (0 without locks).
    pub fence: i64,
    /// When it was placed, RFC 3339.
    pub created_at: String,
    /// When it was paid, RFC 3339.
    pub paid_at: Option<String>,
}

/// An order about to be written by a purchase.
#[derive(Debug, Clone)]
pub struct NewOrder {
    /// Its id.
    pub id: OrderId,
    /// The sale.
    pub sale_id: SaleId,
    /// The buyer.
    pub user_id: UserId,
    /// The fencing token of the stock lock it is written under (0 without locks).
    pub fence: i64,
    /// When it was placed (Unix ms).
    pub created_at: i64,
}

impl NewOrder {
    /// The order as the API shows it once written.
    pub fn view(&self) -> Order {
        Order {
            id: self.id.to_string(),
            sale_id: self.sale_id.to_string(),
            user_id: self.user_id.to_string(),
            status: OrderStatus::Reserved,
            fence: self.fence,
            created_at: format_ms(self.created_at),
            paid_at: None,
        }
    }
}

/// The body of `POST /api/orders/{order_id}/pay`: the payment provider's callback.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentCallback {
    /// The provider's reference of the payment: 1 to 64 letters, digits or `-_.`. A replayed
    /// callback carries the same reference.
    pub payment_ref: String,
}

impl PaymentCallback {
    /// Checks the reference, or `400`.
    pub fn validate(&self) -> Result<(), ApiError> {
        let r = &self.payment_ref;
        if r.is_empty()
            || r.len() > 64
            || !r
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(ApiError::bad_request(
                "invalid_body",
                "`payment_ref` must be 1 to 64 letters, digits or -_.".to_owned(),
            ));
        }
        Ok(())
    }
}

/// The answer to a payment callback.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PaymentResult {
    /// The order, now paid.
    pub order: Order,
    /// The payment reference that paid it.
    pub payment_ref: String,
    /// The amount charged, in cents.
    pub amount_cents: i64,
    /// `true` if this callback paid the order; `false` for a replay of the callback that did.
    pub applied: bool,
    /// For a replay (`applied: false`): which check recognised it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_caught_by: Option<ReplayCheck>,
}

/// The check that recognised a replayed payment callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayCheck {
    /// The order was already paid when the replay read it. Under the order lock a replay
    /// waits for the first callback to finish, so every replay ends here.
    FoundPaid,
    /// The replay read the order unpaid (it ran alongside the first callback: no order lock)
    /// and the database's conditional write (`... WHERE status = 'reserved'`) refused to pay
    /// it a second time.
    ConditionalWrite,
}

/// `GET /api/sales/{sale_id}/stats`: the sale's numbers, straight from the database.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SaleStats {
    /// The sale.
    pub sale_id: String,
    /// Stock at creation.
    pub initial_stock: i64,
    /// Stock left.
    pub stock: i64,
    /// Orders placed.
    pub orders: i64,
    /// Orders paid.
    pub paid: i64,
    /// Distinct buyers with an order.
    pub buyers: i64,
    /// The highest fencing token that claimed the stock.
    pub fence: i64,
    /// Stock writes refused by the fencing check.
    pub stale_writes_rejected: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_reject_junk() {
        let id = SaleId::generate();
        assert_eq!(SaleId::parse(id.as_str()).unwrap(), id);
        for bad in [
            "",
            "sale_",
            "sale_xyz",
            "ord_0123456789abcdef0123",
            "sale_0123456789ABCDEF0123",
        ] {
            assert!(SaleId::parse(bad).is_err(), "{bad}");
        }
        assert!(OrderId::parse(OrderId::generate().as_str()).is_ok());
    }

    #[test]
    fn user_ids() {
        assert!(UserId::parse(Some("buyer-1@x.y")).is_ok());
        assert!(UserId::parse(None).is_err());
        assert!(UserId::parse(Some("a b")).is_err());
        assert!(UserId::parse(Some(&"x".repeat(65))).is_err());
    }

    #[test]
    fn times() {
        let ms = parse_time("t", "2025-01-31T12:00:00Z").unwrap();
        assert_eq!(format_ms(ms), "2025-01-31T12:00:00.000Z");
        assert!(parse_time("t", "yesterday").is_err());
    }
}
