//! The lock a request holds, of whichever kind the layer takes, carried by the response future
//! and then by the response body until it is given back.

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use lock_core::Lost;
use tokio::time::Instant;
use tracing::Span;

use super::guard::{AnyGuard, Unlock};
use super::settings::Settings;
use crate::body::BodyHold;
use crate::config::{HoldTimes, LeaseLost};

/// A held lock: the guard, the watch for its loss, and the span that reports on it.
///
/// Released with [`poll_release`](RequestLock::poll_release) when the request is done, or by
/// dropping it (the guard's background release) when the request is abandoned.
pub(crate) struct RequestLock {
    guard: Option<AnyGuard>,
    /// Whether losing the lock aborts the request ([`LeaseLost::Abort`]).
    abort: bool,
    /// Whether the loss is still watched: `abort`, until the lock is lost or given back.
    watch: bool,
    /// Resolves when the lock is lost: made on the first poll that needs it (a handler that
    /// answers at once never does). In a `Mutex` (only ever reached through `get_mut`, never
    /// locked) so that the response body is `Sync` whenever the inner body is.
    lost: Option<Mutex<Lost>>,
    /// The unlock, once started (in a `Mutex` for the same reason as `lost`).
    release: Option<Mutex<Unlock>>,
    span: Span,
    since: Instant,
    hold_times: Arc<HoldTimes>,
}

impl RequestLock {
    pub(crate) fn new(guard: AnyGuard, settings: &Settings, span: Span) -> Self {
        let abort = settings.lease_lost == LeaseLost::Abort;
        Self {
            abort,
            watch: abort,
            lost: None,
            guard: Some(guard),
            release: None,
            span,
            since: Instant::now(),
            hold_times: settings.hold_times.clone(),
        }
    }

    fn on_lost(&mut self) {
        self.watch = false;
        self.lost = None;
        self.span.record("lost", true);
        tracing::warn!(parent: &self.span, lock = %self.name(),
            "lock lost while the request was running");
    }

    fn record_held(&self) {
        let held = self.since.elapsed();
        self.hold_times.record(held);
        self.span.record(
            "held_ms",
            u64::try_from(held.as_millis()).unwrap_or(u64::MAX),
        );
    }
}

impl BodyHold for RequestLock {
    /// The lock's name (empty once released).
    fn name(&self) -> &str {
        self.guard.as_ref().map_or("", AnyGuard::name)
    }

    /// Whether losing the lock aborts the request ([`LeaseLost::Abort`]).
    fn aborts_on_loss(&self) -> bool {
        self.abort
    }

    /// True (once, and then no longer watched) if the lock is found lost now: not held by
    /// the guard's own account, which reads the hold's validity against the clock and so
    /// knows of a lease that ran out before any timer or renewal has said so. Cheap: no
    /// future is made. Always false when loss is not watched.
    fn check_lost(&mut self) -> bool {
        if !self.watch || self.guard.as_ref().is_none_or(AnyGuard::is_held) {
            return false;
        }
        self.on_lost();
        true
    }

    /// Ready once the lock is lost (checked now, then watched through the guard's `lost`
    /// signal); pending forever when loss is not watched.
    fn poll_lost(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.check_lost() {
            return Poll::Ready(());
        }
        if !self.watch {
            return Poll::Pending;
        }
        let lost = match (&mut self.lost, &self.guard) {
            (Some(lost), _) => lost,
            (lost @ None, Some(guard)) => lost.insert(Mutex::new(guard.lost())),
            (None, None) => return Poll::Pending,
        };
        let lost = lost
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        ready!(Pin::new(lost).poll(cx));
        self.on_lost();
        Poll::Ready(())
    }

    /// Gives the lock back and waits for Redis to confirm it (bounded by the client's
    /// timeouts). Ready with `Err(name)` when Redis said the lock was no longer ours (it had
    /// expired or been taken over), `Ok` otherwise; a failed release is logged (the lease
    /// then expires the lock) and counts as `Ok`, since nothing says the lock was gone.
    fn poll_release(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), String>> {
        if let Some(guard) = self.guard.take() {
            self.record_held();
            self.watch = false;
            self.lost = None;
            self.release = Some(Mutex::new(guard.unlock()));
        }
        let Some(release) = self.release.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let release = release
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (result, held) = ready!(release.as_mut().poll(cx));
        self.release = None;
        Poll::Ready(match result {
            Ok(true) => {
                tracing::debug!(parent: &self.span, "lock released");
                Ok(())
            }
            Ok(false) => {
                tracing::warn!(
                    parent: &self.span,
                    "the lock had already expired or been taken over when the request finished"
                );
                Err(held.name().to_owned())
            }
            Err(e) => {
                tracing::warn!(
                    parent: &self.span,
                    error = %e,
                    "could not release the lock; its lease will expire it"
                );
                Ok(())
            }
        })
    }
}

impl Drop for RequestLock {
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

impl fmt::Debug for RequestLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestLock")
            .field("guard", &self.guard)
            .field("watching_lost", &self.watch)
            .field("releasing", &self.release.is_some())
            .finish()
    }
}
