//! Multi-lock: several locks taken together, all or none, by one owner.
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//!
//! // Move stock between two warehouses: both rows locked, or neither.
//! let both = client
//!     .multi_lock(["stock:berlin:sku-1", "stock:paris:sku-1"])
//!     .wait(Duration::from_secs(2))
//!     .await?;
//! let tokens = both.fencing_tokens(); // one per name, in the order given
//! # let _ = tokens;
//! both.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! On a standalone server all the names are taken by one script, atomically: a multi-lock
//! never holds some of its locks while waiting for the rest, so two multi-locks over
//! overlapping names cannot deadlock. While one name is busy, the request waits for that
//! name's release message (or its holder's lease to run out) and tries again.
//!
//! On a Redis Cluster one script can only touch keys of one slot, and each lock lives in the
//! slot of its own name. A multi-lock whose names share a slot is still one atomic script;
//! one whose names fall in different slots takes them one by one in a stable order (the order
//! of their keys, the same for every request, so overlapping multi-locks cannot deadlock),
//! each with what is left of the wait, and gives back the ones it took if a later one cannot
//! be had. [`MultiLockRequest::atomic`] refuses that instead, with [`LockError::CrossSlot`]
//! before anything is sent.

use std::fmt;
use std::future::IntoFuture;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::sync::{OwnedMutexGuard, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::Topology;
use crate::client::{Inner, LockClient, check_lease};
use crate::error::LockError;
use crate::guard::{Hold, Lease, LockGuard};
use crate::mutex::{expected_count, millis, send_acquisition};
use crate::name::LockKeys;
use crate::scripts;
use crate::waiters::Waiter;

/// The most names one multi-lock takes.
pub const MAX_MULTI_NAMES: usize = 64;

impl LockClient {
    /// Takes all of `names` together, or none of them, waiting as long as needed; see
    /// [`MultiLockRequest`] for the wait and lease options. At most [`MAX_MULTI_NAMES`]
    /// distinct names.
    pub fn multi_lock<I, N>(&self, names: I) -> MultiLockRequest
    where
        I: IntoIterator<Item = N>,
        N: Into<String>,
    {
        MultiLockRequest {
            inner: self.inner.clone(),
            names: names.into_iter().map(Into::into).collect(),
            wait: None,
            lease: None,
            atomic: false,
        }
    }
}

/// A request to take several locks together: made by [`LockClient::multi_lock`], run by
/// `.await`.
#[must_use = "a lock request does nothing until awaited"]
pub struct MultiLockRequest {
    inner: Arc<Inner>,
    names: Vec<String>,
    wait: Option<Duration>,
    lease: Option<Duration>,
    atomic: bool,
}

impl MultiLockRequest {
    /// Requires the one-script path: on a Redis Cluster, names in different hash slots then
    /// fail at once with [`LockError::CrossSlot`] (before anything is sent) instead of being
    /// taken one by one in a stable order. On a standalone or Sentinel server every
    /// multi-lock is atomic anyway.
    pub fn atomic(mut self) -> Self {
        self.atomic = true;
        self
    }

    /// Gives up after waiting this long, with [`LockError::Timeout`] naming a lock that was
    /// busy. `Duration::ZERO` makes a single attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Holds every lock for a fixed lease that is never renewed (at least 10 ms). Without it
    /// the client's watchdog keeps them for as long as the guard lives.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }
}

impl IntoFuture for MultiLockRequest {
    type Output = Result<MultiLockGuard, LockError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'static>>;

    fn into_future(self) -> Self::IntoFuture {
        let span = tracing::debug_span!("multi_lock", names = self.names.len());
        Box::pin(
            acquire(self.inner, self.names, self.wait, self.lease, self.atomic).instrument(span),
        )
    }
}

impl fmt::Debug for MultiLockRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockRequest")
            .field("names", &self.names)
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .field("atomic", &self.atomic)
            .finish()
    }
}

/// Several locks held together. Everything a [`LockGuard`] offers, over all of them:
/// [`unlock`](MultiLockGuard::unlock) releases every one, dropping the guard releases every
/// one in the background, [`lost`](MultiLockGuard::lost) resolves when any is lost.
#[must_use = "dropping the guard releases the locks"]
pub struct MultiLockGuard {
    /// In the order the names were given.
    guards: Vec<LockGuard>,
}

impl MultiLockGuard {
    /// The guards, in the order the names were given.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The separate guards, in the order the names were given, to release one by one.
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }

    /// The fencing token of each lock, in the order the names were given.
    pub fn fencing_tokens(&self) -> Vec<u64> {
        self.guards.iter().map(LockGuard::fencing_token).collect()
    }

    /// True while every lock is held.
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// Resolves when any of the locks is known or presumed lost, or released.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let lost: Vec<_> = self.guards.iter().map(|g| Box::pin(g.lost())).collect();
        async move {
            select_all(lost).await;
        }
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

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.guards).finish()
    }
}

