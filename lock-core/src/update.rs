//! Guarded updates: writes to your own keys, in the same Redis deployment as the lock, that
//! are applied only while the hold that makes them is still the lock's holder.
//!
//! A [fencing token](crate::LockGuard::fencing_token) written with a whole value
//! ([`fenced::set`](crate::fenced::set)) does not protect a read-modify-write: a holder that
//! stalled past its lease reads the stock (1), the next holder reads it too (1), the stale one
//! writes 0 with its token and the new one writes 0 with its greater token; both writes are
//! accepted, two units are sold. A guarded update is instead **one server-side step** (one Lua
//! script) that first checks that the lock's key still holds this hold (its owner id and its
//! fencing token) and then applies a small list of operations, or none:
//!
//! | operation | Redis command | its value in [`Updated::Applied`] |
//! |---|---|---|
//! | [`set`](Update::set) | `SET key value` | 1 |
//! | [`delete`](Update::delete) | `DEL key` | 1 deleted, 0 missing |
//! | [`add`](Update::add) | `INCRBY key n` | the new value |
//! | [`take`](Update::take) | `DECRBY key n`, only while `value - n >= floor` (a missing key counts as 0) | the new value |
//! | [`hset`](Update::hset) | `HSET key field value` | 1 new field, 0 replaced |
//! | [`hadd`](Update::hadd) | `HINCRBY key field n` | the new value |
//! | [`expire`](Update::expire) | `PEXPIRE key ms` | 1 set, 0 no such key |
//!
//! The answer is [`Updated::Applied`] (every operation applied, with its value),
//! [`Updated::NotEnough`] (a `take` would have gone below its floor: nothing applied: "sold
//! out" is an answer, not an error) or [`Updated::NotHeld`] (the lock is not this hold's any
//! more: nothing applied, and the guard learns it lost the lock: [`is_held`](crate::Guard::is_held)
//! turns false and [`lost`](crate::Guard::lost) resolves).
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
//! use lock_core::Updated;
//!
//! let guard = client.lock("item:42").await?;
//! // `stock:{item:42}`: a key in the lock's Cluster slot (any key works on one server).
//! let stock = guard.key_in_slot("stock:")?;
//! match guard.update().take(&stock, 1, 0).hset("order:7", "state", "paid").send().await? {
//!     Updated::Applied { values } => println!("sold; {} left", values[0]),
//!     Updated::NotEnough { .. } => println!("sold out"),
//!     Updated::NotHeld => println!("lost the lock before selling: nothing was written"),
//!     _ => {}
//! }
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! **Where it works.** From a [`LockGuard`](crate::LockGuard) (a mutex's or a fair lock's), a
//! [`WriteGuard`](crate::WriteGuard), and a [`HeldLock`](crate::HeldLock) of one of those
//! (the `held` of `#[distributed_lock]`, the view `run`'s closure gets); a read share,
//! permits, a multi-lock and a RedLock have no single owner to check: their update is
//! [`LockError::Unsupported`]. On one server, Sentinel, a Cluster and the in-memory backend.
//! On a Cluster every key of an update must be in the lock's slot (a script runs on one
//! node): [`key_in_slot`](crate::LockGuard::key_in_slot) makes such a key, and a key in
//! another slot is [`LockError::InvalidOption`] naming it, before anything is sent. A mutex
//! spoken in Valkey 9's native protocol keeps only its owner id in its key (the token lives
//! in a counter beside it): there the script checks the owner id, which is new for every
//! acquisition outside a [`ReentrantScope`](crate::ReentrantScope); the update is still one
//! script, as atomic as on the script protocol.
//!
//! **Safe to repeat.** When the connection fails under an update or its reply does not come
//! within the response timeout, the update is sent once more (and the backend may resend a
//! script after a connection failure). It is applied once: each update carries a sequence
//! number, increasing over the hold's updates (one at a time per hold), and the script keeps
//! the last one it applied, with its values, beside the lock (`P{N}:updated`, kept for the
//! lock's remaining lease plus [`RECORD_TTL`]); a repeat answers those values without
//! applying anything again. One case stays open: a repeat that finds the lock held by another
//! holder cannot tell whether the first send was applied before the lock passed on (the next
//! holder's updates replace the record): it is [`LockError::OutcomeUnknown`], never
//! [`Updated::NotHeld`], which always means nothing was applied.
//!
//! **What it does not promise.** It is as strong as the lock: a write acknowledged by a
//! primary that fails over before a replica received it is lost with the lock's own state
//! (see `min_replicas`), and a replica that is read may lag. Counters are Redis integers;
//! the amounts, floors and values compared in the script must stay within ±2<sup>53</sup>
//! (Lua's exact integers): a larger amount or floor is [`LockError::InvalidOption`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::hold::Hold;

