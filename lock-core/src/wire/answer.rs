//! [`Answer`]: what Redis answered to an acquisition, read in one place for every primitive.
//!
//! The acquisition scripts answer in one of two shapes ([`Shape`]):
//!
//! - **one integer**, for one hold (a mutex, a fair lock, a write lock, a read share), because
//!   a table reply costs the server more on the hottest path: `n > 0` taken (`n` is the
//!   fencing token; a read share answers 1), `0` the owner's hold was lost, `-1` held by
//!   another owner with no expiry, `-2 - ms` held by another owner for `ms` more;
//! - **a table**, whose first element says what it is: `{1, token_1, ..., token_n}` taken
//!   (no tokens for kinds without them), `{0, i, ms}` held by another owner (the `i`-th key,
//!   1-based; `ms < 0`: no expiry), `{2, recorded}` a semaphore recorded with another size,
//!   `{3, i}` the owner's hold on the `i`-th key was lost.

use std::time::Duration;

use redis::Value;

use super::convert::convert;
use crate::error::LockError;

/// How an acquisition's reply is laid out (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Int,
    Table,
}

/// The fencing tokens of a grant: one per hold (0 for kinds without one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tokens {
    /// The same token for every hold (a grant of one hold, or one without tokens).
    Each(u64),
    /// One token per hold, in the order of the call's keys.
    List(Vec<u64>),
}

impl Tokens {
    /// The token of the `i`-th hold.
    pub(crate) fn get(&self, i: usize) -> u64 {
        match self {
            Tokens::Each(token) => *token,
            Tokens::List(tokens) => tokens.get(i).copied().unwrap_or(0),
        }
    }
}

/// What Redis answered to one acquisition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Taken.
    Granted(Tokens),
    /// The `index`-th hold's lock is held by another owner; look again within `retry_in`
    /// (None: nothing says when).
    Busy {
        index: usize,
        retry_in: Option<Duration>,
    },
    /// The `index`-th hold's lock is held by another owner, for a time not asked for (the
    /// first attempt of a request that will wait): subscribe, and ask again at once.
    BusyAskAgain { index: usize },
    /// The owner's `index`-th hold is not what the caller believed: it was lost.
    Lost { index: usize },
    /// A semaphore's permits are held with this other size.
    SizeMismatch { recorded: u32 },
}

/// What an inspection of a lock string read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inspected {
    /// The remaining lease in ms (`-2`: no key, `-1`: no expiry).
    pub(crate) pttl: i64,
    /// The lock string (a native mutex's: its owner).
    pub(crate) value: Option<String>,
    /// A native mutex's fencing counter now: the holder's token is at most this (busy
    /// attempts draw tokens too) and above every earlier holder's. None for the scripts, whose
    /// lock string carries the holder's token itself.
    pub(crate) counter: Option<u64>,
    /// Whether the holder's count and token are kept by its client alone, not in Redis (a
    /// mutex of the native protocol): that client reads them from its own hold.
    pub(crate) kept_by_holder: bool,
}

/// The holder a lock string names, as its inspection read it ([`Inspected::holder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    /// The holder's owner id.
    pub(crate) owner: String,
    /// Its remaining lease, if the key has one.
    pub(crate) ttl: Option<Duration>,
    /// Its hold count (a native mutex keeps none in its key: 1).
    pub(crate) count: u32,
    /// Its fencing token, if the lock string keeps it (a native mutex's does not).
    pub(crate) token: Option<u64>,
    /// Whether a waiter asked to be told of the release.
    pub(crate) contended: bool,
}

