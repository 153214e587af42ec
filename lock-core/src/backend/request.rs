//! What a command path sends, and whether it may be sent again after its connection broke.
//!
//! Every path of every backend sends one of these, so the rule is written once: a call of the
//! crate's code (but a rate decision) and the crate's own plain commands are safe to repeat (a
//! repeat of an applied one is recognised or writes the same thing again), so after a broken
//! connection they go once more on a healed connection, within the call's deadline; an
//! application's command (through [`Connection`](crate::Connection)) and a rate decision may
//! not be, so they are never sent twice: the error is returned. A request that timed out is
//! never sent again (it may have been applied, and its time is spent).

use redis::aio::ConnectionLike;
use redis::{RedisResult, Value};

use super::invocation::Invocation;

/// A request on its way to one node.
#[derive(Clone, Copy)]
pub(crate) enum Request<'a> {
    /// A call of the crate's Lua code or of the native protocol.
    Call(&'a Invocation<'a>),
    /// One of the crate's plain commands: reads (`GET`, `INFO`, `TIME`, `CONFIG GET`) and
    /// writes that set the same thing again (`SET … PX`, a record's compare-and-set).
    Command(&'a redis::Cmd),
    /// An application's command.
    User(&'a redis::Cmd),
    /// An application's pipeline: `offset` and `count` as `ConnectionLike` takes them.
    UserPipeline(&'a redis::Pipeline, usize, usize),
}

impl Request<'_> {
    /// Whether it may be sent again after its connection broke mid-request.
    pub(crate) fn repeatable(&self) -> bool {
        match self {
            Request::Call(invocation) => invocation.repeat_safe(),
            Request::Command(_) => true,
            Request::User(_) | Request::UserPipeline(..) => false,
        }
    }

    /// Sends it on `con`. A pipeline's replies come as one array.
    pub(crate) async fn send(&self, con: &mut (impl ConnectionLike + Send)) -> RedisResult<Value> {
        match *self {
            Request::Call(invocation) => invocation.invoke_async(con).await,
            Request::Command(cmd) => cmd.query_async(con).await,
            Request::User(cmd) => con.req_packed_command(cmd).await,
            Request::UserPipeline(pipe, offset, count) => con
                .req_packed_commands(pipe, offset, count)
                .await
                .map(Value::Array),
        }
    }
}

/// A pipeline's replies, from what [`Request::send`] answers for a
/// [`Request::UserPipeline`] (one array; anything else is taken as the only reply).
pub(crate) fn replies(value: Value) -> Vec<Value> {
    match value {
        Value::Array(replies) => replies,
        other => vec![other],
    }
}