enum MultiAttempt {
    Acquired(MultiLockGuard),
    /// The lock at this index (of the sorted keys) is busy, with this much lease left.
    Busy(usize, Option<Duration>),
}

async fn acquire(
    inner: Arc<Inner>,
    names: Vec<String>,
    wait: Option<Duration>,
    lease: Option<Duration>,
    atomic: bool,
) -> Result<MultiLockGuard, LockError> {
    let start = Instant::now();
    if names.is_empty() || names.len() > MAX_MULTI_NAMES {
        return Err(LockError::InvalidOption {
            option: "names",
            reason: format!(
                "a multi-lock takes 1 to {MAX_MULTI_NAMES} names, not {}",
                names.len()
            ),
        });
    }
    if let Some(lease) = lease {
        check_lease("lease", lease)?;
    }
    // Sorted by key, so every request takes the owner's per-lock operation locks in the same
    // order; `order[i]` is where the i-th sorted key was in the caller's list.
    let mut keyed = Vec::with_capacity(names.len());
    for (index, name) in names.iter().enumerate() {
        keyed.push((LockKeys::new(&inner.config.prefix, name)?, index));
    }
    keyed.sort_by(|a, b| a.0.hash.cmp(&b.0.hash));
    if keyed.windows(2).any(|w| w[0].0.hash == w[1].0.hash) {
        return Err(LockError::InvalidOption {
            option: "names",
            reason: "a multi-lock cannot name the same lock twice".to_owned(),
        });
    }
    let (keys, order): (Vec<LockKeys>, Vec<usize>) = keyed.into_iter().unzip();
    let deadline = wait.and_then(|w| start.checked_add(w));
    // On a Cluster one script can only touch one slot.
    if let Some(first) = keys.first() {
        let slot = inner.backend.slot(&first.hash);
        if let Some(other) = keys.iter().find(|k| inner.backend.slot(&k.hash) != slot) {
            if atomic {
                return Err(LockError::CrossSlot {
                    first: first.name.clone(),
                    second: other.name.clone(),
                });
            }
            return in_order(&inner, &keys, &order, deadline, lease).await;
        }
    }
    let owner = inner.owner_for_current_task();
    let will_wait = wait != Some(Duration::ZERO);
    let timeout = |busy: usize, holder_ttl| LockError::Timeout {
        name: keys[busy].name.clone(),
        waited: start.elapsed(),
        holder_ttl,
    };

    let mut waiter = Waiter::new(
        deadline,
        inner.config.watchdog_lease,
        inner.backend.connect_timeout(),
    );
    loop {
        waiter.mark_seen();
        let (busy, holder_ttl) =
            match attempt(&inner, &keys, &order, &owner, lease, will_wait).await {
                Ok(MultiAttempt::Acquired(guard)) => return Ok(guard),
                Ok(MultiAttempt::Busy(busy, ttl)) => (busy, ttl),
                Err(e) => {
                    waiter.ride_out(e).await?;
                    continue;
                }
            };
        if waiter.expired() {
            return Err(timeout(busy, holder_ttl));
        }
        // Wait on the busy lock's channel: subscribe first, then try again right away.
        if waiter.subscribe(&inner.waiters, &keys[busy].channel).await {
            continue;
        }
        waiter.sleep(holder_ttl).await;
    }
}

/// Takes the locks one by one in the order of their keys (the same order for every request,
/// so two multi-locks over overlapping names cannot deadlock), each with what is left of the
/// wait. If one cannot be had, the ones already taken are given back (awaited) and its error
/// returned. Not atomic: while it waits for a later lock it holds the earlier ones.
async fn in_order(
    inner: &Arc<Inner>,
    keys: &[LockKeys],
    order: &[usize],
    deadline: Option<Instant>,
    lease: Option<Duration>,
) -> Result<MultiLockGuard, LockError> {
    let client = LockClient {
        inner: inner.clone(),
    };
    let mut taken: Vec<(usize, LockGuard)> = Vec::with_capacity(keys.len());
    for (key, position) in keys.iter().zip(order) {
        let mut request = client.lock(key.name.clone());
        if let Some(d) = deadline {
            request = request.wait(d.saturating_duration_since(Instant::now()));
        }
        if let Some(lease) = lease {
            request = request.lease(lease);
        }
        match request.await {
            Ok(guard) => taken.push((*position, guard)),
            Err(e) => {
                // Roll back: give back what was taken, and wait for it, so that "not held" is
                // true when the error returns.
                join_all(taken.into_iter().map(|(_, g)| g.unlock())).await;
                return Err(e);
            }
        }
    }
    taken.sort_by_key(|(position, _)| *position);
    Ok(MultiLockGuard {
        guards: taken.into_iter().map(|(_, g)| g).collect(),
    })
}

/// What undoing a multi-acquisition needs, per lock: the hold, the count it started from
/// and its operation lock.
type Undo = (Arc<Inner>, Vec<(Arc<Hold>, u32, OwnedMutexGuard<()>)>);

