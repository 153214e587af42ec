//! [`Healer`]: replacing a pool's broken connections in the background, off every caller's
//! clock.
//!
//! A request whose connection failed or timed out starts a heal (one at a time per pool) and
//! goes on: a timed-out request returns its timeout at once, and a request that must be sent
//! again after a broken connection waits for the heal only within its own
//! [`Deadline`](super::deadline::Deadline). The heal sends `PING` on a handle of each
//! connection idle in the pool (its slot held only while the handle is cloned, so it never
//! holds up a caller); if one does not answer, it opens as many new connections, and if they
//! answer, puts them in the places of the pool's idle ones (all of them: the pool cannot say
//! which one failed; requests in flight on the old ones finish there). A frozen server
//! answers neither: the old connections are kept, and the next failure starts the next heal.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bb8::Pool;
use bb8_redis::RedisConnectionManager;
use futures_util::FutureExt;
use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use tokio::sync::watch;

/// The heals of one pool.
pub(crate) struct Healer {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool<RedisConnectionManager>,
    response_timeout: Duration,
    connect_timeout: Duration,
    /// Whether a heal is running.
    running: AtomicBool,
    /// Completed heals.
    healed: watch::Sender<u64>,
}

impl Healer {
    pub(crate) fn new(
        pool: Pool<RedisConnectionManager>,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                pool,
                response_timeout,
                connect_timeout,
                running: AtomicBool::new(false),
                healed: watch::Sender::new(0),
            }),
        }
    }

    /// How many heals have completed: read before a request, so a failure seen after a later
    /// heal started does not start another.
    pub(crate) fn completed(&self) -> u64 {
        *self.inner.healed.borrow()
    }

    /// Starts a heal in the background, unless one is running or one completed since
    /// `seen` (a count from [`Healer::completed`]).
    pub(crate) fn start(&self, seen: u64) {
        if self.completed() != seen || self.inner.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.inner.clone();
        tokio::spawn(async move {
            inner.heal().await;
            inner.running.store(false, Ordering::Release);
            inner.healed.send_modify(|n| *n += 1);
        });
    }

    /// Starts a heal (as [`Healer::start`]) and waits until one has completed since `seen`.
    pub(crate) async fn healed_since(&self, seen: u64) {
        self.start(seen);
        let mut healed = self.inner.healed.subscribe();
        let _ = healed.wait_for(|n| *n != seen).await;
    }
}

impl Inner {
    /// Checks the pool's idle connections (see the module docs).
    async fn heal(&self) {
        let checked = self.idle_clones();
        let answers = join_all(checked.iter().map(|conn| self.answers(conn.clone()))).await;
        if answers.iter().all(|answered| *answered) {
            return;
        }
        // New connections first, then the swap, so no slot is held across an await.
        let fresh = join_all(checked.iter().map(|_| self.fresh())).await;
        let mut fresh: Vec<_> = fresh.into_iter().flatten().collect();
        if fresh.is_empty() {
            // The server does not answer a new connection either (frozen, or gone):
            // nothing to heal with now; the next failure starts the next heal.
            return;
        }
        let mut slots = Vec::new();
        while let Some(conn) = fresh.pop() {
            match self.pool.get().now_or_never() {
                Some(Ok(mut slot)) => {
                    *slot = conn;
                    slots.push(slot);
                }
                _ => break,
            }
        }
    }

    /// A handle on each connection idle in the pool now, each slot held only while it is
    /// cloned: never one a caller waits for.
    fn idle_clones(&self) -> Vec<MultiplexedConnection> {
        let mut slots = Vec::new();
        for _ in 0..self.pool.state().idle_connections {
            match self.pool.get().now_or_never() {
                Some(Ok(slot)) => slots.push(slot),
                _ => break,
            }
        }
        slots.iter().map(|slot| (**slot).clone()).collect()
    }

    /// Whether `conn` answers `PING` within the response timeout.
    async fn answers(&self, mut conn: MultiplexedConnection) -> bool {
        let ping = redis::cmd("PING");
        matches!(
            tokio::time::timeout(self.response_timeout, ping.query_async::<String>(&mut conn))
                .await,
            Ok(Ok(_))
        )
    }

    /// A new connection that answers `PING`, within the connect and response timeouts.
    async fn fresh(&self) -> Option<MultiplexedConnection> {
        let open = self.pool.dedicated_connection();
        let mut conn = tokio::time::timeout(self.connect_timeout, open)
            .await
            .ok()?
            .ok()?;
        conn.set_response_timeout(self.response_timeout);
        self.answers(conn.clone()).await.then_some(conn)
    }
}
