//! Fenced updates for data anywhere: the Redis twin of the SQL claim-then-write, and fenced
//! counters, on any connection (re-exported under [`fenced`](crate::fenced)).
//!
//! They keep the layout of [`fenced::set`](crate::fenced::set): a hash at `key` with the
//! fields `value` and `fence` (the greatest token that claimed or wrote it), so
//! [`fenced::get`](crate::fenced::get) reads them; a counter adds the fields `op` and
//! `result` (its last update, to recognise a resend). Each is one script call; the rule is
//! the same everywhere: a **lower** token than the stored fence is refused, an equal one
//! accepted.
//!
//! - [`claim`]: raise the key's fence to the token (refused if a greater one is there) and
//!   read the value, in one step; then [`write_claimed`] writes only while that claim stands
//!   (the fence is still exactly the token: no newer holder claimed the key in between). A
//!   stale holder that claimed before the newer one cannot write after it: the
//!   read-modify-write of data in another Redis, or code that has only a token.
//! - [`add`] and [`take`]: a counter changed only by a token not lower than its fence (which
//!   the change raises to the token); a take only while at least its floor is left. Sent
//!   once more after a connection failure or a timeout, and applied once: each call carries
//!   a random id that the counter keeps with its last result.
//!
//! What they do not promise: they are as durable as the Redis that keeps the key (a failover
//! that loses the last writes loses the fence with them, and a lower token may then be
//! accepted), and they trust the tokens they are given.
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient, mut other: redis::aio::MultiplexedConnection)
//! # -> Result<(), lock_core::LockError> {
//! use lock_core::fenced::{self, Claim, Counted, Fenced};
//!
//! let guard = client.lock("account:7").await?;
//! let token = guard.fencing_token();
//! // Data in another Redis: claim, read, write while the claim stands.
//! if let Claim::Claimed { value } = fenced::claim::<_, i64>(&mut other, "balance:7", token).await? {
//!     let next = value.unwrap_or(0) + 10;
//!     match fenced::write_claimed(&mut other, "balance:7", next, token).await? {
//!         Fenced::Written => {}
//!         Fenced::Refused { .. } => { /* a newer holder claimed it: we lost the lock */ }
//!     }
//! }
//! // A fenced counter: take one unit, never below 0, never with a stale token.
//! match fenced::take(&mut other, "stock:7", 1, 0, token).await? {
//!     Counted::Applied { value } => println!("{value} left"),
//!     Counted::NotEnough { .. } => println!("sold out"),
//!     Counted::Refused { .. } => println!("a newer holder moved on"),
//!     _ => {}
//! }
//! guard.unlock().await?;
//! # Ok(()) }
//! ```

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Script, ScriptInvocation, ToRedisArgs, Value};

use crate::error::LockError;
use crate::fence::{Fenced, MAX_TOKEN, check, once_more, send_again};

/// What [`claim`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim<V> {
    /// The key's fence is now the token; `value` is the key's value at the claim (None: no
    /// value yet).
    Claimed {
        /// The value, read in the same step as the claim.
        value: Option<V>,
    },
    /// A greater token (`stored`) claimed or wrote the key: a newer holder has it.
    Refused {
        /// The fence stored with the key.
        stored: u64,
    },
}

/// What a fenced counter update ([`add`], [`take`]) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Counted {
    /// Applied: the counter is now `value`, and its fence the token.
    Applied {
        /// The counter after the update.
        value: i64,
    },
    /// A [`take`] that would have left the counter below its floor: nothing changed. `left`
    /// is the counter.
    NotEnough {
        /// The counter's value.
        left: i64,
    },
    /// A greater token (`stored`) changed or claimed the counter: nothing changed.
    Refused {
        /// The fence stored with the counter.
        stored: u64,
    },
}

static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local stored = redis.call('HGET', KEYS[1], 'fence')
if stored and tonumber(stored) > tonumber(ARGV[1]) then
  return {0, stored}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
