//! A tower `Layer` that locks a per-request key (order id, user id) around a service.
//!
//! **Not implemented yet.** This crate is a placeholder in the workspace so the layout is in
//! place; it exports nothing. The layer is tracked by its own issue.

#![forbid(unsafe_code)]
