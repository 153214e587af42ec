//! [`Guard`]: what every guard offers, and the core the engine's guards share.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::LockError;
use crate::held_lock::{AtRisk, HeldLock, LeaseWatch, Lost};
use crate::hold::Hold;
use crate::lease::LeaseState;
use crate::scope;
use crate::update::{Under, Update};

/// Proof that this process holds a lock, of any kind: [`LockGuard`](crate::LockGuard),
/// [`ReadGuard`](crate::ReadGuard), [`WriteGuard`](crate::WriteGuard),
/// [`SemaphoreGuard`](crate::SemaphoreGuard), [`MultiLockGuard`](crate::MultiLockGuard) and
/// [`RedLockGuard`](crate::RedLockGuard).
///
/// Every guard also has these methods as inherent methods, so calling them needs no import
/// (`fencing_token` only where the kind always has one, as a plain `u64`: see
/// [`fencing_token`](Guard::fencing_token)); the trait is for code that takes any kind of lock (the tower layer, `#[distributed_lock]`,
/// your own helpers). It is sealed: only this crate implements it.
///
/// Dropping a guard releases what it holds in the background, on the client's runtime; it
/// never blocks and never panics, and if the runtime is gone the lease expires the lock.
/// [`unlock`](Guard::unlock) releases it and says whether it was still held.
///
/// ```no_run
/// use lock_core::{Guard, LockError};
///
/// async fn write_under<G: Guard>(guard: G) -> Result<(), LockError> {
///     tokio::select! {
///         _ = guard.lost() => return Err(LockError::Lost { name: guard.name().to_owned() }),
///         _ = write(guard.fencing_token()) => {}
///     }
///     guard.unlock().await?;
///     Ok(())
/// }
/// # async fn write(_token: Option<u64>) {}
/// ```
pub trait Guard: sealed::Sealed + Send + Sync + fmt::Debug {
    /// The lock's name (a multi-lock's names, joined by `+`).
    fn name(&self) -> &str;

    /// The fencing token: a number strictly greater than the token of every earlier holder
    /// of the name (re-entries of one hold share it), for the resource to refuse a stale
    /// holder's writes. `Some` exactly for the kinds that have one, a mutex, a fair lock and
    /// a write lock, whose guards ([`LockGuard`](crate::LockGuard),
    /// [`WriteGuard`](crate::WriteGuard)) also have an inherent `fencing_token()` that returns
    /// the same number as a plain `u64`. `None` for a read share and permits (which have no
    /// token; their guards have no inherent `fencing_token()`), a multi-lock (one token per
    /// lock: [`MultiLockGuard::fencing_tokens`](crate::MultiLockGuard::fencing_tokens)) and a
    /// RedLock (whose per-node tokens are no single increasing number:
    /// [`RedLockGuard::node_tokens`](crate::RedLockGuard::node_tokens)).
    /// [`HeldLock::fencing_token`] is the same.
    fn fencing_token(&self) -> Option<u64>;

    /// True while the lock is ours: not released, not lost, and within its lease as last
    /// confirmed by Redis (measured on a monotonic clock from when the request was sent).
    fn is_held(&self) -> bool;

    /// How much longer the lock is ours unless a renewal extends it; zero once it is not
    /// held.
    fn remaining(&self) -> Duration;

    /// Resolves when the lock is known or presumed lost (the watchdog found it gone, no
    /// renewal succeeded within the lease, a fixed lease ran out), or released. Select on it
    /// to stop work that must not go on without the lock.
    fn lost(&self) -> Lost;

    /// How the lease stands now: [`LeaseState::Held`]; [`LeaseState::AtRisk`] once a
    /// renewal failed while the lease still runs (until a later renewal succeeds, or the
    /// lease runs out and the lock is lost); [`LeaseState::Ended`] once it is lost or
    /// released (exactly when [`is_held`](Guard::is_held) is false). A multi-lock's is its
    /// worst lock's.
    fn lease_state(&self) -> LeaseState;

    /// Resolves when the lease is at risk (a renewal failed while the lease still runs) or
    /// the lock is not held any more, whichever comes first; at once if one is already so.
    /// Earlier than [`lost`](Guard::lost): while [`is_held`](Guard::is_held) is still true and
    /// [`remaining`](Guard::remaining) says how long is left. Check
    /// [`lease_state`](Guard::lease_state) once it resolves; a later successful renewal makes
    /// it [`LeaseState::Held`] again, which [`watch_lease`](Guard::watch_lease) says.
    fn at_risk(&self) -> AtRisk;

