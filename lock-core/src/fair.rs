//! Fair locks: granted in arrival order across processes and clients.
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//!
//! let turn = client.fair_lock("printer");
//! let guard = turn.lock().wait(Duration::from_secs(30)).await?; // first come, first served
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! The fair lock `N` is a lock string `P{N}:fair` (as for [`LockClient::lock`], so its guard
//! is a [`LockGuard`] with a fencing token, a lease and a lost signal), a queue
//! `P{N}:fair:queue` (a sorted set of waiters by arrival on the server's clock), and the
//! waiters' deadlines `P{N}:fair:deadlines`. A free lock goes only to the head of the queue;
//! a release wakes only the head, on its own channel `P{N}:fair:wake:<owner>` (no herd). A
//! waiter stays queued by calling again at least every
//! [`waiter_timeout`](FairRequest::waiter_timeout) / 3 (default 5 s); one that dies or gives up
//! leaves the queue (at once when it can say so, else when its deadline passes), so it delays
//! the others by at most that timeout.

use std::fmt;
use std::future::IntoFuture;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::Topology;
use crate::client::{Inner, LockClient, check_lease};
use crate::error::LockError;
use crate::guard::{Kind, Lease, LockGuard};
use crate::mutex::{expected_count, millis, send_undoable};
use crate::name::LockKeys;
use crate::scripts;
use crate::waiters::Waiter;

/// How long a waiter stays queued without calling again, unless
/// [`FairRequest::waiter_timeout`] says otherwise.
pub const DEFAULT_WAITER_TIMEOUT: Duration = Duration::from_secs(5);

impl LockClient {
    /// The fair lock `name`.
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock {
            inner: self.inner.clone(),
            name: name.into(),
        }
    }
}

/// A fair lock: made by [`LockClient::fair_lock`]. Cheap to clone.
#[derive(Clone)]
pub struct FairLock {
    inner: Arc<Inner>,
    name: String,
}

impl FairLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes the lock in turn; see [`FairRequest`].
    pub fn lock(&self) -> FairRequest {
        FairRequest {
            lock: self.clone(),
            wait: None,
            lease: None,
            waiter_timeout: DEFAULT_WAITER_TIMEOUT,
        }
    }

    /// Takes the lock only if it is free and nobody is queued for it.
    pub async fn try_lock(&self) -> Result<Option<LockGuard>, LockError> {
        match self.lock().wait(Duration::ZERO).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn keys(&self) -> Result<LockKeys, LockError> {
        let base = LockKeys::new(&self.inner.config.prefix, &self.name)?;
        Ok(LockKeys {
            hash: format!("{}:fair", base.hash),
            channel: format!("{}:fair:wake:", base.hash),
            name: base.name,
        })
    }
}

impl fmt::Debug for FairLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.name)
            .finish()
    }
}

/// A request to take a fair lock: made by [`FairLock::lock`], run by `.await`.
#[must_use = "a lock request does nothing until awaited"]
pub struct FairRequest {
    lock: FairLock,
    wait: Option<Duration>,
    lease: Option<Duration>,
    waiter_timeout: Duration,
}

impl FairRequest {
    /// Gives up after waiting this long, with [`LockError::Timeout`] (and leaves the queue).
    /// `Duration::ZERO` makes a single attempt that does not queue.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Holds the lock for a fixed lease that is never renewed (at least 10 ms). Without it the
    /// client's watchdog keeps it for as long as the guard lives.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long this waiter stays queued without calling again (at least 100 ms; default
    /// 5 s). It calls again at least every third of it while it waits.
    pub fn waiter_timeout(mut self, timeout: Duration) -> Self {
        self.waiter_timeout = timeout;
        self
    }
}

impl fmt::Debug for FairRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairRequest")
            .field("lock", &self.lock)
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .field("waiter_timeout", &self.waiter_timeout)
            .finish()
    }
}

impl IntoFuture for FairRequest {
    type Output = Result<LockGuard, LockError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'static>>;

    fn into_future(self) -> Self::IntoFuture {
        let span =
            tracing::debug_span!("fair_lock", name = %crate::error::shorten(&self.lock.name));
        Box::pin(acquire(self).instrument(span))
    }
}

