//! [`HeldLock`], a cloneable view of a held lock of any kind, and what a holder waits on:
//! [`Lost`] (the lock is gone), [`AtRisk`] (a renewal failed) and [`LeaseWatch`] (every
//! change of its [`LeaseState`]).

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::select_all;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::hold::Hold;
use crate::lease::LeaseState;
use crate::update::{Under, Update, Updater};

/// `Future` and `Debug` for a signal: a boxed future of `()` in a named type.
macro_rules! signal {
    ($name:ident) => {
        impl Future for $name {
            type Output = ();

            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
                self.0.as_mut().poll(cx)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name)).finish_non_exhaustive()
            }
        }
    };
}

/// Resolves when a lock is known or presumed lost, or released: made by
/// [`Guard::lost`](crate::Guard::lost) and [`HeldLock::lost`].
///
/// It does not borrow the guard, so it can be moved into a `select!` next to the work the
/// lock protects, or into another task.
#[must_use = "futures do nothing unless polled"]
pub struct Lost(Pin<Box<dyn Future<Output = ()> + Send + 'static>>);

impl Lost {
    pub(crate) fn new(future: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(Box::pin(future))
    }

    /// Resolves when the first of `all` resolves.
    pub(crate) fn any(all: Vec<Lost>) -> Self {
        Self::new(async move {
            if !all.is_empty() {
                select_all(all).await;
            }
        })
    }
}

signal!(Lost);

/// Resolves when a held lock's lease is at risk (a renewal failed while the lease still
/// runs) or once the lock is not held any more: made by
/// [`Guard::at_risk`](crate::Guard::at_risk) and [`HeldLock::at_risk`].
///
/// Like [`Lost`], it does not borrow the guard. It resolves once; whether the lock recovered
/// afterwards is for [`LeaseWatch`] to say.
#[must_use = "futures do nothing unless polled"]
pub struct AtRisk(Pin<Box<dyn Future<Output = ()> + Send + 'static>>);

signal!(AtRisk);

/// Every change of a held lock's [`LeaseState`]: made by
/// [`Guard::watch_lease`](crate::Guard::watch_lease) and [`HeldLock::watch_lease`]. It
/// holds a [`HeldLock`] (no release), so it may outlive the guard and move to another task.
///
/// ```no_run
/// use lock_core::{LeaseState, LockClient, LockError};
///
/// # async fn f(client: LockClient) -> Result<(), LockError> {
/// let guard = client.lock("report").await?;
/// let mut lease = guard.watch_lease();
/// loop {
///     match lease.changed().await {
///         LeaseState::AtRisk => tracing::warn!("renewals failing: pausing new batches"),
///         LeaseState::Held => tracing::info!("renewed again: resuming"),
///         _ => break, // lost (or released): stop
///     }
/// }
/// # Ok(()) }
/// ```
pub struct LeaseWatch {
    held: HeldLock,
    changes: Vec<watch::Receiver<u64>>,
    /// The state this watch last reported.
    seen: LeaseState,
}

impl LeaseWatch {
    fn new(held: HeldLock) -> Self {
        let changes = held.changes();
        let seen = held.lease_state();
        Self {
            held,
            changes,
            seen,
        }
    }

    /// The state now.
    pub fn state(&self) -> LeaseState {
        self.held.lease_state()
    }

    /// Waits until the state differs from the one this watch last reported (when it was
    /// made, then each `changed()`) and returns it: `AtRisk` when a renewal fails, `Held`
    /// again when a later one succeeds, `Ended` when the lock is lost or released (also when
    /// its lease runs out unconfirmed: the watch checks the deadline itself, so it does not
    /// depend on the watchdog's task running). `Ended` is final: once reported, every later
    /// call returns it at once.
    pub async fn changed(&mut self) -> LeaseState {
        loop {
            for changes in &mut self.changes {
                changes.borrow_and_update();
            }
            let now = self.held.lease_state();
            if now != self.seen || now == LeaseState::Ended {
                self.seen = now;
                return now;
            }
            let Some(deadline) = self.held.deadline() else {
                continue;
            };
            let changed = select_all(self.changes.iter_mut().map(|c| Box::pin(c.changed())));
            tokio::select! {
                (changed, ..) = changed => if changed.is_err() {
                    self.seen = LeaseState::Ended;
                    return LeaseState::Ended;
                },
                () = tokio::time::sleep_until(deadline) => self.held.expire_due(),
            }
        }
    }
}

impl fmt::Debug for LeaseWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseWatch")
            .field("name", &self.held.name())
            .field("state", &self.state())
            .finish()
    }
}

