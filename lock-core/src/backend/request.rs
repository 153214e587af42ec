//! What a command path sends, and whether it may be sent again after its connection broke.
//!
//! Every path of every backend sends one of these, so the rule is written once: a call of the
//! crate's code and the crate's own plain commands are safe to repeat (a repeat of an applied
//! one is recognised or writes the same thing again), so after a connection failure they go
//! once more on a healed connection; an application's command (through
//! [`Connection`](crate::Connection)) may not be, so it is never sent twice: its error is
//! returned, and the connection is healed for the next command.

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
    /// Whether it may be sent again after its connection failed mid-request.
    pub(crate) fn repeatable(&self) -> bool {
        matches!(self, Request::Call(_) | Request::Command(_))
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
