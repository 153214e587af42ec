//! [`Mutex`]: the reentrant, owner-checked, leased lock with a fencing token, and its guard
//! [`LockGuard`].

use crate::client::LockClient;
use crate::driver::{Primitive, Request, Started};
use crate::engine::{Attempt, Engine};
use crate::error::LockError;
use crate::guard::{GuardCore, core_guard};
use crate::hold::Hold;
use crate::info::{self, LockInfo};
use crate::kind::{ChannelRole, HoldKind};
use crate::lock_string::{attempt_lock_string, lock_string_guard};
use crate::named::Named;
use crate::request::{LockRequest, TryLockRequest};
use crate::util::MAX_LEASE;
use crate::wire;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;

/// A reentrant, owner-checked lock with a lease and a fencing token: made by
/// [`LockClient::mutex`](crate::LockClient::mutex). Cheap to clone.
///
/// The lock `N` is one string `P{N}` in Redis (`owner|count|token|released|waiters`) that
/// expires with the holder's lease; a free lock keeps it, with its fencing counter, for the
/// client's `fence_ttl` (1 h by default). Releases are published on `P{N}:released` when
/// someone waits. Taking a lock you hold waits for yourself, as with `tokio::sync::Mutex`,
/// except inside a [`reentrant`](crate::reentrant) scope, where it re-enters.
///
/// ```no_run
/// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
///
/// let order = client.mutex("order:42");
/// let guard = order.lock().wait(Duration::from_secs(2)).await?;
/// let token = guard.fencing_token(); // send it with every write the lock protects
/// # let _ = token;
/// guard.unlock().await?;
/// if let Some(guard) = order.try_lock().lease(Duration::from_secs(10)).await? {
///     drop(guard); // released in the background
/// }
/// println!("{:?}", order.info().await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Mutex {
    named: Named,
}

impl Mutex {
    pub(crate) fn new(engine: Arc<Engine>, name: String) -> Self {
        Self {
            named: Named::new(engine, name),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.named.name()
    }

    /// Takes the lock, waiting for it as long as needed; see [`LockRequest`] for the wait and
    /// lease options.
    pub fn lock(&self) -> LockRequest<LockGuard> {
        LockRequest::new(self.take())
    }

    /// Tries once to take the lock: `Ok(None)` when someone else holds it.
    pub fn try_lock(&self) -> TryLockRequest<LockGuard> {
        TryLockRequest::new(self.take())
    }

    /// What Redis knows about the lock right now, for operators and tests.
    pub async fn info(&self) -> Result<LockInfo, LockError> {
        let keys = self.named.keys()?;
        info::lock(&self.named.engine, HoldKind::Mutex, &keys).await
    }

    /// Frees the lock whoever holds it, and wakes its waiters; returns whether it was held.
    /// An escape hatch for operators: the holder is not told until its next renewal, unlock
    /// or extension finds the lock gone. The fencing counter stays.
    pub async fn force_unlock(&self) -> Result<bool, LockError> {
        let (engine, keys) = (&self.named.engine, self.named.keys()?);
        engine
            .free(&wire::mutex::force_unlock(engine.protocol(), &keys))
            .await
    }

    fn take(&self) -> Take {
        Take {
            named: self.named.clone(),
        }
    }
}

impl fmt::Debug for Mutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex").field("name", &self.named).finish()
    }
}

/// A request to take a mutex, before it starts.
struct Take {
    named: Named,
}

/// One acquisition of a mutex, started: the hold it is for.
struct Taking {
    named: Named,
    hold: Arc<Hold>,
    request: Request,
    /// Whether an attempt was made: a request that will wait sends its first one without
    /// asking how long a holder keeps the lock (it subscribes and asks again at once).
    tried: bool,
}

impl Primitive for Take {
    type Guard = LockGuard;
    type Started = Taking;
    const SPAN: &'static str = "mutex";
    const KIND: &'static str = "mutex";
    const LOCAL_QUEUE: bool = true;

    fn named(&self) -> &Named {
        &self.named
    }

    fn start(self, request: Request) -> Result<Taking, LockError> {
        if let Some(min_hold) = request.hold_at_least {
            let most = request.lease.unwrap_or(MAX_LEASE);
            if min_hold > most {
                return Err(LockError::InvalidOption {
                    option: "hold_at_least",
                    reason: format!(
                        "{min_hold:?} is longer than the lease ({most:?}): the lock would \
                         expire before it"
                    ),
                });
            }
        }
        Ok(Taking {
            hold: self.named.hold_for_current_task(HoldKind::Mutex)?,
            named: self.named,
            request,
            tried: false,
        })
    }
}

impl Started for Taking {
    type Guard = LockGuard;

    fn named(&self) -> &Named {
        &self.named
    }

    fn queue_channel(&self) -> Option<String> {
        (self.hold.expected_count().ok()? == 0)
            .then(|| self.hold.keys.channel(ChannelRole::Released).to_string())
    }

