//! The calls on a fair lock (scripts only): its lock string `P{N}:fair`, its queue
//! `P{N}:fair:queue` and the queue's deadlines `P{N}:fair:deadlines`, every call with the
//! three in that order. Re-entry, renewal and inspection of its lock string are the mutex's
//! (`super::mutex`).

use std::time::Duration;

use redis::Value;

use super::command::Command;
use super::convert::convert;
use super::owner::Owner;
use super::protocol::{Protocol, Target};
use super::script::{Call, Op};
use crate::error::LockError;
use crate::kind::{ChannelRole, KeyRole};
use crate::name::Keys;
use crate::util::millis;

/// A call of `op` on the fair lock at `keys`.
fn call(op: Op, keys: &Keys) -> Call {
    let mut call = Call::new(op);
    call.key(keys.of(KeyRole::Fair))
        .key(keys.of(KeyRole::FairQueue))
        .key(keys.of(KeyRole::FairDeadlines));
    call
}

/// Takes the lock (or queues for it for `queue_for`; zero: a single try that does not
/// queue) with `expected` holds already. Answers an [`Answer`](super::answer::Answer) of one
/// hold.
pub(crate) fn acquire(
    t: Target<'_>,
    expected: u32,
    lease: Duration,
    queue_for: Duration,
) -> Command {
    let mut call = call(Op::FairAcquire, t.keys);
    call.arg(t.owner)
        .arg(millis(lease))
        .arg(expected)
        .arg(millis(queue_for));
    call.into()
}

/// Gives back one hold when the owner's count is `count` and its token `token`, waking the
/// head of the queue.
pub(crate) fn release(p: &Protocol, t: Target<'_>, count: u32, token: u64) -> Command {
    let mut call = call(Op::FairRelease, t.keys);
    call.arg(t.owner)
        .arg(count)
        .arg(token)
        .arg(t.keys.channel(ChannelRole::FairWake))
        .arg(millis(p.fence_ttl()));
    call.into()
}

/// Leaves the queue, and passes the turn on if the lock is free.
pub(crate) fn leave(keys: &Keys, owner: Owner<'_>) -> Command {
    let mut call = call(Op::FairLeave, keys);
    call.arg(owner).arg(keys.channel(ChannelRole::FairWake));
    call.into()
}

/// Frees the lock whoever holds it, and wakes the head of its queue.
pub(crate) fn force_unlock(p: &Protocol, keys: &Keys) -> Command {
    let mut call = call(Op::FairForceUnlock, keys);
    call.arg(keys.channel(ChannelRole::FairWake))
        .arg(millis(p.fence_ttl()));
    call.into()
}

/// Reads the queue: answers `{pttl, value, queued, now}` (see `fair_inspect.lua`), read by
/// [`queued`].
pub(crate) fn inspect(keys: &Keys) -> Call {
    let mut call = call(Op::FairInspect, keys);
    call.arg("");
    call
}

/// Reads [`inspect`]'s reply: the waiters in the queue whose deadline has not passed.
pub(crate) fn queued(reply: Value) -> Result<u32, LockError> {
    let (_, _, queued, _): (i64, Option<String>, u32, i64) = convert(reply)?;
    Ok(queued)
}
