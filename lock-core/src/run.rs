//! A locked block in one call: [`LockRequest::run`] and [`LockRequest::try_run`] take the
//! lock, run a body with the [`HeldLock`], stop the body if the lock is lost, and release.

use crate::driver::LockRequest;
use crate::error::LockError;
use crate::guard::Guard;
use crate::held::HeldLock;

/// What to do when the lock is lost while a body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLost {
    /// Drop the body at its next await point and return [`LockError::Lost`].
    Abort,
    /// Let the body run to its end.
    Continue,
}

impl<G: Guard + 'static> LockRequest<G> {
    /// Takes the lock (waiting as this request says), runs `body` with the held lock, and
    /// releases the lock when the body returns; returns what the body returned.
    ///
    /// If the lock is lost while the body runs (its lease ran out, a renewal found it gone),
    /// the body is dropped at its next `.await` and [`LockError::Lost`] is returned: work
    /// that must not go on without the lock stops. The body gets the [`HeldLock`], whose
    /// [`fencing_token`](HeldLock::fencing_token) is for the resource it writes to. If the
    /// body panics or the returned future is dropped, the lock is released in the background.
    /// A release that fails is logged (the lease then expires the lock) and does not replace
    /// the body's result.
    ///
    /// ```no_run
    /// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
    /// use std::time::Duration;
    ///
    /// let paid = client
    ///     .lock("order:42")
    ///     .wait(Duration::from_secs(2))
    ///     .run(|held| async move {
    ///         let token = held.fencing_token();
    ///         // ... write to the resource with `token` ...
    ///         token
    ///     })
    ///     .await?;
    /// # drop(paid);
    /// # Ok(()) }
    /// ```
    pub async fn run<B, F, T>(self, body: B) -> Result<T, LockError>
    where
        B: FnOnce(HeldLock) -> F,
        F: Future<Output = T>,
    {
        let guard = self.await?;
        locked(guard, OnLost::Abort, body).await
    }

    /// As [`run`](Self::run), with a single attempt: `Ok(None)` without running the body when
    /// someone else holds the lock.
    pub async fn try_run<B, F, T>(self, body: B) -> Result<Option<T>, LockError>
    where
        B: FnOnce(HeldLock) -> F,
        F: Future<Output = T>,
    {
        let guard = match self.wait(std::time::Duration::ZERO).await {
            Ok(guard) => guard,
            Err(LockError::Timeout { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        locked(guard, OnLost::Abort, body).await.map(Some)
    }
}

/// Runs `body` under `guard` (racing it against the lost signal with [`OnLost::Abort`]), then
/// releases the lock and waits for Redis to confirm.
pub(crate) async fn locked<G, B, F, T>(guard: G, on_lost: OnLost, body: B) -> Result<T, LockError>
where
    G: Guard + 'static,
    B: FnOnce(HeldLock) -> F,
    F: Future<Output = T>,
{
    let body = body(guard.held_lock());
    let output = match on_lost {
        OnLost::Continue => body.await,
        OnLost::Abort => {
            let lost = guard.lost();
            tokio::select! {
                biased;
                output = body => output,
                () = lost => {
                    return Err(LockError::Lost { name: guard.name().to_owned() });
                }
            }
        }
    };
    release(guard).await;
    Ok(output)
}

/// Releases the lock and waits for Redis to confirm, so the lock is free when the block
/// returns (a dropped unlock still finishes in the background). Failures are logged.
async fn release<G: Guard>(guard: G) {
    let name = guard.name().to_owned();
    match guard.unlock().await {
        Ok(true) => {}
        Ok(false) => {
            tracing::debug!(lock = %name, "lock was no longer held at the end of the body")
        }
        Err(error) => {
            tracing::warn!(lock = %name, %error, "could not release lock; its lease will expire it")
        }
    }
}