    /// A watch of every change of the lease's state (at risk, held again, ended), which
    /// outlives the guard.
    fn watch_lease(&self) -> LeaseWatch;

    /// A cloneable view of the lock (name, fencing token, lost signal) that cannot release
    /// it: for a request handler, a database layer, a task that must check the lock.
    fn held_lock(&self) -> HeldLock;

    /// Releases the lock (one hold of it, if re-entered). Returns whether it was still held
    /// until now; `Ok(false)` means it had expired or been taken over, and whatever it
    /// protected may have been touched by someone else meanwhile. If Redis cannot be reached
    /// the error is returned and the lock is no longer renewed: its lease expires it.
    /// Dropping the returned future early (a timeout, a cancelled request) does not cancel
    /// the release: it finishes in the background.
    fn unlock(self) -> impl Future<Output = Result<bool, LockError>> + Send
    where
        Self: Sized;
}

pub(crate) mod sealed {
    /// Seals [`Guard`](super::Guard).
    pub trait Sealed {}
}

/// What the engine's guards share: the hold and generation they prove, and whether they were
/// given back. Dropped without [`GuardCore::release`], it releases in the background.
pub(crate) struct GuardCore {
    pub(crate) hold: Arc<Hold>,
    pub(crate) engine: Arc<Engine>,
    pub(crate) generation: u64,
    done: bool,
    /// Until when the last release keeps the lock taken
    /// ([`hold_at_least`](crate::LockRequest::hold_at_least)).
    keep_until: Option<Instant>,
}

impl GuardCore {
    pub(crate) fn new(hold: Arc<Hold>, engine: Arc<Engine>, generation: u64) -> Self {
        hold.guard_added();
        scope::record(|| HeldLock::one(hold.clone(), generation, engine.clone()));
        Self {
            hold,
            engine,
            generation,
            done: false,
            keep_until: None,
        }
    }

    /// Keeps the lock taken until at least `min_hold` from now, even if released sooner.
    pub(crate) fn keep_for(&mut self, min_hold: Duration) {
        self.keep_until = Instant::now().checked_add(min_hold);
    }

    pub(crate) fn name(&self) -> &str {
        self.hold.name()
    }

    pub(crate) fn is_held(&self) -> bool {
        !self.done && self.hold.is_held(self.generation)
    }

    pub(crate) fn remaining(&self) -> Duration {
        if self.done {
            return Duration::ZERO;
        }
        self.hold.remaining(self.generation)
    }

    pub(crate) fn lost(&self) -> Lost {
        Lost::new(self.hold.clone().ended(self.generation))
    }

    pub(crate) fn lease_state(&self) -> LeaseState {
        if self.done {
            return LeaseState::Ended;
        }
        self.hold.lease_state(self.generation)
    }

    pub(crate) fn held_lock(&self) -> HeldLock {
        HeldLock::one(self.hold.clone(), self.generation, self.engine.clone())
    }

    /// A guarded update under this hold (`crate::update`).
    pub(crate) fn update(&self) -> Update {
        Update::new(Ok(Under {
            updater: self.engine.clone(),
            hold: self.hold.clone(),
            generation: self.generation,
        }))
    }

    /// Gives it back; returns whether it was still held until now. Dropped before it is
    /// done (a cancelled request, a timeout), the release goes on in the background.
    pub(crate) async fn release(mut self) -> Result<bool, LockError> {
        self.done = true;
        self.hold.guard_removed();
        let mut releasing = Releasing {
            engine: self.engine.clone(),
            hold: Some(self.hold.clone()),
            generation: self.generation,
            keep_until: self.keep_until,
        };
        drop(self);
        let result = match &releasing.hold {
            Some(hold) => {
                let (generation, keep_until) = (releasing.generation, releasing.keep_until);
                releasing.engine.release(hold, generation, keep_until).await
            }
            None => Ok(false),
        };
        if let Some(hold) = releasing.hold.take() {
            releasing.engine.forget(hold);
        }
        result
    }
}

/// A release under way: dropped before it is done, it finishes in the background (sending
/// it again is safe: the release scripts recognise a repeat).
struct Releasing {
    engine: Arc<Engine>,
    hold: Option<Arc<Hold>>,
    generation: u64,
    keep_until: Option<Instant>,
}

