//! [`Invocation`]: a call of the crate's code on its way to one node, and how it is sent
//! there (loading the code again where the server lost it).

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, RedisResult};
use tokio::time::Instant;

use super::calls::{function_missing, load_library};
use crate::wire::Wire;
use crate::wire::script::{Call, Mode, Scripts};

/// A command on its way: for a script call, the code it calls and how.
pub(crate) struct Invocation<'a> {
    pub(crate) command: Wire<'a>,
    pub(crate) scripts: &'static Scripts,
    pub(crate) mode: Mode,
    /// How many times it was sent (a backend sends it again after a connection failure).
    pub(crate) sends: std::sync::atomic::AtomicU32,
    /// When its caller asked: its [`Deadline`](super::deadline::Deadline) counts from here
    /// (a batch's, from the earliest of its requests).
    pub(crate) asked: Instant,
    /// How long it may wait for its answer when that is longer than the response timeout:
    /// zero for a caller's call; an undo's patience, which keeps its hold's turn until the
    /// server has answered it (see `Engine::undo`).
    pub(crate) patience: std::time::Duration,
}

impl Invocation<'_> {
    /// The response allowance of its deadline: the response timeout, or its patience when
    /// that is longer.
    pub(crate) fn response(&self, timeout: std::time::Duration) -> std::time::Duration {
        timeout.max(self.patience)
    }

    /// Whether it may be sent again after its connection broke under it: a repeat of an
    /// applied one is recognised or changes nothing (every call but a rate decision's, see
    /// [`Call::repeat_safe`]).
    pub(crate) fn repeat_safe(&self) -> bool {
        match self.command {
            Wire::Script(call) => call.repeat_safe(),
            Wire::Native(_) => true,
        }
    }

    /// Whether it was sent more than once: a reply may then answer a repeat of a command the
    /// server already applied.
    pub(crate) fn resent(&self) -> bool {
        self.sends.load(std::sync::atomic::Ordering::Relaxed) > 1
    }

    /// Sends the command on `con`. When the server does not have the code a script call
    /// runs (a restart without persistence, a `SCRIPT FLUSH` or `FUNCTION FLUSH`), loads it
    /// on that connection and sends the call once more.
    pub(crate) async fn invoke_async<T: FromRedisValue>(
        &self,
        con: &mut (impl ConnectionLike + Send),
    ) -> RedisResult<T> {
        self.sends
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let call = match self.command {
            Wire::Script(call) => call,
            Wire::Native(native) => return native.pipeline().query_async(con).await,
        };
        let cmd = call.cmd(self.scripts, self.mode);
        match cmd.query_async(con).await {
            // Boxed: the common path's future then holds a pointer, not the reload's state.
            Err(e) if self.code_missing(&e) => {
                Box::pin(self.reload_and_resend(con, call, &cmd)).await
            }
            result => result,
        }
    }

    /// Whether `e` says the server does not have the code this call runs.
    fn code_missing(&self, e: &redis::RedisError) -> bool {
        match self.mode {
            Mode::Script => e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript),
            Mode::Function => function_missing(e),
        }
    }

    /// Loads the code on `con` and sends `cmd` (of `call`) once more.
    async fn reload_and_resend<T: FromRedisValue>(
        &self,
        con: &mut (impl ConnectionLike + Send),
        call: &Call,
        cmd: &redis::Cmd,
    ) -> RedisResult<T> {
        match self.mode {
            Mode::Script => {
                self.scripts.script(call.op()).load_async(con).await?;
            }
            Mode::Function => load_library(con, self.scripts).await?,
        }
        cmd.query_async(con).await
    }
}
