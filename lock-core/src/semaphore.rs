//! Semaphores whose permits each have a lease.
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//!
//! // At most 10 concurrent exports across every instance.
//! let exports = client.semaphore("exports", 10);
//! let permit = exports.acquire(1).wait(Duration::from_secs(5)).await?;
//! // ... export ...
//! permit.release().await?;
//! # Ok(()) }
//! ```
//!
//! The semaphore `N` is a sorted set `P{N}:permits` of permit ids scored by their expiry on
//! the server's clock; its release channel is `P{N}:permits:released`. Every group of permits
//! has a lease: renewed by the client's watchdog for as long as the guard lives (or fixed, with
//! [`PermitRequest::lease`]), so the permits of a holder that crashed come back by themselves
//! when their lease runs out. A waiter wakes on a release message or when the first held
//! permit's lease runs out, whichever comes first. Every user of a name must give the same
//! size.

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
use crate::guard::{GuardCore, Hold, Lease};
use crate::mutex::{millis, send_undoable};
use crate::name::LockKeys;
use crate::scripts;
use crate::waiters::Waiter;

/// The largest semaphore accepted.
pub const MAX_PERMITS: u32 = 100_000;

/// The most permits one acquisition takes.
pub const MAX_PERMITS_PER_ACQUISITION: u32 = 1_000;

impl LockClient {
    /// The semaphore `name` with `permits` permits in all.
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore {
            inner: self.inner.clone(),
            name: name.into(),
            size: permits,
        }
    }
}

/// A semaphore: made by [`LockClient::semaphore`]. Cheap to clone.
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
    name: String,
    size: u32,
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its number of permits.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Takes `n` permits, waiting for them as long as needed; see [`PermitRequest`].
    pub fn acquire(&self, n: u32) -> PermitRequest {
        PermitRequest {
            semaphore: self.clone(),
            n,
            wait: None,
            lease: None,
        }
    }

    /// Tries once to take `n` permits: `Ok(None)` when not enough are free.
    pub async fn try_acquire(&self, n: u32) -> Result<Option<SemaphoreGuard>, LockError> {
        match self.acquire(n).wait(Duration::ZERO).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn keys(&self) -> Result<LockKeys, LockError> {
        if self.size == 0 || self.size > MAX_PERMITS {
            return Err(LockError::InvalidOption {
                option: "permits",
                reason: format!(
                    "a semaphore has 1 to {MAX_PERMITS} permits, not {}",
                    self.size
                ),
            });
        }
        let lock = LockKeys::new(&self.inner.config.prefix, &self.name)?;
        Ok(LockKeys {
            hash: format!("{}:permits", lock.hash),
            channel: format!("{}:permits:released", lock.hash),
            name: lock.name,
        })
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("size", &self.size)
            .finish()
    }
}

/// A request for permits: made by [`Semaphore::acquire`], run by `.await`.
#[must_use = "a permit request does nothing until awaited"]
pub struct PermitRequest {
    semaphore: Semaphore,
    n: u32,
    wait: Option<Duration>,
    lease: Option<Duration>,
}

impl PermitRequest {
    /// Gives up after waiting this long, with [`LockError::Timeout`]. `Duration::ZERO` makes a
    /// single attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Holds the permits for a fixed lease that is never renewed (at least 10 ms). Without it
    /// the client's watchdog keeps them for as long as the guard lives.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }
}

impl fmt::Debug for PermitRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitRequest")
            .field("semaphore", &self.semaphore)
            .field("n", &self.n)
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .finish()
    }
}

impl IntoFuture for PermitRequest {
    type Output = Result<SemaphoreGuard, LockError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'static>>;

    fn into_future(self) -> Self::IntoFuture {
        let span = tracing::debug_span!(
            "semaphore",
            name = %crate::error::shorten(&self.semaphore.name),
            n = self.n
        );
        Box::pin(acquire(self).instrument(span))
    }
}

