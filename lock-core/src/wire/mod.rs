//! The wire protocol: what each kind of lock sends to Redis and how its replies read, in
//! every dialect the crate speaks.
//!
//! - [`script`]: the Lua code (`scripts/*.lua`) and one call of it ([`script::Call`]);
//! - [`native`]: the native mutex protocol (the server's own compare-and-set commands);
//! - [`answer`]: what an acquisition's reply says, read into an [`Answer`](answer::Answer);
//! - this file: [`Command`], one call in either dialect, as the engine sends it.

pub(crate) mod answer;
pub(crate) mod native;
pub(crate) mod script;

use redis::{FromRedisValue, Value};

use self::script as scripts;
use crate::error::LockError;

/// Converts a reply into `T`; a reply of another shape is [`LockError::UnexpectedReply`].
pub(crate) fn convert<T: FromRedisValue>(value: Value) -> Result<T, LockError> {
    T::from_redis_value(value).map_err(|e| LockError::UnexpectedReply(e.to_string()))
}

/// One call to Redis.
#[derive(Debug, Clone)]
pub(crate) enum Command {
    /// A call of the Lua code (`FCALL`, or `EVALSHA`).
    Script(scripts::Call),
    /// The server's own commands, in one pipeline.
    Native(native::Call),
}

/// A [`Command`], borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wire<'a> {
    Script(&'a scripts::Call),
    Native(&'a native::Call),
}

impl Command {
    /// The command, borrowed.
    pub(crate) fn wire(&self) -> Wire<'_> {
        match self {
            Command::Script(call) => Wire::Script(call),
            Command::Native(call) => Wire::Native(call),
        }
    }
}

impl From<scripts::Call> for Command {
    fn from(call: scripts::Call) -> Self {
        Command::Script(call)
    }
}

impl From<native::Call> for Command {
    fn from(call: native::Call) -> Self {
        Command::Native(call)
    }
}
