//! The server's clock as a job reads it: Redis `TIME`, read at every decision, and between
//! two reads the local clock plus the offset the last read measured.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::LockError;
use crate::wire::convert;

/// The server's clock, for one job's runner.
///
/// Which period it is, is decided by the server's `TIME` (read by [`refresh`](Self::refresh)
/// before every decision), never by this host's clock: instances whose clocks disagree by
/// minutes still agree on the period. Between two reads, [`now`](Self::now) is the local
/// clock plus the offset (server − local) the last read measured, so a skewed local clock
/// cancels out.
pub(crate) struct ServerClock {
    engine: Arc<Engine>,
    local: LocalClock,
    /// Server − local, in µs, as the last `TIME` measured it.
    offset_us: i64,
}

impl ServerClock {
    pub(crate) fn new(engine: Arc<Engine>, skew_ms: i64) -> Self {
        ServerClock {
            engine,
            local: LocalClock::new(skew_ms),
            offset_us: 0,
        }
    }

    /// Reads `TIME` and returns the server's time in whole seconds since the epoch.
    pub(crate) async fn refresh(&mut self) -> Result<u64, LockError> {
        let sent = self.local.now_us();
        let reply = self.engine.command(&redis::cmd("TIME")).await?;
        let (secs, micros): (u64, u64) = convert(reply)?;
        let server = secs.saturating_mul(1_000_000).saturating_add(micros);
        // The reply was read half-way through the round trip, near enough.
        let local = sent + (self.local.now_us().saturating_sub(sent)) / 2;
        self.offset_us = clamp_i64(i128::from(server) - i128::from(local));
        Ok(secs)
    }

    /// The server's time now, in µs, from the local clock and the last measured offset.
    pub(crate) fn now_us(&self) -> u64 {
        u64::try_from(i128::from(self.local.now_us()) + i128::from(self.offset_us)).unwrap_or(0)
    }

    /// How long from now (on the server's clock) until second `at`: zero if it has passed.
    pub(crate) fn until(&self, at: u64) -> Duration {
        Duration::from_micros(at.saturating_mul(1_000_000).saturating_sub(self.now_us()))
    }
}

/// This host's wall clock, as tokio's clock moves it (so a paused test clock moves it too),
/// plus a skew for tests.
struct LocalClock {
    at: Instant,
    wall_us: u64,
    skew_us: i64,
}

impl LocalClock {
    fn new(skew_ms: i64) -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        LocalClock {
            at: Instant::now(),
            wall_us: u64::try_from(wall.as_micros()).unwrap_or(u64::MAX),
            skew_us: skew_ms.saturating_mul(1000),
        }
    }

    fn now_us(&self) -> u64 {
        let elapsed = u64::try_from(self.at.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.wall_us
            .saturating_add(elapsed)
            .saturating_add_signed(self.skew_us)
    }
}

fn clamp_i64(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX })
}
