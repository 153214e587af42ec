//! [`Semaphore`]: permits with their own leases, and [`SemaphoreGuard`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::driver::{Primitive, Request, Started};
use crate::engine::{Attempt, Engine};
use crate::error::LockError;
use crate::guard::{GuardCore, core_guard};
use crate::hold::Hold;
use crate::info::{self, SemaphoreInfo};
use crate::kind::{ChannelRole, HoldKind};
use crate::named::Named;
use crate::request::{LockRequest, TryLockRequest};
use crate::wire;

/// At most `size` permits held at once, across every process: made by
/// [`LockClient::semaphore`](crate::LockClient::semaphore). Cheap to clone.
///
/// ```no_run
/// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
///
/// // At most 10 concurrent exports across every instance.
/// let exports = client.semaphore("exports", 10);
/// let permit = exports.acquire(1).wait(Duration::from_secs(5)).await?;
/// // ... export ...
/// permit.unlock().await?;
/// # Ok(()) }
/// ```
///
/// The semaphore `N` is a sorted set `P{N}:permits` of permit ids scored by their expiry on
/// the server's clock, and its size `P{N}:permits:size`, recorded while any permit is held;
/// its release channel is `P{N}:permits:released`. Every group of permits has a lease:
/// renewed by the client's watchdog for as long as the guard lives (or fixed, with
/// [`LockRequest::lease`]), so the permits of a holder that crashed come back by themselves
/// when their lease runs out. A waiter wakes on a release message or when the first held
/// permit's lease runs out, whichever comes first.
///
/// Every user of a name must give the same size: an acquisition through a handle of another
/// size than the one recorded fails with [`LockError::SizeMismatch`] while permits are held.
/// There is no plain never-expiring counting semaphore: a holder that crashes would leak its
/// permits forever.
#[derive(Clone)]
pub struct Semaphore {
    named: Named,
    size: u32,
}

impl Semaphore {
    /// The largest semaphore accepted: 100,000 permits.
    pub const MAX_SIZE: u32 = 100_000;

    /// The most permits one acquisition takes: 1,000.
    pub const MAX_ACQUIRE: u32 = 1_000;

    pub(crate) fn new(engine: Arc<Engine>, name: String, size: u32) -> Self {
        Self {
            named: Named::new(engine, name),
            size,
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.named.name()
    }

    /// Its number of permits, as this handle was made with.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Takes `n` permits (1 to the size, at most [`MAX_ACQUIRE`](Self::MAX_ACQUIRE)), waiting
    /// for them as long as needed; see [`LockRequest`].
    pub fn acquire(&self, n: u32) -> LockRequest<SemaphoreGuard> {
        LockRequest::new(self.take(n))
    }

    /// Tries once to take `n` permits: `Ok(None)` when not enough are free.
    pub fn try_acquire(&self, n: u32) -> TryLockRequest<SemaphoreGuard> {
        TryLockRequest::new(self.take(n))
    }

    /// What Redis knows about the semaphore right now.
    pub async fn info(&self) -> Result<SemaphoreInfo, LockError> {
        check_size(self.size)?;
        info::semaphore(&self.named.engine, &self.named.keys()?, self.size).await
    }

    /// Frees every permit whoever holds them, and wakes the waiters; returns whether any was
    /// held. An escape hatch for operators: the holders are not told until their next
    /// renewal or unlock finds their permits gone. The recorded size goes with the permits,
    /// and this handle's size is not checked (it plays no part).
    pub async fn force_unlock(&self) -> Result<bool, LockError> {
        let (engine, keys) = (&self.named.engine, self.named.keys()?);
        engine.free(&wire::semaphore::force_unlock(&keys)).await
    }

    fn take(&self, n: u32) -> Take {
        Take {
            named: self.named.clone(),
            size: self.size,
            n,
        }
    }
}

fn check_size(size: u32) -> Result<(), LockError> {
    if size == 0 || size > Semaphore::MAX_SIZE {
        return Err(LockError::InvalidOption {
            option: "permits",
            reason: format!(
                "a semaphore has 1 to {} permits, not {size}",
                Semaphore::MAX_SIZE
            ),
        });
    }
    Ok(())
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.named)
            .field("size", &self.size)
            .finish()
    }
}

/// A request to take permits, before it starts.
struct Take {
    named: Named,
    size: u32,
    n: u32,
}

/// One acquisition of permits, started.
struct Taking {
    named: Named,
    size: u32,
    n: u32,
    hold: Arc<Hold>,
    lease: Option<Duration>,
}

impl Primitive for Take {
    type Guard = SemaphoreGuard;
    type Started = Taking;
    const SPAN: &'static str = "semaphore";
    const KIND: &'static str = "semaphore";

    fn named(&self) -> &Named {
        &self.named
    }

    fn start(self, request: Request) -> Result<Taking, LockError> {
        check_size(self.size)?;
        let n = self.n;
        if n == 0 || n > self.size || n > Semaphore::MAX_ACQUIRE {
            return Err(LockError::InvalidOption {
                option: "n",
                reason: format!(
                    "asked for {n} permits of {} (at most {} at once)",
                    self.size,
                    Semaphore::MAX_ACQUIRE
                ),
            });
        }
        Ok(Taking {
            // Every acquisition is an owner of its own: permits are never re-entered.
            hold: self
                .named
                .hold(HoldKind::Permits(n), crate::scope::next_holder())?,
            named: self.named,
            size: self.size,
            n,
            lease: request.lease,
        })
    }
}

impl Started for Taking {
    type Guard = SemaphoreGuard;

    fn named(&self) -> &Named {
        &self.named
    }

    fn channel(&self, _index: usize) -> String {
        self.hold
            .keys
            .channel(ChannelRole::PermitsReleased)
            .to_string()
    }

    async fn attempt(&mut self) -> Result<Attempt<SemaphoreGuard>, LockError> {
        let (engine, hold) = (&self.named.engine, &self.hold);
        let (_, lease_len) = engine.lease(self.lease);
        let attempt = engine
            .attempt(hold, self.lease, |_| {
                wire::semaphore::acquire(engine.target(hold), self.n, self.size, lease_len)
            })
            .await
            .map_err(|e| match e {
                // The engine knows what was recorded; the size asked for is ours.
                LockError::SizeMismatch { name, recorded, .. } => LockError::SizeMismatch {
                    name,
                    requested: self.size,
                    recorded,
                },
                e => e,
            })?;
        Ok(attempt.map(|generation| SemaphoreGuard {
            core: GuardCore::new(hold.clone(), engine.clone(), generation),
        }))
    }
}

/// Permits of a [`Semaphore`], held: made by [`Semaphore::acquire`] and
/// [`Semaphore::try_acquire`]. Released by [`unlock`](SemaphoreGuard::unlock) (which says
/// whether every permit was still held), or in the background when dropped. Permits have no
/// fencing token.
#[must_use = "dropping the guard releases the permits"]
pub struct SemaphoreGuard {
    core: GuardCore,
}

impl SemaphoreGuard {
    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        match self.core.hold.kind {
            HoldKind::Permits(n) => n,
            _ => 0,
        }
    }
}

core_guard!(SemaphoreGuard, "semaphore");

impl LockClient {
    /// The semaphore `name` with `size` permits in all (1 to 100,000; every user of the name
    /// must give the same size).
    pub fn semaphore(&self, name: impl Into<String>, size: u32) -> Semaphore {
        Semaphore::new(self.engine().clone(), name.into(), size)
    }
}
