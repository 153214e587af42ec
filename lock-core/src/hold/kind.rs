//! [`Kind`]: what a hold holds, its key, its metric label and whether it is fenced.

use std::borrow::Cow;

use crate::name::Keys;

/// What a hold holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// A mutex: the lock string `P{N}`.
    Lock,
    /// A fair lock: the lock string `P{N}:fair`, with its queue.
    Fair,
    /// The write side of a read-write lock: the lock string `P{N}:rw`.
    Write,
    /// A read share of a read-write lock, in `P{N}:rw:readers`.
    Read,
    /// This many permits of a semaphore, ids `<owner>:1..=n` in `P{N}:permits`.
    Permits(u32),
}

impl Kind {
    /// The key this hold lives in.
    pub(crate) fn key(self, keys: &Keys) -> Cow<'_, str> {
        match self {
            Kind::Lock => Cow::Borrowed(keys.lock()),
            Kind::Fair => Cow::Owned(keys.fair()),
            Kind::Write => Cow::Owned(keys.rw_writer()),
            Kind::Read => Cow::Owned(keys.rw_readers()),
            Kind::Permits(_) => Cow::Owned(keys.permits()),
        }
    }

    /// Whether this kind of hold carries a fencing token.
    pub(crate) fn fenced(self) -> bool {
        matches!(self, Kind::Lock | Kind::Fair | Kind::Write)
    }

    /// The `kind` label of this hold's metrics.
    pub(crate) const fn metric(self) -> &'static str {
        match self {
            Kind::Lock => "mutex",
            Kind::Fair => "fair",
            Kind::Write => "write",
            Kind::Read => "read",
            Kind::Permits(_) => "semaphore",
        }
    }

    /// A name for logs and spans.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Lock => "mutex",
            Kind::Fair => "fair lock",
            Kind::Write => "write lock",
            Kind::Read => "read share",
            Kind::Permits(_) => "permits",
        }
    }
}
