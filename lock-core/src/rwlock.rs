//! [`ReadWriteLock`]: many readers or one writer, with [`ReadGuard`] and [`WriteGuard`].

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::client::LockClient;
use crate::driver::{Primitive, Request, Started};
use crate::engine::{Attempt, Engine};
use crate::error::LockError;
use crate::guard::{GuardCore, core_guard};
use crate::hold::Hold;
use crate::info::{self, ReadWriteLockInfo};
use crate::kind::{ChannelRole, HoldKind};
use crate::lock_string::lock_string_guard;
use crate::named::Named;
use crate::request::{LockRequest, TryLockRequest};
use crate::wire;

/// Many readers or one writer: made by
/// [`LockClient::read_write_lock`](crate::LockClient::read_write_lock). Cheap to clone.
///
/// ```no_run
/// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
///
/// let catalog = client.read_write_lock("catalog");
/// let read = catalog.read().wait(Duration::from_secs(1)).await?; // shared with other readers
/// read.unlock().await?;
/// let write = catalog.write().await?; // alone: no reader, no other writer
/// let token = write.fencing_token(); // writers get fencing tokens, like a mutex
/// # let _ = token;
/// write.unlock().await?;
/// # Ok(()) }
/// ```
///
/// The lock `N` is three keys and a channel under the hash tag `{N}`: the writer `P{N}:rw` (a
/// lock string, as for a [`Mutex`](crate::Mutex)), the readers `P{N}:rw:readers` (a hash:
/// reader owner → `count|expiry`, so each reader's lease is its own and a crashed reader's
/// share expires without freeing the others'), the writer-waiting mark
/// `P{N}:rw:writer-waiting`, and the release channel `P{N}:rw:released`.
///
/// **Policy: writers are not starved.** A writer that has to wait marks the lock, and from
/// then on new readers hold back (readers that already read may re-enter) until the writer has
/// had its turn or stopped waiting. The writer may re-enter, and may take a read share (within
/// one [`reentrant`](crate::reentrant) scope) and then give up writing: a downgrade. A reader
/// cannot upgrade: a reader asking to write waits for every reader, itself included.
#[derive(Clone)]
pub struct ReadWriteLock {
    named: Named,
}

impl ReadWriteLock {
    pub(crate) fn new(engine: Arc<Engine>, name: String) -> Self {
        Self {
            named: Named::new(engine, name),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.named.name()
    }

    /// Takes a read share, waiting as long as needed; see [`LockRequest`].
    pub fn read(&self) -> LockRequest<ReadGuard> {
        LockRequest::new(self.side())
    }

    /// Tries once to take a read share: `Ok(None)` while someone writes or a writer waits.
    pub fn try_read(&self) -> TryLockRequest<ReadGuard> {
        TryLockRequest::new(self.side())
    }

    /// Takes the write lock, waiting as long as needed; see [`LockRequest`].
    pub fn write(&self) -> LockRequest<WriteGuard> {
        LockRequest::new(self.side())
    }

    /// Tries once to take the write lock: `Ok(None)` while anyone reads or writes.
    pub fn try_write(&self) -> TryLockRequest<WriteGuard> {
        TryLockRequest::new(self.side())
    }

    /// What Redis knows about the lock right now.
    pub async fn info(&self) -> Result<ReadWriteLockInfo, LockError> {
        info::read_write(&self.named.engine, &self.named.keys()?).await
    }

    /// Frees the lock whoever holds it (the writer and every read share), and wakes its
    /// waiters; returns whether anything was held. An escape hatch for operators: the holders
    /// are not told until their next renewal, unlock or extension finds the lock gone. The
    /// writer's fencing counter stays, and so does a waiting writer's mark.
    pub async fn force_unlock(&self) -> Result<bool, LockError> {
        let (engine, keys) = (&self.named.engine, self.named.keys()?);
        engine
            .free(&wire::rwlock::force_unlock(engine.protocol(), &keys))
            .await
    }

    fn side<G>(&self) -> Side<G> {
        Side {
            named: self.named.clone(),
            guard: PhantomData,
        }
    }
}

impl fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.named)
            .finish()
    }
}

