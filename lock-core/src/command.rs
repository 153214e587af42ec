//! [`Command`]: what the engine sends to Redis: a call of this crate's Lua code, or a native
//! call (the server's own compare-and-set commands, see [`native`](crate::native)).

use crate::native;
use crate::scripts;

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
