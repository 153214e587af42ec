//! The calls every kind of hold has, by its kind: giving one hold back and renewing holds.
//! The one `match` over kinds on the wire; each arm is its kind's room.

use std::time::Duration;

use super::command::Command;
use super::protocol::{Dialect, Protocol, Target};
use super::{fair, mutex, rwlock, semaphore};
use crate::kind::HoldKind;

/// The call that gives back one hold when the owner's count is `count` and the hold's token
/// `token` (0 for kinds without one; a fresh acquisition's undo: 0 matches no recorded
/// release). Read by [`Command::gave_back`].
pub(crate) fn release(p: &Protocol, t: Target<'_>, count: u32, token: u64) -> Command {
    match t.kind {
        HoldKind::Mutex | HoldKind::Write => mutex::release(p, t, count, token),
        HoldKind::Fair => fair::release(p, t, count, token),
        HoldKind::Read => rwlock::read_release(t, count),
        HoldKind::Permits(n) => semaphore::release(t, n),
    }
}

/// Which renewal call a hold needs: holds of one renewal (and on a Cluster one slot) are
/// renewed by one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Renewal {
    /// Lock strings (mutex, fair lock, writer) in this dialect.
    LockString(Dialect),
    Read,
    Permits,
}

impl Renewal {
    /// The renewal a hold of `kind` needs.
    pub(crate) fn of(p: &Protocol, kind: HoldKind) -> Renewal {
        match kind {
            HoldKind::Mutex | HoldKind::Fair | HoldKind::Write => {
                Renewal::LockString(p.dialect(kind))
            }
            HoldKind::Read => Renewal::Read,
            HoldKind::Permits(_) => Renewal::Permits,
        }
    }
}

/// The call that renews `holds` (all of renewal `renewal`) to `lease` where their owners
/// still hold them. Read by [`Command::renewed`].
pub(crate) fn renew<'a>(
    p: &Protocol,
    renewal: Renewal,
    holds: impl IntoIterator<Item = Target<'a>>,
    lease: Duration,
) -> Command {
    match renewal {
        Renewal::LockString(_) => mutex::renew(p, holds, lease),
        Renewal::Read => rwlock::read_renew(holds, lease),
        Renewal::Permits => {
            let permits = holds.into_iter().map(|t| match t.kind {
                HoldKind::Permits(n) => (t, n),
                _ => (t, 0),
            });
            semaphore::renew(permits, lease)
        }
    }
}

/// How the scripted release of a hold of `kind` (the call [`release`] builds where the
/// client speaks the scripts) reads `reply`: for the engine's tests of what it applies.
#[cfg(test)]
pub(crate) fn scripted_gave_back(
    kind: HoldKind,
    reply: redis::Value,
) -> Result<super::answer::GaveBack, crate::error::LockError> {
    let p = Protocol::testing(true, false, crate::capabilities::MutexProtocol::Scripted);
    let keys = crate::name::Keys::new("lock:", "order:42")?;
    let client = std::sync::Arc::from("client");
    let owner = super::Owner {
        client: &client,
        holder: 1,
    };
    let target = Target {
        kind,
        keys: &keys,
        owner,
    };
    release(&p, target, 1, 7).gave_back(reply, false)
}
