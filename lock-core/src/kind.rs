//! Every kind of lock and its facts, in one table: the kinds an operator sees
//! ([`LockKind`]), the role and spelling of each of their keys ([`KeyRole`]) and release
//! channels ([`ChannelRole`]), and the kinds of hold an owner has ([`HoldKind`]: its main key, its
//! metric label, whether it is fenced). The only place that spells what follows `P{N}` in a
//! key or channel; the public ones are re-exported by [`layout`](crate::layout).
//!
//! A new primitive adds its facts here: a [`LockKind`] with its key and channel roles, and
//! the [`HoldKind`] of its holds.

/// A kind of lock: the primitive that owns a key or channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LockKind {
    /// [`Mutex`](crate::Mutex): the reentrant mutex (also what `lock()`, a
    /// [`MultiLock`](crate::MultiLock) and a [`Leader`](crate::Leader) take).
    Mutex,
    /// [`FairLock`](crate::FairLock).
    Fair,
    /// [`ReadWriteLock`](crate::ReadWriteLock).
    ReadWrite,
    /// [`Semaphore`](crate::Semaphore).
    Semaphore,
}

impl LockKind {
    /// Every kind, in the order of the table in the [layout](crate::layout) docs.
    pub const ALL: [LockKind; 4] = [
        LockKind::Mutex,
        LockKind::Fair,
        LockKind::ReadWrite,
        LockKind::Semaphore,
    ];

    /// The roles of this kind's keys, its main key (the lock string or the permits) first.
    pub fn keys(self) -> &'static [KeyRole] {
        match self {
            LockKind::Mutex => &[KeyRole::Mutex],
            LockKind::Fair => &[KeyRole::Fair, KeyRole::FairQueue, KeyRole::FairDeadlines],
            LockKind::ReadWrite => &[KeyRole::Writer, KeyRole::Readers, KeyRole::WriterWaiting],
            LockKind::Semaphore => &[KeyRole::Permits, KeyRole::PermitsSize],
        }
    }

    /// The role of this kind's release channel.
    pub fn channel(self) -> ChannelRole {
        match self {
            LockKind::Mutex => ChannelRole::Released,
            LockKind::Fair => ChannelRole::FairWake,
            LockKind::ReadWrite => ChannelRole::RwReleased,
            LockKind::Semaphore => ChannelRole::PermitsReleased,
        }
    }
}

/// What a key of a lock holds (DESIGN.md, "Keys", has each value's format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum KeyRole {
    /// `P{N}`: the mutex's lock string (owner, hold count, fencing counter).
    Mutex,
    /// `P{N}:fair`: the fair lock's lock string.
    Fair,
    /// `P{N}:fair:queue`: the fair lock's waiters in arrival order (a sorted set).
    FairQueue,
    /// `P{N}:fair:deadlines`: the fair lock's waiters' deadlines (a sorted set); it changes
    /// together with the queue.
    FairDeadlines,
    /// `P{N}:rw`: the read-write lock's writer, a lock string.
    Writer,
    /// `P{N}:rw:readers`: the read-write lock's readers (a hash).
    Readers,
    /// `P{N}:rw:writer-waiting`: a waiting writer's mark.
    WriterWaiting,
    /// `P{N}:permits`: the semaphore's permits held (a sorted set).
    Permits,
    /// `P{N}:permits:size`: the semaphore's size, recorded while any permit is held; it
    /// changes together with the permits.
    PermitsSize,
}

impl KeyRole {
    /// Every role, kind by kind.
    pub const ALL: [KeyRole; 9] = [
        KeyRole::Mutex,
        KeyRole::Fair,
        KeyRole::FairQueue,
        KeyRole::FairDeadlines,
        KeyRole::Writer,
        KeyRole::Readers,
        KeyRole::WriterWaiting,
        KeyRole::Permits,
        KeyRole::PermitsSize,
    ];

    /// The kind of lock this key belongs to.
    pub fn kind(self) -> LockKind {
        match self {
            KeyRole::Mutex => LockKind::Mutex,
            KeyRole::Fair | KeyRole::FairQueue | KeyRole::FairDeadlines => LockKind::Fair,
            KeyRole::Writer | KeyRole::Readers | KeyRole::WriterWaiting => LockKind::ReadWrite,
            KeyRole::Permits | KeyRole::PermitsSize => LockKind::Semaphore,
        }
    }