/// The guard of one side, and what tells the sides apart.
trait SideGuard: Send + 'static {
    const KIND: HoldKind;
    const SPAN: &'static str;
    fn new(core: GuardCore) -> Self;
}

/// A request to take one side of a read-write lock, before it starts.
struct Side<G> {
    named: Named,
    guard: PhantomData<fn() -> G>,
}

/// One acquisition of one side, started.
struct Taking<G> {
    named: Named,
    hold: Arc<Hold>,
    request: Request,
    guard: PhantomData<fn() -> G>,
}

impl<G: SideGuard> Primitive for Side<G> {
    type Guard = G;
    type Started = Taking<G>;
    const SPAN: &'static str = G::SPAN;
    const KIND: &'static str = G::KIND.metric();

    fn named(&self) -> &Named {
        &self.named
    }

    fn start(self, request: Request) -> Result<Taking<G>, LockError> {
        Ok(Taking {
            hold: self.named.hold_for_current_task(G::KIND)?,
            named: self.named,
            request,
            guard: PhantomData,
        })
    }
}

impl<G: SideGuard> Started for Taking<G> {
    type Guard = G;

    fn named(&self) -> &Named {
        &self.named
    }

    fn channel(&self, _index: usize) -> String {
        self.hold.keys.channel(ChannelRole::RwReleased).to_string()
    }

    async fn attempt(&mut self) -> Result<Attempt<G>, LockError> {
        let (engine, hold) = (&self.named.engine, &self.hold);
        let Request {
            lease, will_wait, ..
        } = self.request;
        let (_, lease_len) = engine.lease(lease);
        let attempt = engine
            .attempt(hold, lease, |expected| {
                wire::rwlock::acquire(engine.target(hold), expected, lease_len, will_wait)
            })
            .await?;
        Ok(attempt
            .map(|generation| G::new(GuardCore::new(hold.clone(), engine.clone(), generation))))
    }

    // A writer removes its writer-waiting mark, so the readers it held back go on at once.
    fn abandon(&mut self) {
        let (engine, hold) = (&self.named.engine, &self.hold);
        if G::KIND == HoldKind::Write {
            let unmark = wire::rwlock::unmark(engine.target(hold));
            engine.call_in_background(unmark, "removal of a writer-waiting mark");
        }
    }
}

/// A read share of a [`ReadWriteLock`]: made by [`ReadWriteLock::read`] and
/// [`ReadWriteLock::try_read`]. Released by [`unlock`](ReadGuard::unlock), or in the
/// background when dropped. Readers have no fencing token.
#[must_use = "dropping the guard releases the read share"]
pub struct ReadGuard {
    core: GuardCore,
}

impl SideGuard for ReadGuard {
    const KIND: HoldKind = HoldKind::Read;
    const SPAN: &'static str = "read_lock";

    fn new(core: GuardCore) -> Self {
        Self { core }
    }
}

core_guard!(ReadGuard, "read-write lock");

/// The write lock of a [`ReadWriteLock`]: made by [`ReadWriteLock::write`] and
/// [`ReadWriteLock::try_write`]. Like a [`LockGuard`](crate::LockGuard), it has a fencing
/// token, a hold count, [`reenter`](WriteGuard::reenter) and [`extend`](WriteGuard::extend).
#[must_use = "dropping the guard releases the write lock"]
pub struct WriteGuard {
    core: GuardCore,
}

impl SideGuard for WriteGuard {
    const KIND: HoldKind = HoldKind::Write;
    const SPAN: &'static str = "write_lock";

    fn new(core: GuardCore) -> Self {
        Self { core }
    }
}

core_guard!(WriteGuard, "read-write lock");
lock_string_guard!(WriteGuard);

impl LockClient {
    /// The read-write lock `name`: many readers or one writer.
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self.engine().clone(), name.into())
    }
}
