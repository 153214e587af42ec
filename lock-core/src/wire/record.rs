//! The calls on a record (`P{N}:record`, see [`record`](crate::record)) in both dialects: a
//! put ([`Put`]) is one script (`record_put.lua`), or on a server without scripting a
//! compare-and-set (`SET … NX` / `SET … IFEQ`) after a `GET`, read again while other writers
//! come in between. The stored format, `<token>:<bytes>`, is written and read here.

use std::time::Duration;

use redis::{Cmd, Value};
use tokio::time::Instant;

use super::command::Command;
use super::convert::convert;
use super::protocol::{Dialect, Protocol};
use super::script::{Call, Op};
use crate::error::LockError;
use crate::util::millis;

/// How long the native compare-and-set goes on reading again while other writers come in
/// between (each time one did, another put was written): at least this, or the client's
/// response timeout if longer. A count would not do: `n` concurrent writers with growing
/// tokens can make the last one see `n - 1` changes.
const NATIVE_PATIENCE: Duration = Duration::from_secs(1);

/// How a put ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    /// The value was written.
    Written,
    /// Refused: the record holds a write of this greater token.
    Refused(u64),
}

/// What a put sends next: a call of either dialect, or a plain single-key command.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sending<'a> {
    Call(&'a Command),
    Plain(&'a Cmd),
}

/// A put on its way, in the dialect the client writes records in: what to send next
/// ([`Put::sending`]) and what each reply means ([`Put::read`]), until it is [`Stored`].
#[derive(Debug)]
pub(crate) struct Put {
    key: String,
    stored: Vec<u8>,
    token: u64,
    ttl: Duration,
    step: Step,
    /// How many compare-and-sets were sent (the native dialect).
    attempts: u32,
    patience: Duration,
    /// When the native dialect stops reading again.
    deadline: Instant,
}

#[derive(Debug)]
enum Step {
    /// The put as one script.
    Script(Command),
    /// Reading the record, before a compare-and-set.
    Get(Cmd),
    /// Writing it if it is still what was read.
    Set(Cmd),
}

impl Put {
    /// A put of `value` at `key` written by `token`, to live `ttl`, in the dialect `p`
    /// writes records in; `response_timeout` bounds how long a compare-and-set goes on
    /// reading again (see [`NATIVE_PATIENCE`]). [`LockError::Unsupported`] where the server
    /// has neither scripts nor `SET … IFEQ`.
    pub(crate) fn start(
        p: &Protocol,
        key: String,
        value: &[u8],
        token: u64,
        ttl: Duration,
        response_timeout: Duration,
    ) -> Result<Self, LockError> {
        let stored = encode(token, value);
        let step = match p.records() {
            Some(Dialect::Scripts) => Step::Script(put(&key, &stored, token, ttl)),
            Some(Dialect::Native) => Step::Get(get(&key)),
            None => {
                return Err(LockError::Unsupported {
                    feature: "records",
                    missing: "scripting (EVAL) or SET … IFEQ (Valkey 9.0)",
                    detail: None,
                });
            }
        };
        let patience = NATIVE_PATIENCE.max(response_timeout);
        Ok(Self {
            key,
            stored,
            token,
            ttl,
            step,
            attempts: 0,
            patience,
            deadline: Instant::now() + patience,
        })
    }

    /// What to send now.
    pub(crate) fn sending(&self) -> Sending<'_> {
        match &self.step {
            Step::Script(call) => Sending::Call(call),
            Step::Get(cmd) | Step::Set(cmd) => Sending::Plain(cmd),
        }
    }

    /// Reads the reply to what [`sending`](Self::sending) named: the put's end, or `None`
    /// when there is something more to send.
    pub(crate) fn read(&mut self, reply: Value) -> Result<Option<Stored>, LockError> {
        match &self.step {
            Step::Script(_) => Ok(Some(match put_answer(reply)? {
                None => Stored::Written,
                Some(greater) => Stored::Refused(greater),
            })),
            Step::Get(_) => {
                let current: Option<Vec<u8>> = convert(reply)?;
                if let Some(current) = &current {
                    let (written, _) =
                        stored_token(current).ok_or_else(|| not_a_record(&self.key))?;
                    if written > self.token {
                        return Ok(Some(Stored::Refused(written)));
                    }
                }
                let set = compare_and_set(&self.key, &self.stored, current.as_deref(), self.ttl);
                self.attempts += 1;
                self.step = Step::Set(set);
                Ok(None)
            }
            Step::Set(_) if reply != Value::Nil => Ok(Some(Stored::Written)),
            // Another writer came in between: read again, while there is time.
            Step::Set(_) if Instant::now() < self.deadline => {
                self.step = Step::Get(get(&self.key));
                Ok(None)
            }
            Step::Set(_) => Err(LockError::UnexpectedReply(format!(
                "{} changed {} times in {:?} while a record was being written",
                self.key, self.attempts, self.patience
            ))),
        }
    }
}

