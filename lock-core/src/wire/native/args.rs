//! The arguments a native acquisition is built from, and the one command shape every
//! renewal, re-entry and kept release shares.

use std::sync::Arc;

use redis::{Cmd, Pipeline};

use crate::wire::owner::OwnerId;

/// The arguments of a fresh acquisition.
pub(crate) struct Acquire<'a> {
    /// The (first) lock's key, shared with its hold's keys.
    pub(crate) key: Arc<str>,
    pub(crate) owner: OwnerId,
    pub(crate) lease_ms: u64,
    pub(crate) counter: &'a str,
    /// The server clock in microseconds, for a counter that is missing.
    pub(crate) seed: u64,
}

/// Room, beyond a call's keys, for an owner id (at most 53 bytes) and a few numbers.
pub(super) const ROOM: usize = 96;

/// Starts a command named `name` in `pipe`, with room for `bytes` bytes of arguments and
/// eight arguments, so writing them does not grow its buffers (grown one argument at a time,
/// they took a tenth of the client's CPU per cycle in a profile of lock-bench's W2); the
/// pipeline's `arg` then adds to it.
pub(super) fn start<'p>(pipe: &'p mut Pipeline, name: &str, bytes: usize) -> &'p mut Pipeline {
    let mut cmd = Cmd::with_capacity(8, name.len() + bytes);
    cmd.arg(name);
    pipe.add_command(cmd)
}

/// `SET key owner IFEQ owner PX ms`.
pub(super) fn set_if_owner(
    pipe: &mut Pipeline,
    key: &str,
    owner: &impl redis::ToRedisArgs,
    ms: u64,
) {
    start(pipe, "SET", key.len() + 2 * ROOM)
        .arg(key)
        .arg(owner)
        .arg("IFEQ")
        .arg(owner)
        .arg("PX")
        .arg(ms);
}
