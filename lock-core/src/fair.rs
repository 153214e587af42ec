//! [`FairLock`]: a lock granted in arrival order across processes and clients.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::driver::{Primitive, Request, Started};
use crate::engine::{Attempt, Engine};
use crate::error::LockError;
use crate::hold::Hold;
use crate::info::{self, FairLockInfo};
use crate::kind::{ChannelRole, HoldKind};
use crate::mutex::LockGuard;
use crate::named::Named;
use crate::request::{LockRequest, TryLockRequest};
use crate::util::check_range;
use crate::wire;

/// A lock granted in arrival order: made by
/// [`LockClient::fair_lock`](crate::LockClient::fair_lock). Cheap to clone.
///
/// ```no_run
/// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
///
/// let printer = client.fair_lock("printer");
/// let guard = printer.lock().wait(Duration::from_secs(30)).await?; // first come, first served
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
///
/// The fair lock `N` is a lock string `P{N}:fair` (as for a [`Mutex`](crate::Mutex), so its
/// guard is a [`LockGuard`] with a fencing token, a lease and a lost signal), a queue
/// `P{N}:fair:queue` (a sorted set of waiters by arrival on the server's clock), and the
/// waiters' deadlines `P{N}:fair:deadlines`. A free lock goes only to the head of the queue;
/// a release wakes only the head, on its own channel `P{N}:fair:wake:<owner>` (no herd). A
/// waiter stays queued by calling again at least every third of its
/// [`waiter_timeout`](FairLock::waiter_timeout) (5 s by default); one that dies or gives up
/// leaves the queue (at once when it can say so, else when its deadline passes), so it delays
/// the others by at most that timeout. A fair lock and a mutex of the same name are different
/// locks.
#[derive(Clone)]
pub struct FairLock {
    named: Named,
    waiter_timeout: Duration,
}

impl FairLock {
    /// How long a waiter stays queued without calling again, unless
    /// [`waiter_timeout`](FairLock::waiter_timeout) says otherwise: 5 s.
    pub const DEFAULT_WAITER_TIMEOUT: Duration = Duration::from_secs(5);

    pub(crate) fn new(engine: Arc<Engine>, name: String) -> Self {
        Self {
            named: Named::new(engine, name),
            waiter_timeout: Self::DEFAULT_WAITER_TIMEOUT,
        }
    }

    /// How long this handle's waiters stay queued without calling again (100 ms to 1 h;
    /// default 5 s). A waiter calls again at least every third of it while it waits.
    pub fn waiter_timeout(mut self, timeout: Duration) -> Self {
        self.waiter_timeout = timeout;
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.named.name()
    }

    /// Takes the lock in turn, waiting as long as needed; see [`LockRequest`] for the wait
    /// and lease options. A waiter that gives up leaves the queue.
    pub fn lock(&self) -> LockRequest<LockGuard> {
        LockRequest::new(self.take())
    }

    /// Takes the lock only if it is free and nobody is queued for it: `Ok(None)` otherwise.
    pub fn try_lock(&self) -> TryLockRequest<LockGuard> {
        TryLockRequest::new(self.take())
    }

    /// What Redis knows about the lock and its queue right now.
    pub async fn info(&self) -> Result<FairLockInfo, LockError> {
        info::fair(&self.named.engine, &self.named.keys()?).await
    }

    /// Frees the lock whoever holds it, and wakes the head of its queue; returns whether it
    /// was held. An escape hatch for operators: the holder is not told until its next
    /// renewal, unlock or extension finds the lock gone. The fencing counter stays, and so
    /// does the queue (its waiters keep their turns).
    pub async fn force_unlock(&self) -> Result<bool, LockError> {
        let (engine, keys) = (&self.named.engine, self.named.keys()?);
        engine
            .free(&wire::fair::force_unlock(engine.protocol(), &keys))
            .await
    }

    fn take(&self) -> Take {
        Take {
            named: self.named.clone(),
            waiter_timeout: self.waiter_timeout,
        }
    }
}

impl fmt::Debug for FairLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.named)
            .field("waiter_timeout", &self.waiter_timeout)
            .finish()
    }
}

/// A request to take a fair lock, before it starts.
struct Take {
    named: Named,
    waiter_timeout: Duration,
}

/// One acquisition of a fair lock, started.
struct Taking {
    named: Named,
    waiter_timeout: Duration,
    hold: Arc<Hold>,
    request: Request,
}

impl Taking {
    /// Our own wake channel.
    fn wake(&self) -> String {
        let owner = self.named.engine.owner(self.hold.holder);
        format!("{}{owner}", self.hold.keys.channel(ChannelRole::FairWake))
    }
}

impl Primitive for Take {
    type Guard = LockGuard;
    type Started = Taking;
    const SPAN: &'static str = "fair_lock";
    const KIND: &'static str = "fair";

    fn named(&self) -> &Named {
        &self.named
    }

    fn start(self, request: Request) -> Result<Taking, LockError> {
        let (min, max) = (Duration::from_millis(100), Duration::from_secs(3600));
        check_range("waiter_timeout", self.waiter_timeout, min, max)?;
        if request.hold_at_least.is_some() {
            return Err(LockError::InvalidOption {
                option: "hold_at_least",
                reason: "a fair lock hands itself to the next in its queue when released; \
                         use a mutex to keep a lock taken for a minimum time"
                    .to_owned(),
            });
        }
        Ok(Taking {
            hold: self.named.hold_for_current_task(HoldKind::Fair)?,
            named: self.named,
            waiter_timeout: self.waiter_timeout,
            request,
        })
    }
}

impl Started for Taking {
    type Guard = LockGuard;

    fn named(&self) -> &Named {
        &self.named
    }

    // Subscribed before we can be queued, so no wake-up is missed.
    fn early_channel(&self) -> Option<String> {
        Some(self.wake())
    }

    fn channel(&self, _index: usize) -> String {
        self.wake()
    }

    // Call again at least every third of the waiter timeout to stay queued.
    fn max_sleep(&self) -> Option<Duration> {
        Some(self.waiter_timeout / 3)
    }

    async fn attempt(&mut self) -> Result<Attempt<LockGuard>, LockError> {
        let (engine, hold) = (&self.named.engine, &self.hold);
        let (_, lease_len) = engine.lease(self.request.lease);
        // Queued only by a request that waits; a single try does not queue.
        let queue_for = if self.request.will_wait {
            self.waiter_timeout
        } else {
            Duration::ZERO
        };
        let attempt = engine
            .attempt(hold, self.request.lease, |expected| {
                wire::fair::acquire(engine.target(hold), expected, lease_len, queue_for)
            })
            .await?;
        Ok(attempt.map(|generation| LockGuard::new(hold.clone(), engine.clone(), generation)))
    }

    // Leave the queue at once, and pass the turn on if the lock is free.
    fn abandon(&mut self) {
        let (engine, hold) = (&self.named.engine, &self.hold);
        let leave = wire::fair::leave(&hold.keys, engine.owner_arg(hold.holder));
        engine.call_in_background(leave, "departure from a fair lock's queue");
    }
}

impl LockClient {
    /// The fair lock `name`: granted in arrival order.
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(self.engine().clone(), name.into())
    }
}
