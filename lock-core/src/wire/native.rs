//! The native mutex protocol: a mutex kept with the server's own compare-and-set commands
//! (Valkey 9's `SET … IFEQ` and `DELIFEQ`) instead of scripts. Pure: it builds the commands
//! and reads their replies into the typed answers the engine uses for both protocols
//! ([`Answer`], [`GaveBack`]); the backend sends them.
//!
//! **Keys.** The lock `P{N}` is a string holding exactly its owner id while held, with the
//! lease as its time to live, and no key while free: a release deletes it. The fencing
//! counter is not the lock's: it is one counter per Cluster slot (one per server elsewhere),
//! `Pfence` or `Pfence:{tag}` with a tag of the lock's slot, which never expires, so the
//! keyspace holds one small key per slot in use instead of a free lock string per recently
//! used name.
//!
//! **Acquire** (one `MULTI`/`EXEC`): `SET counter seed NX` (a counter that is missing starts at
//! the server's clock in microseconds, as the scripts' tokens do), `INCR counter` (the token),
//! `SET lock owner NX PX lease GET` (taken if there was no key; the value already there
//! otherwise), `PTTL lock`. A value equal to the owner is a repeat of an applied acquisition.
//! Every token drawn while the owner holds the lock is above every earlier holder's (drawn
//! before their release, which came before this grant) and below every later holder's (drawn
//! after this release), so a repeat may keep the token it drew, and busy attempts may draw
//! tokens nobody keeps. **Re-enter**: `SET lock owner IFEQ owner PX lease` (the count is the
//! client's). **Release**: the last hold `DELIFEQ lock owner` and a publish on the release
//! channel (always: it costs less than a flag kept for it), an earlier one only checks that
//! the lock is still the owner's (`SET … IFEQ … KEEPTTL`). **Renew**, **extend**, a release
//! kept until `hold_at_least`: `SET lock owner IFEQ owner PX ms`. **A multi-lock** (one slot)
//! takes its fresh names with one `MSETNX` (all or none: it never holds some of its names
//! while another holds the rest), see [`Call::multi_acquire`].

use std::time::Duration;

use redis::{Pipeline, Value};

use super::answer::{Answer, GaveBack, Inspected, Tokens};
use super::convert::convert;
use crate::error::LockError;

/// What a native call does, and what its reply is read into.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// A fresh acquisition by the owner whose id is these bytes: read into an [`Answer`].
    Acquire { owner: Vec<u8> },
    /// A re-entry of a hold whose token is this: read into an [`Answer`].
    Reenter { token: u64 },
    /// The last hold's release: read into a [`GaveBack`].
    Release,
    /// An earlier hold's release: read into a [`GaveBack`].
    ReleaseOne,
    /// The last hold kept until its minimum hold: read into a [`GaveBack`].
    Keep,
    /// Renewals, one per lock: renewed, or not held.
    Renew,
    /// What a multi-lock's partial acquisition took, given back (its reply is not read).
    GiveBack,
    /// A free lock string of the scripts deleted where it is unchanged (its reply is not
    /// read).
    Clear,
    /// A force-unlock: freed, or already free.
    ForceUnlock,
    /// The state: the lock's remaining lease and owner.
    Inspect,
    /// Several locks at once: read into an [`Answer`] and what to give back.
    MultiAcquire(Multi),
}

/// What a multi-lock's acquisition asks for, to read its reply.
#[derive(Debug, Clone)]
pub(crate) struct Multi {
    owner: Vec<u8>,
    /// Per lock, in the call's order: its key, its release channel, and the token of the
    /// owner's hold for a re-entry (None: a fresh acquisition).
    locks: Vec<(String, String, Option<u64>)>,
    publish: &'static str,
}

/// One lock of a multi-lock's acquisition: its key, its release channel, and the token of the
/// owner's hold when it re-enters it.
pub(crate) struct MultiLock {
    pub(crate) key: String,
    pub(crate) channel: String,
    pub(crate) reentry: Option<u64>,
}

/// A native call: its commands and how to read their reply.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    op: Op,
    pipe: Pipeline,
    /// The lock's key, which routes the call on a Cluster.
    key: String,
}

/// What the reply to an acquisition found in the lock's place.
#[derive(Debug, Clone)]
pub(crate) enum Found {
    /// Nothing (taken), a repeat of this acquisition (taken), another holder (busy), or for
    /// a re-entry the owner's hold gone (lost).
    Answer(Answer),
    /// Not all of a multi-lock's names could be had: what was taken must go back (`give_back`)
    /// before the answer (busy, or lost) is given.
    Partial { answer: Answer, give_back: Call },
    /// A free lock string of the scripted protocol (kept for its fencing counter): it must
    /// go before the name can be taken natively. The value, to delete it if it is unchanged.
    Scripted(Vec<u8>),
}