/// What a [`HeldLock`] needs from a lock that is not one hold of this crate's engine (a
/// RedLock).
pub(crate) trait View: Send + Sync {
    fn name(&self) -> &str;
    fn is_held(&self) -> bool;
    fn lost(&self) -> Lost;
    fn lease_state(&self) -> LeaseState;
    /// A receiver bumped by every change of the state, the current one seen.
    fn changes(&self) -> watch::Receiver<u64>;
    /// When it runs out unless renewed; None once it is not held.
    fn deadline(&self) -> Option<Instant>;
    /// Marks it lost if its deadline has passed.
    fn expire_due(&self);
}

/// A cheap, cloneable view of a held lock of any kind: its name, its fencing token (for the
/// kinds that have one), whether it is still held, and its [`Lost`] signal, without the power
/// to release it.
///
/// Hand it to code that must check the lock is still ours: a request handler (the tower
/// layer puts one in the request's extensions), a function annotated with
/// `#[distributed_lock(held = ...)]`, a database update. Made by
/// [`Guard::held_lock`](crate::Guard::held_lock) and found by
/// [`current_lock`](crate::current_lock).
#[derive(Clone)]
pub struct HeldLock {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    One {
        hold: Arc<Hold>,
        generation: u64,
        /// What sends its guarded updates.
        updater: Arc<dyn Updater>,
    },
    Many {
        name: Arc<str>,
        holds: Arc<[(Arc<Hold>, u64)]>,
    },
    Other(Arc<dyn View>),
}

impl HeldLock {
    pub(crate) fn one(hold: Arc<Hold>, generation: u64, updater: Arc<dyn Updater>) -> Self {
        Self {
            inner: Inner::One {
                hold,
                generation,
                updater,
            },
        }
    }

    pub(crate) fn many(name: Arc<str>, holds: Arc<[(Arc<Hold>, u64)]>) -> Self {
        Self {
            inner: Inner::Many { name, holds },
        }
    }

    pub(crate) fn other(view: Arc<dyn View>) -> Self {
        Self {
            inner: Inner::Other(view),
        }
    }

    /// The lock's name (a multi-lock's names, joined by `+`).
    pub fn name(&self) -> &str {
        match &self.inner {
            Inner::One { hold, .. } => hold.name(),
            Inner::Many { name, .. } => name,
            Inner::Other(view) => view.name(),
        }
    }

    /// The fencing token, as [`Guard::fencing_token`](crate::Guard::fencing_token) gives it:
    /// strictly greater than the token of every earlier holder of the name. `Some` for a
    /// mutex, a fair lock and a read-write lock's write side; `None` for a read share, a
    /// semaphore's permits, a multi-lock (each of its locks has its own token: see
    /// [`MultiLockGuard::fencing_tokens`](crate::MultiLockGuard::fencing_tokens)) and a
    /// RedLock (see [`RedLockGuard::node_tokens`](crate::RedLockGuard::node_tokens)).
    pub fn fencing_token(&self) -> Option<u64> {
        match &self.inner {
            Inner::One { hold, .. } => hold.fencing_token(),
            Inner::Many { .. } | Inner::Other(_) => None,
        }
    }

    /// A guarded update of your keys, applied only while this lock is still this hold's: see
    /// [`update`](crate::update). For a mutex, a fair lock and a write lock; for any other
    /// kind (a read share, permits, a multi-lock, a RedLock) its
    /// [`send`](Update::send) is [`LockError::Unsupported`](crate::LockError::Unsupported).
    pub fn update(&self) -> Update {
        let unsupported = || crate::error::LockError::Unsupported {
            feature: "guarded update",
            missing: "a lock with one owner and a fencing token",
            detail: Some(format!("`{}` is a multi-lock or a RedLock", self.name())),
        };
        Update::new(match &self.inner {
            Inner::One {
                hold,
                generation,
                updater,
            } => Ok(Under {
                updater: updater.clone(),
                hold: hold.clone(),
                generation: *generation,
            }),
            Inner::Many { .. } | Inner::Other(_) => Err(unsupported()),
        })
    }

