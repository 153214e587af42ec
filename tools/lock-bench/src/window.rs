//! The fixed-window floor: the minimal correct rate limiter, written here to measure
//! lock-core's rate limit (`RateLimit::check`) against, as `floor.rs` is for the locks.
//!
//! * decision: `INCR key` pipelined with `PEXPIRE key window NX` on one multiplexed
//!   connection, one round trip; allowed when the count `INCR` answered is at most the limit.
//!
//! The first `INCR` of a window creates the key (count 1) and its `PEXPIRE … NX` gives it the
//! window as its time to live; the window's later decisions' `PEXPIRE … NX` find a time to
//! live already set and change nothing (`NX`: only a key without one), so the window is fixed
//! from its first decision and the key disappears at its end: the next decision starts a new
//! window. If a connection were cut between the two commands (they leave in one write), the
//! key would have no time to live only until the next decision's `PEXPIRE … NX` gives it one.
//! No script, no `MULTI`. What it does not do that lock-core does: up to `2 × limit` pass
//! around a window's edge, a refused decision still counts (it writes), it says nothing about
//! when to retry, and the window is the server's per key but not smooth.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// Bound on one decision's round trip.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// The fixed-window limiter: `limit` decisions per `window` per key. Cloning shares the
/// connection.
#[derive(Clone)]
pub(crate) struct FixedWindow {
    conn: MultiplexedConnection,
    limit: u64,
    window_ms: u64,
}

impl FixedWindow {
    /// Connects one multiplexed connection to `url`.
    pub(crate) async fn connect(
        url: &str,
        limit: u64,
        window: Duration,
    ) -> Result<FixedWindow, String> {
        let conn = redis::Client::open(url)
            .map_err(|e| e.to_string())?
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| format!("connect the fixed-window floor: {e}"))?;
        Ok(FixedWindow {
            conn,
            limit,
            window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// One decision on `key`: whether it is allowed.
    pub(crate) async fn check(&self, key: &str) -> Result<bool, String> {
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.cmd("INCR")
            .arg(key)
            .cmd("PEXPIRE")
            .arg(key)
            .arg(self.window_ms)
            .arg("NX")
            .ignore();
        let call = pipe.query_async::<(u64,)>(&mut conn);
        let (count,) = tokio::time::timeout(COMMAND_TIMEOUT, call)
            .await
            .map_err(|_| "INCR + PEXPIRE timed out".to_owned())?
            .map_err(|e| format!("INCR + PEXPIRE: {e}"))?;
        Ok(count <= self.limit)
    }
}
