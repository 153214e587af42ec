//! `#[distributed_lock]`: run an `async fn` under a Redis distributed lock.
//!
//! Use it through `lock-core`, which re-exports it (default feature `macros`):
//!
//! ```ignore
//! use lock_core::{distributed_lock, LockError};
//!
//! #[distributed_lock(key = "order:{order_id}")]
//! async fn pay(order_id: u64, amount: Cents) -> Result<Receipt, AppError> {
//!     // Only one caller per order id runs this at a time, across every process that
//!     // shares the Redis server.
//! }
//!
//! impl From<LockError> for AppError { /* ... */ }
//! ```
//!
//! The function keeps its name, signature, visibility, generics, attributes and doc
//! comments. When it is called, it takes the lock named by `key`, runs the body, and releases
//! the lock when the body is done, returning the body's result. If the lock cannot be taken
//! (timeout, no Redis, no client), the body does not run and the function returns the
//! [`LockError`] converted into its error type.
//!
//! # The function
//!
//! It must be an `async fn` with a body that returns `Result<T, E>` where
//! `E: From<lock_core::LockError>`. The return type must be spelled as a path ending in
//! `Result` (`Result<T, E>`, `std::io::Result<T>`, `anyhow::Result<T>`, or an alias of your
//! own named `Result`); rustc checks the rest. Free functions, methods (`&self`,
//! `&mut self`, `self`, `self: Arc<Self>`), generic functions, functions in trait impls
//! (native `async fn` in traits), `impl Trait` inside the `Result`, `?` and early `return`
//! all work.
//!
//! # Arguments
//!
//! ```text
//! #[distributed_lock(
//!     key = "user:{req.user_id}",     // required: a template, or any Display expression
//!     client = self.locks,            // optional: default lock_core::global_client()
//!     wait = "2s",                    // optional: default wait for as long as it takes
//!     lease = "10s",                  // optional: default a watchdog-renewed lease
//!     on_lost = "abort",              // optional: "abort" (default) | "continue"
//!     held = lock,                    // optional: binds a lock_core::HeldLock in the body
//!     kind = "mutex",                 // optional: "mutex" (default) | "fair" | "read" | "write"
//!     permits = 4,                    // optional, instead of kind: one of 4 semaphore permits
//!     on_busy = "skip",               // optional: "wait" (default) | "skip": Ok(None) if busy
//!     hold_at_least = "55s",          // optional (mutex): keep it taken this long at least
//! )]
//! ```
//!
//! Arguments may come in any order, separated by commas. An unknown argument is a compile
//! error that lists the valid ones; an argument given twice is a compile error too.
//!
//! ## `key` (required)
//!
//! The lock's name. A string literal is a template: each `{...}` is a parameter of the
//! function, or a field path from one (`{req.user_id}`, `{pair.0}`, `{self.id}`), formatted
//! with `Display`; `{{` and `}}` stand for literal braces. The names are checked against the
//! signature at compile time; field existence and `Display` are checked by rustc, with the
//! error on the key.
//!
//! ```ignore
//! #[distributed_lock(key = "order:{order_id}")]
//! async fn pay(order_id: u64) -> Result<(), AppError> { /* ... */ }
//!
//! #[distributed_lock(key = "user:{req.user_id}:sale:{sale.id}")]
//! async fn buy(&self, req: &BuyRequest, sale: &Sale) -> Result<Order, AppError> { /* ... */ }
//! ```
//!
//! Any other expression is used as the name through `ToString`:
//!
//! ```ignore
//! #[distributed_lock(key = job.lock_name())]
//! async fn run_job(job: &Job) -> Result<(), AppError> { /* ... */ }
//! ```
//!
//! Re-entry (below) is by resolved name: calls that format to the same string share a lock.
//!
//! ## `client`
//!
//! The `lock_core::LockClient` to lock with: any expression, evaluated inside the function
//! before the body runs, of type `LockClient`, `&LockClient`, `Arc<LockClient>` or anything
//! else that derefs to one. Without it the process-wide client is used, installed once at
//! startup with `lock_core::install_global(client)`; if none is installed, the function
//! returns `LockError::NoClient` (converted into `E`).
//!
//! ```ignore
//! impl Inventory {
//!     #[distributed_lock(key = "stock:{sku}", client = self.locks)]
//!     async fn reserve(&self, sku: &str, qty: u32) -> Result<(), AppError> { /* ... */ }
//! }
//!
//! #[distributed_lock(key = "report", client = state.locks.clone())]
//! async fn report(state: Arc<AppState>) -> Result<(), AppError> { /* ... */ }
//! ```
//!
//! ## `wait`
//!
//! How long to wait for the lock before giving up with `LockError::Timeout`; without it the
//! call waits until the lock is free. Either a string checked at compile time (a whole number
//! and a unit: `"500ms"`, `"2s"`, `"1m"`, `"1h"`; `"0s"` makes a single attempt) or a
//! `std::time::Duration` expression.
//!
//! ```ignore
//! #[distributed_lock(key = "order:{id}", wait = "500ms")]
//! async fn a(id: u64) -> Result<(), AppError> { /* ... */ }
//!
//! #[distributed_lock(key = "order:{id}", wait = config.lock_wait)]
//! async fn b(config: &Config, id: u64) -> Result<(), AppError> { /* ... */ }
//! ```
//!
//! ## `lease`
//!
//! A fixed lease that is never renewed: the lock expires that long after it was taken, even
//! if the body is still running. Without it the client's watchdog renews the lease for as
//! long as the body runs. Same forms as `wait`; a literal must be between `10ms` and 30 days.
//!
//! ```ignore
//! #[distributed_lock(key = "import:{file}", lease = "10m")]
//! async fn import(file: &str) -> Result<(), AppError> { /* ... */ }
//! ```
//!
//! A job that must run once per period on one of several instances needs more than a
//! lease: see `hold_at_least` and `on_busy` below.
//!
//! ## `on_lost`
//!
//! What happens if the lock is lost while the body runs (a watchdog renewal finds it gone,
//! no renewal succeeds within the lease, or a fixed lease runs out):
//!
//! * `"abort"` (the default): the body is dropped at its next `.await` and the function
//!   returns `Err(LockError::Lost { .. })` converted into `E`. A body that finishes after
//!   the lock was lost (it waited at an `.await` while its process or runtime stalled past
//!   the lease) returns that error too: the function never returns the body's `Ok` unless
//!   the lock was held when the body's result was ready and Redis did not answer its
//!   release with "not held". Code before the body's last `.await` has run, though, so
//!   writes it sent need the fencing token (`held` below).
//! * `"continue"`: the body runs to its end and its result is returned as is. Use it for
//!   bodies that must not stop half-way, and check the lock yourself (the `held` lock's
//!   `is_held()` / `lost()`, and its fencing token at the resource).
//!
//! Abort is the default because the attribute promises that the body runs under the lock:
//! once the lock is gone another process may be running the same body, so going on silently
//! breaks the promise, while aborting stops the work and tells the caller. The price is the
//! usual one for cancellation: a body is cut at an `.await`, so it should not leave shared
//! state half-written there (the same care `tokio::time::timeout` asks for).
//!
//! ```ignore
//! #[distributed_lock(key = "migration:{table}", on_lost = "continue")]
//! async fn migrate(table: &str) -> Result<(), AppError> { /* ... */ }
//! ```
//!
//! ## `held`
//!
//! Binds a `lock_core::HeldLock` under the given name in the body: the held lock's name,
//! fencing token (`Option<u64>`: `Some` for the mutex, fair and write kinds), `is_held()` and
//! `lost()`. Write the fencing token with your update so the resource can refuse a stale
//! holder:
//!
//! ```ignore
//! #[distributed_lock(key = "stock:{sku}", client = self.locks, held = lock)]
//! async fn reserve(&self, sku: &str, qty: u32) -> Result<(), AppError> {
//!     let token = lock.fencing_token().expect("a mutex has a fencing token");
//!     self.db.reserve(sku, qty, token).await?;
//!     Ok(())
//! }
//! ```
//!
//! Without it, code anywhere under the body (in the same task) reaches the lock with
//! `lock_core::current_lock("stock:sku-1")`.
//!
//! ## `kind` and `permits`
//!
//! Which lock the function takes, named by `key`:
//!
//! | argument | lock | callers at once per key |
//! |---|---|---|
//! | none, or `kind = "mutex"` | `client.lock(key)` | one |
//! | `kind = "fair"` | `client.fair_lock(key).lock()` | one, in arrival order across processes |
//! | `kind = "read"` | `client.read_write_lock(key).read()` | many readers, while no writer |
//! | `kind = "write"` | `client.read_write_lock(key).write()` | one writer, and no reader |
//! | `permits = N` | `client.semaphore(key, N).acquire(1)` | N (1 to 100000) |
//!
//! `wait`, `lease`, `on_lost` and `held` work the same for every kind. Locks of different
//! kinds with the same key are different locks (a fair lock `a` does not exclude a mutex
//! `a`), and a read and a write function must use the same key to exclude each other. Any
//! other kind, or `permits` together with `kind`, is a compile error.
//!
//! ## `on_busy` and `hold_at_least`: once per period
//!
//! `on_busy = "skip"` makes a call that finds the lock held by someone else (after `wait`,
//! which then defaults to a single attempt) return `Ok(None)` without running the body,
//! instead of an error every caller would have to filter. The function must return
//! `Result<Option<T>, E>` (a compile error says so otherwise); the body returns
//! `Ok(Some(..))` as usual.
//!
//! `hold_at_least = "55s"` keeps the lock taken until at least that long after it was
//! granted, even when the body returns sooner: the release sets the lock's lease to what is
//! left instead of freeing it (`LockRequest::hold_at_least`; mutex only, at most the `lease`).
//! Without it, an instance whose timer fires a moment after another one *finished* finds the
//! lock free and runs the period again.
//!
//! Together, with a key that names the period (`lock_core::Period` makes one from a
//! schedule), this is the noon lottery: every instance fires, exactly one draws.
//!
//! ```ignore
//! #[distributed_lock(key = "{period}", on_busy = "skip", hold_at_least = "55s", held = lock)]
//! async fn draw_winners(period: &str) -> Result<Option<Vec<UserId>>, AppError> {
//!     let winners = pick(10).await?;
//!     save(&winners, lock.fencing_token()).await?;
//!     Ok(Some(winners))
//! }
//!
//! // every instance, every minute:
//! let period = lock_core::Period::every(Duration::from_secs(60))?.name("lottery");
//! match draw_winners(&period).await? {
//!     Some(winners) => tracing::info!(?winners, "drew this period"),
//!     None => {} // another instance drew (or is drawing) this period
//! }
//! ```
//!
//! # Re-entry
//!
//! The body runs inside a `lock_core::reentrant` scope. An annotated function called from
//! the body (in the same task, with the same client) that resolves to the same key
//! re-enters the lock (its hold count goes up, the fencing token is the same) instead of
//! waiting for itself. A task spawned from the body does not inherit the lock: it waits like
//! anyone else.
//!
//! # Release
//!
//! When the body returns (`Ok`, `Err`, `?` or an early `return`), the lock is released and
//! the release confirmed by Redis before the function returns; a failed release is logged and
//! never replaces the body's result (the lease expires the lock). If the body panics, the
//! returned future is dropped (cancelled), or the body is aborted by `on_lost`, the guard's
//! `Drop` releases the lock in the background.
//!
//! # Equivalent code without the macro
//!
//! ```ignore
//! #[distributed_lock(key = "stock:{sku}", client = self.locks, wait = "2s", held = lock)]
//! async fn reserve(&self, sku: &str, qty: u32) -> Result<(), AppError> {
//!     self.db.reserve(sku, qty, lock.fencing_token()).await?;
//!     Ok(())
//! }
//! ```
//!
//! behaves like:
//!
//! ```ignore
//! async fn reserve(&self, sku: &str, qty: u32) -> Result<(), AppError> {
//!     lock_core::reentrant(async move {
//!         let guard = self
//!             .locks
//!             .lock(format!("stock:{sku}"))
//!             .wait(Duration::from_secs(2))
//!             .await?; // LockError -> AppError
//!         let lock: lock_core::HeldLock = guard.held_lock();
//!         let body = async move {
//!             self.db.reserve(sku, qty, lock.fencing_token()).await?;
//!             Ok(())
//!         };
//!         let result: Result<(), AppError> = tokio::select! {
//!             biased;
//!             result = body => result,
//!             () = guard.lost() => return Err(LockError::Lost { name: guard.name().into() }.into()),
//!         };
//!         // A cancelled caller does not stop it half-way: it finishes in the background.
//!         if let Err(e) = guard.unlock().await {
//!             tracing::warn!(error = %e, "could not release lock; its lease will expire it");
//!         }
//!         result
//!     })
//!     .await
//! }
//! ```
//!
//! The real expansion calls small helpers in `lock_core::__private` (not public API), uses
//! absolute paths (`::lock_core::...`) and `__lock_`-prefixed locals, and adds a never-taken
//! `return` of the declared type at the start of the body so type inference and error
//! messages follow the signature.
//!
//! # Limitations
//!
//! * Re-entry needs the same `LockClient` (each client is its own set of owners).
//! * `#[async_trait]` rewrites methods into non-`async` functions before this attribute
//!   runs; use native `async fn` in traits instead.
//! * `key`, `client`, `wait` and `lease` are evaluated in the function's scope before the
//!   body runs; they cannot see variables the body defines.
//!
//! # Compile-fail tests
//!
//! Misuse is reported at the offending token, next to the unchanged function so IDEs keep
//! working. The cases live in the `lock-tests` package (`tests/ui/{pass,fail}`); regenerate
//! their expected output with `TRYBUILD=overwrite cargo test -p lock-tests --test macro_ui`
//! and review the diff.
//!
//! [`LockError`]: https://docs.rs/lock-core/latest/lock_core/enum.LockError.html

#![forbid(unsafe_code)]

mod args;
mod expand;
mod template;

use proc_macro::TokenStream;

/// Runs an `async fn` under a Redis distributed lock named by `key`; see the
/// [crate docs](crate) for every argument and the equivalent code.
///
/// ```ignore
/// #[distributed_lock(key = "order:{order_id}", wait = "2s")]
/// async fn pay(order_id: u64, amount: Cents) -> Result<Receipt, AppError> { /* ... */ }
/// ```
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}

/// Not public API: the limits `#[distributed_lock]` checks literal arguments against, as the
/// expression `(min lease in ms, max lease in ms, max permits)` of type `(u64, u64, u32)`, so
/// that a test can pin them to lock-core's constants. May change in any release.
#[doc(hidden)]
#[proc_macro]
pub fn __limits(input: TokenStream) -> TokenStream {
    if let Some(token) = input.into_iter().next() {
        return syn::Error::new(token.span().into(), "`__limits!()` takes no arguments")
            .into_compile_error()
            .into();
    }
    args::limits().into()
}
