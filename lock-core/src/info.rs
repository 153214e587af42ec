//! What Redis knows about a lock right now, for operators and tests: [`LockInfo`],
//! [`FairLockInfo`], [`ReadWriteLockInfo`] and [`SemaphoreInfo`], and the reads behind them.

use std::collections::HashSet;
use std::time::Duration;

use crate::engine::Engine;
use crate::error::LockError;
use crate::kind::HoldKind;
use crate::name::Keys;
use crate::wire;
use crate::wire::answer::{Holder, Permits, Readers};

/// What Redis knows about the lock string a hold of `kind` on `keys` lives in. A mutex of
/// the native protocol keeps neither its hold count nor its token in Redis: when this client
/// is its holder they come from the hold here; otherwise the count reads 1, the token `None`,
/// and `fencing_token_at_most` the counter's value (the holder's token is at most it).
pub(crate) async fn lock(
    engine: &Engine,
    kind: HoldKind,
    keys: &Keys,
) -> Result<LockInfo, LockError> {
    let key = keys.hold(kind);
    let read = engine
        .inspect(&wire::mutex::inspect(engine.protocol(), kind, &key))
        .await?;
    let mut info = LockInfo::new(read.holder());
    if info.held && info.fencing_token.is_none() {
        info.fencing_token_at_most = read.counter;
    }
    if read.kept_by_holder
        && let Some(held) = info
            .owner
            .as_deref()
            .and_then(|o| engine.own_hold(kind, keys, o))
    {
        info.hold_count = held.count;
        info.fencing_token = Some(held.token);
        info.fencing_token_at_most = Some(held.token);
    }
    Ok(info)
}

/// A lock's state as Redis sees it: made by [`Mutex::info`](crate::Mutex::info) (and, for
/// their lock strings, by [`FairLock::info`](crate::FairLock::info) and
/// [`ReadWriteLock::info`](crate::ReadWriteLock::info)).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockInfo {
    /// Whether anyone holds the lock.
    pub held: bool,
    /// The holder's owner id as stored (`<client id>:<holder id>`), if held. The client id is
    /// the random id of the holder's [`LockClient`](crate::LockClient); what that client says
    /// it is (host, process), if it set an owner description, is
    /// [`LockClient::owner_description`](crate::LockClient::owner_description)`(owner)`.
    pub owner: Option<String>,
    /// The holder's remaining lease, if held with one.
    pub ttl: Option<Duration>,
    /// The holder's hold count (re-entries), 0 when free. A mutex of the native or hybrid
    /// protocol keeps only its owner in its key: asked from another client, a held one
    /// shows 1 whatever its re-entries.
    pub hold_count: u32,
    /// The holder's fencing token, if held and Redis keeps it. A mutex of the native protocol
    /// (Valkey 9) keeps only its owner in the lock's key: its token is known to its holder's
    /// client alone (this field when you ask from that client), and `None` elsewhere; see
    /// [`fencing_token_at_most`](Self::fencing_token_at_most).
    pub fencing_token: Option<u64>,
    /// An upper bound of the holder's fencing token, if held: the token itself where it is
    /// known, else (a native mutex asked from another client) the name's fencing counter now.
    /// The holder's token is at most this and above every earlier holder's: a write fenced
    /// with a greater token than this is not the holder's.
    pub fencing_token_at_most: Option<u64>,
    /// Whether a waiter asked to be told of the release. Always `false` for a mutex of the
    /// native or hybrid protocol, which marks no waiter in Redis (its release always
    /// announces itself).
    pub contended: bool,
}

impl LockInfo {
    /// The lock's state from the holder its lock string names (None: free).
    fn new(holder: Option<Holder>) -> Self {
        let Some(holder) = holder else {
            return LockInfo::default();
        };
        LockInfo {
            held: true,
            owner: Some(holder.owner),
            ttl: holder.ttl,
            hold_count: holder.count,
            fencing_token: holder.token,
            fencing_token_at_most: holder.token,
            contended: holder.contended,
        }
    }
}

/// What Redis knows about a fair lock and its queue.
pub(crate) async fn fair(engine: &Engine, keys: &Keys) -> Result<FairLockInfo, LockError> {
    let lock = lock(engine, HoldKind::Fair, keys).await?;
    let reply = engine.invoke_script(&wire::fair::inspect(keys)).await?;
    let queued = wire::fair::queued(reply)?;
    Ok(FairLockInfo { lock, queued })
}

