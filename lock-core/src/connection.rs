//! [`Connection`]: the application's own commands on the lock client's deployment, through
//! the client's connections, healed as the locks' own are.

use std::fmt;
use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::backend::{Request, replies};
use crate::engine::Engine;
use crate::error::LockError;

/// A connection for the application's own commands (its [fenced](crate::fenced) writes, say)
/// on the deployment a [`LockClient`](crate::LockClient) talks to, made by
/// [`LockClient::connection`](crate::LockClient::connection). Cheap to clone; use it as any
/// redis connection (`cmd.query_async(&mut conn)`, `fenced::set(&mut conn, …)`).
///
/// Commands go through the client's own connections: on a standalone server its pool, under
/// Sentinel the current primary (a failover is followed), on a Cluster the primary of each
/// command's slot, and on `LockClient::in_memory` (the `testing` feature) the in-memory
/// server (which answers the commands the lock code sends, hashes' and sorted sets' among
/// them, and scripts with `EVAL`/`EVALSHA`, so [`fenced::set`](crate::fenced::set) works;
/// `MemoryServer::command` lists them; anything else is an unknown command there). Each is bounded by the client's response timeout (1 s by default).
///
/// **After a fault it works again by itself.** A command whose connection fails under it (a
/// server restart, a reset, a timeout) is answered with that error, because it may have been
/// applied, and is *never* sent again; the connection is replaced before the error is
/// returned, so the next command goes to the server as it is now (under Sentinel: to the
/// primary the sentinels name now). [`fenced::set`](crate::fenced::set) and
/// [`fenced::get`](crate::fenced::get), which are safe to repeat, send once more themselves.
///
/// ```no_run
/// use lock_core::fenced::{self, Fenced};
///
/// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
/// let mut conn = client.connection();
/// let guard = client.lock("report:daily").await?;
/// if let Fenced::Refused { stored } =
///     fenced::set(&mut conn, "report:daily:result", "42 rows", guard.fencing_token()).await?
/// {
///     eprintln!("a newer holder (token {stored}) wrote meanwhile");
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Connection {
    engine: Arc<Engine>,
}

impl Connection {
    pub(crate) fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.engine.not_closed().map_err(LockError::into_redis)?;
            self.engine.backend().user(Request::User(cmd)).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let request = Request::UserPipeline(pipeline, offset, count);
        Box::pin(async move {
            self.engine.not_closed().map_err(LockError::into_redis)?;
            self.engine.backend().user(request).await.map(replies)
        })
    }

    /// The database the client's URL names (0 on a Cluster and in memory).
    fn get_db(&self) -> i64 {
        self.engine.backend().db()
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("prefix", &self.engine.config().prefix)
            .finish_non_exhaustive()
    }
}
