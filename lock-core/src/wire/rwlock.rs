//! The calls on a read-write lock (scripts only): its writer's lock string `P{N}:rw`, its
//! readers `P{N}:rw:readers` and the writer-waiting mark `P{N}:rw:mark`. The writer's
//! re-entry, release and renewal are the mutex's (`super::mutex`), on its lock string.

use std::time::Duration;

use redis::Value;

use super::answer::{ReadShare, Readers};
use super::command::Command;
use super::convert::convert;
use super::protocol::{Protocol, Target};
use super::script::{Call, Op};
use crate::error::LockError;
use crate::kind::{ChannelRole, HoldKind, KeyRole};
use crate::name::Keys;
use crate::util::millis;

/// Takes a read share (`t.kind` [`HoldKind::Read`]) or the write lock with `expected` holds
/// already; `will_wait`: a writer that will wait marks itself, holding new readers back.
/// Answers an [`Answer`](super::answer::Answer) of one hold.
pub(crate) fn acquire(t: Target<'_>, expected: u32, lease: Duration, will_wait: bool) -> Command {
    let op = match t.kind {
        HoldKind::Read => Op::RwRead,
        _ => Op::RwWrite,
    };
    let mut call = Call::new(op);
    call.key(t.keys.of(KeyRole::Writer))
        .key(t.keys.of(KeyRole::Readers))
        .key(t.keys.of(KeyRole::WriterWaiting))
        .arg(t.owner)
        .arg(millis(lease))
        .arg(expected)
        .arg(if will_wait { "1" } else { "0" });
    call.into()
}

/// Gives back one read share when the owner's count is `count`.
pub(crate) fn read_release(t: Target<'_>, count: u32) -> Command {
    let mut call = Call::new(Op::RwReadRelease);
    call.key(t.keys.of(KeyRole::Readers))
        .arg(t.owner)
        .arg(count)
        .arg(t.keys.channel(ChannelRole::RwReleased));
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
        call.key(t.keys.of(KeyRole::Readers)).arg(t.owner);
    }
    call.into()
}

/// Removes a writer's writer-waiting mark, so the readers it held back go on at once.
pub(crate) fn unmark(t: Target<'_>) -> Command {
    let mut call = Call::new(Op::RwUnmark);
    call.key(t.keys.of(KeyRole::WriterWaiting))
        .arg(t.owner)
        .arg(t.keys.channel(ChannelRole::RwReleased));
    call.into()
}

/// Frees the writer and every read share, and wakes the waiters.
pub(crate) fn force_unlock(p: &Protocol, keys: &Keys) -> Command {
    let mut call = Call::new(Op::RwForceUnlock);
    call.key(keys.of(KeyRole::Writer))
        .key(keys.of(KeyRole::Readers))
        .arg(keys.channel(ChannelRole::RwReleased))
        .arg(millis(p.fence_ttl()));
    call.into()
}

/// Reads the readers and the mark (see `rw_inspect.lua`), read by [`readers`].
pub(crate) fn inspect(keys: &Keys) -> Call {
    let mut call = Call::new(Op::RwInspect);
    call.key(keys.of(KeyRole::Writer))
        .key(keys.of(KeyRole::Readers))
        .key(keys.of(KeyRole::WriterWaiting));
    call
}

/// Reads [`inspect`]'s reply: writer pttl and value, mark pttl, server ms, then reader owner
/// and `count|expiry` pairs. Only the shares whose expiry had not passed are kept.
pub(crate) fn readers(reply: Value) -> Result<Readers, LockError> {
    let bad = || LockError::UnexpectedReply("rw_inspect returned a malformed reply".to_owned());
    let mut values = convert::<Vec<Value>>(reply)?.into_iter();
    let [_writer_pttl, _writer_value, mark_pttl, now] =
        [values.next(), values.next(), values.next(), values.next()];
    let mark_pttl: i64 = convert(mark_pttl.ok_or_else(bad)?)?;
    let now: i64 = convert(now.ok_or_else(bad)?)?;
    let mut readers = Readers {
        writer_waiting: mark_pttl != -2,
        shares: Vec::new(),
    };
    while let (Some(owner), Some(share)) = (values.next(), values.next()) {
        let share: String = convert(share)?;
        let (count, expiry) = share.split_once('|').ok_or_else(bad)?;
        let count: u32 = count.parse().map_err(|_| bad())?;
        let expiry: i64 = expiry.parse().map_err(|_| bad())?;
        if expiry > now {
            readers.shares.push(ReadShare {
                owner: convert(owner)?,
                count,
                left: Duration::from_millis(expiry.abs_diff(now)),
            });
        }
    }
    Ok(readers)
}
