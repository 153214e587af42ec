//! Fenced records next to a lock: a small value kept in Redis under a lock's name, written
//! only by a holder whose fencing token is not older than the one that wrote it last.
//!
//! The lock says who may work on a name *now*; a record says what that work came to, for
//! whoever comes next (lock-tower's idempotency layer keeps the response of a request there,
//! so a retry is answered with it instead of running again). [`LockClient::records`] gives
//! the client's [`Records`]; [`Records::put`] writes, [`Records::get`] reads.
//!
//! # Layout
//!
//! The record of lock name `N` under the client's key prefix `P` is the string key
//! **`P{N}:record`** ([`RECORD_SUFFIX`](crate::layout::RECORD_SUFFIX)): it shares the lock's hash tag `{N}`, so on a Redis Cluster it
//! lives in the lock's slot. Its value is the token that wrote it in decimal, a `:`, then the
//! value's bytes as given (`1712345678901234:...`); its time to live is the `ttl` of the
//! [`put`](Records::put) that wrote it. `lockctl status N` shows a name's record (its size and
//! token); `list` and `watch` do not (records are not locks). Read one with `redis-cli GET
//! 'P{N}:record'`, or delete it with `DEL` to make the next request run again.
//!
//! # The rule
//!
//! A put is **refused** ([`Fenced::Refused`], with the stored token) when the key holds a record
//! written with a **greater** token; otherwise it replaces whatever is there (nothing, an
//! expired record, a record of an older or *equal* token: the same holder writing again, e.g.
//! a repeat after a lost reply) and sets the time to live. The check and the write are one
//! atomic step on the server:
//!
//! * where the server runs Lua (every Redis; Valkey with its Lua module), one call of this
//!   crate's Lua code (`GET`, compare, `SET … PX`), through its function library like every
//!   lock operation (`FCALL`, or `EVALSHA` where functions cannot be loaded);
//! * where it does not (Valkey 9.0 or later without Lua), a compare-and-set with the server's
//!   own commands: `GET`, compare, then `SET … NX PX` for a missing key or `SET … IFEQ <what
//!   was read> PX`, read again and retried when another writer came in between (for up to
//!   1 s, or the response timeout if longer);
//! * elsewhere: [`LockError::Unsupported`].
//!
//! A record is not a lock and holding the lock is not checked: pass the token of the guard
//! you hold ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token)). Then a holder that
//! stalled past its lease cannot overwrite what a newer holder recorded: the newer token is
//! greater. What it does not cover: a stale holder that writes *before* the newer holder does
//! is accepted, and then replaced by the newer holder's write. Tokens are at most
//! [`MAX_TOKEN`] (2<sup>53</sup>), as for [`fenced`](crate::fenced).
//!
//! An ACL user needs what the locks need (`+fcall +function|load`, or `+evalsha +script|load`)
//! and `+get` on the lock keys' pattern for records (`+get +set` where the native
//! compare-and-set is used).
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::fenced::Fenced;
//!
//! let records = client.records();
//! let guard = client.lock("invoice:42").await?;
//! if records.get("invoice:42").await?.is_none() {
//!     let token = guard.fencing_token();
//!     // ... do the work once ...
//!     match records.put("invoice:42", b"sent", token, Duration::from_secs(86_400)).await? {
//!         Fenced::Written => {}
//!         Fenced::Refused { stored } => eprintln!("a newer holder ({stored}) recorded first"),
//!     }
//! }
//! guard.unlock().await?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::engine::Engine;
use crate::error::LockError;
use crate::fenced::{Fenced, MAX_TOKEN};
use crate::util::{MAX_LEASE, check_range};
use crate::wire::record::Stored;
use crate::wire::{self, convert};

/// What follows `P{N}` in a record's key: `:record`.
#[deprecated(
    note = "use `lock_core::layout::RECORD_SUFFIX`; `layout::parse_key` reads a record's key"
)]
pub const SUFFIX: &str = crate::kind::RECORD;

/// The largest value a record holds: 16 MiB.
pub const MAX_VALUE_LEN: usize = 16 * 1024 * 1024;

/// The shortest time to live of a record: 1 ms.
pub const MIN_TTL: Duration = Duration::from_millis(1);

/// The longest time to live of a record: 30 days.
pub const MAX_TTL: Duration = MAX_LEASE;

/// The records of one [`LockClient`], under its key prefix: made by
/// [`LockClient::records`]. Cheap to clone. See the [module docs](self).
#[derive(Clone)]
pub struct Records {
    engine: Arc<Engine>,
}

/// A record as [`Records::get`] read it: its value and the token that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    token: u64,
    value: Vec<u8>,
}

impl StoredRecord {
    /// The fencing token of the put that wrote it.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The value, as given to [`Records::put`].
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The value, owned.
    pub fn into_value(self) -> Vec<u8> {
        self.value
    }
}