/// The arguments of a fresh acquisition.
pub(crate) struct Acquire<'a, O> {
    pub(crate) key: &'a str,
    pub(crate) owner: O,
    pub(crate) owner_bytes: Vec<u8>,
    pub(crate) lease_ms: u64,
    pub(crate) counter: &'a str,
    /// The server clock in microseconds, for a counter that is missing.
    pub(crate) seed: u64,
}

impl Call {
    /// A fresh acquisition (see the module docs).
    pub(crate) fn acquire<O: redis::ToRedisArgs>(a: Acquire<'_, O>) -> Self {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(a.counter)
            .arg(a.seed)
            .arg("NX")
            .cmd("INCR")
            .arg(a.counter)
            .cmd("SET")
            .arg(a.key)
            .arg(&a.owner)
            .arg("NX")
            .arg("PX")
            .arg(a.lease_ms)
            .arg("GET")
            .cmd("PTTL")
            .arg(a.key);
        Self::new(
            Op::Acquire {
                owner: a.owner_bytes,
            },
            pipe,
            a.key,
        )
    }

    /// A re-entry by `owner`, whose hold's token is `token`: the lease becomes `lease_ms`.
    pub(crate) fn reenter(
        key: &str,
        owner: impl redis::ToRedisArgs,
        lease_ms: u64,
        token: u64,
    ) -> Self {
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(key)
            .arg(&owner)
            .arg("IFEQ")
            .arg(&owner)
            .arg("PX")
            .arg(lease_ms);
        Self::new(Op::Reenter { token }, pipe, key)
    }

    /// A release of one hold of `owner`'s, the last one when `last`, published on `channel`
    /// with `publish` (`PUBLISH`, or `SPUBLISH` on a Cluster) and the hold's token.
    pub(crate) fn release(
        key: &str,
        owner: impl redis::ToRedisArgs,
        last: bool,
        (publish, channel, token): (&str, impl redis::ToRedisArgs, u64),
    ) -> Self {
        let mut pipe = redis::pipe();
        if last {
            pipe.cmd("DELIFEQ").arg(key).arg(&owner);
            pipe.cmd(publish).arg(channel).arg(token);
            Self::new(Op::Release, pipe, key)
        } else {
            pipe.cmd("SET")
                .arg(key)
                .arg(&owner)
                .arg("IFEQ")
                .arg(&owner)
                .arg("KEEPTTL");
            Self::new(Op::ReleaseOne, pipe, key)
        }
    }

    /// Sets the lease of `owner`'s lock to `ms` if it is still theirs: a release kept until
    /// its minimum hold.
    pub(crate) fn keep(key: &str, owner: impl redis::ToRedisArgs, ms: u64) -> Self {
        let mut pipe = redis::pipe();
        set_if_owner(&mut pipe, key, &owner, ms);
        Self::new(Op::Keep, pipe, key)
    }