/// The most operations one update carries: 256.
pub const MAX_OPERATIONS: usize = 256;

/// How long the record of a hold's last update outlives the lock's lease: 60 s (long enough
/// for any resend of its last update to find it).
pub const RECORD_TTL: Duration = Duration::from_secs(60);

/// The largest amount, floor or counter a guarded update compares exactly: 2^53.
pub const MAX_AMOUNT: u64 = 1 << 53;

/// One operation of an update, as the script reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    Set {
        key: String,
        value: Vec<u8>,
    },
    Delete {
        key: String,
    },
    Add {
        key: String,
        n: i64,
    },
    Take {
        key: String,
        n: u64,
        floor: i64,
    },
    HSet {
        key: String,
        field: Vec<u8>,
        value: Vec<u8>,
    },
    HAdd {
        key: String,
        field: Vec<u8>,
        n: i64,
    },
    Expire {
        key: String,
        ms: u64,
    },
}

impl Step {
    /// The user's key the operation works on.
    pub(crate) fn key(&self) -> &str {
        match self {
            Step::Set { key, .. }
            | Step::Delete { key }
            | Step::Add { key, .. }
            | Step::Take { key, .. }
            | Step::HSet { key, .. }
            | Step::HAdd { key, .. }
            | Step::Expire { key, .. } => key,
        }
    }
}

/// What a guarded update did: [`Update::send`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Updated {
    /// Every operation was applied, in order, in one step, while the lock was this hold's.
    /// `values` has one number per operation (see the [module docs](self)' table): for a
    /// counter its new value.
    Applied {
        /// Each operation's value, in the order they were added.
        values: Vec<i64>,
    },
    /// Operation number `op` (0-based) is a [`take`](Update::take) that would have left its
    /// key below its floor: nothing was applied. `left` is what the key held.
    NotEnough {
        /// The index of the take, in the order the operations were added.
        op: usize,
        /// The key's value when the update was refused.
        left: i64,
    },
    /// The lock is not this hold's any more (expired, taken over, released or
    /// force-unlocked): nothing was applied, and the guard is marked lost.
    NotHeld,
}

/// Sends a hold's guarded updates: the engine, above this module.
pub(crate) trait Updater: Send + Sync {
    /// Runs `steps` under the hold of `generation`.
    fn update<'a>(
        &'a self,
        hold: &'a Arc<Hold>,
        generation: u64,
        steps: &'a [Step],
    ) -> Pin<Box<dyn Future<Output = Result<Updated, LockError>> + Send + 'a>>;
}

/// The hold an update is made under.
#[derive(Clone)]
pub(crate) struct Under {
    pub(crate) updater: Arc<dyn Updater>,
    pub(crate) hold: Arc<Hold>,
    pub(crate) generation: u64,
}

/// A guarded update being built: made by [`LockGuard::update`](crate::LockGuard::update),
/// [`WriteGuard::update`](crate::WriteGuard::update) and
/// [`HeldLock::update`](crate::HeldLock::update); add operations, then [`send`](Self::send)
/// them as one step. See the [module docs](self).
///
/// An operation given a bad argument (an amount above [`MAX_AMOUNT`], more than
/// [`MAX_OPERATIONS`]) makes `send` fail with [`LockError::InvalidOption`] without sending
/// anything.
#[must_use = "an update does nothing until it is sent"]
pub struct Update {
    under: Result<Under, LockError>,
    steps: Vec<Step>,
    invalid: Option<LockError>,
}