    fn channel(&self, _index: usize) -> String {
        self.hold.keys.channel(ChannelRole::Released).to_string()
    }

    async fn attempt(&mut self) -> Result<Attempt<LockGuard>, LockError> {
        let (engine, hold) = (&self.named.engine, &self.hold);
        let Request {
            lease,
            will_wait,
            hold_at_least,
            ..
        } = self.request;
        let holder_ttl = !will_wait || self.tried;
        self.tried = true;
        let attempt = attempt_lock_string(engine, hold, lease, will_wait, holder_ttl).await?;
        Ok(attempt.map(|generation| {
            let mut guard = LockGuard::new(hold.clone(), engine.clone(), generation);
            if let Some(min_hold) = hold_at_least {
                guard.core.keep_for(min_hold);
            }
            guard
        }))
    }

    fn keep_queue_place(&self, guard: &LockGuard, place: OwnedSemaphorePermit) {
        guard
            .core
            .hold
            .keep_queue_place(guard.core.generation, place);
    }
}

impl LockRequest<LockGuard> {
    /// Keeps a mutex taken until at least `min_hold` after it was granted, even if the guard
    /// is unlocked or dropped sooner: the last release then sets the lock's lease to what is
    /// left instead of freeing it, and the lock expires then (still owner-checked; its fencing
    /// token stays). For a job that must run once per period on one of several instances
    /// (ShedLock's `lockAtLeastFor`): an instance whose timer fires a moment after another
    /// finished finds the lock still taken. At most the lease
    /// ([`lease`](Self::lease), or 30 days with the watchdog; longer is
    /// [`LockError::InvalidOption`]). Mutexes only: a fair lock refuses it (its release hands
    /// the lock to the queue).
    ///
    /// ```no_run
    /// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
    /// use std::time::Duration;
    ///
    /// // Every instance fires at noon; the first one draws, the others find it taken.
    /// let draw = client
    ///     .try_lock("lottery:2026-11-24T12:00:00Z")
    ///     .lease(Duration::from_secs(300))
    ///     .hold_at_least(Duration::from_secs(55))
    ///     .await?;
    /// if let Some(guard) = draw {
    ///     // ... draw the winners, with guard.fencing_token() ...
    ///     guard.unlock().await?; // the lock stays taken until 55 s after it was granted
    /// }
    /// # Ok(()) }
    /// ```
    pub fn hold_at_least(mut self, min_hold: Duration) -> Self {
        self.options_mut().hold_at_least = Some(min_hold);
        self
    }
}

impl TryLockRequest<LockGuard> {
    /// As [`LockRequest::hold_at_least`]: keeps the lock taken until at least `min_hold`
    /// after it was granted, even if released sooner.
    pub fn hold_at_least(mut self, min_hold: Duration) -> Self {
        self.options_mut().hold_at_least = Some(min_hold);
        self
    }
}

/// Proof of holding a [`Mutex`] or a [`FairLock`](crate::FairLock): made by their `lock()`
/// and `try_lock()`, and by [`LockClient::lock`](crate::LockClient::lock).
///
/// * [`fencing_token`](LockGuard::fencing_token): a number that grows with every new holder of
///   the name. Pass it to the resource you protect and have it refuse writes carrying a token
///   lower than one it has seen: that makes a holder that stalled past its lease harmless.
/// * [`is_held`](LockGuard::is_held) and [`lost`](LockGuard::lost): whether the lock is still
///   ours, and a future that resolves when it is known or presumed lost.
/// * [`unlock`](LockGuard::unlock) releases it and reports whether it was still held. Dropping
///   the guard releases it too, in the background on the client's runtime (if the runtime is
///   gone, the lease expires it).
///
/// It implements [`Guard`](crate::Guard), like every guard.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    core: GuardCore,
}

impl LockGuard {
    pub(crate) fn new(hold: Arc<Hold>, engine: Arc<Engine>, generation: u64) -> Self {
        Self {
            core: GuardCore::new(hold, engine, generation),
        }
    }

    pub(crate) fn core(&self) -> &GuardCore {
        &self.core
    }
}

core_guard!(LockGuard, "lock");
lock_string_guard!(LockGuard);

impl LockClient {
    /// The mutex `name`: reentrant, owner-checked, leased, with a fencing token.
    pub fn mutex(&self, name: impl Into<String>) -> Mutex {
        Mutex::new(self.engine().clone(), name.into())
    }

    /// Takes the mutex `name`, waiting for it as long as needed: `client.mutex(name).lock()`.
    pub fn lock(&self, name: impl Into<String>) -> LockRequest<LockGuard> {
        self.mutex(name).lock()
    }

    /// Tries once to take the mutex `name`: `client.mutex(name).try_lock()`.
    pub fn try_lock(&self, name: impl Into<String>) -> TryLockRequest<LockGuard> {
        self.mutex(name).try_lock()
    }
}
