//! A multi-lock's native acquisition: every lock in one `MULTI`/`EXEC`, all or none (see
//! [`Multi::build`]), and the reading of its reply: what each lock came to, and what to give
//! back when not all of them could be had.

use std::time::Duration;

use redis::{Pipeline, Value};

use super::args::{Acquire, Compare, delete_if_equal, set_if_owner};
use crate::error::LockError;
use crate::wire::answer::{Answer, Tokens};
use crate::wire::owner::OwnerId;

/// What a multi-lock's acquisition asks for, to read its reply.
#[derive(Debug, Clone)]
pub(crate) struct Multi {
    owner: OwnerId,
    /// Per lock, in the call's order: its key, its release channel, and the token of the
    /// owner's hold for a re-entry (None: a fresh acquisition).
    locks: Vec<(String, String, Option<u64>)>,
    publish: &'static str,
    compare: Compare,
}

/// One lock of a multi-lock's acquisition: its key, its release channel, and the token of the
/// owner's hold when it re-enters it.
pub(crate) struct MultiLock {
    pub(crate) key: String,
    pub(crate) channel: String,
    pub(crate) reentry: Option<u64>,
}

/// What one lock of a multi-lock's acquisition came to.
enum Took {
    /// Taken (fresh, with this token, or re-entered).
    Taken { token: u64, fresh: bool },
    /// Held by another owner, for `ms` more (-1: no expiry).
    Busy { ms: i64 },
    /// A free lock string of the scripts was in the way: to be deleted, then tried again.
    Scripted(Vec<u8>),
    /// The owner's hold was gone (a re-entry that found another value).
    Lost,
}

impl Multi {
    /// A multi-lock's acquisition: every lock in one `MULTI`/`EXEC`, all or none, so it holds
    /// none of its names until it holds all of them. `MGET` of the fresh ones (what is in
    /// their place: nothing, a repeat of this acquisition, another holder), then `MSETNX` of
    /// all of them to the owner (every one or none), then per lock: a re-entry's `SET … IFEQ
    /// … PX`, or a fresh one's token (`INCR counter`, the counter of their slot), its lease
    /// (`SET … IFEQ owner PX`: only where the owner's value now is, taken or repeated) and
    /// `PTTL` (a busy holder's remaining lease).
    pub(super) fn build(
        a: Acquire<'_>,
        locks: Vec<MultiLock>,
        publish: &'static str,
    ) -> (Multi, Pipeline) {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(a.counter)
            .arg(a.seed)
            .arg("NX");
        let fresh: Vec<&str> = locks
            .iter()
            .filter(|l| l.reentry.is_none())
            .map(|l| l.key.as_str())
            .collect();
        if !fresh.is_empty() {
            pipe.cmd("MGET").arg(&fresh);
            let msetnx = pipe.cmd("MSETNX");
            for key in &fresh {
                msetnx.arg(*key).arg(&a.owner);
            }
        }
        for lock in &locks {
            if lock.reentry.is_none() {
                pipe.cmd("INCR").arg(a.counter);
            }
            set_if_owner(&mut pipe, a.compare, &lock.key, &a.owner, a.lease_ms);
            if lock.reentry.is_none() {
                pipe.cmd("PTTL").arg(&lock.key);
            }
        }
        let multi = Multi {
            owner: a.owner,
            locks: locks
                .into_iter()
                .map(|l| (l.key, l.channel, l.reentry))
                .collect(),
            publish,
            compare: a.compare,
        };
        (multi, pipe)
    }

    /// The key that routes the acquisition: its first lock's.
    pub(super) fn route(&self) -> &str {
        self.locks.first().map_or("", |l| l.0.as_str())
    }

