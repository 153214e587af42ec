//! [`ServerCapabilities`]: what the Redis deployment can do, found at connect, and
//! [`MutexProtocol`]: how the mutex speaks with it.

use std::fmt;

/// How a mutex (and everything built on it: [`run`](crate::LockRequest::run),
/// `hold_at_least`, the leader, the multi-lock, the macro's and the tower layer's mutex mode)
/// is kept in Redis. Set with
/// [`LockClientBuilder::mutex_protocol`](crate::LockClientBuilder::mutex_protocol); the
/// default is [`Auto`](MutexProtocol::Auto).
///
/// [`Native`](MutexProtocol::Native) and [`Hybrid`](MutexProtocol::Hybrid) keep a lock the
/// same way (its key holds the owner id, its token comes from the same counter) and speak
/// with each other freely: clients of either, on one server, exclude each other as clients of
/// one protocol do. [`Scripted`](MutexProtocol::Scripted) keeps a lock's key in another
/// format. **Scripted clients and clients of the other two must not share names**: each side
/// fails safe on the other's lock (the scripts call it a value they did not write,
/// `WRONGTYPE`; the others see a held lock string as busy, and clear a free one before taking
/// the name), so no name is ever held by both, but a scripted client gets errors where it
/// would wait. Pin [`Scripted`](MutexProtocol::Scripted) on the new version during a rolling
/// upgrade from a version of this crate without [`Hybrid`](MutexProtocol::Hybrid) (whose
/// `Auto` spoke the scripts on Redis 7 and Valkey 8), then go back to
/// [`Auto`](MutexProtocol::Auto) once no old client is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MutexProtocol {
    /// [`Native`](MutexProtocol::Native) where every primary has the commands it needs
    /// (Valkey 9.0 or later: `SET … IFEQ`, `DELIFEQ`), else
    /// [`Hybrid`](MutexProtocol::Hybrid) where every primary has `SET … NX GET` and scripting
    /// (Redis 7.0 or later, Valkey 7.2 or later), else [`Scripted`](MutexProtocol::Scripted).
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
    /// The native protocol's acquisition (the same `MULTI`/`EXEC`, the same key, the same
    /// fencing counter) with its two compare-and-sets each spoken as one small script
    /// (`EVAL`) where the server lacks `SET … IFEQ` and `DELIFEQ`: a release is
    /// compare-and-delete plus a publish, a re-entry or a kept release a
    /// compare-and-`SET … PX`; the watchdog's renewals are the scripts' batched `renew` (one
    /// call for up to 256 locks). The acquisition, the hot path, runs no script at all. Needs
    /// `SET … NX GET` (Redis 7.0 or later, Valkey 7.2 or later) and scripting;
    /// [`build`](crate::LockClientBuilder::build) fails with
    /// [`LockError::Unsupported`](crate::LockError::Unsupported) elsewhere. Fencing tokens
    /// as for [`Native`](MutexProtocol::Native).
    Hybrid,
    /// This crate's Lua code (a function library, or scripts): the protocol of every server
    /// with scripting; every mutex call is one script call.
    Scripted,
}

impl fmt::Display for MutexProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MutexProtocol::Auto => "auto",
            MutexProtocol::Native => "native",
            MutexProtocol::Hybrid => "hybrid",
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
    /// `SET … NX GET` (Redis 7.0 or later, Valkey 7.2 or later) on every primary: what the
    /// native acquisition needs (known by a command of the same release, `SINTERCARD`).
    pub set_nx_get: bool,
    /// Lua scripting (`EVAL`/`FCALL`) on every primary, with this crate's code loaded.
    pub scripting: bool,
    /// The code loaded as a function library (`FCALL`); false: as scripts (`EVALSHA`), or
    /// no scripting.
    pub functions: bool,
    /// `WAIT` (replica acknowledgement, for `min_replicas`).
    pub wait: bool,
    /// Sharded pub/sub (`SSUBSCRIBE`, `SPUBLISH`; needed on a Cluster).
    pub sharded_pubsub: bool,
    /// The mutex protocol this client speaks: [`MutexProtocol::Native`],
    /// [`MutexProtocol::Hybrid`] or [`MutexProtocol::Scripted`].
    pub mutex_protocol: MutexProtocol,
}

impl fmt::Display for ServerCapabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yes = |b: bool| if b { "yes" } else { "no" };
        write!(
            f,
            "{}: mutex protocol {}, native compare-and-set {}, SET NX GET {}, scripting {}{}, \
             WAIT {}, sharded pub/sub {}",
            self.server,
            self.mutex_protocol,
            yes(self.native_compare),
            yes(self.set_nx_get),
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
