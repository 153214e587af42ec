//! A hold's mutable part ([`State`]), the copy of it the engine reads ([`Snapshot`]), and
//! what it says: its [`Lease`] and [`Status`].

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

/// How a hold's lease is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// Renewed by the client's watchdog for as long as a guard lives.
    Watchdog,
    /// Set once by the acquisition (or by an extension), never renewed.
    Fixed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Not held (before the first acquisition, or after the last release).
    Idle,
    Held,
    /// Every guard is gone; the release is on its way. Not renewed.
    Releasing,
    Lost,
}

/// The mutable part of a hold.
pub(super) struct State {
    /// The owner's hold count in Redis, as far as this process knows.
    pub(super) count: u32,
    pub(super) token: u64,
    pub(super) lease: Lease,
    pub(super) status: Status,
    /// The lock is ours until this instant unless a renewal moves it.
    pub(super) valid_until: Instant,
    /// Bumped by every fresh acquisition, so a late answer about an earlier hold is ignored.
    pub(super) generation: u64,
    /// Why the hold of this generation was lost, once it was.
    pub(super) lost_reason: Option<&'static str>,
    /// When this generation was granted (its first acquisition's answer).
    pub(super) granted_at: Instant,
    /// The last renewal of this generation failed while it was still valid (counted in the
    /// `lock_at_risk` gauge while set); a confirmed renewal clears it.
    pub(super) at_risk: bool,
    /// This process's place at the head of the name's local queue, kept from the grant until
    /// the hold ends, so the next local waiter asks Redis only once the lock is given back
    /// (see [`Hold::keep_queue_place`](super::Hold::keep_queue_place)).
    pub(super) queue_place: Option<OwnedSemaphorePermit>,
}

/// A copy of a hold's state at one moment ([`Hold::snapshot`](super::Hold::snapshot)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot {
    pub(crate) generation: u64,
    pub(crate) token: u64,
    /// The owner's hold count in Redis, as far as this process knows.
    pub(crate) count: u32,
    pub(crate) lease: Lease,
    pub(crate) status: Status,
    /// The lock is ours until this instant unless a renewal moves it.
    pub(crate) valid_until: Instant,
}

impl State {
    /// Not held: no count, no token, no lease yet.
    pub(super) fn idle() -> Self {
        State {
            count: 0,
            token: 0,
            lease: Lease::Fixed,
            status: Status::Idle,
            valid_until: Instant::now(),
            generation: 0,
            lost_reason: None,
            granted_at: Instant::now(),
            at_risk: false,
            queue_place: None,
        }
    }

    /// Whether the hold counts as held in Redis (the `lock_held` gauge): granted and neither
    /// released nor lost.
    pub(super) fn counted(&self) -> bool {
        matches!(self.status, Status::Held | Status::Releasing)
    }

    /// A copy of the state now.
    pub(super) fn snapshot(&self) -> Snapshot {
        Snapshot {
            generation: self.generation,
            token: self.token,
            count: self.count,
            lease: self.lease,
            status: self.status,
            valid_until: self.valid_until,
        }
    }
}
