//! Read-write locks: many readers or one writer.
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//!
//! let catalog = client.read_write_lock("catalog");
//! let read = catalog.read().wait(Duration::from_secs(1)).await?; // shared with other readers
//! read.unlock().await?;
//! let write = catalog.write().await?; // alone: no reader, no other writer
//! let token = write.fencing_token(); // writers get fencing tokens, like a lock
//! # let _ = token;
//! write.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! The lock `N` is three keys and a channel under the hash tag `{N}`: the writer
//! `P{N}:rw` (a lock string, as for [`LockClient::lock`]), the readers `P{N}:rw:readers` (a
//! hash: reader owner → `count|expiry`, so each reader's lease is its own and a crashed
//! reader's share expires without freeing the others'), the writer-waiting mark
//! `P{N}:rw:writer-waiting`, and the release channel `P{N}:rw:released`.
//!
//! **Policy: writers are not starved.** A writer that has to wait marks the lock, and from
//! then on new readers hold back (readers that already read may re-enter) until the writer has
//! had its turn or stopped waiting. The writer may re-enter, and may take a read share (within
//! one [`reentrant`](crate::reentrant) scope) and then give up writing: a downgrade. A reader
//! cannot upgrade: a reader asking to write waits for every reader, itself included.

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
use crate::guard::{GuardCore, Hold, Kind, Lease, LockGuard};
use crate::mutex::{expected_count, millis, send_undoable};
use crate::name::LockKeys;
use crate::scripts;
use crate::waiters::Waiter;

impl LockClient {
    /// The read-write lock `name`.
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock {
            inner: self.inner.clone(),
            name: name.into(),
        }
    }
}

/// A read-write lock: made by [`LockClient::read_write_lock`]. Cheap to clone.
#[derive(Clone)]
pub struct ReadWriteLock {
    inner: Arc<Inner>,
    name: String,
}

impl ReadWriteLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes a read share; see [`RwRequest`] for the wait and lease options.
    pub fn read(&self) -> RwRequest<ReadGuard> {
        RwRequest::new(self.clone(), Mode::Read)
    }

    /// Takes the write lock; see [`RwRequest`]. The guard is a [`LockGuard`], with a fencing
    /// token.
    pub fn write(&self) -> RwRequest<LockGuard> {
        RwRequest::new(self.clone(), Mode::Write)
    }

    fn keys(&self) -> Result<RwKeys, LockError> {
        let base = LockKeys::new(&self.inner.config.prefix, &self.name)?;
        let channel = format!("{}:rw:released", base.hash);
        Ok(RwKeys {
            writer: LockKeys {
                name: base.name.clone(),
                hash: format!("{}:rw", base.hash),
                channel: channel.clone(),
            },
            readers: LockKeys {
                name: base.name,
                hash: format!("{}:rw:readers", base.hash),
                channel,
            },
            mark: format!("{}:rw:writer-waiting", base.hash),
        })
    }
}

impl fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.name)
            .finish()
    }
}

struct RwKeys {
    writer: LockKeys,
    readers: LockKeys,
    mark: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
}

/// A request for a read share ([`ReadGuard`]) or the write lock ([`LockGuard`]): made by
/// [`ReadWriteLock::read`] / [`ReadWriteLock::write`], run by `.await`.
#[must_use = "a lock request does nothing until awaited"]
pub struct RwRequest<G> {
    lock: ReadWriteLock,
    mode: Mode,
    wait: Option<Duration>,
    lease: Option<Duration>,
    _guard: std::marker::PhantomData<fn() -> G>,
}

impl<G> RwRequest<G> {
    fn new(lock: ReadWriteLock, mode: Mode) -> Self {
        Self {
            lock,
            mode,
            wait: None,
            lease: None,
            _guard: std::marker::PhantomData,
        }
    }

    /// Gives up after waiting this long, with [`LockError::Timeout`]. `Duration::ZERO` makes a
    /// single attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Holds for a fixed lease that is never renewed (at least 10 ms). Without it the
    /// client's watchdog keeps the hold for as long as the guard lives.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }
}

impl<G> fmt::Debug for RwRequest<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwRequest")
            .field("lock", &self.lock)
            .field("mode", &self.mode)
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .finish()
    }
}

impl IntoFuture for RwRequest<ReadGuard> {
    type Output = Result<ReadGuard, LockError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'static>>;

    fn into_future(self) -> Self::IntoFuture {
        let span =
            tracing::debug_span!("read_lock", name = %crate::error::shorten(&self.lock.name));
        Box::pin(
            async move {
                match acquire(self.lock, Mode::Read, self.wait, self.lease).await? {
                    Held::Read(guard) => Ok(guard),
                    Held::Write(_) => unreachable!("a read request yields a read share"),
                }
            }
            .instrument(span),
        )
    }
}

impl IntoFuture for RwRequest<LockGuard> {
    type Output = Result<LockGuard, LockError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'static>>;

    fn into_future(self) -> Self::IntoFuture {
        let span =
            tracing::debug_span!("write_lock", name = %crate::error::shorten(&self.lock.name));
        Box::pin(
            async move {
                match acquire(self.lock, Mode::Write, self.wait, self.lease).await? {
                    Held::Write(guard) => Ok(guard),
                    Held::Read(_) => unreachable!("a write request yields the write lock"),
                }
            }
            .instrument(span),
        )
    }
}