/// The reply of a multi-acquisition, handed from its task to the caller; dropped without
/// being taken, it undoes what may have been applied (see `mutex::attempt`).
struct Reply {
    result: Result<Vec<i64>, LockError>,
    sent_at: Instant,
    undo: Option<Undo>,
}

impl Drop for Reply {
    fn drop(&mut self) {
        let Some((inner, holds)) = self.undo.take() else {
            return;
        };
        let needed = match &self.result {
            Ok(reply) => reply.first() == Some(&1),
            Err(e) if e.never_sent() => false,
            Err(_) => true,
        };
        if needed {
            for (hold, expected, op) in holds {
                inner.compensate_in_background(hold, expected, op);
            }
        }
    }
}

/// One try to take every lock, in one script.
async fn attempt(
    inner: &Arc<Inner>,
    keys: &[LockKeys],
    order: &[usize],
    owner: &str,
    lease: Option<Duration>,
    will_wait: bool,
) -> Result<MultiAttempt, LockError> {
    let holds: Vec<Arc<Hold>> = keys.iter().map(|k| inner.hold(k, owner)).collect();
    let mut undo = Vec::with_capacity(holds.len());
    for hold in &holds {
        let op = hold.op.clone().lock_owned().await;
        let expected = expected_count(hold)?;
        undo.push((hold.clone(), expected, op));
    }
    let (kind, lease_len) = match lease {
        Some(d) => (Lease::Fixed, d),
        None => (Lease::Watchdog, inner.config.watchdog_lease),
    };
    let mut invocation = scripts::MULTI_ACQUIRE.prepare_invoke();
    invocation
        .arg(owner)
        .arg(millis(lease_len))
        .arg(if will_wait { "1" } else { "0" });
    for (key, (_, expected, _)) in keys.iter().zip(&undo) {
        invocation.key(&key.hash).arg(*expected);
    }
    // The keys share a slot here (see `acquire`): `WAIT` goes to the first one's node.
    let Some(first) = keys.first().cloned() else {
        return Err(LockError::InvalidOption {
            option: "names",
            reason: "a multi-lock needs at least one name".to_owned(),
        });
    };
    let (tx, rx) = oneshot::channel();
    let task_inner = inner.clone();
    tokio::spawn(async move {
        let sent_at = Instant::now();
        let applied = |reply: &Vec<i64>| reply.first() == Some(&1);
        let result = send_acquisition(&task_inner, &first, &invocation, applied).await;
        if matches!(result, Err(LockError::NotReplicated { .. })) {
            // Given back before the caller hears of it, so the error means "not held".
            for (hold, expected, op) in undo {
                hold.compensate(&task_inner, expected, op).await;
            }
            let _ = tx.send(Reply {
                result,
                sent_at,
                undo: None,
            });
            return;
        }
        let _ = tx.send(Reply {
            result,
            sent_at,
            undo: Some((task_inner, undo)),
        });
    });
    let mut delivered = rx.await.map_err(|_| LockError::Unavailable {
        waited: Duration::ZERO,
        source: None,
    })?;
    let reply = match std::mem::replace(&mut delivered.result, Ok(Vec::new())) {
        Ok(reply) => reply,
        Err(e) => {
            if !e.never_sent() {
                delivered.result = Err(LockError::UnexpectedReply(e.to_string()));
            }
            return Err(e);
        }
    };
    let bad = || LockError::UnexpectedReply(format!("multi-acquire script returned {reply:?}"));
    let index = |i: i64| {
        usize::try_from(i)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .filter(|i| *i < keys.len())
    };
    match reply.as_slice() {
        [1, tokens @ ..] if tokens.len() == keys.len() => {
            let Some((_, undo)) = delivered.undo.take() else {
                return Err(bad());
            };
            let mut guards: Vec<Option<LockGuard>> = (0..keys.len()).map(|_| None).collect();
            for ((hold, _, op), (token, position)) in undo.into_iter().zip(tokens.iter().zip(order))
            {
                let generation =
                    hold.acquired(token.unsigned_abs(), delivered.sent_at, kind, lease_len);
                guards[*position] = Some(LockGuard::new(hold, inner.clone(), generation));
                drop(op);
            }
            Ok(MultiAttempt::Acquired(MultiLockGuard {
                guards: guards.into_iter().flatten().collect(),
            }))
        }
        [0, i, pttl] => {
            let i = index(*i).ok_or_else(bad)?;
            Ok(MultiAttempt::Busy(
                i,
                u64::try_from(*pttl).ok().map(Duration::from_millis),
            ))
        }
        [-1, i] => {
            let i = index(*i).ok_or_else(bad)?;
            let generation = holds[i].state().generation;
            holds[i].mark_lost(generation, "re-entry found the lock gone");
            Err(LockError::Lost {
                name: keys[i].name.clone(),
            })
        }
        _ => Err(bad()),
    }
}