    /// Reads the `EXEC` reply: every lock taken (an answer and nothing to give back), or the
    /// answer and the commands that give back what was taken.
    pub(super) fn found(
        &self,
        replies: Vec<Value>,
    ) -> Result<(Answer, Option<Pipeline>), LockError> {
        let bad = |what: &str| LockError::UnexpectedReply(format!("multi-lock answered {what}"));
        let fresh = self.locks.iter().filter(|l| l.2.is_none()).count();
        // After the counter's seed: the fresh names' old values and whether `MSETNX` set them.
        let (mut olds, mut at) = (Vec::new().into_iter(), 1);
        let mut set = false;
        if fresh > 0 {
            match (replies.get(1), replies.get(2)) {
                (Some(Value::Array(values)), Some(Value::Int(n))) if values.len() == fresh => {
                    olds = values.clone().into_iter();
                    set = *n == 1;
                }
                _ => return Err(bad("no MGET and MSETNX")),
            }
            at = 3;
        }
        let mut took = Vec::with_capacity(self.locks.len());
        for (_, _, reentry) in &self.locks {
            let entry = match reentry {
                Some(token) => {
                    at += 1;
                    match replies.get(at - 1) {
                        Some(Value::Okay) => Took::Taken {
                            token: *token,
                            fresh: false,
                        },
                        Some(Value::Nil) => Took::Lost,
                        _ => return Err(bad("a re-entry with something else")),
                    }
                }
                None => {
                    at += 3;
                    let (Some(Value::Int(token)), Some(Value::Int(pttl))) =
                        (replies.get(at - 3), replies.get(at - 1))
                    else {
                        return Err(bad("an acquisition without its token or lease"));
                    };
                    self.fresh(olds.next(), set, token.unsigned_abs(), *pttl)
                        .ok_or_else(|| bad("an acquisition with something else"))?
                }
            };
            took.push(entry);
        }
        let not_taken = |t: &Took| !matches!(t, Took::Taken { .. });
        let busy_elsewhere = |t: &Took| not_taken(t) && !matches!(t, Took::Busy { ms: 0 });
        let failed = took
            .iter()
            .position(busy_elsewhere)
            .or_else(|| took.iter().position(not_taken));
        let Some(failed) = failed else {
            let tokens = took.iter().filter_map(|t| match t {
                Took::Taken { token, .. } => Some(*token),
                _ => None,
            });
            return Ok((Answer::Granted(Tokens::List(tokens.collect())), None));
        };
        let answer = match &took[failed] {
            Took::Lost => Answer::Lost { index: failed },
            Took::Busy { ms } => Answer::Busy {
                index: failed,
                retry_in: u64::try_from(*ms).ok().map(Duration::from_millis),
            },
            _ => Answer::Busy {
                index: failed,
                retry_in: Some(Duration::ZERO),
            },
        };
        Ok((answer, Some(self.give_back(&took))))
    }

    /// What a fresh name came to: `old`, what `MGET` found in its place, `set`, whether
    /// `MSETNX` took every fresh name, `token` and `pttl` its token and remaining lease. None
    /// for an `old` that is no value.
    fn fresh(&self, old: Option<Value>, set: bool, token: u64, pttl: i64) -> Option<Took> {
        Some(match old? {
            Value::Nil if set => Took::Taken { token, fresh: true },
            // Free, but another name was not: nothing taken here.
            Value::Nil => Took::Busy { ms: 0 },
            Value::BulkString(old) if self.owner.is(&old) => Took::Taken { token, fresh: true },
            Value::BulkString(old) if old.first() == Some(&b'|') => Took::Scripted(old),
            Value::BulkString(_) => Took::Busy { ms: pttl },
            _ => return None,
        })
    }

    /// Deletes what a partial acquisition took fresh (and publishes its release, for a waiter
    /// that met it meanwhile), and the free lock strings of the scripts it met.
    fn give_back(&self, took: &[Took]) -> Pipeline {
        let mut pipe = redis::pipe();
        for ((key, channel, _), t) in self.locks.iter().zip(took) {
            match t {
                Took::Taken { fresh: true, .. } => {
                    delete_if_equal(&mut pipe, self.compare, key, &self.owner);
                    pipe.cmd(self.publish).arg(channel).arg(0);
                }
                Took::Scripted(old) => {
                    delete_if_equal(&mut pipe, self.compare, key, old);
                }
                _ => {}
            }
        }
        pipe
    }
}
