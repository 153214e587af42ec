//! Fenced writes at the resource, in Redis: a value stored with the fencing token of the
//! holder that wrote it, and a write that is refused when it carries an older token.
//!
//! A lock's [fencing token](crate::LockGuard::fencing_token) only protects what checks it. A
//! holder that stalled past its lease (a GC pause, a frozen VM) wakes up still believing it
//! holds the lock and writes; a resource that remembers the highest token it accepted refuses
//! that write, because the next holder's token is greater. [`set`] is that check for a value
//! kept in Redis (on any connection: the lock client's own,
//! [`LockClient::connection`](crate::LockClient::connection), which heals after a restart and
//! runs on the in-memory backend, or another server's); for SQL, see the crate docs' section
//! *Fencing at the resource*. Both [`set`] and [`get`] are safe to repeat and send once more
//! when their connection broke under them (not after a timeout).
//!
//! The value lives in a hash at `key` with two fields, `value` and `fence`; [`get`] reads
//! both. The rule: a write whose token is **lower** than the stored fence is refused; an equal
//! token is accepted (the same holder writing again), as is any write to a missing key. Tokens
//! are at most 2<sup>53</sup> (about 9·10<sup>15</sup>; this crate's are about 1.8·10<sup>15</sup>),
//! which Lua numbers hold exactly; a larger one is [`LockError::InvalidOption`].
//!
//! `set` fits a value written whole. It does **not** protect a read-modify-write (a stale
//! holder that read before the newer one and writes first is accepted, and so is the newer
//! one's write after it): for that, [`claim`] and [`write_claimed`] (data anywhere), the
//! fenced counters [`add`] and [`take`], or a guarded update ([`crate::update`]) for keys in
//! the lock's own Redis.
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient) -> Result<(), Box<dyn std::error::Error>> {
//! use lock_core::fenced::{self, Fenced};
//!
//! // The client's own connections: healed after a restart or a failover, and served by the
//! // in-memory server on `LockClient::in_memory()`. Any other redis connection works too.
//! let mut conn = client.connection();
//! let guard = client.lock("report:daily").await?;
//! match fenced::set(&mut conn, "report:daily:result", "42 rows", guard.fencing_token()).await? {
//!     Fenced::Written => {}
//!     Fenced::Refused { stored } => {
//!         // A newer holder (token `stored`) wrote meanwhile: ours lost the lock.
//!         # drop(stored);
//!     }
//! }
//! guard.unlock().await?;
//! # Ok(()) }
//! ```

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Script, ToRedisArgs, Value};

use crate::error::LockError;
pub use crate::fence::{Fenced, MAX_TOKEN};
use crate::fence::{check, once_more};

static SET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local stored = redis.call('HGET', KEYS[1], 'fence')
if stored and tonumber(stored) > tonumber(ARGV[2]) then
  return stored
end
redis.call('HSET', KEYS[1], 'value', ARGV[1], 'fence', ARGV[2])
return 0
",
    )
});

/// Writes `value` to `key` with the fencing token `token`, unless `key` holds a value written
/// with a greater token: then nothing is written and [`Fenced::Refused`] says which token
/// holds it. An equal token is accepted (see the module docs).
///
/// Errors: a token above [`MAX_TOKEN`] is [`LockError::InvalidOption`]; a key of another
/// type, or any failure of the connection, is [`LockError::Redis`].
pub async fn set<C, V>(conn: &mut C, key: &str, value: V, token: u64) -> Result<Fenced, LockError>
where
    C: ConnectionLike + Send,
    V: ToRedisArgs + Send + Sync,
{
    check(token)?;
    let mut invocation = SET.key(key);
    invocation.arg(value).arg(token);
    let reply: Value = once_more!(false, invocation.invoke_async(conn).await)?;
    match reply {
        Value::Int(0) => Ok(Fenced::Written),
        other => {
            let stored: u64 = FromRedisValue::from_redis_value(other)
                .map_err(|e| LockError::UnexpectedReply(e.to_string()))?;
            Ok(Fenced::Refused { stored })
        }
    }
}

/// The value at `key` and the token it was written with; `None` for a missing key.
///
/// Errors: a key of another type, or a hash without both fields, is an error
/// ([`LockError::Redis`] or [`LockError::UnexpectedReply`]).
pub async fn get<C, V>(conn: &mut C, key: &str) -> Result<Option<(V, u64)>, LockError>
where
    C: ConnectionLike + Send,
    V: FromRedisValue,
{
    let mut hmget = redis::cmd("HMGET");
    hmget.arg(key).arg("value").arg("fence");
    let (value, fence): (Option<Value>, Option<u64>) =
        once_more!(false, hmget.query_async(conn).await)?;
    match (value, fence) {
        (None, None) => Ok(None),
        (Some(value), Some(fence)) => {
            let value = V::from_redis_value(value)
                .map_err(|e| LockError::UnexpectedReply(e.to_string()))?;
            Ok(Some((value, fence)))
        }
        _ => Err(LockError::UnexpectedReply(format!(
            "{key} is not a fenced value (a hash with `value` and `fence`)"
        ))),
    }
}

// Claims, writes while a claim stands, and fenced counters: see `fenced_update.rs`.
pub use crate::fenced_update::{Claim, Counted, add, claim, take, write_claimed};
