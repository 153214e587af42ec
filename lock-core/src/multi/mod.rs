//! [`MultiLock`]: several mutexes taken together, all or none, by one owner: the handle here,
//! the acquisition in [`take`], the guard in [`guard`].

mod guard;
mod take;

use std::fmt;
use std::sync::Arc;

use crate::client::LockClient;
use crate::engine::Engine;
use crate::error::LockError;
use crate::info::{self, LockInfo};
use crate::kind::HoldKind;
use crate::request::{LockRequest, TryLockRequest};

pub use guard::MultiLockGuard;
use take::Take;

/// Several mutexes taken together, all or none: made by
/// [`LockClient::multi_lock`](crate::LockClient::multi_lock). Cheap to clone.
///
/// ```no_run
/// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
///
/// // Move stock between two warehouses: both rows locked, or neither.
/// let both = client
///     .multi_lock(["stock:berlin:sku-1", "stock:paris:sku-1"])
///     .lock()
///     .wait(Duration::from_secs(2))
///     .await?;
/// let tokens = both.fencing_tokens(); // one per name, in the order given
/// # let _ = tokens;
/// both.unlock().await?;
/// # Ok(()) }
/// ```
///
/// The locks are ordinary [`Mutex`](crate::Mutex)es: a multi-lock over `a` and `b` excludes a mutex `a`.
/// On a standalone or Sentinel server all the names are taken by one script, atomically: a
/// multi-lock never holds some of its locks while waiting for the rest, so two multi-locks
/// over overlapping names cannot deadlock. While one name is busy, the request waits for that
/// name's release message (or its holder's lease to run out) and tries again.
///
/// On a Redis Cluster one script can only touch keys of one slot, and each lock lives in the
/// slot of its own name. A multi-lock whose names share a slot is still one atomic script;
/// one whose names fall in different slots takes them one by one in a stable order (the order
/// of their keys, the same for every request, so overlapping multi-locks cannot deadlock),
/// each with what is left of the wait, and gives back the ones it took if a later one cannot
/// be had. [`MultiLock::atomic`] refuses that instead, with [`LockError::CrossSlot`] before
/// anything is sent.
#[derive(Clone)]
pub struct MultiLock {
    engine: Arc<Engine>,
    names: Vec<String>,
    atomic: bool,
}

impl MultiLock {
    /// The most names one multi-lock takes: 64.
    pub const MAX_NAMES: usize = take::MAX_NAMES;

    pub(crate) fn new(engine: Arc<Engine>, names: Vec<String>) -> Self {
        Self {
            engine,
            names,
            atomic: false,
        }
    }

    /// Requires the one-script path: on a Redis Cluster, names in different hash slots then
    /// fail at once with [`LockError::CrossSlot`] (before anything is sent) instead of being
    /// taken one by one in a stable order. On a standalone or Sentinel server every
    /// multi-lock is atomic anyway.
    pub fn atomic(mut self) -> Self {
        self.atomic = true;
        self
    }

    /// The names, in the order given.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Takes every lock, waiting as long as needed; see [`LockRequest`]. A timeout names a
    /// lock that was busy.
    pub fn lock(&self) -> LockRequest<MultiLockGuard> {
        LockRequest::new(self.take())
    }

    /// Tries once to take every lock: `Ok(None)` when one is busy.
    pub fn try_lock(&self) -> TryLockRequest<MultiLockGuard> {
        TryLockRequest::new(self.take())
    }

    /// What Redis knows about each lock right now, in the order the names were given.
    pub async fn info(&self) -> Result<Vec<LockInfo>, LockError> {
        let mut infos = Vec::with_capacity(self.names.len());
        for name in &self.names {
            let keys = self.engine.keys(name)?;
            infos.push(info::lock(&self.engine, HoldKind::Mutex, &keys).await?);
        }
        Ok(infos)
    }

    fn take(&self) -> Take {
        Take::new(self.engine.clone(), self.names.clone(), self.atomic)
    }
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names)
            .field("atomic", &self.atomic)
            .finish()
    }
}

impl LockClient {
    /// The mutexes `names` (1 to 64 distinct names), taken together: all or none.
    pub fn multi_lock<I, N>(&self, names: I) -> MultiLock
    where
        I: IntoIterator<Item = N>,
        N: Into<String>,
    {
        MultiLock::new(
            self.engine().clone(),
            names.into_iter().map(Into::into).collect(),
        )
    }
}
