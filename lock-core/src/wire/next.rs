//! [`Next`]: what follows an acquisition's reply. Most acquisitions are one call, and their
//! reply is their answer. A native one may need one more call: a multi-lock that took only
//! some of its names gives them back before its answer is given, and a free lock string of
//! the scripted protocol in the name's place (kept by a client of that protocol for its
//! fencing counter) is deleted, if it is still the same, before the acquisition is sent once
//! more; found again after that, it is deleted once more and the name counts as busy for
//! now. The engine sends what [`Next`] names and reads nothing else.

use std::time::Duration;

use redis::Value;

use super::answer::Answer;
use super::command::{Command, script_answer};
use super::native::Found;
use crate::error::LockError;

/// What the engine does after an acquisition's reply.
#[derive(Debug)]
pub(crate) enum Next {
    /// Nothing more: this is the answer.
    Done(Answer),
    /// Send the command (its reply is not read), then give the answer: what a multi-lock's
    /// partial acquisition took, given back; or a scripted lock string still in the way,
    /// deleted, and the name busy for now.
    SendThenDone(Command, Answer),
    /// Send the command (its reply is not read), then the acquisition once more: a scripted
    /// lock string in the way, deleted if it is unchanged.
    ClearThenRetry(Command),
}

/// How many times a native acquisition is sent again after clearing a scripted lock string
/// out of its way.
const RETRIES: u32 = 1;

impl Command {
    /// Reads the reply to an acquisition (or a re-entry) about `holds` holds, sent again
    /// `retries` times so far after a [`Next::ClearThenRetry`].
    pub(crate) fn next(&self, reply: Value, holds: usize, retries: u32) -> Result<Next, LockError> {
        let call = match self {
            Command::Script(call) => return script_answer(call.op(), reply, holds).map(Next::Done),
            Command::Native(call) => call,
        };
        Ok(match call.found(reply)? {
            Found::Answer(answer) => Next::Done(answer),
            Found::Partial { answer, give_back } if give_back.is_empty() => Next::Done(answer),
            Found::Partial { answer, give_back } => Next::SendThenDone(give_back.into(), answer),
            Found::Scripted(clear) if retries < RETRIES => Next::ClearThenRetry(clear.into()),
            Found::Scripted(clear) => {
                let busy = Answer::Busy {
                    index: 0,
                    retry_in: Some(Duration::ZERO),
                };
                Next::SendThenDone(clear.into(), busy)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::answer::Tokens;
    use crate::wire::native;

    fn acquire() -> Command {
        native::tests::acquire().into()
    }

    /// The reply of a native acquisition's transaction that found `old` in the name's place.
    fn exec(old: Value) -> Value {
        Value::Array(vec![Value::Nil, Value::Int(42), old, Value::Int(3_600_000)])
    }

    #[test]
    fn a_scripted_lock_string_in_the_way_is_cleared_once_then_the_name_is_busy() {
        let call = acquire();
        let scripted = || Value::BulkString(b"|0|1795000000000000|1795000000000000|".to_vec());
        // Found first: cleared, then the acquisition once more.
        let Ok(Next::ClearThenRetry(Command::Native(_))) = call.next(exec(scripted()), 1, 0) else {
            panic!("not a clear and a retry");
        };
        // Found again: cleared once more, and busy for now (no wait: the name is free).
        match call.next(exec(scripted()), 1, 1) {
            Ok(Next::SendThenDone(Command::Native(_), busy)) => assert_eq!(
                busy,
                Answer::Busy {
                    index: 0,
                    retry_in: Some(Duration::ZERO)
                }
            ),
            other => panic!("not a clear and busy: {other:?}"),
        }
        // Nothing in the way: the answer, whatever the retries.
        for retries in [0, 1] {
            match call.next(exec(Value::Nil), 1, retries) {
                Ok(Next::Done(answer)) => assert_eq!(answer, Answer::Granted(Tokens::Each(42))),
                other => panic!("not granted: {other:?}"),
            }
        }
        assert!(call.next(Value::Int(1), 1, 0).is_err());
    }

    #[test]
    fn a_script_call_is_answered_by_its_reply_alone() {
        let mut call = crate::wire::script::Call::new(crate::wire::script::Op::Acquire);
        call.key("lock:{a}");
        let call = Command::from(call);
        match call.next(Value::Int(7), 1, 0) {
            Ok(Next::Done(answer)) => assert!(answer.is_granted(), "{answer:?}"),
            other => panic!("not an answer: {other:?}"),
        }
    }
}
