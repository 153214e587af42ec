//! [`Command`]: one call in either dialect, as the engine sends it, and the readers of its
//! reply into typed answers.

use redis::Value;

use super::answer::{Answer, GaveBack, Inspected};
use super::convert::convert;
use super::native;
use super::script::{self as scripts, Op};
use crate::error::LockError;

/// One call to Redis.
#[derive(Debug, Clone)]
pub(crate) enum Command {
    /// A call of the Lua code (`FCALL`, or `EVALSHA`).
    Script(scripts::Call),
    /// The server's own commands, in one pipeline.
    Native(native::Call),
}

/// A [`Command`], borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wire<'a> {
    Script(&'a scripts::Call),
    Native(&'a native::Call),
}

impl Command {
    /// The command, borrowed.
    pub(crate) fn wire(&self) -> Wire<'_> {
        match self {
            Command::Script(call) => Wire::Script(call),
            Command::Native(call) => Wire::Native(call),
        }
    }
}

impl Command {
    /// Whether the call may go out in a batch with others of its dialect (see
    /// [`scripts::Call::batch`] and [`native::Call::batch`]).
    pub(crate) fn batches(&self) -> bool {
        match self {
            Command::Script(call) => call.batches(),
            Command::Native(call) => call.batches(),
        }
    }
}

impl From<scripts::Call> for Command {
    fn from(call: scripts::Call) -> Self {
        Command::Script(call)
    }
}

impl From<native::Call> for Command {
    fn from(call: native::Call) -> Self {
        Command::Native(call)
    }
}

/// Reading a reply, in the call's dialect, into what it says. Every reply of every dialect
/// is read here or in [`native`]; a reply of another shape is
/// [`LockError::UnexpectedReply`].
impl Command {
    /// A reply to a call that gives one hold back; `resent`: the call may have been sent
    /// before (see [`native::Call::gave_back`]; a script recognises a repeat itself).
    pub(crate) fn gave_back(&self, reply: Value, resent: bool) -> Result<GaveBack, LockError> {
        let call = match self {
            Command::Native(call) => return call.gave_back(reply, resent),
            Command::Script(call) => call,
        };
        script_gave_back(call.op(), reply)
    }

    /// A renewal's reply: per hold, in the call's order, whether it was still its owner's.
    pub(crate) fn renewed(&self, reply: Value) -> Result<Vec<bool>, LockError> {
        match self {
            Command::Native(call) => call.renewed(reply),
            Command::Script(_) => {
                let held: Vec<i64> = convert(reply)?;
                Ok(held.into_iter().map(|n| n == 1).collect())
            }
        }
    }

    /// A force-unlock's reply: whether there was a holder to free.
    pub(crate) fn freed(&self, reply: Value) -> Result<bool, LockError> {
        match self {
            Command::Native(call) => call.freed(reply),
            Command::Script(_) => Ok(convert::<i64>(reply)? == 1),
        }
    }

    /// An inspection's reply: the lock string's remaining lease, its value, and a native
    /// mutex's fencing counter.
    pub(crate) fn inspected(&self, reply: Value) -> Result<Inspected, LockError> {
        match self {
            Command::Native(call) => call.inspected(reply),
            Command::Script(_) => {
                let (pttl, value) = convert(reply)?;
                Ok(Inspected {
                    pttl,
                    value,
                    counter: None,
                    kept_by_holder: false,
                })
            }
        }
    }
}

/// The reply to a call of `op` that gives one hold back (a script recognises a repeat
/// itself): 1 released, 2 decremented, 3 a repeat, 0 not held; a semaphore's: how many of
/// the owner's permits were still held.
fn script_gave_back(op: Op, reply: Value) -> Result<GaveBack, LockError> {
    let n: i64 = convert(reply)?;
    let gave_back = match op {
        Op::SemRelease => Some(GaveBack::Permits(n)),
        Op::Release | Op::ReleaseKeep | Op::FairRelease | Op::RwReadRelease => match n {
            1..=3 => Some(GaveBack::Held),
            0 => Some(GaveBack::NotHeld),
            _ => None,
        },
        _ => None,
    };
    gave_back.ok_or_else(|| unexpected(op, &Value::Int(n)))
}

/// The reply to a call of the acquisition `op`, about `holds` holds.
pub(super) fn script_answer(op: Op, reply: Value, holds: usize) -> Result<Answer, LockError> {
    match op.shape() {
        Some(shape) => Answer::read(shape, reply, holds),
        None => Err(unexpected(op, &reply)),
    }
}

fn unexpected(op: Op, reply: &Value) -> LockError {
    LockError::UnexpectedReply(format!("{} answered {reply:?}", op.name()))
}