return {1, redis.call('HGET', KEYS[1], 'value')}
",
    )
});

static WRITE_CLAIMED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local stored = redis.call('HGET', KEYS[1], 'fence')
if stored and tonumber(stored) == tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'value', ARGV[1])
  return {1}
end
return {0, stored or '0'}
",
    )
});

/// ARGV: token, delta, floor ('' for none), the call's id, '1' for a repeat ('' otherwise).
/// A repeat that is not the counter's last update answers {3}: the first send may have been
/// applied and followed by another update, or never applied; which one cannot be known.
static COUNT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local fence, op, result = unpack(redis.call('HMGET', KEYS[1], 'fence', 'op', 'result'))
if op and op == ARGV[4] then
  return {1, result}
end
if ARGV[5] == '1' then
  return {3}
end
if fence and tonumber(fence) > tonumber(ARGV[1]) then
  return {0, fence}
end
local value = tonumber(redis.call('HGET', KEYS[1], 'value') or '0')
if not value then
  return redis.error_reply('ERR fenced counter: ' .. KEYS[1] .. ' does not hold an integer')
end
if ARGV[3] ~= '' and value + tonumber(ARGV[2]) < tonumber(ARGV[3]) then
  return {2, string.format('%.0f', value)}
end
local new = redis.call('HINCRBY', KEYS[1], 'value', ARGV[2])
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'op', ARGV[4], 'result', new)
return {1, string.format('%.0f', new)}
",
    )
});

/// Invokes `invocation`, and once more when the connection failed under it or its reply did
/// not come in time (every script here is safe to repeat: see `fence::send_again`).
async fn invoke<C: ConnectionLike + Send>(
    invocation: &ScriptInvocation<'_>,
    conn: &mut C,
) -> Result<Vec<Value>, LockError> {
    Ok(once_more!(true, invocation.invoke_async(conn).await)?)
}

fn parse<T: FromRedisValue>(value: Option<&Value>) -> Result<T, LockError> {
    let value = value.cloned().unwrap_or(Value::Nil);
    T::from_redis_value(value).map_err(|e| LockError::UnexpectedReply(e.to_string()))
}

fn amount(what: &'static str, n: u64) -> Result<(), LockError> {
    if n > MAX_TOKEN {
        return Err(LockError::InvalidOption {
            option: what,
            reason: format!("{n} is beyond 2^53, which Lua numbers cannot compare exactly"),
        });
    }
    Ok(())
}

/// Claims `key` for the holder of `token`: raises its fence to `token` and reads its value,
/// in one step, unless a greater token is there ([`Claim::Refused`]). Then write with
/// [`write_claimed`]. Safe to repeat: an equal token is accepted (the same holder again, or a
/// resend; tokens are unique per lock name, so two holders share one only if the lock's
/// counter was lost), where the SQL claim of the crate docs refuses it and is not safe to
/// resend.
///
/// Errors: a token above [`MAX_TOKEN`](crate::fenced::MAX_TOKEN) is
/// [`LockError::InvalidOption`]; a key of another type, a connection failure,
/// [`LockError::Redis`]; a value that is not a `V`, [`LockError::UnexpectedReply`].
pub async fn claim<C, V>(conn: &mut C, key: &str, token: u64) -> Result<Claim<V>, LockError>
where
    C: ConnectionLike + Send,
    V: FromRedisValue,
{
    check(token)?;
    let mut invocation = CLAIM.key(key);
    invocation.arg(token);
    let reply = invoke(&invocation, conn).await?;
    match parse::<i64>(reply.first())? {
        1 => Ok(Claim::Claimed {
            value: parse(reply.get(1))?,
        }),
        _ => Ok(Claim::Refused {
            stored: parse(reply.get(1))?,
        }),
    }
}