    /// Renews each lock `(key, owner)` to `ms` if it is still its owner's; `route` is the
    /// first key (all in one slot on a Cluster).
    pub(crate) fn renew<'a, O: redis::ToRedisArgs + 'a>(
        locks: impl IntoIterator<Item = (&'a str, O)>,
        ms: u64,
    ) -> Self {
        let mut pipe = redis::pipe();
        let mut route = None;
        for (key, owner) in locks {
            route.get_or_insert_with(|| key.to_owned());
            set_if_owner(&mut pipe, key, &owner, ms);
        }
        let key = route.unwrap_or_default();
        Self {
            op: Op::Renew,
            pipe,
            key,
        }
    }

    /// Frees the lock whoever holds it, and publishes on its channel.
    pub(crate) fn force_unlock(key: &str, (publish, channel): (&str, &str)) -> Self {
        let mut pipe = redis::pipe();
        pipe.cmd("DEL").arg(key);
        pipe.cmd(publish).arg(channel).arg("");
        Self::new(Op::ForceUnlock, pipe, key)
    }

    /// Deletes `key` if it still holds `value` (a free lock string of the scripts in the way
    /// of a native acquisition): answers 1 deleted, 0 not.
    pub(crate) fn delete_if(key: &str, value: Vec<u8>) -> Self {
        let mut pipe = redis::pipe();
        pipe.cmd("DELIFEQ").arg(key).arg(value);
        Self::new(Op::Clear, pipe, key)
    }

    /// Reads the lock's state, and its fencing counter (the holder's token is at most it).
    pub(crate) fn inspect(key: &str, counter: &str) -> Self {
        let mut pipe = redis::pipe();
        pipe.cmd("PTTL")
            .arg(key)
            .cmd("GET")
            .arg(key)
            .cmd("GET")
            .arg(counter);
        Self::new(Op::Inspect, pipe, key)
    }

    fn new(op: Op, pipe: Pipeline, key: &str) -> Self {
        Self {
            op,
            pipe,
            key: key.to_owned(),
        }
    }

    /// The commands.
    pub(crate) fn pipeline(&self) -> &Pipeline {
        &self.pipe
    }

    /// Whether there is nothing to send.
    pub(crate) fn is_empty(&self) -> bool {
        self.pipe.cmd_iter().next().is_none()
    }

    /// The key that routes the call.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// Whether this is a fresh acquisition (of one lock or several).
    pub(crate) fn is_acquisition(&self) -> bool {
        matches!(self.op, Op::Acquire { .. } | Op::MultiAcquire(_))
    }

    /// A multi-lock's acquisition: every lock in one `MULTI`/`EXEC`, all or none, so it holds
    /// none of its names until it holds all of them. `MGET` of the fresh ones (what is in
    /// their place: nothing, a repeat of this acquisition, another holder), then `MSETNX` of
    /// all of them to the owner (every one or none), then per lock: a re-entry's `SET … IFEQ
    /// … PX`, or a fresh one's token (`INCR counter`, the counter of their slot), its lease
    /// (`SET … IFEQ owner PX`: only where the owner's value now is, taken or repeated) and
    /// `PTTL` (a busy holder's remaining lease).
    pub(crate) fn multi_acquire<O: redis::ToRedisArgs>(
        a: Acquire<'_, O>,
        locks: Vec<MultiLock>,
        publish: &'static str,
    ) -> Self {
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
            set_if_owner(&mut pipe, &lock.key, &a.owner, a.lease_ms);
            if lock.reentry.is_none() {
                pipe.cmd("PTTL").arg(&lock.key);
            }
        }
        let multi = Multi {
            owner: a.owner_bytes,
            locks: locks
                .into_iter()
                .map(|l| (l.key, l.channel, l.reentry))
                .collect(),
            publish,
        };
        let key = multi.locks.first().map_or("", |l| l.0.as_str()).to_owned();
        Self {
            op: Op::MultiAcquire(multi),
            pipe,
            key,
        }
    }

