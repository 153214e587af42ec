//! Several native calls as one pipeline: the acquisitions, re-entries and releases that queue
//! behind calls in flight go out together (see the engine's batching), each read afterwards
//! by its own reader, exactly as if it had been sent alone.
//!
//! **Layout.** The acquisitions (each a `MULTI`/`EXEC` when sent alone) share one
//! `MULTI` … `EXEC` at the front; every other call's commands follow, outside the transaction,
//! so a call that would run outside a transaction alone runs outside one here too (under
//! `maxmemory` without eviction the server refuses a transaction that holds a `SET`, and a
//! release must not be refused with it). Running several acquisitions in one transaction
//! instead of one each changes nothing for any of them: each one's commands still run
//! together, in its order, with no other client's command in between.
//!
//! **One seed per counter.** Every acquisition starts with `SET counter seed NX` (a missing
//! counter starts at the server's clock). In one transaction, the first acquisition's seed
//! does that for every later acquisition of the same counter (on one server, all of them), so
//! the others' seeds are left out and their replies read as the `nil` a `SET … NX` answers
//! where the key is there: the counter exists before each of their `INCR`s either way, and a
//! seed is any recent reading of this client's clock of the server.
//!
//! **One script for the releases.** Where the compare-and-sets are scripts (the hybrid
//! protocol: Redis 7, Valkey 8), a batch's last releases share one call of
//! [`DELETE_EACH_IF_EQUAL`] at the front of the calls outside the transaction, in place of
//! their own *delete if equal* each (a script call costs the server about three plain
//! commands, most of it the call itself); their publishes follow as their own commands, after
//! it, as they do alone. Each release reads its element of that script's reply as the reply
//! of its own script, an error included (a key of another type: the script catches it per
//! lock).
//!
//! **Replies.** The pipeline ignores errors, so one call's error (a key of another type)
//! stays that call's: it is in its replies, where its reader finds it, as it would alone. A
//! refused transaction (`EXECABORT`) is every acquisition's error.

use redis::{Pipeline, Value};

use super::args::{DELETE_EACH_IF_EQUAL, DELETE_IF_EQUAL, ROOM, start};
use super::call::{Call, Op, Part};
use crate::error::LockError;

impl Call {
    /// Whether the call may go out in a [`batch`](Self::batch) with others: a one-name
    /// acquisition, a re-entry, a release, a release kept until its minimum hold.
    pub(crate) fn batches(&self) -> bool {
        matches!(
            self.op,
            Op::Acquire { .. } | Op::Reenter { .. } | Op::Release | Op::ReleaseOne | Op::Keep
        )
    }

    /// Whether this is a [`batch`](Self::batch) (its pipeline ignores errors: each call's
    /// stay in its replies); for the in-memory backend, which answers as a connection does.
    #[cfg(feature = "testing")]
    pub(crate) fn is_batch(&self) -> bool {
        matches!(self.op, Op::Batch(_))
    }

