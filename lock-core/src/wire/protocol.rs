//! [`Protocol`]: how one client speaks to its deployment, fixed when it connects, and the one
//! place that chooses a call's dialect ([`Protocol::dialect`]).

use std::borrow::Cow;
use std::time::Duration;

use redis::cluster_routing::Slot;
use tokio::time::Instant;

use super::counter;
use super::native::Compare;
use super::owner::Owner;
use crate::capabilities::{MutexProtocol, ServerCapabilities};
use crate::kind::HoldKind;
use crate::name::Keys;

/// The dialect of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Dialect {
    /// A call of this crate's Lua code.
    Scripts,
    /// The server's own compare-and-set commands (a mutex on a server that has them).
    Native,
}

/// What a client's calls depend on besides their arguments.
#[derive(Debug)]
pub(crate) struct Protocol {
    mutex: MutexProtocol,
    /// How records are written: a script, or a compare-and-set (None: neither is there).
    records: Option<Dialect>,
    /// Keys live in slots (a Cluster): releases publish with `SPUBLISH`, and the native
    /// fencing counter is one per slot.
    sharded: bool,
    prefix: String,
    /// The server's fencing counter where keys do not live in slots, spelled once.
    server_counter: String,
    /// How long a released lock string is kept for its fencing counter.
    fence_ttl: Duration,
    /// The server's clock in microseconds as read at connect, and when it was read.
    clock: (u64, Instant),
}

/// One owner's hold, as a call names it: what it holds, where, and who holds it.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) kind: HoldKind,
    pub(crate) keys: &'a Keys,
    pub(crate) owner: Owner<'a>,
}

impl Protocol {
    pub(crate) fn new(
        capabilities: &ServerCapabilities,
        sharded: bool,
        prefix: &str,
        fence_ttl: Duration,
        clock: (u64, Instant),
    ) -> Self {
        let records = if capabilities.scripting {
            Some(Dialect::Scripts)
        } else if capabilities.native_compare {
            Some(Dialect::Native)
        } else {
            None
        };
        Self {
            mutex: capabilities.mutex_protocol,
            records,
            sharded,
            prefix: prefix.to_owned(),
            server_counter: counter::counter(prefix, None),
            fence_ttl,
            clock,
        }
    }

    /// A client's protocol with a server that runs scripts or not (`scripting`), has the
    /// native compare-and-set commands or not (`native`), and speaks `mutex`: for tests of
    /// what the wire room sends.
    #[cfg(test)]
    pub(crate) fn testing(scripting: bool, native: bool, mutex: MutexProtocol) -> Self {
        let capabilities = ServerCapabilities {
            server: String::new(),
            native_compare: native,
            set_nx_get: true,
            scripting,
            functions: false,
            wait: true,
            sharded_pubsub: true,
            mutex_protocol: mutex,
        };
        let clock = (0, Instant::now());
        Self::new(
            &capabilities,
            false,
            "lock:",
            Duration::from_secs(3600),
            clock,
        )
    }

    /// The dialect of a call about a hold of `kind`: the native protocol for a mutex where
    /// the client speaks it, the scripts for everything else.
    pub(crate) fn dialect(&self, kind: HoldKind) -> Dialect {
        match (kind, self.mutex) {
            (HoldKind::Mutex, MutexProtocol::Native | MutexProtocol::Hybrid) => Dialect::Native,
            _ => Dialect::Scripts,
        }
    }

    /// How a native call's compare-and-sets are spoken: the server's commands where the
    /// client speaks [`MutexProtocol::Native`], one small script each where it speaks
    /// [`MutexProtocol::Hybrid`].
    pub(crate) fn compare(&self) -> Compare {
        match self.mutex {
            MutexProtocol::Native => Compare::Commands,
            _ => Compare::Script,
        }
    }

    /// The dialect a record is written in: a script where the server runs them, else a
    /// compare-and-set (`SET … IFEQ`, Valkey 9); None where it has neither.
    pub(crate) fn records(&self) -> Option<Dialect> {
        self.records
    }

    /// `PUBLISH`, or `SPUBLISH` where waiters listen per shard (a Cluster).
    pub(crate) fn publish(&self) -> &'static str {
        if self.sharded { "SPUBLISH" } else { "PUBLISH" }
    }

    /// How long a released lock string is kept for its fencing counter.
    pub(crate) fn fence_ttl(&self) -> Duration {
        self.fence_ttl
    }

    /// The server's clock in microseconds now, as read at connect and advanced by this
    /// process's monotonic clock: the seed of a fencing counter that is missing.
    pub(crate) fn seed(&self) -> u64 {
        let (at_connect, read_at) = self.clock;
        let since = u64::try_from(read_at.elapsed().as_micros()).unwrap_or(u64::MAX);
        at_connect.saturating_add(since)
    }

    /// The native fencing counter of the slot `key` is in (the server's only one where keys
    /// do not live in slots).
    pub(crate) fn counter(&self, key: &str) -> Cow<'_, str> {
        if self.sharded {
            Cow::Owned(counter::counter(&self.prefix, Some(Slot::for_key(key))))
        } else {
            Cow::Borrowed(&self.server_counter)
        }
    }
}
