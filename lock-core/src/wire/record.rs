//! The calls on a record (`P{N}:record`, see [`record`](crate::record)) in both dialects: a
//! put is one script (`record_put.lua`), or on a server without scripting a compare-and-set
//! (`SET … NX` / `SET … IFEQ`) after a `GET`. The stored format, `<token>:<bytes>`, is
//! written and read here.

use std::time::Duration;

use redis::{Cmd, Value};

use super::command::Command;
use super::convert::convert;
use super::script::{Call, Op};
use crate::error::LockError;
use crate::util::millis;

/// The value as stored: `<token>:<bytes>`.
pub(crate) fn encode(token: u64, value: &[u8]) -> Vec<u8> {
    let token = token.to_string();
    let mut stored = Vec::with_capacity(token.len() + 1 + value.len());
    stored.extend_from_slice(token.as_bytes());
    stored.push(b':');
    stored.extend_from_slice(value);
    stored
}

/// The token of a stored value (`<token>:<bytes>`) and where its colon is, if it is one.
pub(crate) fn stored_token(stored: &[u8]) -> Option<(u64, usize)> {
    let colon = stored.iter().take(21).position(|&b| b == b':')?;
    let token = std::str::from_utf8(&stored[..colon])
        .ok()
        .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|digits| digits.parse().ok())?;
    Some((token, colon))
}

/// The put of `stored` (written by `token`) at `key` with a time to live of `ttl`, as one
/// script: written unless a greater token wrote the record. Read by [`put_answer`].
pub(crate) fn put(key: &str, stored: &[u8], token: u64, ttl: Duration) -> Command {
    let mut call = Call::new(Op::RecordPut);
    call.key(key).arg(stored).arg(token).arg(millis(ttl));
    call.into()
}

/// A scripted put's reply: None written, or the greater token that refused it.
pub(crate) fn put_answer(reply: Value) -> Result<Option<u64>, LockError> {
    match convert::<i64>(reply)? {
        -1 => Ok(None),
        greater => u64::try_from(greater)
            .map(Some)
            .map_err(|_| LockError::UnexpectedReply(format!("record put answered {greater}"))),
    }
}

/// Reads the record at `key` (`GET`).
pub(crate) fn get(key: &str) -> Cmd {
    let mut get = redis::cmd("GET");
    get.arg(key);
    get
}

/// Writes `stored` at `key` with a time to live of `ttl` if `key` still holds `current`
/// (None: nothing). Answers `OK` written, nil not (something else came in between).
pub(crate) fn compare_and_set(
    key: &str,
    stored: &[u8],
    current: Option<&[u8]>,
    ttl: Duration,
) -> Cmd {
    let mut set = redis::cmd("SET");
    set.arg(key).arg(stored);
    match current {
        None => set.arg("NX"),
        Some(current) => set.arg("IFEQ").arg(current),
    };
    set.arg("PX").arg(millis(ttl));
    set
}
