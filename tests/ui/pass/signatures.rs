//! Shapes of function the attribute accepts; built with every warning denied, so the
//! expansion adds none.
#![deny(warnings, missing_docs)]

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockClient, LockError, distributed_lock};

/// An application error.
#[derive(Debug)]
pub struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(_: std::num::ParseIntError) -> Self {
        AppError
    }
}

/// A request with nested fields.
pub struct BuyRequest {
    /// The buyer.
    pub user: User,
}

/// A user.
pub struct User {
    /// Their id.
    pub id: u64,
}

/// Free function, template with a field path, `?`, early `return`, inner attributes.
#[distributed_lock(key = "user:{req.user.id}:{{literal}}", wait = "2s", lease = "1m")]
pub async fn buy(req: &BuyRequest, qty: &str) -> Result<u32, AppError> {
    #![allow(clippy::needless_return)]
    let qty: u32 = qty.parse()?;
    if qty == 0 {
        return Ok(0);
    }
    Ok(qty)
}

/// A fair (first come, first served) lock, with every other option.
#[distributed_lock(key = "queue:{name}", kind = "fair", wait = "1s", lease = "5s", held = held)]
pub async fn fair_turn(name: &str) -> Result<Option<u64>, AppError> {
    Ok(held.fencing_token())
}

/// Mutable and destructured parameters, a raw identifier, a tuple field, `on_lost`.
#[distributed_lock(key = "{r#type}:{a}:{pair.1}", on_lost = "continue", kind = "mutex")]
pub async fn patterns(
    r#type: &str,
    (a, _b): (u8, u8),
    pair: (u8, String),
    mut log: Vec<String>,
) -> Result<Vec<String>, AppError> {
    log.push(format!("{type}{a}{}", pair.1, type = r#type));
    Ok(log)
}

/// A `Result` alias.
pub type Result<T, E = AppError> = std::result::Result<T, E>;

/// `impl Trait` in and out, generics with a where clause, a `Result` alias.
#[distributed_lock(key = "gen:{item}", wait = Duration::from_millis(10), held = _lock)]
pub async fn generic<T>(item: T, _extra: impl Send) -> self::Result<impl Display>
where
    T: Display + Send,
{
    Ok(item.to_string())
}

/// A key expression and a lifetime.
#[distributed_lock(key = name, on_lost = "abort")]
pub async fn borrowed<'a>(name: &'a str) -> Result<&'a str, LockError> {
    Ok(name)
}

/// Holds its own client.
pub struct Inventory {
    locks: Arc<LockClient>,
    name: String,
}

impl Inventory {
    /// `&self`.
    #[distributed_lock(key = "stock:{sku}", client = self.locks, held = lock)]
    pub async fn reserve(&self, sku: &str) -> Result<Option<u64>, AppError> {
        Ok(lock.fencing_token())
    }

    /// `&mut self`.
    #[distributed_lock(key = "rename:{self.name}", client = self.locks.clone())]
    pub async fn rename(&mut self, name: String) -> Result<(), AppError> {
        self.name = name;
        Ok(())
    }

    /// `self: Arc<Self>`, returning `Self`.
    #[distributed_lock(key = "shared:{self.name}", client = &*self.locks)]
    pub async fn shared(self: Arc<Self>) -> Result<Arc<Self>, AppError> {
        Ok(self)
    }
}

/// A trait with an `async fn`.
pub trait Store {
    /// Stores a value.
    fn put(&self, key: &str) -> impl Future<Output = Result<(), AppError>> + Send;
}

impl Store for Inventory {
    #[distributed_lock(key = "put:{key}", client = self.locks)]
    async fn put(&self, key: &str) -> Result<(), AppError> {
        let _ = key;
        Ok(())
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    // Never awaited: the point is that they build (and that their futures are `Send`).
    let req = BuyRequest { user: User { id: 1 } };
    assert_send(buy(&req, "1"));
    assert_send(patterns("t", (1, 2), (3, String::new()), Vec::new()));
    assert_send(generic(1, ()));
    assert_send(borrowed("x"));
    let _ = Inventory::reserve;
    let _ = Inventory::rename;
    let _ = Inventory::shared;
    let _ = <Inventory as Store>::put;
}
