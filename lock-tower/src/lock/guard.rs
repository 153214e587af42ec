//! [`AnyGuard`]: a lock-core guard whose kind (mutex, read share, write lock, permit, ...) is
//! erased, with only what the lock layer asks of it.
//!
//! Every lock-core guard implements [`lock_core::Guard`], which cannot be a trait object (its
//! `unlock` takes the guard by value and returns an opaque future). [`LayerGuard`] is the
//! object-safe part the layer uses, implemented once for every `Guard`: a new kind of lock
//! needs no change here, only its request in `acquire`.

use std::fmt;
use std::pin::Pin;

use lock_core::{Guard, HeldLock, LockError, Lost};

/// A release under way, with a view of the lock it gives back (for its name afterwards).
pub(crate) type Unlock = Pin<Box<dyn Future<Output = (Result<bool, LockError>, HeldLock)> + Send>>;

/// What the layer asks of a guard, whatever its kind.
trait LayerGuard: Send + Sync + fmt::Debug {
    fn name(&self) -> &str;
    fn fencing_token(&self) -> Option<u64>;
    fn held_lock(&self) -> HeldLock;
    fn is_held(&self) -> bool;
    fn lost(&self) -> Lost;
    fn unlock(self: Box<Self>) -> Unlock;
}

impl<G: Guard + 'static> LayerGuard for G {
    fn name(&self) -> &str {
        Guard::name(self)
    }

    fn fencing_token(&self) -> Option<u64> {
        Guard::fencing_token(self)
    }

    fn held_lock(&self) -> HeldLock {
        Guard::held_lock(self)
    }

    fn is_held(&self) -> bool {
        Guard::is_held(self)
    }

    fn lost(&self) -> Lost {
        Guard::lost(self)
    }

    fn unlock(self: Box<Self>) -> Unlock {
        let held = Guard::held_lock(&*self);
        Box::pin(async move { (Guard::unlock(*self).await, held) })
    }
}

/// A held lock of any kind the layer takes. Dropping it releases the lock in the background
/// (the guard's own drop).
pub(crate) struct AnyGuard(Box<dyn LayerGuard>);

impl AnyGuard {
    pub(crate) fn new(guard: impl Guard + 'static) -> Self {
        Self(Box::new(guard))
    }

    /// The lock's name.
    pub(crate) fn name(&self) -> &str {
        self.0.name()
    }

    /// The lock's fencing token, for the kinds that have one.
    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.0.fencing_token()
    }

    /// A view of the lock for the handler (the request's extension).
    pub(crate) fn held_lock(&self) -> HeldLock {
        self.0.held_lock()
    }

    /// Whether the lock is still ours, by the guard's own account (its lease read against the
    /// clock).
    pub(crate) fn is_held(&self) -> bool {
        self.0.is_held()
    }

    /// Resolves when the lock is lost.
    pub(crate) fn lost(&self) -> Lost {
        self.0.lost()
    }

    /// The release, polled by the request's future or body. Dropped before it is done (the
    /// request abandoned half-way through), it finishes in the background: lock-core's
    /// `unlock` is not cut short by a drop.
    pub(crate) fn unlock(self) -> Unlock {
        self.0.unlock()
    }
}

impl fmt::Debug for AnyGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}
