//! What every operation of the Lua code needs when it runs in Rust instead: its `KEYS` and
//! `ARGV` (1-based, as in Lua), the error of a call that fails (a `redis.call` that raises, a
//! `redis.error_reply` returned), and the reply values, and the dispatch from an [`Op`] to
//! its Rust twin.

use redis::Value;

use super::keyspace::WrongType;
use super::server::Ctx;
use super::{fair, mutex, record, rwlock, semaphore};
use crate::wire::script::{Call, Op};

/// A call that fails: the error line Redis would answer (`WRONGTYPE …`, `ERR …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fail(pub(super) String);

pub(super) type Res<T> = Result<T, Fail>;

impl From<WrongType> for Fail {
    fn from(_: WrongType) -> Self {
        Fail("WRONGTYPE Operation against a key holding the wrong kind of value".to_owned())
    }
}

/// An error reply (`-line`), as a value.
pub(super) fn error_value(line: &str) -> Value {
    let line: String = line.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap_or(Value::Nil)
}

/// The prelude's `foreign()`: the error for a key whose value lock-core did not write.
pub(super) fn foreign() -> Value {
    error_value("WRONGTYPE the lock key holds a value lock-core did not write")
}

/// Whether `value` is an error reply (a Lua table with `err`).
pub(super) fn is_error(value: &Value) -> bool {
    matches!(value, Value::ServerError(_))
}

pub(super) fn int(n: i64) -> Value {
    Value::Int(n)
}

pub(super) fn bulk(bytes: impl Into<Vec<u8>>) -> Value {
    Value::BulkString(bytes.into())
}

/// A value that may be missing (Lua's `false`: a nil reply).
pub(super) fn bulk_or_nil(bytes: Option<impl Into<Vec<u8>>>) -> Value {
    bytes.map_or(Value::Nil, bulk)
}

/// A call's `KEYS` and `ARGV`.
pub(super) struct Args<'a> {
    keys: Vec<String>,
    argv: Vec<&'a [u8]>,
}

impl<'a> Args<'a> {
    pub(super) fn of(call: &'a Call) -> Self {
        Self {
            keys: call
                .keys()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect(),
            argv: call.args().collect(),
        }
    }

    pub(super) fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// `KEYS[i]`.
    pub(super) fn key(&self, i: usize) -> Res<&str> {
        i.checked_sub(1)
            .and_then(|i| self.keys.get(i))
            .map(String::as_str)
            .ok_or_else(|| Fail(format!("ERR the call has no KEYS[{i}]")))
    }

    /// `ARGV[i]`, as bytes.
    pub(super) fn raw(&self, i: usize) -> Res<&'a [u8]> {
        i.checked_sub(1)
            .and_then(|i| self.argv.get(i))
            .copied()
            .ok_or_else(|| Fail(format!("ERR the call has no ARGV[{i}]")))
    }

    /// `ARGV[i]`, as text.
    pub(super) fn arg(&self, i: usize) -> Res<&'a str> {
        std::str::from_utf8(self.raw(i)?).map_err(|_| Fail(format!("ERR ARGV[{i}] is not text")))
    }

    /// `tonumber(ARGV[i])`, which must be a whole number.
    pub(super) fn num(&self, i: usize) -> Res<i64> {
        number(self.arg(i)?)
    }
}

/// `tonumber(text)` for a whole number; anything else fails the call as Lua's arithmetic on
/// nil would.
pub(super) fn number(text: &str) -> Res<i64> {
    text.parse()
        .map_err(|_| Fail(format!("ERR {text:?} is not a whole number")))
}

/// A whole number as a score (`string.format('%.0f', n)` read back by `ZADD`).
pub(super) fn score(n: i64) -> f64 {
    n as f64
}

/// A score as `ZSCORE` and `ZRANGE … WITHSCORES` write it (whole numbers without decimals).
pub(super) fn score_text(score: f64) -> String {
    if score.fract() == 0.0 && score.abs() < 9.0e15 {
        format!("{score:.0}")
    } else {
        format!("{score}")
    }
}

/// Runs `call` as its Lua operation would, against the server's keyspace. The reply is the
/// script's; an error is an error value.
pub(super) fn run(ctx: &mut Ctx<'_>, call: &Call) -> Value {
    let a = Args::of(call);
    let reply = match call.op() {
        Op::Acquire => mutex::acquire(ctx, &a),
        Op::Release => mutex::release(ctx, &a),
        Op::ReleaseKeep => mutex::release_keep(ctx, &a),
        Op::Batch => mutex::batch(ctx, &a),
        Op::Renew => mutex::renew(ctx, &a),
        Op::ForceUnlock => mutex::force_unlock(ctx, &a),
        Op::Inspect => mutex::inspect(ctx, &a),
        Op::MultiAcquire => mutex::multi_acquire(ctx, &a),
        Op::FairAcquire => fair::acquire(ctx, &a),
        Op::FairRelease => fair::release(ctx, &a),
        Op::FairLeave => fair::leave(ctx, &a),
        Op::FairInspect => fair::inspect(ctx, &a),
        Op::FairForceUnlock => fair::force_unlock(ctx, &a),
        Op::RwWrite => rwlock::write(ctx, &a),
        Op::RwRead => rwlock::read(ctx, &a),
        Op::RwReadRelease => rwlock::read_release(ctx, &a),
        Op::RwReadRenew => rwlock::read_renew(ctx, &a),
        Op::RwUnmark => rwlock::unmark(ctx, &a),
        Op::RwInspect => rwlock::inspect(ctx, &a),
        Op::RwForceUnlock => rwlock::force_unlock(ctx, &a),
        Op::SemAcquire => semaphore::acquire(ctx, &a),
        Op::SemRelease => semaphore::release(ctx, &a),
        Op::SemRenew => semaphore::renew(ctx, &a),
        Op::SemInspect => semaphore::inspect(ctx, &a),
        Op::SemForceUnlock => semaphore::force_unlock(ctx, &a),
        Op::RecordPut => record::put(ctx, &a),
    };
    reply.unwrap_or_else(|Fail(line)| error_value(&line))
}
