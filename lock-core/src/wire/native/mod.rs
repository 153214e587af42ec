//! The native mutex protocol: a mutex kept with the server's own compare-and-set commands
//! (Valkey 9's `SET … IFEQ` and `DELIFEQ`) instead of scripts. Pure: it builds the commands
//! and reads their replies into the typed answers the engine uses for both protocols
//! ([`Answer`], [`GaveBack`]); the backend sends them.
//!
//! **Keys.** The lock `P{N}` is a string holding exactly its owner id while held, with the
//! lease as its time to live, and no key while free: a release deletes it. The fencing
//! counter is not the lock's: it is one counter per Cluster slot (one per server elsewhere),
//! `Pfence` or `Pfence:{tag}` with a tag of the lock's slot, which never expires, so the
//! keyspace holds one small key per slot in use instead of a free lock string per recently
//! used name.
//!
//! **Acquire** (one `MULTI`/`EXEC`): `SET counter seed NX` (a counter that is missing starts at
//! the server's clock in microseconds, as the scripts' tokens do), `INCR counter` (the token),
//! `SET lock owner NX PX lease GET` (taken if there was no key; the value already there
//! otherwise), `PTTL lock` (what a busy answer reads: left out of a waiting request's first
//! attempt, which subscribes and asks again at once). A value equal to the owner is a repeat of an applied acquisition.
//! Every token drawn while the owner holds the lock is above every earlier holder's (drawn
//! before their release, which came before this grant) and below every later holder's (drawn
//! after this release), so a repeat may keep the token it drew, and busy attempts may draw
//! tokens nobody keeps. **Re-enter**: `SET lock owner IFEQ owner PX lease` (the count is the
//! client's). **Release**: the last hold `DELIFEQ lock owner` and a publish on the release
//! channel (always: it costs less than a flag kept for it), an earlier one only checks that
//! the lock is still the owner's (`SET … IFEQ … KEEPTTL`). **Renew**, **extend**, a release
//! kept until `hold_at_least`: `SET lock owner IFEQ owner PX ms`. **A multi-lock** (one slot)
//! takes its fresh names with one `MSETNX` (all or none: it never holds some of its names
//! while another holds the rest), see [`Call::multi_acquire`].

mod args;
mod batch;
mod call;
mod multi;
mod read;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use args::{Acquire, Compare};
pub(crate) use call::{Call, Found};
pub(crate) use multi::MultiLock;
