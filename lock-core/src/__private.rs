//! Not public API: the items `#[distributed_lock]` expands to. They may change in any release.
//!
//! An annotated function's body becomes (see the `lock-macros` docs for the whole expansion):
//!
//! ```ignore
//! ::lock_core::__private::reentrant(async move {
//!     let __lock_acquire = ::lock_core::__private::acquire(client, key, wait, lease);
//!     ::lock_core::__private::run(__lock_acquire, E::from, on_lost, move |handle| async move {
//!         body
//!     })
//!     .await
//! })
//! .await
//! ```

use std::time::Duration;

use crate::{HeldLock, LockClient, LockError, LockGuard};

pub use crate::global::global_client;
pub use crate::scope::reentrant;

/// What to do when the lock is lost while the body runs (`on_lost = "..."`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLost {
    /// Drop the body at its next await point and return `LockError::Lost`.
    Abort,
    /// Let the body run to its end.
    Continue,
}

/// The client given with `client = <expr>`; its type check (`&LockClient`, through deref
/// coercion) is spanned at the user's expression.
pub fn client(client: &LockClient) -> Result<&LockClient, LockError> {
    Ok(client)
}

/// Starts taking the lock. The client is only borrowed for this call, so the body may move
/// whatever the client expression borrowed from (`self: Arc<Self>`).
pub fn acquire(
    client: Result<&LockClient, LockError>,
    name: String,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> impl Future<Output = Result<LockGuard, LockError>> + Send + use<> {
    let request = client.map(|client| {
        let mut request = client.lock(name);
        if let Some(wait) = wait {
            request = request.wait(wait);
        }
        if let Some(lease) = lease {
            request = request.lease(lease);
        }
        request
    });
    async move { request?.await }
}

/// Starts taking the fair lock (`fair = true`): granted in arrival order across processes.
pub fn acquire_fair(
    client: Result<&LockClient, LockError>,
    name: String,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> impl Future<Output = Result<LockGuard, LockError>> + Send + use<> {
    let request = client.map(|client| {
        let mut request = client.fair_lock(name).lock();
        if let Some(wait) = wait {
            request = request.wait(wait);
        }
        if let Some(lease) = lease {
            request = request.lease(lease);
        }
        request
    });
    async move { request?.await }
}

/// Takes the lock, runs the body under it and releases it.
///
/// `convert` is `E::from`, named in the expansion at the user's error type, so that a missing
/// `From<LockError>` is reported there.
///
/// The lock is released (and the release awaited) when the body returns, whatever it
/// returns; on panic, cancellation or abort the guard's `Drop` releases it in the background.
pub async fn run<A, B, F, T, E>(
    acquire: A,
    convert: fn(LockError) -> E,
    on_lost: OnLost,
    body: B,
) -> Result<T, E>
where
    A: Future<Output = Result<LockGuard, LockError>>,
    B: FnOnce(HeldLock) -> F,
    F: Future<Output = Result<T, E>>,
{
    let guard = acquire.await.map_err(convert)?;
    let body = body(guard.handle());
    let result = match on_lost {
        OnLost::Continue => body.await,
        OnLost::Abort => {
            let lost = guard.lost();
            tokio::select! {
                biased;
                result = body => result,
                () = lost => {
                    return Err(convert(LockError::Lost { name: guard.name().to_owned() }));
                }
            }
        }
    };
    release(guard).await;
    result
}

/// Releases the lock and waits for Redis to confirm, so the lock is free when the annotated
/// function returns. The release runs on its own task: if the caller is cancelled meanwhile,
/// it still completes. Failures are logged and never replace the body's result.
async fn release(guard: LockGuard) {
    let name = guard.name().to_owned();
    let released = match tokio::runtime::Handle::try_current() {
        Ok(runtime) => match runtime.spawn(guard.unlock()).await {
            Ok(released) => released,
            // The task panicked or its runtime shut down; the lease expires the lock.
            Err(_) => return,
        },
        Err(_) => guard.unlock().await,
    };
    match released {
        Ok(true) => {}
        Ok(false) => {
            tracing::debug!(lock = %name, "lock was no longer held at the end of the body")
        }
        Err(error) => {
            tracing::warn!(lock = %name, %error, "could not release lock; its lease will expire it")
        }
    }
}
