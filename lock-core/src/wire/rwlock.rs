//! The calls on a read-write lock (scripts only): its writer's lock string `P{N}:rw`, its
//! readers `P{N}:rw:readers` and the writer-waiting mark `P{N}:rw:mark`. The writer's
//! re-entry, release and renewal are the mutex's (`super::mutex`), on its lock string.

use std::time::Duration;

use super::command::Command;
use super::protocol::{Protocol, Target};
use super::script::{Call, Op};
use crate::hold::Kind;
use crate::name::Keys;
use crate::util::millis;

/// Takes a read share (`t.kind` [`Kind::Read`]) or the write lock with `expected` holds
/// already; `will_wait`: a writer that will wait marks itself, holding new readers back.
/// Answers an [`Answer`](super::answer::Answer) of one hold.
pub(crate) fn acquire(t: Target<'_>, expected: u32, lease: Duration, will_wait: bool) -> Command {
    let op = match t.kind {
        Kind::Read => Op::RwRead,
        _ => Op::RwWrite,
    };
    let mut call = Call::new(op);
    call.key(t.keys.rw_writer())
        .key(t.keys.rw_readers())
        .key(t.keys.rw_mark())
        .arg(t.owner)
        .arg(millis(lease))
        .arg(expected)
        .arg(if will_wait { "1" } else { "0" });
    call.into()
}

/// Gives back one read share when the owner's count is `count`.
pub(crate) fn read_release(t: Target<'_>, count: u32) -> Command {
    let mut call = Call::new(Op::RwReadRelease);
    call.key(t.keys.rw_readers())
        .arg(t.owner)
        .arg(count)
        .arg(t.keys.rw_released());
    call.into()
}

/// Renews read shares (one slot on a Cluster) to `lease` where their owners still hold them.
pub(crate) fn read_renew<'a>(
    holds: impl IntoIterator<Item = Target<'a>>,
    lease: Duration,
) -> Command {
    let mut call = Call::new(Op::RwReadRenew);
    call.arg(millis(lease));
    for t in holds {
        call.key(t.keys.rw_readers()).arg(t.owner);
    }
    call.into()
}

/// Removes a writer's writer-waiting mark, so the readers it held back go on at once.
pub(crate) fn unmark(t: Target<'_>) -> Command {
    let mut call = Call::new(Op::RwUnmark);
    call.key(t.keys.rw_mark())
        .arg(t.owner)
        .arg(t.keys.rw_released());
    call.into()
}

/// Frees the writer and every read share, and wakes the waiters.
pub(crate) fn force_unlock(p: &Protocol, keys: &Keys) -> Command {
    let mut call = Call::new(Op::RwForceUnlock);
    call.key(keys.rw_writer())
        .key(keys.rw_readers())
        .arg(keys.rw_released())
        .arg(millis(p.fence_ttl()));
    call.into()
}

/// Reads the readers and the mark (see `rw_inspect.lua`).
pub(crate) fn inspect(keys: &Keys) -> Call {
    let mut call = Call::new(Op::RwInspect);
    call.key(keys.rw_writer())
        .key(keys.rw_readers())
        .key(keys.rw_mark());
    call
}
