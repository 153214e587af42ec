//! The kinds of lock, as lockctl names them on the command line and in its output. Which keys
//! and channels each kind has is lock-core's to say ([`lock_core::layout`]): lockctl spells no
//! key.

use std::fmt;

use clap::ValueEnum;
use lock_core::layout::LockKind;
use serde::Serialize;

/// A kind of lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    /// The reentrant mutex: a lock string `P{N}`.
    Mutex,
    /// The fair lock: a lock string `P{N}:fair` and its queue.
    Fair,
    /// The read-write lock: the writer `P{N}:rw`, the readers, a waiting writer's mark.
    #[value(alias = "read-write")]
    Rw,
    /// The semaphore: permits `P{N}:permits` and the recorded size.
    #[value(alias = "sem")]
    Semaphore,
}

impl Kind {
    /// Every kind, in the order lockctl shows them.
    pub(crate) const ALL: [Kind; 4] = [Kind::Mutex, Kind::Fair, Kind::Rw, Kind::Semaphore];

    /// The kind's name in output and on the command line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Fair => "fair",
            Kind::Rw => "rw",
            Kind::Semaphore => "semaphore",
        }
    }

    /// lock-core's kind.
    pub(crate) fn lock_kind(self) -> LockKind {
        match self {
            Kind::Mutex => LockKind::Mutex,
            Kind::Fair => LockKind::Fair,
            Kind::Rw => LockKind::ReadWrite,
            Kind::Semaphore => LockKind::Semaphore,
        }
    }

    /// lockctl's kind for lock-core's; None for a kind lockctl does not know.
    pub(crate) fn of(kind: LockKind) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.lock_kind() == kind)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_lock_core_has_a_name() {
        for kind in LockKind::ALL {
            assert_eq!(Kind::of(kind).map(Kind::lock_kind), Some(kind));
        }
        for kind in Kind::ALL {
            assert_eq!(Kind::of(kind.lock_kind()), Some(kind));
        }
    }
}
