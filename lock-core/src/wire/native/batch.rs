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
//! **Replies.** The pipeline ignores errors, so one call's error (a key of another type)
//! stays that call's: it is in its replies, where its reader finds it, as it would alone. A
//! refused transaction (`EXECABORT`) is every acquisition's error.

use redis::{Pipeline, Value};

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
        let parts: Vec<Part> = calls
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
                }
            })
            .collect();
        let mut pipe = Pipeline::with_capacity(parts.iter().map(|p| p.len).sum::<usize>() + 2);
        pipe.ignore_errors();
        let add = |atomic: bool, pipe: &mut Pipeline| {
            for (call, part) in calls.iter().zip(&parts).filter(|(_, p)| p.atomic == atomic) {
                let skip = usize::from(part.seed_shared);
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
        add(false, &mut pipe);
        Some(Call::new(Op::Batch(parts), pipe, first.key.clone()))
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
        // MULTI's OK, one QUEUED per command, EXEC's reply; then the other calls' replies.
        let head = if opened { in_transaction + 2 } else { 0 };
        let outside: usize = parts.iter().filter(|p| !p.atomic).map(|p| p.len).sum();
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
                (false, _) => Ok(Value::Array(replies.by_ref().take(part.len).collect())),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        })
    }

    fn release(key: &str) -> Call {
        Call::release(
            Compare::Commands,
            key.into(),
            "me:1",
            true,
            ("PUBLISH", "chan", 9),
        )
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
