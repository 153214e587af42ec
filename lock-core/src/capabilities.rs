//! [`ServerCapabilities`]: what the Redis deployment can do, found at connect, and
//! [`MutexProtocol`]: how the mutex speaks with it.

use std::fmt;

/// How a mutex (and everything built on it: [`run`](crate::LockRequest::run),
/// `hold_at_least`, the leader, the multi-lock, the macro's and the tower layer's mutex mode)
/// is kept in Redis. Set with
/// [`LockClientBuilder::mutex_protocol`](crate::LockClientBuilder::mutex_protocol); the
/// default is [`Auto`](MutexProtocol::Auto).
///
/// **Every client of one deployment must use the same protocol**: the two keep a lock's key in
/// different formats. A client of one protocol meeting a lock of the other fails safe (the
/// scripts call it a value they did not write, `WRONGTYPE`; the native protocol sees it as
/// held, or clears a free lock string of the scripts before taking the name), but they do not
/// exclude each other by design. Pin [`Scripted`](MutexProtocol::Scripted) during a rolling
/// upgrade from a version without the native protocol, then switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MutexProtocol {
    /// [`Native`](MutexProtocol::Native) where every primary has the commands it needs
    /// (Valkey 9.0 or later: `SET … IFEQ`, `DELIFEQ`), else
    /// [`Scripted`](MutexProtocol::Scripted).
    #[default]
    Auto,
    /// The server's own compare-and-set commands, no scripts: a fresh acquisition is one
    /// `MULTI`/`EXEC` (a fencing counter step and `SET NX PX`), a release one `DELIFEQ` and a
    /// publish, a renewal one `SET … IFEQ … PX`. Fencing tokens come from one counter per
    /// Cluster slot (per server elsewhere) that never expires; a counter that is missing
    /// (a new server, data lost) starts at the server's clock in microseconds as read at
    /// connect and advanced by the client's monotonic clock, so tokens stay ahead of earlier
    /// ones as long as that clock is not behind the clock that issued them by more than the
    /// time the counter was gone (the scripts read the server's clock in the same step
    /// instead). Needs Valkey 9.0 or later; [`build`](crate::LockClientBuilder::build)
    /// fails with [`LockError::Unsupported`](crate::LockError::Unsupported) elsewhere.
    Native,
    /// This crate's Lua code (a function library, or scripts): the protocol of every server
    /// with scripting, and the only one before Valkey 9.0.
    Scripted,
}

impl fmt::Display for MutexProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MutexProtocol::Auto => "auto",
            MutexProtocol::Native => "native",
            MutexProtocol::Scripted => "scripted",
        })
    }
}

/// What the Redis deployment can do, as found when the client connected (on a Cluster: what
/// every primary can do). Made by
/// [`LockClient::server_capabilities`](crate::LockClient::server_capabilities); logged once at
/// `info` when the client connects.
///
/// A feature that needs what the server lacks fails with
/// [`LockError::Unsupported`](crate::LockError::Unsupported) at its first use, naming what is
/// missing: on a server without scripting the fair lock, the read-write lock, the semaphore
/// and an atomic multi-lock on a Cluster; `min_replicas` without `WAIT`; a Cluster without
/// sharded pub/sub.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerCapabilities {
    /// The server and its version, as it says (`"valkey 9.1.2"`, `"redis 7.0.15"`): Valkey
    /// reports `redis_version:7.2.4` whatever its own version is, so this reads
    /// `valkey_version` where there is one.
    pub server: String,
    /// `SET … IFEQ` and `DELIFEQ` (Valkey 9.0 or later) on every primary.
    pub native_compare: bool,
    /// Lua scripting (`EVAL`/`FCALL`) on every primary, with this crate's code loaded.
    pub scripting: bool,
    /// The code loaded as a function library (`FCALL`); false: as scripts (`EVALSHA`), or
    /// no scripting.
    pub functions: bool,
    /// `WAIT` (replica acknowledgement, for `min_replicas`).
    pub wait: bool,
    /// Sharded pub/sub (`SSUBSCRIBE`, `SPUBLISH`; needed on a Cluster).
    pub sharded_pubsub: bool,
    /// The mutex protocol this client speaks: [`MutexProtocol::Native`] or
    /// [`MutexProtocol::Scripted`].
    pub mutex_protocol: MutexProtocol,
}

impl fmt::Display for ServerCapabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yes = |b: bool| if b { "yes" } else { "no" };
        write!(
            f,
            "{}: mutex protocol {}, native compare-and-set {}, scripting {}{}, WAIT {}, \
             sharded pub/sub {}",
            self.server,
            self.mutex_protocol,
            yes(self.native_compare),
            yes(self.scripting),
            if self.scripting && !self.functions {
                " (scripts)"
            } else {
                ""
            },
            yes(self.wait),
            yes(self.sharded_pubsub),
        )
    }
}
