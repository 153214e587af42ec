//! The arguments a native acquisition is built from, and the one command shape every
//! renewal, re-entry and kept release shares.

use redis::Pipeline;

/// The arguments of a fresh acquisition.
pub(crate) struct Acquire<'a, O> {
    pub(crate) key: &'a str,
    pub(crate) owner: O,
    pub(crate) owner_bytes: Vec<u8>,
    pub(crate) lease_ms: u64,
    pub(crate) counter: &'a str,
    /// The server clock in microseconds, for a counter that is missing.
    pub(crate) seed: u64,
}

/// `SET key owner IFEQ owner PX ms`.
pub(super) fn set_if_owner(
    pipe: &mut Pipeline,
    key: &str,
    owner: &impl redis::ToRedisArgs,
    ms: u64,
) {
    pipe.cmd("SET")
        .arg(key)
        .arg(owner)
        .arg("IFEQ")
        .arg(owner)
        .arg("PX")
        .arg(ms);
}