    /// One call doing `calls` (each one that [`batches`](Self::batches)), each answered on
    /// its own by [`split`](Self::split); `None` if any call does not batch or there are none.
    pub(crate) fn batch(calls: &[&Call]) -> Option<Call> {
        let first = calls.first()?;
        if !calls.iter().all(|c| c.batches()) {
            return None;
        }
        // One seed per counter: the first acquisition of a counter seeds it for the rest.
        let mut seeded: Vec<&[u8]> = Vec::new();
        let mut parts: Vec<Part> = calls
            .iter()
            .map(|c| {
                let counter = c.seeded_counter();
                let seed_shared = counter.is_some_and(|k| seeded.contains(&k));
                if let (Some(k), false) = (counter, seed_shared) {
                    seeded.push(k);
                }
                Part {
                    atomic: c.pipe.is_transaction(),
                    len: c.pipe.len() - usize::from(seed_shared),
                    seed_shared,
                    merged: false,
                }
            })
            .collect();
        // One script for the last releases' deletes, where there are two or more.
        let deletes: Vec<(usize, &[u8], &[u8])> = calls
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.scripted_delete().map(|(key, owner)| (i, key, owner)))
            .collect();
        let merge = deletes.len() > 1;
        if merge {
            for (i, _, _) in &deletes {
                parts[*i].merged = true;
            }
        }
        let mut pipe = Pipeline::with_capacity(parts.iter().map(|p| p.len).sum::<usize>() + 3);
        pipe.ignore_errors();
        let add = |atomic: bool, pipe: &mut Pipeline| {
            for (call, part) in calls.iter().zip(&parts).filter(|(_, p)| p.atomic == atomic) {
                let skip = usize::from(part.seed_shared || part.merged);
                for cmd in call.pipe.cmd_iter().skip(skip) {
                    pipe.add_command(cmd.clone());
                }
            }
        };
        if parts.iter().any(|p| p.atomic) {
            pipe.cmd("MULTI");
            add(true, &mut pipe);
            pipe.cmd("EXEC");
        }
        if merge {
            let bytes: usize = deletes.iter().map(|(_, k, o)| k.len() + o.len() + 16).sum();
            let eval = start(&mut pipe, "EVAL", DELETE_EACH_IF_EQUAL.len() + ROOM + bytes)
                .arg(DELETE_EACH_IF_EQUAL)
                .arg(deletes.len());
            for (_, key, _) in &deletes {
                eval.arg(*key);
            }
            for (_, _, owner) in &deletes {
                eval.arg(*owner);
            }
        }
        add(false, &mut pipe);
        Some(Call::new(Op::Batch(parts), pipe, first.key.clone()))
    }

    /// A last release's *delete if equal* script (its first command, on the hybrid protocol):
    /// the lock's key and the owner it compares.
    fn scripted_delete(&self) -> Option<(&[u8], &[u8])> {
        if !matches!(self.op, Op::Release) {
            return None;
        }
        let mut args = self.pipe.cmd_iter().next()?.args_iter();
        match [(); 5].map(|()| args.next()) {
            [
                Some(redis::Arg::Simple(b"EVAL")),
                Some(redis::Arg::Simple(script)),
                Some(redis::Arg::Simple(b"1")),
                Some(redis::Arg::Simple(key)),
                Some(redis::Arg::Simple(owner)),
            ] if script == DELETE_IF_EQUAL.as_bytes() => Some((key, owner)),
            _ => None,
        }
    }

    /// The fencing counter a fresh acquisition's first command seeds (`SET counter seed NX`).
    fn seeded_counter(&self) -> Option<&[u8]> {
        if !matches!(self.op, Op::Acquire { .. }) {
            return None;
        }
        match self.pipe.cmd_iter().next()?.args_iter().nth(1)? {
            redis::Arg::Simple(counter) => Some(counter),
            _ => None,
        }
    }

    /// Splits a batch's reply into each call's, in the order the calls were given: what
    /// that call's reader reads, or the error that is that call's answer.
    pub(crate) fn split(&self, reply: Value) -> Result<Vec<Result<Value, LockError>>, LockError> {
        let Op::Batch(parts) = &self.op else {
            return Err(self.unexpected(std::slice::from_ref(&reply)));
        };
        let Value::Array(replies) = reply else {
            return Err(self.unexpected(std::slice::from_ref(&reply)));
        };
        let in_transaction: usize = parts.iter().filter(|p| p.atomic).map(|p| p.len).sum();
        let opened = parts.iter().any(|p| p.atomic);
        // MULTI's OK, one QUEUED per command, EXEC's reply; then the releases' one script and
        // the other calls' replies.
        let head = if opened { in_transaction + 2 } else { 0 };
        let merged = parts.iter().filter(|p| p.merged).count();
        let outside: usize = parts
            .iter()
            .filter(|p| !p.atomic)
            .map(|p| p.len)
            .sum::<usize>()
            - merged
            + usize::from(merged > 0);
        if replies.len() != head + outside {
            return Err(self.unexpected(&replies));
        }
        let mut replies = replies.into_iter();
        let mut executed = match replies.by_ref().take(head).last() {
            Some(Value::Array(executed)) if executed.len() == in_transaction => {
                Ok(executed.into_iter())
            }
            Some(Value::ServerError(e)) => Err(LockError::Redis(e.into())),
            None => Ok(Vec::new().into_iter()),
            Some(other) => return Err(self.unexpected(std::slice::from_ref(&other))),
        };
        // The releases' one script: its elements in order, or its error for each of them.
        let mut deleted = match (merged > 0).then(|| replies.next()).flatten() {
            None => Vec::new().into_iter(),
            Some(Value::Array(each)) if each.len() == merged => each.into_iter(),
            Some(error @ Value::ServerError(_)) => vec![error; merged].into_iter(),
            Some(other) => return Err(self.unexpected(std::slice::from_ref(&other))),
        };
        Ok(parts
            .iter()
            .map(|part| match (part.atomic, &mut executed) {
                (true, Ok(executed)) => {
                    // A seed left out answers as `SET … NX` does where the key is there.
                    let seed = part.seed_shared.then_some(Value::Nil);
                    Ok(Value::Array(
                        seed.into_iter().chain(executed.take(part.len)).collect(),
                    ))
                }
                (true, Err(e)) => Err(e.clone()),
                (false, _) if part.merged => Ok(Value::Array(
                    deleted
                        .next()
                        .into_iter()
                        .chain(replies.by_ref().take(part.len - 1))
                        .collect(),
                )),
                (false, _) => Ok(Value::Array(replies.by_ref().take(part.len).collect())),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::answer::GaveBack;
    use crate::wire::native::{Acquire, Compare};
    use crate::wire::owner::OwnerId;

    fn acquire(key: &str) -> Call {
        acquire_counted(key, "fence")
    }

    fn acquire_counted(key: &str, counter: &str) -> Call {
        Call::acquire(Acquire {
            key: key.into(),
            owner: OwnerId::new("me", 1),
            lease_ms: 1000,
            counter,
            seed: 7,
            compare: Compare::Commands,
            holder_ttl: true,
        })
    }

    fn release(key: &str) -> Call {
        release_by(Compare::Commands, key)
    }

    fn release_by(compare: Compare, key: &str) -> Call {
        Call::release(compare, key.into(), "me:1", true, ("PUBLISH", "chan", 9))
    }

    fn names(call: &Call) -> Vec<String> {
        call.pipe
            .cmd_iter()
            .map(|c| match c.args_iter().next() {
                Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).into_owned(),
                _ => String::new(),
            })
            .collect()
    }

    #[test]
    fn acquisitions_share_one_transaction_and_one_seed_per_counter_and_the_rest_follow() {
        let (a, r, b) = (acquire("x"), release("y"), acquire("z"));
        let batch = Call::batch(&[&a, &r, &b]).unwrap();
        let expected = [
            "MULTI", "SET", "INCR", "SET", "PTTL", "INCR", "SET", "PTTL", "EXEC", "DELIFEQ",
            "PUBLISH",
        ];
        assert_eq!(names(&batch), expected);
        // Another counter (another Cluster slot's, were a Cluster to batch) gets its own seed.
        let other = acquire_counted("w", "fence:{7}");
        let both = Call::batch(&[&a, &other, &b]).unwrap();
        let seeds: Vec<String> = both
            .pipe
            .cmd_iter()
            .filter_map(|c| match c.args_iter().collect::<Vec<_>>()[..] {
                [redis::Arg::Simple(b"SET"), redis::Arg::Simple(counter), ..]
                    if counter.starts_with(b"fence") =>
                {
                    Some(String::from_utf8_lossy(counter).into_owned())
                }
                _ => None,
            })
            .collect();
        assert_eq!(seeds, ["fence", "fence:{7}"]);
        assert!(!batch.pipe.is_transaction());
        let kept = Call::new(Op::Renew, redis::pipe(), "x");
        assert!(Call::batch(&[&a, &kept]).is_none());
        assert!(Call::batch(&[]).is_none());
    }

    #[test]
    fn a_batch_reply_is_split_back_into_each_calls_reply_in_the_given_order() {
        let (a, r, b) = (acquire("x"), release("y"), acquire("z"));
        let batch = Call::batch(&[&a, &r, &b]).unwrap();
        let queued = || Value::SimpleString("QUEUED".into());
        let int = Value::Int;
        let mut reply = vec![Value::Okay];
        reply.extend((0..7).map(|_| queued()));
        reply.push(Value::Array(vec![
            Value::Nil,
            int(10),
            Value::Nil,
            int(-2),
            int(11),
            Value::BulkString(b"other".to_vec()),
            int(500),
        ]));
        reply.extend([int(1), int(0)]);
        let split = batch.split(Value::Array(reply)).unwrap();
        let [Ok(first), Ok(second), Ok(third)] = &split[..] else {
            panic!("{split:?}");
        };
        assert_eq!(
            *first,
            Value::Array(vec![Value::Nil, int(10), Value::Nil, int(-2)])
        );
        assert_eq!(*second, Value::Array(vec![int(1), int(0)]));
        // The seed left out reads as nil, so the acquisition's reply has its usual shape.
        assert_eq!(
            *third,
            Value::Array(vec![
                Value::Nil,
                int(11),
                Value::BulkString(b"other".to_vec()),
                int(500)
            ])
        );
        assert!(a.found(first.clone()).is_ok());
        assert!(b.found(third.clone()).is_ok());
    }

    #[test]
    fn the_hybrid_protocols_last_releases_share_one_script_and_read_their_element_of_it() {
        let hybrid = |key: &str| {
            Call::acquire(Acquire {
                key: key.into(),
                owner: OwnerId::new("me", 1),
                lease_ms: 1000,
                counter: "fence",
                seed: 7,
                compare: Compare::Script,
                holder_ttl: false,
            })
        };
        let (a, r, s) = (
            hybrid("x"),
            release_by(Compare::Script, "y"),
            release_by(Compare::Script, "z"),
        );
        let batch = Call::batch(&[&r, &a, &s]).unwrap();
        let expected = [
            "MULTI", "SET", "INCR", "SET", "EXEC", "EVAL", "PUBLISH", "PUBLISH",
        ];
        assert_eq!(names(&batch), expected);
        let eval: Vec<Vec<u8>> = batch
            .pipe
            .cmd_iter()
            .nth(5)
            .unwrap()
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        let me = OwnerId::new("me", 1);
        let me = redis::ToRedisArgs::to_redis_args(&me).concat();
        assert_eq!(eval[1], DELETE_EACH_IF_EQUAL.as_bytes());
        assert_eq!(
            eval[2..],
            [b"2".to_vec(), b"y".to_vec(), b"z".to_vec(), me.clone(), me]
        );
        let int = Value::Int;
        let queued = || Value::SimpleString("QUEUED".into());
        let mut head = vec![Value::Okay, queued(), queued(), queued()];
        head.push(Value::Array(vec![Value::Nil, int(10), Value::Nil]));
        let wrong = redis::parse_redis_value(b"-WRONGTYPE Operation against a key\r\n").unwrap();
        let mut reply = head.clone();
        reply.extend([Value::Array(vec![int(1), wrong.clone()]), int(0), int(1)]);
        let split = batch.split(Value::Array(reply)).unwrap();
        assert_eq!(split.len(), 3);
        let read = |i: usize, call: &Call| {
            let Ok(value) = &split[i] else {
                panic!("{split:?}");
            };
            call.gave_back(value.clone(), false)
        };
        assert_eq!(read(0, &r).unwrap(), GaveBack::Held);
        assert!(matches!(read(2, &s), Err(LockError::Redis(_))), "{split:?}");
        assert!(
            matches!(&split[1], Ok(Value::Array(v)) if v.len() == 3),
            "{split:?}"
        );
        // The script refused as a whole: each release's error.
        let mut reply = head;
        reply.extend([wrong, int(0), int(1)]);
        let split = batch.split(Value::Array(reply)).unwrap();
        assert!(
            read_err(&r, &split[0]) && read_err(&s, &split[2]),
            "{split:?}"
        );
        // A single release keeps its own script.
        let alone = Call::batch(&[&a, &r]).unwrap();
        assert_eq!(
            names(&alone),
            ["MULTI", "SET", "INCR", "SET", "EXEC", "EVAL", "PUBLISH"]
        );
    }

    fn read_err(call: &Call, split: &Result<Value, LockError>) -> bool {
        let Ok(value) = split else { return false };
        matches!(
            call.gave_back(value.clone(), false),
            Err(LockError::Redis(_))
        )
    }

    #[test]
    fn a_refused_transaction_is_each_acquisitions_error_and_a_short_reply_the_batchs() {
        let (a, r) = (acquire("x"), release("y"));
        let batch = Call::batch(&[&a, &r]).unwrap();
        let abort = redis::parse_redis_value(b"-EXECABORT Transaction discarded\r\n").unwrap();
        let mut reply = vec![Value::Okay];
        reply.extend((0..4).map(|_| Value::SimpleString("QUEUED".into())));
        reply.push(abort);
        reply.extend([Value::Int(1), Value::Int(1)]);
        let split = batch.split(Value::Array(reply.clone())).unwrap();
        assert!(matches!(split[0], Err(LockError::Redis(_))), "{split:?}");
        assert!(
            matches!(&split[1], Ok(Value::Array(v)) if v == &[Value::Int(1), Value::Int(1)]),
            "{split:?}"
        );
        reply.pop();
        assert!(matches!(
            batch.split(Value::Array(reply)),
            Err(LockError::UnexpectedReply(_))
        ));
    }
}
