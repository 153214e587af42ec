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
    /// How its compare-and-sets are spoken (a multi-lock's re-entries and leases, a give-back).
    pub(crate) compare: Compare,
    /// Whether a busy answer says how long the holder's lease has left (`PTTL`): not asked by
    /// the first attempt of a request that will wait, which subscribes and asks again at once
    /// when it finds the name busy. A multi-lock always asks.
    pub(crate) holder_ttl: bool,
}

/// How the native protocol's two compare-and-sets on a lock (`SET … IFEQ` and `DELIFEQ`) are
/// spoken: the server's own commands (Valkey 9.0 or later), or, on a server without them
/// (Redis 7, Valkey 8), one small script each that does the same and answers the same
/// (`EVAL`, so a server that lost its scripts — a restart, `SCRIPT FLUSH` — runs it anyway).
/// Everything else the protocol sends (the acquisition's transaction, the publish, `DEL`,
/// `PTTL`, `GET`) is plain commands either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compare {
    /// `SET … IFEQ` and `DELIFEQ`.
    Commands,
    /// [`SET_IF_EQUAL`] and [`DELETE_IF_EQUAL`].
    Script,
}

/// `SET KEYS[1] ARGV[1] <ARGV[2..]>` if `KEYS[1]` holds `ARGV[1]`: `SET … IFEQ` where the new
/// value is the compared one (a lock's owner), answering `OK` or nil as it does.
pub(crate) const SET_IF_EQUAL: &str = "if redis.call('GET',KEYS[1])==ARGV[1] then \
return redis.call('SET',KEYS[1],ARGV[1],unpack(ARGV,2)) end return false";

/// `DEL KEYS[1]` if it holds `ARGV[1]`: `DELIFEQ`, answering 1 or 0 as it does.
pub(crate) const DELETE_IF_EQUAL: &str = "if redis.call('GET',KEYS[1])==ARGV[1] then \
return redis.call('DEL',KEYS[1]) end return 0";

/// [`DELETE_IF_EQUAL`] for many locks in one call (a batch's last releases): `DEL KEYS[i]` if
/// it holds `ARGV[i]`, answering per lock 1 or 0, or the error `GET` met (a key of another
/// type), so each release reads what it would alone.
pub(crate) const DELETE_EACH_IF_EQUAL: &str = "local r={} for i,k in ipairs(KEYS) do \
local v=redis.pcall('GET',k) if type(v)=='table' and v.err then r[i]=v \
elseif v==ARGV[i] then r[i]=redis.call('DEL',k) else r[i]=0 end end return r";

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
    compare: Compare,
    key: &str,
    owner: &impl redis::ToRedisArgs,
    ms: u64,
) {
    set_if_owner_with(pipe, compare, key, owner)
        .arg("PX")
        .arg(ms);
}

/// `SET key owner IFEQ owner`, its options to follow (`PX ms`, `KEEPTTL`).
pub(super) fn set_if_owner_with<'p>(
    pipe: &'p mut Pipeline,
    compare: Compare,
    key: &str,
    owner: &impl redis::ToRedisArgs,
) -> &'p mut Pipeline {
    match compare {
        Compare::Commands => start(pipe, "SET", key.len() + 2 * ROOM)
            .arg(key)
            .arg(owner)
            .arg("IFEQ")
            .arg(owner),
        Compare::Script => start(pipe, "EVAL", key.len() + SET_IF_EQUAL.len() + ROOM)
            .arg(SET_IF_EQUAL)
            .arg(1)
            .arg(key)
            .arg(owner),
    }
}

/// `DELIFEQ key value`.
pub(super) fn delete_if_equal<'p>(
    pipe: &'p mut Pipeline,
    compare: Compare,
    key: &str,
    value: &impl redis::ToRedisArgs,
) -> &'p mut Pipeline {
    match compare {
        Compare::Commands => start(pipe, "DELIFEQ", key.len() + ROOM).arg(key).arg(value),
        Compare::Script => start(pipe, "EVAL", key.len() + DELETE_IF_EQUAL.len() + ROOM)
            .arg(DELETE_IF_EQUAL)
            .arg(1)
            .arg(key)
            .arg(value),
    }
}
