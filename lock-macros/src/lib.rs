//! `#[distributed_lock]`: run an `async fn` under a Redis distributed lock.
//!
//! Use it through `lock-core`, which re-exports it (default feature `macros`) as
//! `lock_core::distributed_lock`:
//!
//! ```
//! use lock_core::{distributed_lock, LockError};
//! # struct Cents(u64);
//! # struct Receipt;
//!
//! #[distributed_lock(key = "order:{order_id}")]
//! async fn pay(order_id: u64, amount: Cents) -> Result<Receipt, AppError> {
//!     // Only one caller per order id runs this at a time, across every process that
//!     // shares the Redis server.
//! #   Ok(Receipt)
//! }
//!
//! #[derive(Debug)]
//! enum AppError {
//!     Lock(LockError),
//!     // ... the application's own errors
//! }
//!
//! impl From<LockError> for AppError {
//!     fn from(e: LockError) -> Self {
//!         AppError::Lock(e)
//!     }
//! }
//! ```
//!
//! The reference, every argument with its default and limits, re-entry, release and the
//! equivalent code without the macro, is the attribute's own documentation:
//! [`distributed_lock`](macro@distributed_lock) (the same page as
//! `lock_core::distributed_lock`).
//!
//! # Compile-fail tests
//!
//! Misuse is reported at the offending token, next to the unchanged function so IDEs keep
//! working. The cases live in the `lock-tests` package (`tests/ui/{pass,fail}`); regenerate
//! their expected output with `TRYBUILD=overwrite cargo test -p lock-tests --test macro_ui`
//! and review the diff.

#![forbid(unsafe_code)]

mod args;
mod expand;
mod template;

use proc_macro::TokenStream;

// The whole reference, so that it is on this item's page wherever it is shown: here and at
// `lock_core::distributed_lock`, the re-export users import (rustdoc inlines it there).
#[doc = include_str!("distributed_lock.md")]
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