/// A fair lock's state as Redis sees it: made by [`FairLock::info`](crate::FairLock::info).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FairLockInfo {
    /// The lock itself.
    pub lock: LockInfo,
    /// Waiters in the queue whose deadline has not passed (the first 1000 are counted).
    pub queued: u32,
}

/// What Redis knows about a read-write lock.
pub(crate) async fn read_write(
    engine: &Engine,
    keys: &Keys,
) -> Result<ReadWriteLockInfo, LockError> {
    let writer = lock(engine, HoldKind::Write, keys).await?;
    let reply = engine.invoke_script(&wire::rwlock::inspect(keys)).await?;
    Ok(ReadWriteLockInfo::new(
        writer,
        wire::rwlock::readers(reply)?,
    ))
}

/// A read-write lock's state as Redis sees it: made by
/// [`ReadWriteLock::info`](crate::ReadWriteLock::info).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ReadWriteLockInfo {
    /// The write side.
    pub writer: LockInfo,
    /// Owners holding a read share that has not expired.
    pub readers: u32,
    /// Read shares held, re-entries included.
    pub read_shares: u32,
    /// The longest remaining lease of a read share.
    pub readers_ttl: Option<Duration>,
    /// Whether a writer waits (new readers hold back meanwhile).
    pub writer_waiting: bool,
    /// The owner ids of the readers counted in `readers`, sorted.
    pub reader_owners: Vec<String>,
}

impl ReadWriteLockInfo {
    /// The lock's state from its writer's inspection and its readers'.
    fn new(writer: LockInfo, readers: Readers) -> Self {
        let mut info = ReadWriteLockInfo {
            writer,
            writer_waiting: readers.writer_waiting,
            ..Default::default()
        };
        for share in readers.shares {
            info.readers += 1;
            info.read_shares = info.read_shares.saturating_add(share.count);
            info.reader_owners.push(share.owner);
            let left = share.left;
            info.readers_ttl = Some(info.readers_ttl.map_or(left, |t| t.max(left)));
        }
        info.reader_owners.sort_unstable();
        info
    }
}

/// What Redis knows about a semaphore whose handle has `size` permits.
pub(crate) async fn semaphore(
    engine: &Engine,
    keys: &Keys,
    size: u32,
) -> Result<SemaphoreInfo, LockError> {
    let reply = engine
        .invoke_script(&wire::semaphore::inspect(keys))
        .await?;
    Ok(SemaphoreInfo::new(size, wire::semaphore::permits(reply)?))
}

/// A semaphore's state as Redis sees it: made by
/// [`Semaphore::info`](crate::Semaphore::info).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The size recorded at first use (None while no permit is held).
    pub size: Option<u32>,
    /// Permits held (leases not run out).
    pub held: u32,
    /// Permits free: the recorded size (or this handle's) minus those held.
    pub free: u32,
    /// Acquisitions holding permits.
    pub holders: u32,
    /// When the first held permit's lease runs out.
    pub next_expiry: Option<Duration>,
    /// The owner ids of the acquisitions counted in `holders`, sorted.
    pub holder_owners: Vec<String>,
}