    /// The key `base` + `{name}`, in this lock's Redis Cluster slot (its hash tag is the
    /// lock's name), for a guarded [`update`](Self::update): e.g. `stock:{item:42}` for
    /// `base` `"stock:"` under the lock `item:42`. A `base` with a `{` is
    /// [`LockError::InvalidOption`](crate::LockError::InvalidOption). (A multi-lock's name is
    /// its names joined by `+`, in no single slot.)
    pub fn key_in_slot(&self, base: &str) -> Result<String, crate::error::LockError> {
        crate::update::key_in_slot(base, self.name())
    }

    /// True while the lock is ours: not released, not lost, and within its lease.
    pub fn is_held(&self) -> bool {
        match &self.inner {
            Inner::One {
                hold, generation, ..
            } => hold.is_held(*generation),
            Inner::Many { holds, .. } => holds.iter().all(|(h, g)| h.is_held(*g)),
            Inner::Other(view) => view.is_held(),
        }
    }

    /// Resolves when the lock is known or presumed lost, or released.
    pub fn lost(&self) -> Lost {
        match &self.inner {
            Inner::One {
                hold, generation, ..
            } => Lost::new(hold.clone().ended(*generation)),
            Inner::Many { holds, .. } => Lost::any(
                holds
                    .iter()
                    .map(|(h, g)| Lost::new(h.clone().ended(*g)))
                    .collect(),
            ),
            Inner::Other(view) => view.lost(),
        }
    }

    /// How the lease stands now: held, at risk (a renewal failed; the lease still runs) or
    /// ended (lost or released). A multi-lock's is its worst lock's.
    pub fn lease_state(&self) -> LeaseState {
        match &self.inner {
            Inner::One {
                hold, generation, ..
            } => hold.lease_state(*generation),
            Inner::Many { holds, .. } => holds
                .iter()
                .map(|(h, g)| h.lease_state(*g))
                .max_by_key(|state| match state {
                    LeaseState::Held => 0,
                    LeaseState::AtRisk => 1,
                    LeaseState::Ended => 2,
                })
                .unwrap_or(LeaseState::Ended),
            Inner::Other(view) => view.lease_state(),
        }
    }

    /// Resolves when the lease is at risk (a renewal failed while it still runs: see
    /// [`LeaseState::AtRisk`]) or the lock is not held any more, whichever comes first; at
    /// once if one is already so. Select on it next to [`lost`](Self::lost) to react before
    /// the lock is gone (stop taking new work, checkpoint), then check
    /// [`lease_state`](Self::lease_state). It does not say when the lease is safe again:
    /// [`watch_lease`](Self::watch_lease) does.
    pub fn at_risk(&self) -> AtRisk {
        let mut watch = self.watch_lease();
        AtRisk(Box::pin(async move {
            let mut state = watch.seen;
            while state == LeaseState::Held {
                state = watch.changed().await;
            }
        }))
    }

    /// A watch of the lease's state: [`LeaseWatch::changed`] says each change (at risk,
    /// held again, ended).
    pub fn watch_lease(&self) -> LeaseWatch {
        LeaseWatch::new(self.clone())
    }

    /// Receivers of every hold's changes, the current ones seen.
    fn changes(&self) -> Vec<watch::Receiver<u64>> {
        match &self.inner {
            Inner::One { hold, .. } => vec![hold.changes()],
            Inner::Many { holds, .. } => holds.iter().map(|(h, _)| h.changes()).collect(),
            Inner::Other(view) => vec![view.changes()],
        }
    }

    /// The earliest moment a lock of this view runs out unless renewed; None once none is
    /// held.
    fn deadline(&self) -> Option<Instant> {
        match &self.inner {
            Inner::One {
                hold, generation, ..
            } => hold.deadline(*generation),
            Inner::Many { holds, .. } => holds.iter().filter_map(|(h, g)| h.deadline(*g)).min(),
            Inner::Other(view) => view.deadline(),
        }
    }

    /// Marks lost whatever of this view has run out.
    fn expire_due(&self) {
        let now = Instant::now();
        match &self.inner {
            Inner::One { hold, .. } => {
                hold.expire_if_due(now);
            }
            Inner::Many { holds, .. } => {
                for (hold, _) in holds.iter() {
                    hold.expire_if_due(now);
                }
            }
            Inner::Other(view) => view.expire_due(),
        }
    }
}

impl fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldLock")
            .field("name", &self.name())
            .field("fencing_token", &self.fencing_token())
            .field("held", &self.is_held())
            .finish()
    }
}
