//! Reading a native call's reply into the typed answers the engine uses for both protocols.

use std::time::Duration;

use redis::Value;

use super::call::{Call, Found, Op};
use crate::error::LockError;
use crate::wire::answer::{Answer, GaveBack, Inspected, Tokens};
use crate::wire::convert::convert;

impl Call {
    /// Reads the reply to an acquisition (fresh, or a re-entry): what it found in the lock's
    /// place.
    pub(crate) fn found(&self, reply: Value) -> Result<Found, LockError> {
        let replies = self.replies(reply)?;
        match &self.op {
            Op::MultiAcquire(multi) => Ok(match multi.found(replies)? {
                (answer, None) => Found::Answer(answer),
                (answer, Some(pipe)) => Found::Partial {
                    answer,
                    give_back: Call::new(Op::GiveBack, pipe, self.key.clone()),
                },
            }),
            Op::Acquire {
                owner,
                compare,
                holder_ttl,
            } => {
                let bad = || self.unexpected(&replies);
                let pttl = match (holder_ttl, replies.get(3)) {
                    (true, Some(Value::Int(pttl))) => Some(*pttl),
                    (false, None) => None,
                    _ => return Err(bad()),
                };
                let Some(Value::Int(token)) = replies.get(1) else {
                    return Err(bad());
                };
                let granted = Answer::Granted(Tokens::Each(token.unsigned_abs()));
                Ok(Found::Answer(match replies.get(2) {
                    Some(Value::Nil) => granted,
                    Some(Value::BulkString(old)) if owner.is(old) => granted,
                    Some(Value::BulkString(old)) if old.first() == Some(&b'|') => {
                        let clear = Call::delete_if(*compare, &self.key, old.clone());
                        return Ok(Found::Scripted(clear));
                    }
                    Some(Value::BulkString(_)) => match pttl {
                        Some(ms) => Answer::Busy {
                            index: 0,
                            retry_in: u64::try_from(ms).ok().map(Duration::from_millis),
                        },
                        None => Answer::BusyAskAgain { index: 0 },
                    },
                    _ => return Err(bad()),
                }))
            }
            Op::Reenter { token } => Ok(Found::Answer(match replies.first() {
                Some(Value::Okay) => Answer::Granted(Tokens::Each(*token)),
                Some(Value::Nil) => Answer::Lost { index: 0 },
                _ => return Err(self.unexpected(&replies)),
            })),
            _ => Err(self.unexpected(&replies)),
        }
    }

    /// Reads the reply to a call that gives one hold back. `resent`: the call may have been
    /// sent before, and the server may have applied it then; a last release that finds the
    /// lock gone counts as a repeat of its first sending (held, released). The lock was the
    /// owner's when it was first sent, unless its lease had run out or it was taken away in
    /// that moment; that cannot be told apart, and it is taken as released.
    pub(crate) fn gave_back(&self, reply: Value, resent: bool) -> Result<GaveBack, LockError> {
        let replies = self.replies(reply)?;
        let held = match (&self.op, replies.first()) {
            (Op::Release, Some(Value::Int(deleted))) => *deleted >= 1 || resent,
            (Op::ReleaseOne | Op::Keep, Some(first)) => *first == Value::Okay,
            _ => return Err(self.unexpected(&replies)),
        };
        Ok(if held {
            GaveBack::Held
        } else {
            GaveBack::NotHeld
        })
    }

    /// Reads the reply to a renewal: per lock, whether it was still its owner's (renewed).
    pub(crate) fn renewed(&self, reply: Value) -> Result<Vec<bool>, LockError> {
        let replies = self.replies(reply)?;
        if !matches!(self.op, Op::Renew) {
            return Err(self.unexpected(&replies));
        }
        Ok(replies.iter().map(|r| *r == Value::Okay).collect())
    }

    /// Reads the reply to a force-unlock: whether there was a lock to free.
    pub(crate) fn freed(&self, reply: Value) -> Result<bool, LockError> {
        let replies = self.replies(reply)?;
        match (&self.op, replies.first()) {
            (Op::ForceUnlock, Some(Value::Int(n))) => Ok(*n >= 1),
            _ => Err(self.unexpected(&replies)),
        }
    }

    /// Reads the reply to an inspection: the lock's remaining lease, its owner and the
    /// fencing counter.
    pub(crate) fn inspected(&self, reply: Value) -> Result<Inspected, LockError> {
        let replies = self.replies(reply)?;
        if !matches!(self.op, Op::Inspect) {
            return Err(self.unexpected(&replies));
        }
        let (pttl, value, counter): (i64, Option<String>, Option<u64>) =
            convert(Value::Array(replies))?;
        Ok(Inspected {
            pttl,
            value,
            counter,
            kept_by_holder: true,
        })
    }

    /// The replies of the call's commands; an error in one of them (a key of another type)
    /// is the call's.
    fn replies(&self, reply: Value) -> Result<Vec<Value>, LockError> {
        match reply.extract_error().map_err(LockError::Redis)? {
            Value::Array(replies) => Ok(replies),
            other => Err(self.unexpected(std::slice::from_ref(&other))),
        }
    }

    pub(super) fn unexpected(&self, replies: &[Value]) -> LockError {
        LockError::UnexpectedReply(format!("{:?} answered {replies:?}", self.op))
    }
}