impl std::fmt::Debug for Update {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Update")
            .field("operations", &self.steps.len())
            .finish_non_exhaustive()
    }
}

fn invalid(option: &'static str, reason: String) -> LockError {
    LockError::InvalidOption { option, reason }
}

fn amount(what: &'static str, n: i64) -> Result<i64, LockError> {
    if n.unsigned_abs() > MAX_AMOUNT {
        return Err(invalid(
            what,
            format!("{n} is beyond ±2^53, which the update's Lua cannot compare exactly"),
        ));
    }
    Ok(n)
}

impl Update {
    pub(crate) fn new(under: Result<Under, LockError>) -> Self {
        Self {
            under,
            steps: Vec::new(),
            invalid: None,
        }
    }

    fn push(mut self, step: Result<Step, LockError>) -> Self {
        if self.invalid.is_some() {
            return self;
        }
        match step {
            Ok(_) if self.steps.len() >= MAX_OPERATIONS => {
                self.invalid = Some(invalid(
                    "update",
                    format!("more than {MAX_OPERATIONS} operations in one update"),
                ));
            }
            Ok(step) => self.steps.push(step),
            Err(e) => self.invalid = Some(e),
        }
        self
    }

    /// Sets `key` to `value` (`SET`: the key's expiry, if any, is dropped). Its value: 1.
    pub fn set(self, key: impl Into<String>, value: impl AsRef<[u8]>) -> Self {
        let (key, value) = (key.into(), value.as_ref().to_vec());
        self.push(Ok(Step::Set { key, value }))
    }

    /// Deletes `key` (`DEL`). Its value: 1 if there was one, else 0.
    pub fn delete(self, key: impl Into<String>) -> Self {
        self.push(Ok(Step::Delete { key: key.into() }))
    }

    /// Adds `n` (negative: subtracts) to the counter at `key` (`INCRBY`; a missing key counts
    /// from 0), without a bound. Its value: the counter after it.
    pub fn add(self, key: impl Into<String>, n: i64) -> Self {
        let key = key.into();
        self.push(amount("add", n).map(|n| Step::Add { key, n }))
    }

    /// Takes `n` from the counter at `key` (`DECRBY`) only if at least `floor` is left after
    /// it (a missing key counts as 0): the stock. If not, nothing of the update is applied
    /// and it answers [`Updated::NotEnough`]. Its value: the counter after it.
    pub fn take(self, key: impl Into<String>, n: u64, floor: i64) -> Self {
        let key = key.into();
        let step = match (n > MAX_AMOUNT, amount("take", floor)) {
            (true, _) => Err(invalid(
                "take",
                format!("{n} is above 2^53, which the update's Lua cannot compare exactly"),
            )),
            (false, Err(e)) => Err(e),
            (false, Ok(floor)) => Ok(Step::Take { key, n, floor }),
        };
        self.push(step)
    }

