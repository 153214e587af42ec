//! The lock a request holds, carried by the response future and then by the response body
//! until it is given back.

use std::fmt;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, ready};

use lock_core::{LockError, LockGuard};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Span;

type LostFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A held lock: the guard, the watch for its loss, and the span that reports on it.
///
/// Released with [`poll_release`](Hold::poll_release) when the request is done, or by
/// dropping it (the guard's background release) when the request is abandoned.
pub(crate) struct Hold {
    guard: Option<LockGuard>,
    /// Resolves when the lock is lost; only kept when losing it aborts the request. In a
    /// `Mutex` (only ever reached through `get_mut`, never locked) so that the response body
    /// is `Sync` whenever the inner body is.
    lost: Option<Mutex<LostFuture>>,
    /// The unlock, once started. It runs in its own task so that dropping the body half-way
    /// through the release cannot cut it short.
    release: Option<JoinHandle<Result<bool, LockError>>>,
    span: Span,
    since: Instant,
}

impl Hold {
    pub(crate) fn new(guard: LockGuard, watch_lost: bool, span: Span) -> Self {
        let lost = watch_lost.then(|| Mutex::new(Box::pin(guard.lost()) as LostFuture));
        Self {
            guard: Some(guard),
            lost,
            release: None,
            span,
            since: Instant::now(),
        }
    }

    /// The lock's name (empty once released).
    pub(crate) fn name(&self) -> &str {
        self.guard.as_ref().map_or("", LockGuard::name)
    }

    /// Ready once the lock is lost; pending forever when loss is not watched.
    pub(crate) fn poll_lost(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(lost) = self.lost.as_mut() else {
            return Poll::Pending;
        };
        let lost = lost
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        ready!(lost.as_mut().poll(cx));
        self.lost = None;
        self.span.record("lost", true);
        tracing::warn!(parent: &self.span, "lock lost while the request was running");
        Poll::Ready(())
    }

    /// Gives the lock back and waits for Redis to confirm it (bounded by the client's
    /// timeouts). Failures are logged: the lease then expires the lock.
    pub(crate) fn poll_release(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(guard) = self.guard.take() {
            self.record_held();
            self.lost = None;
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => self.release = Some(runtime.spawn(guard.unlock())),
                // No runtime to wait on: the guard's own background release does it.
                Err(_) => drop(guard),
            }
        }
        let Some(release) = self.release.as_mut() else {
            return Poll::Ready(());
        };
        let result = ready!(Pin::new(release).poll(cx));
        self.release = None;
        match result {
            Ok(Ok(true)) => tracing::debug!(parent: &self.span, "lock released"),
            Ok(Ok(false)) => tracing::warn!(
                parent: &self.span,
                "the lock had already expired or been taken over when the request finished"
            ),
            Ok(Err(e)) => tracing::warn!(
                parent: &self.span,
                error = %e,
                "could not release the lock; its lease will expire it"
            ),
            Err(e) => tracing::warn!(parent: &self.span, error = %e, "lock release task failed"),
        }
        Poll::Ready(())
    }

    fn record_held(&self) {
        let held = self.since.elapsed();
        self.span.record(
            "held_ms",
            u64::try_from(held.as_millis()).unwrap_or(u64::MAX),
        );
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            // Abandoned (client gone, handler failed, lock lost): the guard releases itself in
            // the background.
            self.record_held();
            tracing::debug!(parent: &self.span, "request abandoned; releasing the lock in the background");
            drop(guard);
        }
    }
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold")
            .field("guard", &self.guard)
            .field("watching_lost", &self.lost.is_some())
            .field("releasing", &self.release.is_some())
            .finish()
    }
}
