//! [`MultiLockGuard`]: several mutexes held together.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::error::LockError;
use crate::guard::Guard;
use crate::guard::sealed::Sealed;
use crate::held_lock::{AtRisk, HeldLock, LeaseWatch, Lost};
use crate::hold::Hold;
use crate::lease::LeaseState;
use crate::mutex::LockGuard;

/// Several locks held together: made by [`MultiLock::lock`](crate::MultiLock::lock) and
/// [`MultiLock::try_lock`](crate::MultiLock::try_lock).
/// Everything a [`LockGuard`] offers, over all of them: [`unlock`](MultiLockGuard::unlock)
/// releases every one, dropping the guard releases every one in the background,
/// [`lost`](MultiLockGuard::lost) resolves when any is lost.
#[must_use = "dropping the guard releases the locks"]
pub struct MultiLockGuard {
    /// The names joined by `+`.
    name: Arc<str>,
    /// In the order the names were given.
    guards: Vec<LockGuard>,
}

impl MultiLockGuard {
    pub(super) fn new(name: String, guards: Vec<LockGuard>) -> Self {
        Self {
            name: name.into(),
            guards,
        }
    }

    /// The names, joined by `+`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The guards, in the order the names were given.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The separate guards, in the order the names were given, to release one by one.
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }

    /// The fencing token of each lock, in the order the names were given. (A multi-lock has
    /// no single token: each lock's counter is its own.)
    pub fn fencing_tokens(&self) -> Vec<u64> {
        self.guards.iter().map(LockGuard::fencing_token).collect()
    }

    /// True while every lock is held.
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// How much longer every lock is ours unless renewals extend them: the shortest.
    pub fn remaining(&self) -> Duration {
        self.guards
            .iter()
            .map(LockGuard::remaining)
            .min()
            .unwrap_or_default()
    }

    /// Resolves when any of the locks is known or presumed lost, or released.
    pub fn lost(&self) -> Lost {
        Lost::any(self.guards.iter().map(LockGuard::lost).collect())
    }

    /// How the leases stand now: the worst of its locks' (ended if any is, at risk if any
    /// is).
    pub fn lease_state(&self) -> LeaseState {
        self.held_lock().lease_state()
    }

    /// Resolves when any lock's lease is at risk (a renewal failed while it still runs) or
    /// any lock is not held any more: see [`Guard::at_risk`].
    pub fn at_risk(&self) -> AtRisk {
        self.held_lock().at_risk()
    }

    /// A watch of every change of [`lease_state`](Self::lease_state).
    pub fn watch_lease(&self) -> LeaseWatch {
        self.held_lock().watch_lease()
    }

    /// A cloneable view of all the locks that cannot release them.
    pub fn held_lock(&self) -> HeldLock {
        let holds: Vec<(Arc<Hold>, u64)> = self
            .guards
            .iter()
            .map(|g| (g.core().hold.clone(), g.core().generation))
            .collect();
        HeldLock::many(self.name.clone(), holds.into())
    }

    /// Sets every lock's lease to `lease` from now; [`LockError::Lost`] if any is gone.
    pub async fn extend(&self, lease: Duration) -> Result<(), LockError> {
        for result in join_all(self.guards.iter().map(|g| g.extend(lease))).await {
            result?;
        }
        Ok(())
    }

    /// Releases every lock. Returns whether all of them were still held until now. Every
    /// release is attempted even if one fails; the first error is returned.
    pub async fn unlock(self) -> Result<bool, LockError> {
        let results = join_all(self.guards.into_iter().map(LockGuard::unlock)).await;
        let mut all_held = true;
        for result in results {
            all_held &= result?;
        }
        Ok(all_held)
    }
}

impl Sealed for MultiLockGuard {}

impl Guard for MultiLockGuard {
    fn name(&self) -> &str {
        &self.name
    }

    fn fencing_token(&self) -> Option<u64> {
        None
    }

    fn is_held(&self) -> bool {
        MultiLockGuard::is_held(self)
    }

    fn remaining(&self) -> Duration {
        MultiLockGuard::remaining(self)
    }

    fn lost(&self) -> Lost {
        MultiLockGuard::lost(self)
    }

    fn lease_state(&self) -> LeaseState {
        MultiLockGuard::lease_state(self)
    }

    fn at_risk(&self) -> AtRisk {
        MultiLockGuard::at_risk(self)
    }

    fn watch_lease(&self) -> LeaseWatch {
        MultiLockGuard::watch_lease(self)
    }

    fn held_lock(&self) -> HeldLock {
        MultiLockGuard::held_lock(self)
    }

    async fn unlock(self) -> Result<bool, LockError> {
        MultiLockGuard::unlock(self).await
    }
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.guards).finish()
    }
}