    /// Sets `field` of the hash at `key` to `value` (`HSET`). Its value: 1 for a new field,
    /// 0 for one replaced.
    pub fn hset(
        self,
        key: impl Into<String>,
        field: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Self {
        let (key, field) = (key.into(), field.as_ref().to_vec());
        let value = value.as_ref().to_vec();
        self.push(Ok(Step::HSet { key, field, value }))
    }

    /// Adds `n` to the counter in `field` of the hash at `key` (`HINCRBY`). Its value: the
    /// counter after it.
    pub fn hadd(self, key: impl Into<String>, field: impl AsRef<[u8]>, n: i64) -> Self {
        let (key, field) = (key.into(), field.as_ref().to_vec());
        self.push(amount("hadd", n).map(|n| Step::HAdd { key, field, n }))
    }

    /// Lets `key` expire `ttl` from now (`PEXPIRE`, at least 1 ms; a longer one than
    /// 2^53 ms is refused). Its value: 1 if the key exists, else 0.
    pub fn expire(self, key: impl Into<String>, ttl: Duration) -> Self {
        let key = key.into();
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let step = match ms > MAX_AMOUNT {
            true => Err(invalid("expire", format!("{ttl:?} is too long"))),
            false => Ok(Step::Expire { key, ms }),
        };
        self.push(step)
    }

    /// The operations added so far.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether no operation was added (sending it only checks that the lock is still held:
    /// [`Updated::Applied`] with no values, or [`Updated::NotHeld`]).
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Checks the hold and applies every operation, in one step.
    ///
    /// Errors: a bad operation or a key outside the lock's Cluster slot is
    /// [`LockError::InvalidOption`] (nothing sent); a lock kind without a single owner is
    /// [`LockError::Unsupported`]; a key of the wrong type (a hash given to `take`) is
    /// [`LockError::Redis`], nothing applied; when Redis cannot be reached, or answers
    /// neither time the update is sent, the error says so and whether it was applied is
    /// unknown (a later update or read says).
    ///
    /// Time: an update whose reply was lost or did not come within the client's response
    /// timeout is sent once more, as a new call, to learn what happened; on a frozen server
    /// it therefore gives up after twice the bound of one call (2 × the response timeout on
    /// a warm pool, 2 s by default).
    pub async fn send(self) -> Result<Updated, LockError> {
        if let Some(e) = self.invalid {
            return Err(e);
        }
        let under = self.under?;
        under
            .updater
            .update(&under.hold, under.generation, &self.steps)
            .await
    }
}

/// The key `base` + `{name}`: a key whose hash tag is the lock `name`, so it lives in the
/// lock's Cluster slot (the lock's own keys are `<prefix>{name}…`), for a guarded update
/// under that lock: `key_in_slot("stock:", "item:42")` is `stock:{item:42}`. The same as a
/// guard's [`key_in_slot`](crate::LockGuard::key_in_slot), for code that has no guard yet
/// (creating the key, reading it outside the lock). `base` must have no `{` (it would make
/// another hash tag): [`LockError::InvalidOption`].
///
/// ```
/// assert_eq!(lock_core::update::key_in_slot("stock:", "item:42").unwrap(), "stock:{item:42}");
/// ```
pub fn key_in_slot(base: &str, name: &str) -> Result<String, LockError> {
    if base.contains('{') {
        return Err(invalid(
            "key_in_slot",
            format!("{base:?} has a `{{`, which would give the key another hash tag"),
        ));
    }
    Ok(format!("{base}{{{name}}}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_operations_fail_at_send_before_anything_is_sent() {
        let update = Update::new(Err(LockError::NoClient)).take("k", MAX_AMOUNT + 1, 0);
        assert!(matches!(
            update.invalid,
            Some(LockError::InvalidOption { option: "take", .. })
        ));
        let mut many = Update::new(Err(LockError::NoClient));
        for _ in 0..=MAX_OPERATIONS {
            many = many.delete("k");
        }
        assert_eq!(many.len(), MAX_OPERATIONS);
        assert!(matches!(
            many.invalid,
            Some(LockError::InvalidOption {
                option: "update",
                ..
            })
        ));
        let update = Update::new(Err(LockError::NoClient)).add("k", i64::MIN);
        assert!(matches!(
            update.invalid,
            Some(LockError::InvalidOption { option: "add", .. })
        ));
    }

    #[test]
    fn a_key_in_slot_carries_the_lock_name_as_its_hash_tag() {
        assert_eq!(key_in_slot("stock:", "item:42").unwrap(), "stock:{item:42}");
        assert!(matches!(
            key_in_slot("a{b}:", "n"),
            Err(LockError::InvalidOption {
                option: "key_in_slot",
                ..
            })
        ));
    }
}