    /// What follows `P{N}` in the key (empty for the mutex).
    pub fn suffix(self) -> &'static str {
        match self {
            KeyRole::Mutex => "",
            KeyRole::Fair => ":fair",
            KeyRole::FairQueue => ":fair:queue",
            KeyRole::FairDeadlines => ":fair:deadlines",
            KeyRole::Writer => ":rw",
            KeyRole::Readers => ":rw:readers",
            KeyRole::WriterWaiting => ":rw:writer-waiting",
            KeyRole::Permits => ":permits",
            KeyRole::PermitsSize => ":permits:size",
        }
    }
}

/// A release channel of a lock: lock-core publishes on it when a waiter may take the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ChannelRole {
    /// `P{N}:released`: a mutex's full release that someone waits for, a force-unlock.
    Released,
    /// `P{N}:fair:wake:<owner>`: the wake-up of one fair-lock waiter, the head of the queue;
    /// one channel per waiter, the owner id after the prefix `P{N}:fair:wake:`.
    FairWake,
    /// `P{N}:rw:released`: a read-write lock's writer out, last reader out, a waiting writer
    /// giving up, a force-unlock.
    RwReleased,
    /// `P{N}:permits:released`: a semaphore's release, a force-unlock.
    PermitsReleased,
}

impl ChannelRole {
    /// Every role, kind by kind.
    pub const ALL: [ChannelRole; 4] = [
        ChannelRole::Released,
        ChannelRole::FairWake,
        ChannelRole::RwReleased,
        ChannelRole::PermitsReleased,
    ];

    /// The kind of lock this channel belongs to.
    pub fn kind(self) -> LockKind {
        match self {
            ChannelRole::Released => LockKind::Mutex,
            ChannelRole::FairWake => LockKind::Fair,
            ChannelRole::RwReleased => LockKind::ReadWrite,
            ChannelRole::PermitsReleased => LockKind::Semaphore,
        }
    }

    /// What follows `P{N}` in the channel; for [`FairWake`](Self::FairWake), what comes
    /// before the waiter's owner id.
    pub fn suffix(self) -> &'static str {
        match self {
            ChannelRole::Released => ":released",
            ChannelRole::FairWake => ":fair:wake:",
            ChannelRole::RwReleased => ":rw:released",
            ChannelRole::PermitsReleased => ":permits:released",
        }
    }
}

/// What follows `P{N}` in a name's record (`crate::record`): `<token>:<bytes>`.
pub(crate) const RECORD: &str = ":record";

/// What follows `P{N}` in a name's rate limit (`crate::rate_limit`):
/// `<tat>|<interval>|<burst>`.
pub(crate) const RATE: &str = ":rate";

/// What follows `P{N}` in a lock's update record (`crate::update`): the last guarded update
/// its holder applied, `<owner>|<token>|<seq>|<values>`.
pub(crate) const UPDATED: &str = ":updated";

/// What follows the prefix in a client's key (`Pclient:<client id>`).
pub(crate) const CLIENT: &str = "client:";

/// What an owner's hold holds (a hold's kind; [`LockKind`] is a lock's): the mutex, a fair
/// lock, a read-write lock's write side or one read share, or a number of permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum HoldKind {
    /// A mutex: the lock string `P{N}`.
    Mutex,
    /// A fair lock: the lock string `P{N}:fair`, with its queue.
    Fair,
    /// The write side of a read-write lock: the lock string `P{N}:rw`.
    Write,
    /// A read share of a read-write lock, in `P{N}:rw:readers`.
    Read,
    /// This many permits of a semaphore, ids `<owner>:1..=n` in `P{N}:permits`.
    Permits(u32),
}

impl HoldKind {
    /// The key this hold lives in.
    pub(crate) fn role(self) -> KeyRole {
        match self {
            HoldKind::Mutex => KeyRole::Mutex,
            HoldKind::Fair => KeyRole::Fair,
            HoldKind::Write => KeyRole::Writer,
            HoldKind::Read => KeyRole::Readers,
            HoldKind::Permits(_) => KeyRole::Permits,
        }
    }

    /// Whether this kind of hold carries a fencing token.
    pub(crate) fn fenced(self) -> bool {
        matches!(self, HoldKind::Mutex | HoldKind::Fair | HoldKind::Write)
    }

    /// The `kind` label of this hold's metrics.
    pub(crate) const fn metric(self) -> &'static str {
        match self {
            HoldKind::Mutex => "mutex",
            HoldKind::Fair => "fair",
            HoldKind::Write => "write",
            HoldKind::Read => "read",
            HoldKind::Permits(_) => "semaphore",
        }
    }

    /// A name for logs and spans.
    pub(crate) fn label(self) -> &'static str {
        match self {
            HoldKind::Mutex => "mutex",
            HoldKind::Fair => "fair lock",
            HoldKind::Write => "write lock",
            HoldKind::Read => "read share",
            HoldKind::Permits(_) => "permits",
        }
    }
}
