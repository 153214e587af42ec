//! The replies the in-memory server gives, as `redis::Value`s: integers, bulk strings, nil,
//! and the error of a command that fails (`Fail`, the line Redis would answer).

use redis::Value;

use super::keyspace::WrongType;

/// A command that fails: the error line Redis would answer (`WRONGTYPE …`, `ERR …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fail(pub(super) String);

pub(super) type Res<T> = Result<T, Fail>;

impl Fail {
    pub(super) fn new(line: impl Into<String>) -> Self {
        Fail(line.into())
    }

    /// The error as a reply value.
    pub(super) fn value(&self) -> Value {
        error_value(&self.0)
    }
}

impl From<WrongType> for Fail {
    fn from(_: WrongType) -> Self {
        Fail::new("WRONGTYPE Operation against a key holding the wrong kind of value")
    }
}

/// An error reply (`-line`), as a value: its code is the line's first word.
pub(super) fn error_value(line: &str) -> Value {
    let line: String = line.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap_or(Value::Nil)
}

pub(super) fn int(n: i64) -> Value {
    Value::Int(n)
}

/// A count as an integer reply.
pub(super) fn count(n: usize) -> Value {
    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

pub(super) fn bulk(bytes: impl Into<Vec<u8>>) -> Value {
    Value::BulkString(bytes.into())
}

/// A value that may be missing (a nil reply).
pub(super) fn bulk_or_nil(bytes: Option<impl Into<Vec<u8>>>) -> Value {
    bytes.map_or(Value::Nil, bulk)
}

/// `ERR wrong number of arguments for '<command>' command`.
pub(super) fn wrong_arity(command: &str) -> Fail {
    Fail(format!(
        "ERR wrong number of arguments for '{}' command",
        command.to_ascii_lowercase()
    ))
}

pub(super) fn syntax() -> Fail {
    Fail::new("ERR syntax error")
}

pub(super) fn not_integer() -> Fail {
    Fail::new("ERR value is not an integer or out of range")
}

/// An argument as an integer (`ERR value is not an integer` otherwise).
pub(super) fn integer(arg: &[u8]) -> Res<i64> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(not_integer)
}

/// An argument as text (keys, fields and members are kept as text).
pub(super) fn text(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).into_owned()
}
