//! `#[distributed_lock(key = "...")]` for async functions.
//!
//! **Not implemented yet.** The attribute currently refuses to compile, with an error
//! saying so; it is tracked by its own issue.

#![forbid(unsafe_code)]

use proc_macro::TokenStream;

/// Wraps an async function in a distributed lock. **Not implemented yet.**
#[proc_macro_attribute]
pub fn distributed_lock(_args: TokenStream, item: TokenStream) -> TokenStream {
    let mut out: TokenStream =
        "::core::compile_error!(\"#[distributed_lock] is not implemented yet\");"
            .parse()
            .unwrap_or_default();
    out.extend(item);
    out
}
