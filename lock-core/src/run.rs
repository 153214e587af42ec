//! A locked block in one call: [`LockRequest::run`] and [`TryLockRequest::run`] take the
//! lock, run a body with the [`HeldLock`], stop the body if the lock is lost, and release.

use std::future::poll_fn;
use std::pin::{Pin, pin};
use std::task::{Poll, ready};

use crate::error::LockError;
use crate::guard::Guard;
use crate::held_lock::HeldLock;
use crate::request::{LockRequest, TryLockRequest};

/// What to do when the lock is lost while a body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLost {
    /// Drop the body at its next await point and return [`LockError::Lost`]; a body that
    /// finished after the lock was lost also returns [`LockError::Lost`], never its output.
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
    /// A release that fails (Redis unreachable) is logged, the lease then expires the lock,
    /// and the body's result stands.
    ///
    /// **What "abort" guarantees, and what it cannot.** `run` never *reports* success
    /// without a valid lock. The body's output is accepted only if the lock is held (not
    /// lost, and within its lease by the local monotonic clock) at the moment the output is
    /// ready, and only if Redis does not answer the release with "not held" (force-unlocked,
    /// evicted, or expired there first); otherwise the output is dropped and the result is
    /// [`LockError::Lost`]. That includes a body that finishes in the very step after a
    /// stall (a runtime blocked, a process frozen or a VM paused past the lease while the
    /// body waited at an `.await`). What it cannot do is undo what the body did before its
    /// last `.await`: that code ran, and a write it sent may land after another holder's.
    /// Give such writes the [`fencing_token`](HeldLock::fencing_token) and let the resource
    /// refuse stale ones (see [`fenced`](crate::fenced)).
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
}

impl<G: Guard + 'static> TryLockRequest<G> {
    /// As [`LockRequest::run`], with a single attempt: `Ok(None)` without running the body
    /// when someone else holds the lock.
    pub async fn run<B, F, T>(self, body: B) -> Result<Option<T>, LockError>
    where
        B: FnOnce(HeldLock) -> F,
        F: Future<Output = T>,
    {
        match self.await? {
            Some(guard) => locked(guard, OnLost::Abort, body).await.map(Some),
            None => Ok(None),
        }
    }
}

/// Runs `body` under `guard` (with [`OnLost::Abort`], stopped when the lock is lost), then
/// releases the lock and waits for Redis to confirm.
///
/// With [`OnLost::Abort`] the loss is looked at before the body on every poll, and the body's
/// output is accepted only if the lock is still held at that moment: a body that becomes ready
/// in the same poll in which its lease is found to have run out (a runtime or a process that
/// stalled past the lease while the body waited at an `.await`) is a loss, not a success.
pub(crate) async fn locked<G, B, F, T>(guard: G, on_lost: OnLost, body: B) -> Result<T, LockError>
where
    G: Guard + 'static,
    B: FnOnce(HeldLock) -> F,
    F: Future<Output = T>,
{
    let body = body(guard.held_lock());
    let output = match on_lost {
        OnLost::Continue => body.await,
        OnLost::Abort => match while_held(&guard, body).await {
            Some(output) => output,
            // The guard drops here: what is left of the hold is released in the background.
            None => {
                return Err(LockError::Lost {
                    name: guard.name().to_owned(),
                });
            }
        },
    };
    let name = guard.name().to_owned();
    if !release(guard).await && on_lost == OnLost::Abort {
        // Redis says the lock was gone before the body gave it back (force-unlocked, evicted,
        // or its lease ran out there first): the body did not run all of its way under it.
        return Err(LockError::Lost { name });
    }
    Ok(output)
}

/// Polls `body` while `guard` holds its lock: `Some` with the body's output if the lock was
/// still held when the output was ready, `None` (and the body dropped at its current
/// `.await`) once the lock is lost.
async fn while_held<G: Guard, F: Future>(guard: &G, body: F) -> Option<F::Output> {
    let mut lost = guard.lost();
    let mut body = pin!(body);
    poll_fn(|cx| {
        // The loss first, then the body, then the loss again: `is_held` reads the hold's
        // validity against the clock, so it knows of a lease that ran out even before the
        // watchdog or the `lost` future's timer has run.
        if !guard.is_held() || Pin::new(&mut lost).poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        let output = ready!(body.as_mut().poll(cx));
        Poll::Ready(guard.is_held().then_some(output))
    })
    .await
}

/// Releases the lock and waits for Redis to confirm, so the lock is free when the block
/// returns (a dropped unlock still finishes in the background). False when Redis said the
/// lock was no longer held; a failed release is logged and counts as true (nothing says the
/// lock was gone: the lease expires it).
async fn release<G: Guard>(guard: G) -> bool {
    let name = guard.name().to_owned();
    match guard.unlock().await {
        Ok(true) => true,
        Ok(false) => {
            tracing::debug!(lock = %name, "lock was no longer held at the end of the body");
            false
        }
        Err(error) => {
            tracing::warn!(lock = %name, %error, "could not release lock; its lease will expire it");
            true
        }
    }
}