/// Writes `value` to `key` only while the claim of `token` stands: its fence is exactly
/// `token` (a [`claim`] or a write of this token was the last). Otherwise nothing is written
/// and [`Fenced::Refused`] says the fence (a greater one: a newer holder claimed the key; 0:
/// the key was never claimed, or is gone). Safe to repeat.
///
/// Errors: as [`claim`].
pub async fn write_claimed<C, V>(
    conn: &mut C,
    key: &str,
    value: V,
    token: u64,
) -> Result<Fenced, LockError>
where
    C: ConnectionLike + Send,
    V: ToRedisArgs + Send + Sync,
{
    check(token)?;
    let mut invocation = WRITE_CLAIMED.key(key);
    invocation.arg(value).arg(token);
    let reply = invoke(&invocation, conn).await?;
    match parse::<i64>(reply.first())? {
        1 => Ok(Fenced::Written),
        _ => Ok(Fenced::Refused {
            stored: parse(reply.get(1))?,
        }),
    }
}

async fn count<C: ConnectionLike + Send>(
    conn: &mut C,
    key: &str,
    token: u64,
    delta: i64,
    floor: Option<i64>,
) -> Result<Counted, LockError> {
    check(token)?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let send = |repeat: &'static str| {
        let mut invocation = COUNT.key(key);
        invocation.arg(token).arg(delta);
        match floor {
            Some(floor) => invocation.arg(floor),
            None => invocation.arg(""),
        };
        invocation.arg(&id).arg(repeat);
        invocation
    };
    // Sent once more (marked as a repeat) when the first reply was lost: the script then
    // recognises the first by its id, or says it cannot tell.
    let reply: Vec<Value> = match send("").invoke_async(conn).await {
        Err(e) if send_again(&e, true) => {
            tracing::debug!(error = %e, "a fenced counter update got no answer; sending it once more");
            send("1").invoke_async(conn).await?
        }
        reply => reply?,
    };
    match parse::<i64>(reply.first())? {
        1 => Ok(Counted::Applied {
            value: parse(reply.get(1))?,
        }),
        2 => Ok(Counted::NotEnough {
            left: parse(reply.get(1))?,
        }),
        3 => Err(LockError::OutcomeUnknown {
            what: format!("fenced counter `{key}`"),
        }),
        _ => Ok(Counted::Refused {
            stored: parse(reply.get(1))?,
        }),
    }
}

/// Adds `n` (negative: subtracts) to the fenced counter at `key` (a missing one counts from
/// 0) unless a greater token than `token` changed or claimed it ([`Counted::Refused`]); the
/// counter's fence becomes `token`. Sent once more after a connection failure or a timeout,
/// and applied once.
///
/// Errors: a token or `|n|` above 2^53 is [`LockError::InvalidOption`]; a key of another type
/// or a value that is not an integer, a connection failure, [`LockError::Redis`]; a repeat
/// that cannot tell whether the first send was applied (another update of the counter came
/// between them), [`LockError::OutcomeUnknown`].
pub async fn add<C>(conn: &mut C, key: &str, n: i64, token: u64) -> Result<Counted, LockError>
where
    C: ConnectionLike + Send,
{
    amount("n", n.unsigned_abs())?;
    count(conn, key, token, n, None).await
}

/// Takes `n` from the fenced counter at `key` only if at least `floor` is left after it (a
/// missing counter counts as 0: [`Counted::NotEnough`] otherwise) and no greater token than
/// `token` changed or claimed it ([`Counted::Refused`]); the counter's fence becomes `token`.
/// Sent once more after a connection failure or a timeout, and applied once.
///
/// Errors: as [`add`] ([`LockError::OutcomeUnknown`] included) (`n` and `|floor|` at most 2^53).
pub async fn take<C>(
    conn: &mut C,
    key: &str,
    n: u64,
    floor: i64,
    token: u64,
) -> Result<Counted, LockError>
where
    C: ConnectionLike + Send,
{
    amount("n", n)?;
    amount("floor", floor.unsigned_abs())?;
    let delta = -i64::try_from(n).unwrap_or(i64::MAX);
    count(conn, key, token, delta, Some(floor)).await
}
