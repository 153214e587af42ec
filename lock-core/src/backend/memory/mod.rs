//! The in-memory backend, for tests (lock-core's `testing` feature): a server kept in this
//! process ([`Server`]: strings with TTLs, hashes, sorted sets, pub/sub) whose time is tokio's
//! clock, so `tokio::time::pause()` and `advance()` drive expiry, renewals and losses without
//! sleeping.
//!
//! A client reaches it through its link (`backend::in_memory`, the `Topology`, outside this
//! module so that nothing here imports the backend module that declares it). It implements
//! commands, not operations: its command table (`commands`: `strings`,
//! `hashes`, `zsets`, and the key, pub/sub, server and scripting commands) answers what the
//! engine sends a Redis server, the native mutex protocol's commands and each Lua operation,
//! which runs as its script (prelude in front) in an embedded Lua 5.1 (`lua`) whose
//! `redis.call` reaches the same table. A call runs under the server's one lock, so it is
//! atomic as a script or a `MULTI`/`EXEC` is.
//!
//! Tests set faults on the server or on one client's [`Link`]: unreachable (calls fail with
//! `LockError::Unavailable` and are not applied; the client's pub/sub subscriptions drop),
//! and replies delayed on tokio's clock (applied at once, answered later; a delay of the
//! response timeout or more answers `LockError::ResponseTimeout`).
//!
//! The modules import each other one way only (none imports one that imports it back):
//! `keyspace` ← `reply` ← `lua`; `keyspace` and `lua` ← `server` ← `strings`, `hashes`,
//! `zsets` ← `commands` ← this module (and the test-only `fuzz`). None imports the backend
//! module above it.

mod commands;
#[cfg(test)]
mod fuzz;
mod hashes;
mod keyspace;
mod lua;
mod reply;
mod server;
mod strings;
#[cfg(test)]
mod tests;
mod zsets;

use redis::Value;

pub(crate) use self::server::{Changes, Link, Server, Subscription};
use crate::wire::script::Call;

// What a client's link runs (`backend::in_memory`), each call atomic.
impl Server {
    /// Runs one command as a client's connection would: any the command table has, `EVAL`,
    /// `EVALSHA` and `SCRIPT` included; an error is an error value.
    pub(crate) fn command(&self, cmd: &redis::Cmd) -> Value {
        self.call(|ctx, lua| commands::command(ctx, lua, cmd))
    }

    /// A pipeline's (or a `MULTI`/`EXEC`'s) replies, one per command, each error in its
    /// place; the whole pipeline is one call.
    pub(crate) fn pipeline(&self, pipe: &redis::Pipeline) -> Value {
        self.call(|ctx, lua| commands::pipeline(ctx, lua, pipe))
    }

    /// Runs lock-core's operation `call`: its script, as `EVAL` runs it.
    pub(crate) fn op(&self, call: &Call) -> Value {
        self.call(|ctx, lua| commands::op(ctx, lua, call))
    }
}
