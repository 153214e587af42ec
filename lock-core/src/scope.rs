//! Who owns a lock: task-scoped holders for re-entry, and the locks a scope holds.
//!
//! A lock is owned by `<client id>:<holder id>`. Outside a [`reentrant`] scope every
//! acquisition gets a holder id of its own, so taking a lock you already hold waits for
//! yourself, exactly like `tokio::sync::Mutex`. Inside a scope, every acquisition made by the
//! task running the scope shares one holder id, so taking a lock the scope already holds
//! re-enters it (the hold count goes up) instead of deadlocking. A task spawned from inside
//! the scope does not inherit it. Ownership never depends on the OS thread.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::held_lock::HeldLock;

tokio::task_local! {
    static SCOPE: ReentrantScope;
}

/// One lock holder: what [`reentrant`] runs a future as, made available for code that polls
/// futures by hand (a tower service's response future, say) through
/// [`ReentrantScope::enter`]. Cheap to clone; clones are the same holder.
#[derive(Clone)]
pub struct ReentrantScope {
    inner: Arc<Scope>,
}

struct Scope {
    holder: u64,
    /// Locks taken inside the scope, newest last (entries whose hold ended are pruned).
    held: Mutex<Vec<HeldLock>>,
}

impl ReentrantScope {
    /// A new holder.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Scope {
                holder: next_holder(),
                held: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The scope the current task runs in, or a new one.
    pub fn current_or_new() -> Self {
        SCOPE.try_with(Clone::clone).unwrap_or_default()
    }

    /// Runs `f` (typically one `poll` of a future) in this scope: locks taken while it runs
    /// belong to this holder, re-enter the ones it holds, and are visible to
    /// [`current_lock`].
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        if current_holder() == Some(self.inner.holder) {
            f()
        } else {
            SCOPE.sync_scope(self.clone(), f)
        }
    }
}

impl Default for ReentrantScope {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ReentrantScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReentrantScope")
            .field("holder", &self.inner.holder)
            .finish_non_exhaustive()
    }
}

static NEXT_HOLDER: AtomicU64 = AtomicU64::new(1);

/// A holder id never used before in this process.
pub(crate) fn next_holder() -> u64 {
    NEXT_HOLDER.fetch_add(1, Ordering::Relaxed)
}

/// The holder id of the enclosing [`reentrant`] scope, if any.
pub(crate) fn current_holder() -> Option<u64> {
    SCOPE.try_with(|s| s.inner.holder).ok()
}

/// Records a lock taken inside the current scope (no-op, and `lock` not called, outside one).
pub(crate) fn record(lock: impl FnOnce() -> HeldLock) {
    let _ = SCOPE.try_with(|s| {
        let mut held = crate::util::lock(&s.inner.held);
        held.retain(HeldLock::is_held);
        held.push(lock());
    });
}

/// Runs `future` as one lock holder: locks it takes (on any client) re-enter instead of
/// waiting when it already holds them. Nested scopes join the outermost one.
///
/// ```no_run
/// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
/// lock_core::reentrant(async {
///     let outer = client.lock("account:7").await?;
///     let inner = client.lock("account:7").await?; // re-enters: no deadlock
///     assert_eq!(inner.hold_count(), 2);
///     inner.unlock().await?;
///     outer.unlock().await?; // released here, when the count returns to zero
///     Ok::<_, lock_core::LockError>(())
/// })
/// .await
/// # }
/// ```
pub async fn reentrant<F: Future>(future: F) -> F::Output {
    if current_holder().is_some() {
        future.await
    } else {
        SCOPE.scope(ReentrantScope::new(), future).await
    }
}

/// The lock named `name` that the current [`reentrant`] scope holds, if any: its fencing
/// token and lost signal, for code that runs under a lock taken further up (for example by
/// `#[distributed_lock]`).
///
/// ```no_run
/// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
/// lock_core::reentrant(async {
///     let _guard = client.lock("stock:sku-1").await?;
///     let held = lock_core::current_lock("stock:sku-1").expect("taken above");
///     println!("write with fencing token {:?}", held.fencing_token());
///     Ok::<_, lock_core::LockError>(())
/// })
/// .await
/// # }
/// ```
pub fn current_lock(name: &str) -> Option<HeldLock> {
    SCOPE
        .try_with(|s| {
            let held = crate::util::lock(&s.inner.held);
            held.iter()
                .rev()
                .find(|l| l.name() == name && l.is_held())
                .cloned()
        })
        .ok()
        .flatten()
}