impl Inspected {
    /// The holder the lock string names, None when the lock is free. A script's lock string
    /// is `owner|count|token|released|waiters` (an empty owner: free); a native mutex's key
    /// holds its owner alone.
    pub(crate) fn holder(&self) -> Option<Holder> {
        let value = self.value.as_deref().unwrap_or("");
        let ttl = u64::try_from(self.pttl).ok().map(Duration::from_millis);
        if !value.is_empty() && !value.contains('|') {
            // A mutex of the native protocol: its owner, the lease; the hold count is the
            // holder's and the fencing token its counter's, neither kept in the key.
            return Some(Holder {
                owner: value.to_owned(),
                ttl,
                count: 1,
                token: None,
                contended: false,
            });
        }
        let mut fields = value.split('|');
        let owner = fields.next().unwrap_or("");
        let count = fields.next().and_then(|c| c.parse().ok()).unwrap_or(0);
        let token = fields.next().and_then(|t| t.parse().ok());
        let contended = fields.nth(1) == Some("1");
        (!owner.is_empty()).then(|| Holder {
            owner: owner.to_owned(),
            ttl,
            count,
            token,
            contended,
        })
    }
}

/// What an inspection of a read-write lock's readers and writer-waiting mark read
/// (`rw_inspect.lua`; the writer's lock string is read by its own inspection).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Readers {
    /// Whether a writer's writer-waiting mark is set.
    pub(crate) writer_waiting: bool,
    /// The read shares whose expiry had not passed on the server's clock, in the reply's order.
    pub(crate) shares: Vec<ReadShare>,
}

/// One owner's read share, as an inspection read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadShare {
    /// The reader's owner id.
    pub(crate) owner: String,
    /// Its hold count (re-entries included).
    pub(crate) count: u32,
    /// What was left of its lease on the server's clock.
    pub(crate) left: Duration,
}

/// What an inspection of a semaphore read (`sem_inspect.lua`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Permits {
    /// The size recorded at first use (None while no permit is held).
    pub(crate) size: Option<u32>,
    /// The permits whose lease had not run out on the server's clock, in the reply's order.
    pub(crate) held: Vec<Permit>,
}

/// One held permit, as an inspection read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Permit {
    /// The owner id of the acquisition holding it (its permit id without the `:<k>`).
    pub(crate) owner: String,
    /// What was left of its lease on the server's clock.
    pub(crate) left: Duration,
}

/// What a call that gives one hold back (a release, an undo, a release kept until the
/// minimum hold) answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GaveBack {
    /// The owner still held it: released, decremented, kept until its minimum hold, or a
    /// repeat of a release already applied.
    Held,
    /// The owner no longer held it.
    NotHeld,
    /// A semaphore's release: how many of the owner's permits were still held, as the
    /// script counted them (any number: only a count equal to the owner's means all).
    Permits(i64),
}

impl Answer {
    /// Whether this answer grants the acquisition (which must then be undone if its caller
    /// went away).
    pub(crate) fn is_granted(&self) -> bool {
        matches!(self, Answer::Granted(_))
    }

    /// Reads a reply of `shape` to an acquisition of `holds` holds.
    pub(crate) fn read(shape: Shape, value: Value, holds: usize) -> Result<Answer, LockError> {
        match shape {
            Shape::Int => Ok(Self::from_int(convert(value)?)),
            Shape::Table => {
                // Only an array: the redis crate would also read one number as a table of one.
                if !matches!(value, Value::Array(_)) {
                    return Err(LockError::UnexpectedReply(format!(
                        "acquisition answered {value:?}, not a table"
                    )));
                }
                let table: Vec<i64> = convert(value)?;
                Self::from_table(&table, holds).ok_or_else(|| {
                    LockError::UnexpectedReply(format!("acquisition answered {table:?}"))
                })
            }
        }
    }

    fn from_int(n: i64) -> Answer {
        match n {
            token if token > 0 => Answer::Granted(Tokens::Each(token.unsigned_abs())),
            0 => Answer::Lost { index: 0 },
            -1 => Answer::Busy {
                index: 0,
                retry_in: None,
            },
            busy => Answer::Busy {
                index: 0,
                retry_in: Some(Duration::from_millis((-2 - busy).unsigned_abs())),
            },
        }
    }