    /// Reads the reply to an acquisition (fresh, or a re-entry): what it found in the lock's
    /// place.
    pub(crate) fn found(&self, reply: Value) -> Result<Found, LockError> {
        let replies = self.replies(reply)?;
        match &self.op {
            Op::MultiAcquire(multi) => multi.found(replies, &self.key),
            Op::Acquire { owner } => {
                let bad = || self.unexpected(&replies);
                let (Some(Value::Int(token)), Some(Value::Int(pttl))) =
                    (replies.get(1), replies.get(3))
                else {
                    return Err(bad());
                };
                let granted = Answer::Granted(Tokens::Each(token.unsigned_abs()));
                Ok(Found::Answer(match replies.get(2) {
                    Some(Value::Nil) => granted,
                    Some(Value::BulkString(old)) if old == owner => granted,
                    Some(Value::BulkString(old)) if old.first() == Some(&b'|') => {
                        return Ok(Found::Scripted(old.clone()));
                    }
                    Some(Value::BulkString(_)) => Answer::Busy {
                        index: 0,
                        retry_in: u64::try_from(*pttl).ok().map(Duration::from_millis),
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

    fn unexpected(&self, replies: &[Value]) -> LockError {
        LockError::UnexpectedReply(format!("{:?} answered {replies:?}", self.op))
    }
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
    /// Reads the `EXEC` reply: every lock taken, or what to give back and why not.
    fn found(&self, replies: Vec<Value>, route: &str) -> Result<Found, LockError> {
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
            return Ok(Found::Answer(Answer::Granted(Tokens::List(
                tokens.collect(),
            ))));
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
        Ok(Found::Partial {
            answer,
            give_back: self.give_back(&took, route),
        })
    }

    /// What a fresh name came to: `old`, what `MGET` found in its place, `set`, whether
    /// `MSETNX` took every fresh name, `token` and `pttl` its token and remaining lease. None
    /// for an `old` that is no value.
    fn fresh(&self, old: Option<Value>, set: bool, token: u64, pttl: i64) -> Option<Took> {
        Some(match old? {
            Value::Nil if set => Took::Taken { token, fresh: true },
            // Free, but another name was not: nothing taken here.
            Value::Nil => Took::Busy { ms: 0 },
            Value::BulkString(old) if old == self.owner => Took::Taken { token, fresh: true },
            Value::BulkString(old) if old.first() == Some(&b'|') => Took::Scripted(old),
            Value::BulkString(_) => Took::Busy { ms: pttl },
            _ => return None,
        })
    }

    /// Deletes what a partial acquisition took fresh (and publishes its release, for a waiter
    /// that met it meanwhile), and the free lock strings of the scripts it met.
    fn give_back(&self, took: &[Took], route: &str) -> Call {
        let mut pipe = redis::pipe();
        for ((key, channel, _), t) in self.locks.iter().zip(took) {
            match t {
                Took::Taken { fresh: true, .. } => {
                    pipe.cmd("DELIFEQ").arg(key).arg(&self.owner);
                    pipe.cmd(self.publish).arg(channel).arg(0);
                }
                Took::Scripted(old) => {
                    pipe.cmd("DELIFEQ").arg(key).arg(old);
                }
                _ => {}
            }
        }
        Call::new(Op::GiveBack, pipe, route)
    }
}

/// `SET key owner IFEQ owner PX ms`.
fn set_if_owner(pipe: &mut Pipeline, key: &str, owner: &impl redis::ToRedisArgs, ms: u64) {
    pipe.cmd("SET")
        .arg(key)
        .arg(owner)
        .arg("IFEQ")
        .arg(owner)
        .arg("PX")
        .arg(ms);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire() -> Call {
        Call::acquire(Acquire {
            key: "lock:{a}",
            owner: "me:1",
            owner_bytes: b"me:1".to_vec(),
            lease_ms: 30_000,
            counter: "lock:fence",
            seed: 1_795_000_000_000_000,
        })
    }

    fn exec(old: Value, pttl: i64) -> Value {
        Value::Array(vec![Value::Nil, Value::Int(42), old, Value::Int(pttl)])
    }

    fn answer(found: Result<Found, LockError>) -> Answer {
        match found {
            Ok(Found::Answer(answer)) => answer,
            other => panic!("not an answer: {other:?}"),
        }
    }

    #[test]
    fn an_acquisition_reads_into_an_answer() {
        let call = acquire();
        let read = |old, pttl| answer(call.found(exec(old, pttl)));
        let granted = Answer::Granted(Tokens::Each(42));
        assert_eq!(read(Value::Nil, 30_000), granted);
        let mine = Value::BulkString(b"me:1".to_vec());
        assert_eq!(read(mine, 29_000), granted, "a repeat keeps its token");
        let other = || Value::BulkString(b"you:7".to_vec());
        let busy = |ms: Option<u64>| Answer::Busy {
            index: 0,
            retry_in: ms.map(Duration::from_millis),
        };
        assert_eq!(read(other(), 1_500), busy(Some(1_500)));
        assert_eq!(read(other(), -1), busy(None));
        assert!(call.found(Value::Int(1)).is_err());
        assert!(call.found(Value::Array(vec![])).is_err());
    }

    #[test]
    fn a_scripted_free_lock_string_is_found_as_such() {
        let old = b"|0|1795000000000000|1795000000000000|".to_vec();
        let found = acquire().found(exec(Value::BulkString(old.clone()), 3_600_000));
        assert!(matches!(found, Ok(Found::Scripted(o)) if o == old));
    }

    #[test]
    fn releases_renewals_and_reentries_read_into_typed_answers() {
        let release = Call::release("lock:{a}", "me:1", true, ("PUBLISH", "c", 42));
        let gave_back =
            |call: &Call, replies, resent| call.gave_back(Value::Array(replies), resent).unwrap();
        let (deleted, gone) = (vec![Value::Int(1), Value::Int(0)], vec![Value::Int(0)]);
        assert_eq!(gave_back(&release, deleted, false), GaveBack::Held);
        assert_eq!(gave_back(&release, gone.clone(), false), GaveBack::NotHeld);
        assert_eq!(gave_back(&release, gone, true), GaveBack::Held, "a repeat");
        let one = Call::release("lock:{a}", "me:1", false, ("PUBLISH", "c", 42));
        assert_eq!(gave_back(&one, vec![Value::Okay], false), GaveBack::Held);
        assert_eq!(gave_back(&one, vec![Value::Nil], true), GaveBack::NotHeld);
        let renew = Call::renew([("lock:{a}", "me:1"), ("lock:{b}", "me:2")], 30_000);
        assert_eq!(renew.key(), "lock:{a}");
        let renewed = renew.renewed(Value::Array(vec![Value::Okay, Value::Nil]));
        assert_eq!(renewed.unwrap(), [true, false]);
        assert!(renew.gave_back(Value::Array(vec![]), false).is_err());
        let reenter = Call::reenter("lock:{a}", "me:1", 30_000, 42);
        let read = |replies| answer(reenter.found(Value::Array(replies)));
        assert_eq!(read(vec![Value::Okay]), Answer::Granted(Tokens::Each(42)));
        assert_eq!(read(vec![Value::Nil]), Answer::Lost { index: 0 });
        let force = Call::force_unlock("lock:{a}", ("PUBLISH", "c"));
        assert!(
            force
                .freed(Value::Array(vec![Value::Int(1), Value::Int(0)]))
                .unwrap()
        );
        assert!(
            !force
                .freed(Value::Array(vec![Value::Int(0), Value::Int(0)]))
                .unwrap()
        );
    }
}
