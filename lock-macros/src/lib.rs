//! `#[distributed_lock(key = "...")]` for async functions.
//!
//! **Not implemented yet.** This crate is a placeholder in the workspace so the layout is in
//! place; it exports nothing. The macro is tracked by its own issue.

#![forbid(unsafe_code)]
