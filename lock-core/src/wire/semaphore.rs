//! The calls on a semaphore (scripts only): its permits `P{N}:permits` (a sorted set of
//! permit ids `<owner>:1..=n` scored by expiry) and its recorded size `P{N}:permits:size`.

use std::time::Duration;

use redis::Value;

use super::answer::{Permit, Permits};
use super::command::Command;
use super::convert::convert;
use super::protocol::Target;
use super::script::{Call, Op};
use crate::error::LockError;
use crate::kind::{ChannelRole, KeyRole};
use crate::name::Keys;
use crate::util::millis;

/// Takes `n` permits of a semaphore of `size`. Answers an [`Answer`](super::answer::Answer)
/// of one hold (the table shape: a size recorded otherwise is a size mismatch).
pub(crate) fn acquire(t: Target<'_>, n: u32, size: u32, lease: Duration) -> Command {
    let mut call = Call::new(Op::SemAcquire);
    call.key(t.keys.of(KeyRole::Permits))
        .key(t.keys.of(KeyRole::PermitsSize))
        .arg(t.owner)
        .arg(n)
        .arg(size)
        .arg(millis(lease));
    call.into()
}

/// Gives back the owner's `n` permits.
pub(crate) fn release(t: Target<'_>, n: u32) -> Command {
    let mut call = Call::new(Op::SemRelease);
    call.key(t.keys.of(KeyRole::Permits))
        .key(t.keys.of(KeyRole::PermitsSize))
        .arg(t.owner)
        .arg(n)
        .arg(t.keys.channel(ChannelRole::PermitsReleased));
    call.into()
}

/// Renews permits (`(hold, n)`, one slot on a Cluster) to `lease` where their owners still
/// hold them.
pub(crate) fn renew<'a>(
    holds: impl IntoIterator<Item = (Target<'a>, u32)>,
    lease: Duration,
) -> Command {
    let mut call = Call::new(Op::SemRenew);
    call.arg(millis(lease));
    for (t, n) in holds {
        call.key(t.keys.of(KeyRole::Permits)).arg(t.owner);
        call.key(t.keys.of(KeyRole::PermitsSize)).arg(n);
    }
    call.into()
}

/// Frees every permit whoever holds them, and wakes the waiters.
pub(crate) fn force_unlock(keys: &Keys) -> Command {
    let mut call = Call::new(Op::SemForceUnlock);
    call.key(keys.of(KeyRole::Permits))
        .key(keys.of(KeyRole::PermitsSize))
        .arg(keys.channel(ChannelRole::PermitsReleased));
    call.into()
}

/// Reads the permits and the recorded size (see `sem_inspect.lua`), read by [`permits`].
pub(crate) fn inspect(keys: &Keys) -> Call {
    let mut call = Call::new(Op::SemInspect);
    call.key(keys.of(KeyRole::Permits))
        .key(keys.of(KeyRole::PermitsSize));
    call
}

/// Reads [`inspect`]'s reply: server ms, recorded size, then permit id and expiry pairs.
/// Only the permits whose lease had not run out are kept.
pub(crate) fn permits(reply: Value) -> Result<Permits, LockError> {
    let bad = || LockError::UnexpectedReply("sem_inspect returned a malformed reply".to_owned());
    let mut values = convert::<Vec<Value>>(reply)?.into_iter();
    let now: i64 = convert(values.next().ok_or_else(bad)?)?;
    let mut permits = Permits {
        size: convert(values.next().ok_or_else(bad)?)?,
        held: Vec::new(),
    };
    while let (Some(member), Some(expiry)) = (values.next(), values.next()) {
        let member: String = convert(member)?;
        let expiry: i64 = convert(expiry)?;
        if expiry > now {
            let owner = member.rsplit_once(':').map_or(member.as_str(), |(o, _)| o);
            permits.held.push(Permit {
                owner: owner.to_owned(),
                left: Duration::from_millis(expiry.abs_diff(now)),
            });
        }
    }
    Ok(permits)
}
