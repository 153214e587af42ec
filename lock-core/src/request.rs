//! The public face of an acquisition: [`LockRequest`] (take, waiting if needed) and
//! [`TryLockRequest`] (one attempt), the builders every handle returns, run by the driver
//! when awaited.

use std::fmt;
use std::future::IntoFuture;
use std::pin::Pin;
use std::time::Duration;

use tracing::Instrument;

use crate::driver::{Options, Primitive, acquire};
use crate::error::LockError;
use crate::util::Short;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A primitive's acquisition with its type erased, so one request type serves every
/// primitive with the same guard (and RedLock, which has an acquisition of its own).
pub(crate) trait ErasedTake<G>: Send + Sync {
    fn start(self: Box<Self>, options: Options) -> BoxFuture<Result<G, LockError>>;

    /// What it takes, for `Debug`: the span name and the lock's name.
    fn describe(&self) -> (&'static str, &str);
}

impl<P: Primitive> ErasedTake<P::Guard> for P {
    fn start(self: Box<Self>, options: Options) -> BoxFuture<Result<P::Guard, LockError>> {
        let span = tracing::debug_span!("lock", kind = P::SPAN, name = %Short(self.name()));
        Box::pin(acquire(*self, options).instrument(span))
    }

    fn describe(&self) -> (&'static str, &str) {
        (P::SPAN, self.name())
    }
}

/// A request to take a lock, waiting for it if needed: made by a handle's `lock()` (or
/// [`LockClient::lock`](crate::LockClient::lock)), `read()`, `write()` or `acquire(n)`, run by
/// `.await`, which resolves to the guard `G`.
///
/// * [`wait`](Self::wait): how long to wait for a busy lock (default: as long as it takes).
/// * [`lease`](Self::lease): a fixed lease (default: the client's watchdog lease, renewed
///   while the guard lives).
///
/// Bad input (an invalid name, a lease outside 10 ms..=30 days, a semaphore size of 0) is
/// reported as [`LockError::InvalidName`] or [`LockError::InvalidOption`] by the `.await`,
/// before anything is sent.
#[must_use = "a lock request does nothing until awaited"]
pub struct LockRequest<G> {
    take: Box<dyn ErasedTake<G>>,
    options: Options,
}

impl<G> LockRequest<G> {
    pub(crate) fn new(take: impl ErasedTake<G> + 'static) -> Self {
        Self {
            take: Box::new(take),
            options: Options::default(),
        }
    }

    /// The builder's settings, for the builder methods of particular kinds.
    pub(crate) fn options_mut(&mut self) -> &mut Options {
        &mut self.options
    }

    /// Gives up after waiting this long, with [`LockError::Timeout`]. Without it the request
    /// waits until the lock is free. `Duration::ZERO` makes a single attempt.
    ///
    /// If Redis cannot be reached on the first attempt the request fails at once; once it is
    /// waiting, it rides out an outage (a restart, a failover), trying again every 250 ms,
    /// and if its wait ends during one it returns that error rather than
    /// [`LockError::Timeout`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = Some(wait);
        self
    }

    /// Holds the lock for a fixed lease that is never renewed (10 ms to 30 days). Without it
    /// the client's watchdog keeps the lock for as long as the guard lives.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.options.lease = Some(lease);
        self
    }
}

impl<G: Send + 'static> IntoFuture for LockRequest<G> {
    type Output = Result<G, LockError>;
    type IntoFuture = BoxFuture<Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        self.take.start(self.options)
    }
}

impl<G> fmt::Debug for LockRequest<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, name) = self.take.describe();
        f.debug_struct("LockRequest")
            .field("kind", &kind)
            .field("name", &name)
            .field("wait", &self.options.wait)
            .field("lease", &self.options.lease)
            .field("hold_at_least", &self.options.hold_at_least)
            .finish()
    }
}

/// A single attempt to take a lock: made by a handle's `try_lock()` (or
/// [`LockClient::try_lock`](crate::LockClient::try_lock)), `try_read()`, `try_write()` or
/// `try_acquire(n)`, run by `.await`, which resolves to `Ok(Some(guard))`, or `Ok(None)` when
/// someone else holds the lock.
#[must_use = "a lock request does nothing until awaited"]
pub struct TryLockRequest<G> {
    take: Box<dyn ErasedTake<G>>,
    options: Options,
}

impl<G> TryLockRequest<G> {
    pub(crate) fn new(take: impl ErasedTake<G> + 'static) -> Self {
        Self {
            take: Box::new(take),
            options: Options {
                wait: Some(Duration::ZERO),
                ..Options::default()
            },
        }
    }

    /// The builder's settings, for the builder methods of particular kinds.
    pub(crate) fn options_mut(&mut self) -> &mut Options {
        &mut self.options
    }

    /// Holds the lock for a fixed lease that is never renewed (10 ms to 30 days). Without it
    /// the client's watchdog keeps the lock for as long as the guard lives.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.options.lease = Some(lease);
        self
    }
}

impl<G: Send + 'static> IntoFuture for TryLockRequest<G> {
    type Output = Result<Option<G>, LockError>;
    type IntoFuture = BoxFuture<Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let acquire = self.take.start(self.options);
        Box::pin(async move {
            match acquire.await {
                Ok(guard) => Ok(Some(guard)),
                Err(LockError::Timeout { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }
}

impl<G> fmt::Debug for TryLockRequest<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, name) = self.take.describe();
        f.debug_struct("TryLockRequest")
            .field("kind", &kind)
            .field("name", &name)
            .field("lease", &self.options.lease)
            .field("hold_at_least", &self.options.hold_at_least)
            .finish()
    }
}
