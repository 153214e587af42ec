//! A batch: requests of one dialect that queued behind calls in flight, sent as one
//! [`Command`] (the scripts' `batch` call, or one native pipeline), and its reply split into
//! one reply per request. The engine's batcher decides when; this file speaks each dialect.

use redis::Value;

use super::command::Command;
use super::{native, script};
use crate::error::LockError;

impl Command {
    /// The one call that does every one of `commands` (all of one dialect), each answered on
    /// its own; `None` if one of them does not batch, they are of both dialects, or there are
    /// none.
    pub(crate) fn batch<'a>(commands: impl IntoIterator<Item = &'a Command>) -> Option<Command> {
        let commands: Vec<&Command> = commands.into_iter().collect();
        match commands.first() {
            Some(Command::Script(_)) => {
                script::Call::batch(&all(&commands, script_call)?).map(Command::Script)
            }
            Some(Command::Native(_)) => {
                native::Call::batch(&all(&commands, native_call)?).map(Command::Native)
            }
            None => None,
        }
    }

    /// A [`batch`](Self::batch)'s reply, split into one per request (`expected` of them), in
    /// the order the requests were given.
    pub(crate) fn split(
        &self,
        value: Value,
        expected: usize,
    ) -> Result<Vec<Result<Value, LockError>>, LockError> {
        match self {
            Command::Script(_) => answers(value, expected),
            Command::Native(call) => call.split(value),
        }
    }
}

fn script_call(command: &Command) -> Option<&script::Call> {
    match command {
        Command::Script(call) => Some(call),
        Command::Native(_) => None,
    }
}

fn native_call(command: &Command) -> Option<&native::Call> {
    match command {
        Command::Native(call) => Some(call),
        Command::Script(_) => None,
    }
}

/// Each command's call of one dialect (`pick`), or `None` if one is of the other.
fn all<'a, T>(
    commands: &[&'a Command],
    pick: impl Fn(&'a Command) -> Option<&'a T>,
) -> Option<Vec<&'a T>> {
    commands.iter().map(|c| pick(c)).collect()
}

/// Splits a scripted batch's reply into one answer per request: nil is the error a single
/// call gets for a key holding a value the library did not write.
fn answers(value: Value, expected: usize) -> Result<Vec<Result<Value, LockError>>, LockError> {
    let Value::Array(values) = value else {
        return Err(LockError::UnexpectedReply(format!(
            "a batch answered {value:?}, not an array"
        )));
    };
    if values.len() != expected {
        return Err(LockError::UnexpectedReply(format!(
            "a batch of {expected} answered {} times",
            values.len()
        )));
    }
    Ok(values
        .into_iter()
        .map(|v| match v {
            Value::Nil => Err(LockError::Redis(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "WRONGTYPE",
                "the lock key holds a value lock-core did not write".to_owned(),
            )))),
            v => Ok(v),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_reply_is_split_per_request_and_malformed_ones_are_errors() {
        let reply = Value::Array(vec![Value::Int(5), Value::Nil, Value::Int(1)]);
        let split = answers(reply, 3).unwrap();
        assert!(matches!(split[0], Ok(Value::Int(5))));
        assert!(matches!(split[1], Err(LockError::Redis(_))));
        assert!(matches!(split[2], Ok(Value::Int(1))));
        assert!(matches!(
            answers(Value::Array(vec![Value::Int(1)]), 2),
            Err(LockError::UnexpectedReply(_))
        ));
        assert!(matches!(
            answers(Value::Int(1), 1),
            Err(LockError::UnexpectedReply(_))
        ));
    }
}