    fn from_table(table: &[i64], holds: usize) -> Option<Answer> {
        let index = |i: i64| {
            usize::try_from(i)
                .ok()?
                .checked_sub(1)
                .filter(|i| *i < holds)
        };
        Some(match table {
            [1] if holds == 1 => Answer::Granted(Tokens::Each(0)),
            [1, tokens @ ..] if tokens.len() == holds => {
                let tokens: Option<Vec<u64>> =
                    tokens.iter().map(|t| u64::try_from(*t).ok()).collect();
                Answer::Granted(Tokens::List(tokens?))
            }
            [0, i, ms] => Answer::Busy {
                index: index(*i)?,
                retry_in: u64::try_from(*ms).ok().map(Duration::from_millis),
            },
            [2, recorded] => Answer::SizeMismatch {
                recorded: u32::try_from(*recorded).unwrap_or(u32::MAX),
            },
            [3, i] => Answer::Lost { index: index(*i)? },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::util::arbitrary::{config, int, resp2_value};

    #[test]
    fn both_shapes_read_the_same_outcomes() {
        let busy = |index, ms: Option<u64>| Answer::Busy {
            index,
            retry_in: ms.map(Duration::from_millis),
        };
        let int = |n| Answer::read(Shape::Int, Value::Int(n), 1).unwrap();
        assert_eq!(int(42), Answer::Granted(Tokens::Each(42)));
        assert_eq!(int(0), Answer::Lost { index: 0 });
        assert_eq!(int(-1), busy(0, None));
        assert_eq!(int(-2), busy(0, Some(0)));
        assert_eq!(int(-1502), busy(0, Some(1500)));
        let table = |t: &[i64], holds| {
            let value = Value::Array(t.iter().map(|n| Value::Int(*n)).collect());
            Answer::read(Shape::Table, value, holds)
        };
        assert_eq!(table(&[1], 1).unwrap(), Answer::Granted(Tokens::Each(0)));
        assert_eq!(
            table(&[1, 7, 9], 2).unwrap(),
            Answer::Granted(Tokens::List(vec![7, 9]))
        );
        assert_eq!(table(&[0, 2, 30], 2).unwrap(), busy(1, Some(30)));
        assert_eq!(table(&[0, 1, -1], 2).unwrap(), busy(0, None));
        assert_eq!(table(&[3, 2], 2).unwrap(), Answer::Lost { index: 1 });
        assert_eq!(
            table(&[2, 5], 1).unwrap(),
            Answer::SizeMismatch { recorded: 5 }
        );
        // A grant whose first element came as text (a CI run of the property below drew it)
        // is read as a grant.
        let text_one = Value::Array(vec![Value::BulkString(b"1".to_vec())]);
        assert!(matches!(
            Answer::read(Shape::Table, text_one.clone(), 1),
            Ok(Answer::Granted(_))
        ));
        for bad in [&[1, 7][..], &[0, 3, 1], &[0, 0, 1], &[3, 0], &[4], &[]] {
            assert!(matches!(table(bad, 2), Err(LockError::UnexpectedReply(_))));
        }
    }

    proptest! {
        #![proptest_config(config(2000))]

        /// Any reply reads as an answer of its shape or as [`LockError::UnexpectedReply`],
        /// never a panic; a one-integer reply is a grant exactly when it is positive.
        #[test]
        fn any_reply_reads_as_an_answer_or_an_unexpected_reply(
            reply in prop_oneof![
                resp2_value(),
                int().prop_map(Value::Int),
                int().prop_map(|n| Value::BulkString(n.to_string().into_bytes())),
                proptest::collection::vec(int(), 0..4)
                    .prop_map(|t| Value::Array(t.into_iter().map(Value::Int).collect())),
            ],
            holds in 1usize..4,
        ) {
            for shape in [Shape::Int, Shape::Table] {
                match Answer::read(shape, reply.clone(), holds) {
                    Ok(_) | Err(LockError::UnexpectedReply(_)) => {}
                    Err(e) => prop_assert!(false, "{:?} read as {:?}", reply, e),
                }
            }
            if let Value::Int(n) = reply {
                let read = Answer::read(Shape::Int, reply, 1).map(|a| a.is_granted());
                prop_assert_eq!(read.ok(), Some(n > 0));
            }
        }
    }
}