/// A stored value read back at `key`: its token and its bytes;
/// [`LockError::UnexpectedReply`] if it is not one.
pub(crate) fn decode(key: &str, mut stored: Vec<u8>) -> Result<(u64, Vec<u8>), LockError> {
    let (token, colon) = stored_token(&stored).ok_or_else(|| not_a_record(key))?;
    let value = stored.split_off(colon + 1);
    Ok((token, value))
}

fn not_a_record(key: &str) -> LockError {
    LockError::UnexpectedReply(format!("{key} does not hold a record"))
}

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
fn stored_token(stored: &[u8]) -> Option<(u64, usize)> {
    let colon = stored.iter().take(21).position(|&b| b == b':')?;
    let token = std::str::from_utf8(&stored[..colon])
        .ok()
        .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|digits| digits.parse().ok())?;
    Some((token, colon))
}

/// The put of `stored` (written by `token`) at `key` with a time to live of `ttl`, as one
/// script: written unless a greater token wrote the record. Read by [`put_answer`].
fn put(key: &str, stored: &[u8], token: u64, ttl: Duration) -> Command {
    let mut call = Call::new(Op::RecordPut);
    call.key(key).arg(stored).arg(token).arg(millis(ttl));
    call.into()
}

/// A scripted put's reply: None written, or the greater token that refused it.
fn put_answer(reply: Value) -> Result<Option<u64>, LockError> {
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
fn compare_and_set(key: &str, stored: &[u8], current: Option<&[u8]>, ttl: Duration) -> Cmd {
    let mut set = redis::cmd("SET");
    set.arg(key).arg(stored);
    match current {
        None => set.arg("NX"),
        Some(current) => set.arg("IFEQ").arg(current),
    };
    set.arg("PX").arg(millis(ttl));
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::MutexProtocol;

    fn bulk(bytes: &[u8]) -> Value {
        Value::BulkString(bytes.to_vec())
    }

    fn start(p: &Protocol, token: u64) -> Put {
        let ttl = Duration::from_secs(60);
        Put::start(
            p,
            "lock:{a}:record".into(),
            b"v",
            token,
            ttl,
            Duration::ZERO,
        )
        .unwrap()
    }

    /// The arguments of a plain command, as text.
    fn args(sending: Sending<'_>) -> Vec<String> {
        let Sending::Plain(cmd) = sending else {
            panic!("not a plain command: {sending:?}");
        };
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<not an argument>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn a_scripted_put_is_one_call_read_into_written_or_refused() {
        let p = Protocol::testing(true, true, MutexProtocol::Native);
        let mut put = start(&p, 5);
        assert!(matches!(put.sending(), Sending::Call(Command::Script(_))));
        assert_eq!(put.read(Value::Int(-1)).unwrap(), Some(Stored::Written));
        let mut put = start(&p, 5);
        assert_eq!(put.read(Value::Int(9)).unwrap(), Some(Stored::Refused(9)));
        assert!(start(&p, 5).read(Value::Int(-7)).is_err());
    }

    #[test]
    fn a_native_put_reads_then_compares_and_sets_and_reads_again_when_overtaken() {
        let p = Protocol::testing(false, true, MutexProtocol::Native);
        let mut put = start(&p, 5);
        assert_eq!(args(put.sending()), ["GET", "lock:{a}:record"]);
        // Nothing there: written only if there is still nothing.
        assert_eq!(put.read(Value::Nil).unwrap(), None);
        assert_eq!(
            args(put.sending()),
            ["SET", "lock:{a}:record", "5:v", "NX", "PX", "60000"]
        );
        // Another writer came in between: read again.
        assert_eq!(put.read(Value::Nil).unwrap(), None);
        assert_eq!(args(put.sending()), ["GET", "lock:{a}:record"]);
        // A smaller token's write: replaced if it is still there.
        assert_eq!(put.read(bulk(b"4:old")).unwrap(), None);
        assert_eq!(
            args(put.sending()),
            [
                "SET",
                "lock:{a}:record",
                "5:v",
                "IFEQ",
                "4:old",
                "PX",
                "60000"
            ]
        );
        assert_eq!(put.read(Value::Okay).unwrap(), Some(Stored::Written));
        // A greater token's write refuses the put; a value no put wrote is an error.
        let mut put = start(&p, 5);
        assert_eq!(put.read(bulk(b"6:new")).unwrap(), Some(Stored::Refused(6)));
        assert!(start(&p, 5).read(bulk(b"junk")).is_err());
    }

    #[test]
    fn without_scripts_or_compare_and_set_a_put_is_unsupported() {
        let p = Protocol::testing(false, false, MutexProtocol::Scripted);
        let put = Put::start(
            &p,
            "k".into(),
            b"v",
            1,
            Duration::from_secs(1),
            Duration::ZERO,
        );
        assert!(matches!(
            put,
            Err(LockError::Unsupported {
                feature: "records",
                ..
            })
        ));
    }
}
