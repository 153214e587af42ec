//! [`LeaseState`]: how a held lock's lease stands, as its holder knows it.

/// How a held lock's lease stands, as this process knows it: read with
/// [`Guard::lease_state`](crate::Guard::lease_state) (and the same method of every guard and of
/// [`HeldLock`](crate::HeldLock)), awaited with [`at_risk`](crate::Guard::at_risk) and
/// [`watch_lease`](crate::Guard::watch_lease).
///
/// A watchdog-leased lock goes `Held` → `AtRisk` when a renewal fails (Redis unreachable,
/// not answering in time, an error) while the lease it last confirmed still has time left,
/// and back to `Held` when a later renewal (or an extension) succeeds. If none succeeds
/// before the lease runs out, it is lost: `Ended`. A lock with a fixed lease is never
/// renewed, so never `AtRisk`: it goes from `Held` to `Ended` when the lease runs out, or
/// earlier when Redis says it is gone or it is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseState {
    /// Held, and the last renewal, if one was due, was confirmed by Redis.
    Held,
    /// Still held, but the last renewal failed: the lease runs out at
    /// [`remaining`](crate::Guard::remaining) from now unless a renewal succeeds before. The
    /// watchdog goes on trying (every quarter of its period); a success makes it `Held`
    /// again. Time to stop starting work that needs the lock for long, or to checkpoint.
    AtRisk,
    /// Not held any more: lost (Redis said it is gone, or its lease ran out unconfirmed) or
    /// released. Final: a lock never comes back from `Ended`.
    Ended,
}