impl LockClient {
    /// Fenced records next to this client's locks, under its key prefix (see
    /// [`record`](crate::record)).
    pub fn records(&self) -> Records {
        Records {
            engine: self.engine().clone(),
        }
    }
}

impl Records {
    /// The Redis key of the record of lock name `name`: `P{name}:record`.
    /// [`LockError::InvalidName`] if `name` is not a valid lock name.
    pub fn key(&self, name: &str) -> Result<String, LockError> {
        Ok(self.engine.keys(name)?.record())
    }

    /// The record of `name`, if there is one (one `GET`). A key that holds something else is
    /// [`LockError::UnexpectedReply`]; Redis's errors are as for a lock's
    /// ([`LockError::Unavailable`], [`LockError::NoPermission`], ...).
    pub async fn get(&self, name: &str) -> Result<Option<StoredRecord>, LockError> {
        let key = self.key(name)?;
        let get = wire::record::get(&key);
        let value: Option<Vec<u8>> = convert(self.engine.command(&get).await?)?;
        value.map(|stored| decode(&key, stored)).transpose()
    }

    /// Writes `value` as the record of `name` for `ttl`, fenced by `token`: refused when the
    /// record holds a write of a greater token (see [the rule](self#the-rule)).
    ///
    /// Checked before anything is sent, as [`LockError::InvalidOption`]: a value over
    /// [`MAX_VALUE_LEN`], a token over [`MAX_TOKEN`], a `ttl` outside [`MIN_TTL`]..=[`MAX_TTL`];
    /// an invalid name is [`LockError::InvalidName`]. A server with neither Lua nor `SET …
    /// IFEQ` is [`LockError::Unsupported`]. Safe to repeat: a repeat writes the same value
    /// with the same token.
    pub async fn put(
        &self,
        name: &str,
        value: &[u8],
        token: u64,
        ttl: Duration,
    ) -> Result<Fenced, LockError> {
        check(value.len(), token, ttl)?;
        let put = wire::record::Put::start(
            self.engine.protocol(),
            self.key(name)?,
            value,
            token,
            ttl,
            self.engine.config().response_timeout,
        )?;
        Ok(match self.engine.put_record(put).await? {
            Stored::Written => Fenced::Written,
            Stored::Refused(stored) => Fenced::Refused { stored },
        })
    }
}

impl fmt::Debug for Records {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Records")
            .field("prefix", &self.engine.config().prefix)
            .finish()
    }
}

/// Checks a put's size, token and time to live.
fn check(len: usize, token: u64, ttl: Duration) -> Result<(), LockError> {
    if len > MAX_VALUE_LEN {
        return Err(LockError::InvalidOption {
            option: "value",
            reason: format!("{len} bytes is more than {MAX_VALUE_LEN}"),
        });
    }
    if token > MAX_TOKEN {
        return Err(LockError::InvalidOption {
            option: "token",
            reason: format!("{token} is above 2^53, which Lua numbers cannot compare exactly"),
        });
    }
    check_range("ttl", ttl, MIN_TTL, MAX_TTL)
}

/// A stored value read back; [`LockError::UnexpectedReply`] if it is not one.
fn decode(key: &str, stored: Vec<u8>) -> Result<StoredRecord, LockError> {
    let (token, value) = wire::record::decode(key, stored)?;
    Ok(StoredRecord { token, value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::record::encode;

    #[test]
    fn a_value_round_trips_with_its_token() {
        for (token, value) in [(0, &b""[..]), (7, b"a:b"), (MAX_TOKEN, b"\0\xff:")] {
            let read = decode("k", encode(token, value)).unwrap();
            assert_eq!((read.token(), read.value()), (token, value));
        }
    }

    #[test]
    fn what_no_put_wrote_is_refused_not_misread() {
        for bad in [
            &b""[..],
            b":x",
            b"12",
            b"-1:x",
            b"1a:x",
            b"123456789012345678901234:x",
        ] {
            assert!(
                matches!(
                    decode("k", bad.to_vec()),
                    Err(LockError::UnexpectedReply(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn puts_are_checked_before_anything_is_sent() {
        assert!(check(MAX_VALUE_LEN, MAX_TOKEN, MIN_TTL).is_ok());
        assert!(check(0, 0, MAX_TTL).is_ok());
        for (len, token, ttl, option) in [
            (MAX_VALUE_LEN + 1, 1, MIN_TTL, "value"),
            (0, MAX_TOKEN + 1, MIN_TTL, "token"),
            (0, 1, Duration::ZERO, "ttl"),
            (0, 1, MAX_TTL + MIN_TTL, "ttl"),
        ] {
            match check(len, token, ttl) {
                Err(LockError::InvalidOption { option: o, .. }) => assert_eq!(o, option),
                other => panic!("{option}: {other:?}"),
            }
        }
    }
}