async fn acquire(request: PermitRequest) -> Result<SemaphoreGuard, LockError> {
    let start = Instant::now();
    let PermitRequest {
        semaphore,
        n,
        wait,
        lease,
    } = request;
    let keys = semaphore.keys()?;
    if n == 0 || n > semaphore.size || n > MAX_PERMITS_PER_ACQUISITION {
        return Err(LockError::InvalidOption {
            option: "n",
            reason: format!(
                "asked for {n} permits of {} (at most {MAX_PERMITS_PER_ACQUISITION} at once)",
                semaphore.size
            ),
        });
    }
    if let Some(lease) = lease {
        check_lease("lease", lease)?;
    }
    let inner = &semaphore.inner;
    let hold = inner.permit_hold(&keys, &inner.fresh_owner(), n);
    let deadline = wait.and_then(|w| start.checked_add(w));
    let mut waiter = Waiter::new(
        deadline,
        inner.config.watchdog_lease,
        inner.backend.connect_timeout(),
    );
    loop {
        waiter.mark_seen();
        let retry_in = match attempt(inner, &hold, semaphore.size, lease).await {
            Ok(Ok(guard)) => return Ok(guard),
            Ok(Err(retry_in)) => retry_in,
            Err(e) => {
                waiter.ride_out(e).await?;
                continue;
            }
        };
        if waiter.expired() {
            return Err(LockError::Timeout {
                name: keys.name.clone(),
                waited: start.elapsed(),
                holder_ttl: Some(retry_in),
            });
        }
        // Subscribe first, then try again right away.
        if waiter.subscribe(&inner.waiters, &keys.channel).await {
            continue;
        }
        waiter.sleep(Some(retry_in)).await;
    }
}

/// One try; `Err(d)` inside `Ok`: not enough permits free, the first lease runs out in `d`.
async fn attempt(
    inner: &Arc<Inner>,
    hold: &Arc<Hold>,
    size: u32,
    lease: Option<Duration>,
) -> Result<Result<SemaphoreGuard, Duration>, LockError> {
    let crate::guard::Kind::Permits(n) = hold.kind else {
        unreachable!("a semaphore hold holds permits");
    };
    let op = hold.op.clone().lock_owned().await;
    let (kind, lease_len) = match lease {
        Some(d) => (Lease::Fixed, d),
        None => (Lease::Watchdog, inner.config.watchdog_lease),
    };
    let mut invocation = scripts::SEM_ACQUIRE.key(&hold.keys.hash);
    invocation
        .arg(&hold.owner)
        .arg(n)
        .arg(size)
        .arg(millis(lease_len));
    let (reply, sent_at, op) = send_undoable(inner, hold, 0, op, invocation).await?;
    let outcome = if reply > 0 {
        let generation = hold.acquired(0, sent_at, kind, lease_len);
        Ok(SemaphoreGuard {
            core: GuardCore::new(hold.clone(), inner.clone(), generation),
        })
    } else {
        Err(Duration::from_millis(reply.unsigned_abs()))
    };
    drop(op);
    Ok(outcome)
}

/// Permits of a semaphore, held. Released by [`release`](SemaphoreGuard::release), or in the
/// background when dropped.
#[must_use = "dropping the guard releases the permits"]
pub struct SemaphoreGuard {
    core: GuardCore,
}

impl SemaphoreGuard {
    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        match self.core.hold.kind {
            crate::guard::Kind::Permits(n) => n,
            _ => 0,
        }
    }

    /// True while the permits are ours: not released, not lost, within their lease.
    pub fn is_held(&self) -> bool {
        self.core.is_held()
    }

    /// Resolves when the permits are known or presumed lost, or released.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.core.lost()
    }

    /// Gives the permits back. Returns whether all of them were still held until now.
    pub async fn release(self) -> Result<bool, LockError> {
        self.core.release().await
    }
}

impl fmt::Debug for SemaphoreGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphoreGuard")
            .field("semaphore", &self.core.hold.keys.name)
            .field("permits", &self.permits())
            .field("held", &self.is_held())
            .finish()
    }
}
