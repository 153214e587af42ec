//! [`HeldLock`], a cloneable view of a held lock of any kind, and [`Lost`], the future that
//! resolves when a lock is lost.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::select_all;

use crate::hold::Hold;

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

impl Future for Lost {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lost").finish_non_exhaustive()
    }
}

/// What a [`HeldLock`] needs from a lock that is not one hold of this crate's engine (a
/// RedLock).
pub(crate) trait View: Send + Sync {
    fn name(&self) -> &str;
    fn fencing_token(&self) -> Option<u64>;
    fn is_held(&self) -> bool;
    fn lost(&self) -> Lost;
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
    },
    Many {
        name: Arc<str>,
        holds: Arc<[(Arc<Hold>, u64)]>,
    },
    Other(Arc<dyn View>),
}

impl HeldLock {
    pub(crate) fn one(hold: Arc<Hold>, generation: u64) -> Self {
        Self {
            inner: Inner::One { hold, generation },
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

    /// The fencing token: strictly greater than the token of every earlier holder of the
    /// name. `Some` for a mutex, a fair lock and a read-write lock's write side; `None` for a
    /// read share, a semaphore's permits, a multi-lock (each of its locks has its own token:
    /// see [`MultiLockGuard::fencing_tokens`](crate::MultiLockGuard::fencing_tokens)) and a
    /// RedLock.
    pub fn fencing_token(&self) -> Option<u64> {
        match &self.inner {
            Inner::One { hold, .. } => hold.fencing_token(),
            Inner::Many { .. } => None,
            Inner::Other(view) => view.fencing_token(),
        }
    }

    /// True while the lock is ours: not released, not lost, and within its lease.
    pub fn is_held(&self) -> bool {
        match &self.inner {
            Inner::One { hold, generation } => hold.is_held(*generation),
            Inner::Many { holds, .. } => holds.iter().all(|(h, g)| h.is_held(*g)),
            Inner::Other(view) => view.is_held(),
        }
    }

    /// Resolves when the lock is known or presumed lost, or released.
    pub fn lost(&self) -> Lost {
        match &self.inner {
            Inner::One { hold, generation } => Lost::new(hold.clone().ended(*generation)),
            Inner::Many { holds, .. } => Lost::any(
                holds
                    .iter()
                    .map(|(h, g)| Lost::new(h.clone().ended(*g)))
                    .collect(),
            ),
            Inner::Other(view) => view.lost(),
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
