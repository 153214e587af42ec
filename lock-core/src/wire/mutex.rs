//! The calls on a lock string, in both dialects: a mutex's (scripts, or the native protocol
//! where the client speaks it), and what a fair lock and a read-write lock's writer share
//! with it (re-entry, release, renewal, inspection) in the scripts.

use std::sync::Arc;
use std::time::Duration;

use super::command::Command;
use super::native;
use super::owner::Owner;
use super::protocol::{Dialect, Protocol, Target};
use super::script::{Call, Op};
use crate::kind::{ChannelRole, HoldKind};
use crate::name::Keys;
use crate::util::millis;

/// A re-entry: the token of the hold it re-enters and what is left of that hold's lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reentry {
    pub(crate) token: u64,
    pub(crate) left: Duration,
}

/// The call that takes a hold on a lock string with `expected` holds already (0: a fresh
/// acquisition, else a re-entry, `reentry`), with a lease of `lease` (for a re-entry that
/// must not shorten the hold: at least what is left of it). `will_wait`: whether the request
/// waits when it finds the lock busy; `holder_ttl`: whether a busy answer must say how long
/// the holder keeps it (a native acquisition leaves its `PTTL` out otherwise, and a busy
/// answer is [`Answer::BusyAskAgain`]). Answers an [`Answer`] of one hold.
///
/// [`Answer`]: super::answer::Answer
/// [`Answer::BusyAskAgain`]: super::answer::Answer::BusyAskAgain
pub(crate) fn acquire(
    p: &Protocol,
    t: Target<'_>,
    expected: u32,
    lease: Duration,
    (will_wait, holder_ttl): (bool, bool),
    reentry: Option<Reentry>,
) -> Command {
    match (p.dialect(t.kind), reentry) {
        // Only a mutex (its key `P{N}` itself) speaks natively.
        (Dialect::Native, Some(reentry)) if expected > 0 => native::Call::reenter(
            p.compare(),
            t.keys.lock_shared(),
            t.owner,
            millis(lease.max(reentry.left)),
            reentry.token,
        )
        .into(),
        (Dialect::Native, _) => native::Call::acquire(native::Acquire {
            key: t.keys.lock_shared(),
            owner: t.owner.id(),
            lease_ms: millis(lease),
            counter: &p.counter(t.keys.lock()),
            seed: p.seed(),
            compare: p.compare(),
            holder_ttl,
        })
        .into(),
        (Dialect::Scripts, _) => {
            let mut call = Call::new(Op::Acquire);
            call.key(t.keys.hold(t.kind).as_ref())
                .arg(t.owner)
                .arg(millis(lease))
                .arg(expected)
                .arg(if will_wait { "1" } else { "0" });
            call.into()
        }
    }
}

/// One mutex of a multi-lock's acquisition: its keys, the count the owner holds it with
/// (0: fresh), and the owner's token on it for a re-entry.
pub(crate) struct Claimed<'a> {
    pub(crate) keys: &'a Keys,
    pub(crate) expected: u32,
    pub(crate) token: u64,
}

/// The call that takes several mutexes (in one slot) at once, all or none, for `owner`, with
/// a lease of `lease`. Answers an [`Answer`](super::answer::Answer) of as many holds.
pub(crate) fn multi_acquire<'a>(
    p: &Protocol,
    owner: Owner<'_>,
    locks: &[Claimed<'a>],
    lease: Duration,
    will_wait: bool,
) -> Command {
    if p.dialect(HoldKind::Mutex) == Dialect::Native {
        let first = locks
            .first()
            .map_or_else(|| Arc::from(""), |l| l.keys.lock_shared());
        let acquire = native::Acquire {
            counter: &p.counter(&first),
            key: first.clone(),
            owner: owner.id(),
            lease_ms: millis(lease),
            seed: p.seed(),
            compare: p.compare(),
            holder_ttl: true,
        };
        let locks = locks
            .iter()
            .map(|l| native::MultiLock {
                key: l.keys.lock().to_owned(),
                channel: l.keys.channel(ChannelRole::Released).to_string(),
                reentry: (l.expected > 0).then_some(l.token),
            })
            .collect();
        return native::Call::multi_acquire(acquire, locks, p.publish()).into();
    }
    let mut call = Call::new(Op::MultiAcquire);
    call.arg(owner)
        .arg(millis(lease))
        .arg(if will_wait { "1" } else { "0" });
    for lock in locks {
        call.key(lock.keys.lock()).arg(lock.expected);
    }
    call.into()
}

