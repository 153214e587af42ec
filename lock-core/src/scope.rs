//! Who owns a lock: task-scoped holders for re-entry.
//!
//! A lock is owned by `<client id>:<holder id>`. Outside a [`reentrant`] scope every
//! acquisition gets a holder id of its own, so taking a lock you already hold waits for
//! yourself, exactly like `tokio::sync::Mutex`. Inside a scope, every acquisition made by the
//! task running the scope shares one holder id, so taking a lock the scope already holds
//! re-enters it (the hold count goes up) instead of deadlocking. A task spawned from inside
//! the scope does not inherit it. Ownership never depends on the OS thread.

use std::sync::atomic::{AtomicU64, Ordering};

tokio::task_local! {
    static HOLDER: u64;
}

static NEXT_HOLDER: AtomicU64 = AtomicU64::new(1);

/// A holder id never used before in this process.
pub(crate) fn next_holder() -> u64 {
    NEXT_HOLDER.fetch_add(1, Ordering::Relaxed)
}

/// The holder id of the enclosing [`reentrant`] scope, if any.
pub(crate) fn current_holder() -> Option<u64> {
    HOLDER.try_with(|h| *h).ok()
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
        HOLDER.scope(next_holder(), future).await
    }
}