impl Drop for Releasing {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            self.engine
                .release_in_background(hold, self.generation, self.keep_until);
        }
    }
}

impl Drop for GuardCore {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        self.hold.guard_removed();
        self.engine
            .release_in_background(self.hold.clone(), self.generation, self.keep_until);
    }
}

/// Implements the common methods (inherent and [`Guard`]) of a guard made of a
/// [`GuardCore`] field named `core`.
macro_rules! core_guard {
    ($guard:ident, $what:literal) => {
        impl $guard {
            #[doc = concat!("The name of the ", $what, ".")]
            pub fn name(&self) -> &str {
                self.core.name()
            }

            /// True while it is ours: not released, not lost, and within its lease as last
            /// confirmed by Redis (measured on a monotonic clock from when the request was
            /// sent).
            pub fn is_held(&self) -> bool {
                self.core.is_held()
            }

            /// How much longer it is ours unless a renewal extends it; zero once it is not
            /// held.
            pub fn remaining(&self) -> ::std::time::Duration {
                self.core.remaining()
            }

            /// Resolves when it is known or presumed lost (the watchdog found it gone, no
            /// renewal succeeded within the lease, a fixed lease ran out), or released.
            pub fn lost(&self) -> $crate::held_lock::Lost {
                self.core.lost()
            }

            /// How its lease stands now: held, at risk (a renewal failed while the lease
            /// still runs; a later success clears it) or ended (lost or released). See
            /// [`LeaseState`]($crate::LeaseState).
            pub fn lease_state(&self) -> $crate::lease::LeaseState {
                self.core.lease_state()
            }

            /// Resolves when its lease is at risk (a renewal failed while the lease still
            /// runs) or it is not held any more, whichever comes first: see
            /// [`Guard::at_risk`]($crate::Guard::at_risk).
            pub fn at_risk(&self) -> $crate::held_lock::AtRisk {
                self.core.held_lock().at_risk()
            }

            /// A watch of every change of its lease's state: see
            /// [`LeaseWatch`]($crate::LeaseWatch).
            pub fn watch_lease(&self) -> $crate::held_lock::LeaseWatch {
                self.core.held_lock().watch_lease()
            }

            /// A cloneable view (name, fencing token, lost signal) that cannot release it.
            pub fn held_lock(&self) -> $crate::held_lock::HeldLock {
                self.core.held_lock()
            }

            /// Gives it back (one hold of it, if re-entered). Returns whether it was still
            /// held until now; `Ok(false)` means it had expired or been taken over. If Redis
            /// cannot be reached the error is returned and it is no longer renewed: its lease
            /// expires it. Dropping the returned future early does not cancel the release: it
            /// finishes in the background.
            pub async fn unlock(self) -> Result<bool, $crate::error::LockError> {
                self.core.release().await
            }
        }

        impl $crate::guard::sealed::Sealed for $guard {}

        impl $crate::guard::Guard for $guard {
            fn name(&self) -> &str {
                self.core.name()
            }

            fn fencing_token(&self) -> Option<u64> {
                self.core.hold.fencing_token()
            }

            fn is_held(&self) -> bool {
                self.core.is_held()
            }

            fn remaining(&self) -> ::std::time::Duration {
                self.core.remaining()
            }

            fn lost(&self) -> $crate::held_lock::Lost {
                self.core.lost()
            }

            fn lease_state(&self) -> $crate::lease::LeaseState {
                self.core.lease_state()
            }

            fn at_risk(&self) -> $crate::held_lock::AtRisk {
                self.core.held_lock().at_risk()
            }

            fn watch_lease(&self) -> $crate::held_lock::LeaseWatch {
                self.core.held_lock().watch_lease()
            }

            fn held_lock(&self) -> $crate::held_lock::HeldLock {
                self.core.held_lock()
            }

            async fn unlock(self) -> Result<bool, $crate::error::LockError> {
                self.core.release().await
            }
        }

        impl ::std::fmt::Debug for $guard {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                // The owner id stays out: whoever has it can release or extend the lock.
                f.debug_struct(stringify!($guard))
                    .field("name", &self.core.name())
                    .field("fencing_token", &self.core.hold.fencing_token())
                    .field("held", &self.core.is_held())
                    .finish()
            }
        }
    };
}

pub(crate) use core_guard;