/// The call that gives back one hold of a lock string (mutex or writer) when the owner's
/// count is `count` and the hold's token `token`.
pub(crate) fn release(p: &Protocol, t: Target<'_>, count: u32, token: u64) -> Command {
    let channel = match t.kind {
        HoldKind::Write => t.keys.channel(ChannelRole::RwReleased),
        _ => t.keys.channel(ChannelRole::Released),
    };
    if p.dialect(t.kind) == Dialect::Native {
        let publish = (p.publish(), channel, token);
        return native::Call::release(
            p.compare(),
            t.keys.lock_shared(),
            t.owner,
            count <= 1,
            publish,
        )
        .into();
    }
    let mut call = Call::new(Op::Release);
    call.key(t.keys.hold(t.kind).as_ref())
        .arg(t.owner)
        .arg(count)
        .arg(token)
        .arg(channel)
        .arg(millis(p.fence_ttl()));
    call.into()
}

/// The call that leaves a mutex's last hold to expire in `left` rather than freeing it
/// (`hold_at_least`).
pub(crate) fn keep(p: &Protocol, t: Target<'_>, left: Duration) -> Command {
    if p.dialect(t.kind) == Dialect::Native {
        return native::Call::keep(p.compare(), t.keys.lock_shared(), t.owner, millis(left)).into();
    }
    let mut call = Call::new(Op::ReleaseKeep);
    call.key(t.keys.lock()).arg(t.owner).arg(millis(left));
    call.into()
}

/// The call that sets the lease of lock-string holds (mutex, fair, writer; one dialect, and
/// on a Cluster one slot, for all) to `lease` where their owners still hold them. The hybrid
/// protocol's renewals are the scripts' `renew` (which knows a lock that is its owner id):
/// one script call for the batch, where a compare-and-set per lock would be one each.
pub(crate) fn renew<'a>(
    p: &Protocol,
    holds: impl IntoIterator<Item = Target<'a>>,
    lease: Duration,
) -> Command {
    let mut holds = holds.into_iter().peekable();
    if holds
        .peek()
        .is_some_and(|t| p.dialect(t.kind) == Dialect::Native)
        && p.compare() == native::Compare::Commands
    {
        let locks = holds.map(|t| (t.keys.lock(), t.owner));
        return native::Call::renew(p.compare(), locks, millis(lease)).into();
    }
    let mut call = Call::new(Op::Renew);
    call.arg(millis(lease));
    for t in holds {
        call.key(t.keys.hold(t.kind).as_ref()).arg(t.owner);
    }
    call.into()
}

/// The call that frees a mutex whoever holds it and wakes its waiters.
pub(crate) fn force_unlock(p: &Protocol, keys: &Keys) -> Command {
    if p.dialect(HoldKind::Mutex) == Dialect::Native {
        let channel = keys.channel(ChannelRole::Released).to_string();
        return native::Call::force_unlock(keys.lock(), (p.publish(), &channel)).into();
    }
    let mut call = Call::new(Op::ForceUnlock);
    call.key(keys.lock())
        .arg(keys.channel(ChannelRole::Released))
        .arg(millis(p.fence_ttl()));
    call.into()
}

/// The call that reads the lock string at `key` (of a hold of `kind`): its remaining lease
/// and its value (a native mutex's: its owner).
pub(crate) fn inspect(p: &Protocol, kind: HoldKind, key: &str) -> Command {
    if p.dialect(kind) == Dialect::Native {
        return native::Call::inspect(key, &p.counter(key)).into();
    }
    let mut call = Call::new(Op::Inspect);
    call.key(key);
    call.into()
}