enum Held {
    Read(ReadGuard),
    Write(LockGuard),
}

/// Removes a waiting writer's mark when its wait ends without the lock (timeout, error,
/// cancellation), so the readers it held back go on at once.
struct Unmark<'a> {
    inner: &'a Arc<Inner>,
    keys: &'a RwKeys,
    owner: &'a str,
    armed: bool,
}

impl Drop for Unmark<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut invocation = self.inner.publish.rw_unmark.key(&self.keys.mark);
            invocation.arg(self.owner).arg(&self.keys.writer.channel);
            self.inner
                .script_in_background(invocation, "removal of a writer-waiting mark");
        }
    }
}

async fn acquire(
    lock: ReadWriteLock,
    mode: Mode,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> Result<Held, LockError> {
    let start = Instant::now();
    let keys = lock.keys()?;
    if let Some(lease) = lease {
        check_lease("lease", lease)?;
    }
    let inner = &lock.inner;
    let owner = inner.owner_for_current_task();
    let deadline = wait.and_then(|w| start.checked_add(w));
    let will_wait = wait != Some(Duration::ZERO);
    let mut unmark = Unmark {
        inner,
        keys: &keys,
        owner: &owner,
        armed: mode == Mode::Write && will_wait,
    };
    let mut waiter = Waiter::new(
        deadline,
        inner.config.watchdog_lease,
        inner.backend.connect_timeout(),
    );
    loop {
        waiter.mark_seen();
        let retry_in = match attempt(inner, &keys, &owner, mode, lease, will_wait).await {
            Ok(Ok(held)) => {
                unmark.armed = false;
                return Ok(held);
            }
            Ok(Err(retry_in)) => retry_in,
            Err(e) => {
                waiter.ride_out(e).await?;
                continue;
            }
        };
        if waiter.expired() {
            return Err(LockError::Timeout {
                name: keys.writer.name.clone(),
                waited: start.elapsed(),
                holder_ttl: retry_in,
            });
        }
        // Subscribe first, then try again right away.
        if waiter.subscribe(&inner.waiters, &keys.writer.channel).await {
            continue;
        }
        waiter.sleep(retry_in).await;
    }
}

/// One try; `Err(d)` inside `Ok`: busy, look again in `d` (None: no expiry to wait for).
async fn attempt(
    inner: &Arc<Inner>,
    keys: &RwKeys,
    owner: &str,
    mode: Mode,
    lease: Option<Duration>,
    will_wait: bool,
) -> Result<Result<Held, Option<Duration>>, LockError> {
    let (hold, script) = match mode {
        Mode::Write => (inner.hold(&keys.writer, owner), &scripts::RW_WRITE),
        Mode::Read => (
            inner.hold_of(Kind::Read, &keys.readers, owner),
            &scripts::RW_READ,
        ),
    };
    let op = hold.op.clone().lock_owned().await;
    let expected = expected_count(&hold)?;
    let (kind, lease_len) = match lease {
        Some(d) => (Lease::Fixed, d),
        None => (Lease::Watchdog, inner.config.watchdog_lease),
    };
    let mut invocation = script.key(&keys.writer.hash);
    invocation
        .key(&keys.readers.hash)
        .key(&keys.mark)
        .arg(owner)
        .arg(millis(lease_len))
        .arg(expected)
        .arg(if will_wait { "1" } else { "0" });
    let (reply, sent_at, op) = send_undoable(inner, &hold, expected, op, invocation).await?;
    let outcome = match reply {
        token if token > 0 => {
            let token = if mode == Mode::Write {
                token.unsigned_abs()
            } else {
                0
            };
            let generation = hold.acquired(token, sent_at, kind, lease_len);
            Ok(Ok(match mode {
                Mode::Write => Held::Write(LockGuard::new(hold.clone(), inner.clone(), generation)),
                Mode::Read => Held::Read(ReadGuard::new(hold.clone(), inner.clone(), generation)),
            }))
        }
        0 => {
            let generation = hold.state().generation;
            hold.mark_lost(generation, "re-entry found the hold gone");
            Err(LockError::Lost {
                name: keys.writer.name.clone(),
            })
        }
        -1 => Ok(Err(None)),
        busy => Ok(Err(Some(Duration::from_millis((-2 - busy).unsigned_abs())))),
    };
    drop(op);
    outcome
}

/// A read share of a [`ReadWriteLock`]. Released by [`unlock`](ReadGuard::unlock), or in
/// the background when dropped.
#[must_use = "dropping the guard releases the read share"]
pub struct ReadGuard {
    core: GuardCore,
}

impl ReadGuard {
    fn new(hold: Arc<Hold>, inner: Arc<Inner>, generation: u64) -> Self {
        Self {
            core: GuardCore::new(hold, inner, generation),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.core.hold.keys.name
    }

    /// True while the share is ours: not released, not lost, within its lease.
    pub fn is_held(&self) -> bool {
        self.core.is_held()
    }

    /// Resolves when the share is known or presumed lost, or released.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.core.lost()
    }

    /// Gives the share back. Returns whether it was still held until now.
    pub async fn unlock(self) -> Result<bool, LockError> {
        self.core.release().await
    }
}

impl fmt::Debug for ReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadGuard")
            .field("name", &self.core.hold.keys.name)
            .field("held", &self.is_held())
            .finish()
    }
}