/// Leaves the queue when a wait ends without the lock (timeout, error, cancellation).
struct Leave<'a> {
    inner: &'a Arc<Inner>,
    keys: &'a LockKeys,
    owner: &'a str,
    armed: bool,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut invocation = self.inner.publish.fair_leave.key(&self.keys.hash);
            invocation
                .key(format!("{}:queue", self.keys.hash))
                .key(format!("{}:deadlines", self.keys.hash))
                .arg(self.owner)
                .arg(&self.keys.channel);
            self.inner
                .script_in_background(invocation, "departure from a fair lock's queue");
        }
    }
}

async fn acquire(request: FairRequest) -> Result<LockGuard, LockError> {
    let start = Instant::now();
    let FairRequest {
        lock,
        wait,
        lease,
        waiter_timeout,
    } = request;
    let keys = lock.keys()?;
    if let Some(lease) = lease {
        check_lease("lease", lease)?;
    }
    if waiter_timeout < Duration::from_millis(100) || waiter_timeout > Duration::from_secs(3600) {
        return Err(LockError::InvalidOption {
            option: "waiter_timeout",
            reason: format!("{waiter_timeout:?} is outside 100ms..=1h"),
        });
    }
    let inner = &lock.inner;
    let owner = inner.owner_for_current_task();
    let deadline = wait.and_then(|w| start.checked_add(w));
    let will_wait = wait != Some(Duration::ZERO);
    let queue_for = if will_wait {
        waiter_timeout
    } else {
        Duration::ZERO
    };
    let mut waiter = Waiter::new(
        deadline,
        inner.config.watchdog_lease,
        inner.backend.connect_timeout(),
    );
    // Subscribe to our own wake channel before we can be queued, so no wake-up is missed.
    if will_wait {
        waiter
            .subscribe(&inner.waiters, &format!("{}{owner}", keys.channel))
            .await;
    }
    let mut leave = Leave {
        inner,
        keys: &keys,
        owner: &owner,
        armed: will_wait,
    };
    loop {
        waiter.mark_seen();
        let retry_in = match attempt(inner, &keys, &owner, lease, queue_for).await {
            Ok(Ok(guard)) => {
                leave.armed = false;
                return Ok(guard);
            }
            Ok(Err(retry_in)) => retry_in,
            Err(e) => {
                waiter.ride_out(e).await?;
                continue;
            }
        };
        if !will_wait || waiter.expired() {
            return Err(LockError::Timeout {
                name: keys.name.clone(),
                waited: start.elapsed(),
                holder_ttl: Some(retry_in),
            });
        }
        // Call again when woken, when the holder's (or the head's) time runs out, and at
        // least every third of the waiter timeout to stay queued.
        waiter.sleep(Some(retry_in.min(waiter_timeout / 3))).await;
    }
}

/// One try; `Err(d)` inside `Ok`: not our turn yet, call again within `d`.
async fn attempt(
    inner: &Arc<Inner>,
    keys: &LockKeys,
    owner: &str,
    lease: Option<Duration>,
    queue_for: Duration,
) -> Result<Result<LockGuard, Duration>, LockError> {
    let hold = inner.hold_of(Kind::Fair, keys, owner);
    let op = hold.op.clone().lock_owned().await;
    let expected = expected_count(&hold)?;
    let (kind, lease_len) = match lease {
        Some(d) => (Lease::Fixed, d),
        None => (Lease::Watchdog, inner.config.watchdog_lease),
    };
    let mut invocation = scripts::FAIR_ACQUIRE.key(&keys.hash);
    invocation
        .key(format!("{}:queue", keys.hash))
        .key(format!("{}:deadlines", keys.hash))
        .arg(owner)
        .arg(millis(lease_len))
        .arg(expected)
        .arg(millis(queue_for));
    let (reply, sent_at, op) = send_undoable(inner, &hold, expected, op, invocation).await?;
    let outcome = match reply {
        token if token > 0 => {
            let generation = hold.acquired(token.unsigned_abs(), sent_at, kind, lease_len);
            Ok(Ok(LockGuard::new(hold.clone(), inner.clone(), generation)))
        }
        0 => {
            let generation = hold.state().generation;
            hold.mark_lost(generation, "re-entry found the lock gone");
            Err(LockError::Lost {
                name: keys.name.clone(),
            })
        }
        busy => Ok(Err(Duration::from_millis(
            (-2 - busy).unsigned_abs().max(1),
        ))),
    };
    drop(op);
    outcome
}