impl SemaphoreInfo {
    /// The semaphore's state from its inspection, for a handle of `size` permits.
    fn new(size: u32, permits: Permits) -> Self {
        let mut info = SemaphoreInfo {
            size: permits.size,
            ..Default::default()
        };
        let mut owners = HashSet::new();
        for permit in permits.held {
            info.held += 1;
            owners.insert(permit.owner);
            let left = permit.left;
            info.next_expiry = Some(info.next_expiry.map_or(left, |e| e.min(left)));
        }
        info.holders = u32::try_from(owners.len()).unwrap_or(u32::MAX);
        info.holder_owners = owners.into_iter().collect();
        info.holder_owners.sort_unstable();
        info.free = permits.size.unwrap_or(size).saturating_sub(info.held);
        info
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;
    use crate::wire::answer::Inspected;
    use crate::wire::convert;

    /// What `lock()` makes of a lock string's inspection (a script's: no counter).
    fn lock_parse(pttl: i64, value: Option<&str>) -> LockInfo {
        let value = value.map(str::to_owned);
        let counter = None;
        LockInfo::new(
            Inspected {
                pttl,
                value,
                counter,
                kept_by_holder: false,
            }
            .holder(),
        )
    }

    /// What `read_write()` makes of `rw_inspect.lua`'s reply.
    fn rw_parse(writer: LockInfo, reply: Vec<Value>) -> Result<ReadWriteLockInfo, LockError> {
        let readers = wire::rwlock::readers(Value::Array(reply))?;
        Ok(ReadWriteLockInfo::new(writer, readers))
    }

    /// What `semaphore()` makes of `sem_inspect.lua`'s reply.
    fn sem_parse(size: u32, reply: Vec<Value>) -> Result<SemaphoreInfo, LockError> {
        let permits = wire::semaphore::permits(Value::Array(reply))?;
        Ok(SemaphoreInfo::new(size, permits))
    }

    #[test]
    fn a_malformed_reply_is_an_error_not_a_panic() {
        let short = vec![Value::Int(1)];
        assert!(rw_parse(LockInfo::default(), short.clone()).is_err());
        assert!(sem_parse(3, short).is_err());
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let bad_share = vec![
            Value::Int(-2),
            Value::Nil,
            Value::Int(-2),
            Value::Int(5),
            text("r"),
            text("x"),
        ];
        assert!(rw_parse(LockInfo::default(), bad_share).is_err());
        let info = sem_parse(
            4,
            vec![
                Value::Int(100),
                Value::Nil,
                text("c:7:1"),
                text("150"),
                text("c:8:1"),
                text("90"),
            ],
        )
        .unwrap();
        assert_eq!((info.held, info.free, info.holders), (1, 3, 1));
        assert_eq!(info.next_expiry, Some(Duration::from_millis(50)));
        assert_eq!(info.holder_owners, ["c:7"]);
    }

    /// Found by the properties below: a server clock or an expiry far from each other
    /// overflowed `expiry - now`, and read shares beyond `u32::MAX` overflowed their sum
    /// (panics in debug builds, wrong numbers in release ones).
    #[test]
    fn extreme_numbers_in_an_inspection_are_not_a_panic() {
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let info = sem_parse(
            0,
            vec![Value::Int(i64::MIN), Value::Nil, text(":0:0"), text("0")],
        )
        .unwrap();
        assert_eq!(info.next_expiry, Some(Duration::from_millis(1 << 63)));
        let rw = |now: i64, shares: &[&str]| {
            let mut reply = vec![Value::Nil, Value::Nil, Value::Int(-2), Value::Int(now)];
            for share in shares {
                reply.extend([text("r"), text(share)]);
            }
            rw_parse(LockInfo::default(), reply).unwrap()
        };
        let info = rw(-47_259, &["2624872609|9223372036854775807"]);
        assert_eq!(
            info.readers_ttl,
            Some(Duration::from_millis(i64::MAX as u64 + 47_259))
        );
        let info = rw(0, &["4294967295|10", "4294967295|10"]);
        assert_eq!((info.readers, info.read_shares), (2, u32::MAX));
    }

    #[test]
    fn info_reads_the_lock_string() {
        let held = lock_parse(1500, Some("c:1|2|77||1"));
        assert!(held.held && held.contended);
        assert_eq!(held.ttl, Some(Duration::from_millis(1500)));
        assert_eq!((held.hold_count, held.fencing_token), (2, Some(77)));
        assert_eq!(held.owner.as_deref(), Some("c:1"));
        let free = lock_parse(3_600_000, Some("|0|77|77|"));
        assert_eq!(free, LockInfo::default());
        assert_eq!(lock_parse(-2, None), LockInfo::default());
    }

    /// Every reply an `info()` decodes, malformed ones included (issue 17 §3): a typed
    /// [`LockError::UnexpectedReply`] or a consistent value, never a panic.
    mod properties {
        use proptest::prelude::*;

        use super::*;
        use crate::util::arbitrary::{array_of, config, int, numberish, scalar, text, value};

        /// What `lock()` does with `inspect.lua`'s reply.
        fn decode_lock(reply: Value) -> Result<LockInfo, LockError> {
            let (pttl, value): (i64, Option<String>) = convert(reply)?;
            Ok(lock_parse(pttl, value.as_deref()))
        }

        fn check_lock_info(info: &LockInfo) -> Result<(), TestCaseError> {
            if !info.held {
                prop_assert_eq!(info, &LockInfo::default());
            }
            Ok(())
        }

        fn typed(error: LockError) -> Result<(), TestCaseError> {
            prop_assert!(
                matches!(error, LockError::UnexpectedReply(_)),
                "not an UnexpectedReply: {:?}",
                error
            );
            Ok(())
        }

        fn bulk(text: String) -> Value {
            Value::BulkString(text.into_bytes())
        }

        /// A lock string: `owner|count|token|released|waiters`, each field any text.
        fn lock_string() -> impl Strategy<Value = Value> {
            prop_oneof![
                3 => ("[a-z0-9:-]{0,8}", int(), int(), int(), "[01]?").prop_map(
                    |(owner, count, token, released, waiters)| {
                        bulk(format!("{owner}|{count}|{token}|{released}|{waiters}"))
                    }
                ),
                1 => text().prop_map(Value::BulkString),
                1 => Just(Value::Nil),
                1 => scalar(),
            ]
        }

        /// `count|expiry`, with counts up to `u32::MAX` and any expiry.
        fn read_share() -> impl Strategy<Value = Value> {
            prop_oneof![
                4 => (prop_oneof![any::<u32>().prop_map(i64::from), int()], int())
                    .prop_map(|(count, expiry)| bulk(format!("{count}|{expiry}"))),
                1 => scalar(),
            ]
        }

        /// `rw_inspect.lua`'s reply, roughly: writer pttl and value, mark pttl, server ms,
        /// then owner / share pairs.
        fn rw_reply() -> impl Strategy<Value = Value> {
            (
                scalar(),
                lock_string(),
                numberish(),
                numberish(),
                prop::collection::vec((scalar(), read_share()), 0..6),
            )
                .prop_map(|(pttl, writer, mark, now, shares)| {
                    let mut reply = vec![pttl, writer, mark, now];
                    for (owner, share) in shares {
                        reply.extend([owner, share]);
                    }
                    Value::Array(reply)
                })
        }

        /// `sem_inspect.lua`'s reply, roughly: server ms, recorded size, then permit id /
        /// expiry pairs.
        fn sem_reply() -> impl Strategy<Value = Value> {
            (
                numberish(),
                prop_oneof![Just(Value::Nil), numberish()],
                prop::collection::vec(
                    (
                        prop_oneof![
                            "[a-z0-9-]{0,6}:[0-9]{1,3}:[0-9]{1,2}".prop_map(bulk),
                            scalar()
                        ],
                        numberish(),
                    ),
                    0..6,
                ),
            )
                .prop_map(|(now, size, permits)| {
                    let mut reply = vec![now, size];
                    for (member, expiry) in permits {
                        reply.extend([member, expiry]);
                    }
                    Value::Array(reply)
                })
        }

        proptest! {
            #![proptest_config(config(500))]

            #[test]
            fn a_lock_inspection_reply_decodes_or_is_a_typed_error(
                reply in prop_oneof![
                    value(),
                    array_of(prop_oneof![numberish(), lock_string()], 0..4),
                    (numberish(), lock_string()).prop_map(|(a, b)| Value::Array(vec![a, b])),
                ]
            ) {
                match decode_lock(reply) {
                    Ok(info) => check_lock_info(&info)?,
                    Err(e) => typed(e)?,
                }
            }

            #[test]
            fn a_fair_inspection_reply_decodes_or_is_a_typed_error(
                reply in prop_oneof![
                    value(),
                    (numberish(), lock_string(), numberish(), numberish())
                        .prop_map(|(a, b, c, d)| Value::Array(vec![a, b, c, d])),
                ]
            ) {
                // What `fair()` reads from `fair_inspect.lua`.
                if let Err(e) = wire::fair::queued(reply) {
                    typed(e)?;
                }
            }

            #[test]
            fn a_read_write_inspection_reply_decodes_or_is_a_typed_error(
                reply in prop_oneof![1 => value(), 4 => rw_reply()]
            ) {
                let pairs = match &reply {
                    Value::Array(items) => items.len().saturating_sub(4) / 2,
                    _ => 0,
                };
                let decoded = wire::rwlock::readers(reply)
                    .map(|readers| ReadWriteLockInfo::new(LockInfo::default(), readers));
                match decoded {
                    Ok(info) => {
                        prop_assert!(info.readers as usize <= pairs);
                        prop_assert_eq!(info.readers_ttl.is_some(), info.readers > 0);
                    }
                    Err(e) => typed(e)?,
                }
            }

            #[test]
            fn a_semaphore_inspection_reply_decodes_or_is_a_typed_error(
                size in any::<u32>(),
                reply in prop_oneof![1 => value(), 4 => sem_reply()],
            ) {
                let pairs = match &reply {
                    Value::Array(items) => items.len().saturating_sub(2) / 2,
                    _ => 0,
                };
                match wire::semaphore::permits(reply).map(|permits| SemaphoreInfo::new(size, permits)) {
                    Ok(info) => {
                        prop_assert!(info.held as usize <= pairs);
                        prop_assert!(info.holders <= info.held);
                        prop_assert_eq!(info.next_expiry.is_some(), info.held > 0);
                        prop_assert_eq!(info.free, info.size.unwrap_or(size).saturating_sub(info.held));
                    }
                    Err(e) => typed(e)?,
                }
            }
        }
    }
}
