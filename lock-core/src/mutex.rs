//! The reentrant leased lock: acquisition, waiting, and the request builders.

use std::fmt;
use std::future::IntoFuture;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedMutexGuard, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::Topology;
use crate::client::{Inner, LockClient, check_lease};
use crate::error::LockError;
use crate::guard::{Hold, Lease, LockGuard, Status};
use crate::name::LockKeys;
use crate::scripts;
use crate::waiters::Waiter;

/// The outcome of one try in Redis.
pub(crate) enum Attempt {
    Acquired(LockGuard),
    /// Held by someone else, whose lease has this much left (None: no expiry set).
    Busy(Option<Duration>),
    /// Granted, but the answer came after the lease (less the drift margin) had run out, so
    /// the lock may already be someone else's: not a success. The grant is being given back;
    /// a first attempt reports [`LockError::Lost`], a request already waiting tries again.
    Late,
}

/// One try to take (or re-enter) the lock in Redis, for `owner` (see [`send_undoable`] for
/// what happens when the caller goes away meanwhile).
pub(crate) async fn attempt(
    inner: &Arc<Inner>,
    keys: &LockKeys,
    owner: &str,
    lease: Option<Duration>,
    will_wait: bool,
) -> Result<Attempt, LockError> {
    let hold = inner.hold(keys, owner);
    let op = hold.op.clone().lock_owned().await;
    let expected = expected_count(&hold)?;
    let (kind, lease_len) = match lease {
        Some(d) => (Lease::Fixed, d),
        None => (Lease::Watchdog, inner.config.watchdog_lease),
    };
    let mut invocation = scripts::ACQUIRE.key(&hold.keys.hash);
    invocation
        .arg(owner)
        .arg(millis(lease_len))
        .arg(expected)
        .arg(if will_wait { "1" } else { "0" });
    let (reply, sent_at, op) = send_undoable(inner, &hold, expected, op, invocation).await?;
    let outcome = match reply {
        token if token > 0 => {
            let generation = hold.acquired(token.unsigned_abs(), sent_at, kind, lease_len);
            let guard = LockGuard::new(hold.clone(), inner.clone(), generation);
            if guard.is_held() {
                Ok(Attempt::Acquired(guard))
            } else {
                // Given back by the guard's drop, before this owner's next command (which
                // waits for the operation lock the release takes).
                drop(guard);
                Ok(Attempt::Late)
            }
        }
        -1 => Ok(Attempt::Busy(None)),
        0 => {
            let generation = hold.state().generation;
            hold.mark_lost(generation, "re-entry found the lock gone");
            Err(LockError::Lost {
                name: keys.name.clone(),
            })
        }
        pttl => Ok(Attempt::Busy(Some(Duration::from_millis(
            (-2 - pttl).unsigned_abs(),
        )))),
    };
    drop(op);
    outcome
}

/// What undoing an acquisition needs: the client, the hold, the hold count the acquisition
/// started from, and the owner's operation lock (kept until the undo is done).
type Undo = (
    Arc<Inner>,
    Arc<crate::guard::Hold>,
    u32,
    OwnedMutexGuard<()>,
);

/// The reply of an acquisition, handed from its task to the caller. Unless the caller takes
/// `undo` out, dropping it undoes the acquisition if it was (or may have been) applied.
struct Reply {
    result: Result<i64, LockError>,
    sent_at: Instant,
    undo: Option<Undo>,
}

impl Drop for Reply {
    fn drop(&mut self) {
        let Some((inner, hold, expected, op)) = self.undo.take() else {
            return;
        };
        let needed = match &self.result {
            Ok(reply) => *reply > 0,
            // Never sent (no connection): nothing to undo.
            Err(e) if e.never_sent() => false,
            Err(_) => true,
        };
        if needed {
            inner.compensate_in_background(hold, expected, op);
        }
    }
}

/// Sends an acquisition script whose positive reply means "applied", in a task of its own, and
/// returns the reply, when it was sent, and the operation lock back.
///
/// Dropping the returned future never abandons the request in flight: when the caller is gone
/// (or the outcome is unknown) by the time the reply arrives, the undo runs from the task,
/// after the reply, which orders it after the acquisition on the server. (Sent from the
/// dropped future on another connection, an undo could overtake the acquisition and leave an
/// orphan.) An error that may have left the acquisition applied is undone the same way.
pub(crate) async fn send_undoable(
    inner: &Arc<Inner>,
    hold: &Arc<Hold>,
    expected: u32,
    op: OwnedMutexGuard<()>,
    invocation: redis::ScriptInvocation<'static>,
) -> Result<(i64, Instant, OwnedMutexGuard<()>), LockError> {
    let (tx, rx) = oneshot::channel();
    let task = {
        let (inner, hold) = (inner.clone(), hold.clone());
        async move {
            let sent_at = Instant::now();
            let result = send_acquisition(&inner, &hold.keys, &invocation, |r: &i64| *r > 0).await;
            if matches!(result, Err(LockError::NotReplicated { .. })) {
                // Given back before the caller hears of it, so the error means "not held".
                hold.compensate(&inner, expected, op).await;
                let _ = tx.send(Reply {
                    result,
                    sent_at,
                    undo: None,
                });
                return;
            }
            // If the caller is gone, or goes before it reads this, dropping it undoes the
            // acquisition.
            let _ = tx.send(Reply {
                result,
                sent_at,
                undo: Some((inner, hold, expected, op)),
            });
        }
    };
    tokio::spawn(task);
    let mut delivered = rx.await.map_err(|_| LockError::Unavailable {
        waited: Duration::ZERO,
        source: None,
    })?;
    let reply = match std::mem::replace(&mut delivered.result, Ok(0)) {
        Ok(reply) => reply,
        Err(e) => {
            if !e.never_sent() {
                // Put an error back: dropping `delivered` then undoes what may have run.
                delivered.result = Err(LockError::UnexpectedReply(e.to_string()));
            }
            return Err(e);
        }
    };
    let Some((_, _, _, op)) = delivered.undo.take() else {
        return Err(LockError::UnexpectedReply(
            "an acquisition reply without its undo".to_owned(),
        ));
    };
    Ok((reply, delivered.sent_at, op))
}

/// Sends an acquisition script. With [`min_replicas`](crate::LockClientBuilder::min_replicas)
/// it is followed by `WAIT`, and a reply that `applied` says took effect but that fewer than
/// the required replicas confirmed becomes [`LockError::NotReplicated`] (the caller gives the
/// acquisition back before reporting it).
pub(crate) async fn send_acquisition<T: redis::FromRedisValue>(
    inner: &Inner,
    keys: &LockKeys,
    invocation: &redis::ScriptInvocation<'static>,
    applied: impl FnOnce(&T) -> bool,
) -> Result<T, LockError> {
    let Some((required, timeout)) = inner.config.min_replicas else {
        return inner.backend.invoke(invocation).await;
    };
    let (value, acked) = inner
        .backend
        .invoke_acked(invocation, &keys.hash, required, timeout)
        .await?;
    let reply: T = crate::backend::convert(value)?;
    if applied(&reply) && acked < required {
        tracing::warn!(lock = %keys.name, acked, required,
            "too few replicas confirmed the acquisition; giving it back");
        return Err(LockError::NotReplicated {
            name: keys.name.clone(),
            acked,
            required,
            timeout,
        });
    }
    Ok(reply)
}

/// The hold count an acquisition for `hold` starts from (call with its operation lock held).
/// A hold that was lost while guards of it still live cannot be re-entered.
pub(crate) fn expected_count(hold: &Hold) -> Result<u32, LockError> {
    let mut st = hold.state();
    match st.status {
        Status::Held | Status::Releasing => Ok(st.count),
        Status::Lost if hold.guards() > 0 => Err(LockError::Lost {
            name: hold.keys.name.clone(),
        }),
        Status::Idle | Status::Lost => {
            st.count = 0;
            Ok(0)
        }
    }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Takes the lock, waiting up to `wait` (None: forever).
async fn acquire(
    inner: Arc<Inner>,
    name: String,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> Result<LockGuard, LockError> {
    let start = Instant::now();
    let keys = LockKeys::new(&inner.config.prefix, &name)?;
    if let Some(lease) = lease {
        check_lease("lease", lease)?;
    }
    let owner = inner.owner_for_current_task();
    let deadline = wait.and_then(|w| start.checked_add(w));
    let timeout = |holder_ttl| LockError::Timeout {
        name: keys.name.clone(),
        waited: start.elapsed(),
        holder_ttl,
    };

    let lost = || LockError::Lost {
        name: keys.name.clone(),
    };
    let mut holder_ttl =
        match attempt(&inner, &keys, &owner, lease, wait != Some(Duration::ZERO)).await? {
            Attempt::Acquired(guard) => return Ok(guard),
            Attempt::Busy(ttl) => ttl,
            // Like an outage, a late grant fails the first attempt; a waiting request (below)
            // tries again instead.
            Attempt::Late => return Err(lost()),
        };
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(timeout(holder_ttl));
    }

    // Subscribe first, then take this process's turn for the name, then try again; then
    // wait for the release message or the holder's lease to run out, whichever comes first.
    let mut waiter = Waiter::new(
        deadline,
        inner.config.watchdog_lease,
        inner.backend.connect_timeout(),
    )
    .after_first_attempt();
    waiter.subscribe(&inner.waiters, &keys.channel).await;
    let Some(sub) = waiter.subscription() else {
        unreachable!("just subscribed");
    };
    let turn = sub.queue();
    let _turn = match deadline {
        Some(d) => match tokio::time::timeout_at(d, turn).await {
            Ok(turn) => turn,
            Err(_) => return Err(timeout(holder_ttl)),
        },
        None => turn.await,
    };
    loop {
        waiter.mark_seen();
        match attempt(&inner, &keys, &owner, lease, true).await {
            Ok(Attempt::Acquired(guard)) => return Ok(guard),
            Ok(Attempt::Busy(ttl)) => holder_ttl = ttl,
            Ok(Attempt::Late) if waiter.expired() => return Err(lost()),
            Ok(Attempt::Late) => continue,
            Err(e) => {
                waiter.ride_out(e).await?;
                continue;
            }
        }
        if waiter.expired() {
            return Err(timeout(holder_ttl));
        }
        // A crashed holder never publishes: look again when its lease runs out.
        waiter.sleep(holder_ttl).await;
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A request to take a lock, waiting for it if needed: made by [`LockClient::lock`], run by
/// `.await`.
#[must_use = "a lock request does nothing until awaited"]
pub struct LockRequest {
    inner: Arc<Inner>,
    name: String,
    wait: Option<Duration>,
    lease: Option<Duration>,
}

impl LockRequest {
    pub(crate) fn new(client: &LockClient, name: String) -> Self {
        Self {
            inner: client.inner.clone(),
            name,
            wait: None,
            lease: None,
        }
    }

    /// Gives up after waiting this long, with [`LockError::Timeout`]. Without it the request
    /// waits until the lock is free. `Duration::ZERO` makes a single attempt.
    ///
    /// If Redis cannot be reached on the first attempt the request fails at once; once it is
    /// waiting, it rides out an outage (a restart, a failover), trying again every 250 ms,
    /// and if its wait ends during one it returns that error rather than
    /// [`LockError::Timeout`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Holds the lock for a fixed lease that is never renewed (at least 10 ms). Without it
    /// the client's watchdog keeps the lock for as long as the guard lives.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }
}

impl IntoFuture for LockRequest {
    type Output = Result<LockGuard, LockError>;
    type IntoFuture = BoxFuture<Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let span = tracing::debug_span!("lock", name = %crate::error::shorten(&self.name));
        Box::pin(acquire(self.inner, self.name, self.wait, self.lease).instrument(span))
    }
}

impl fmt::Debug for LockRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockRequest")
            .field("name", &self.name)
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .finish()
    }
}

/// A single attempt to take a lock: made by [`LockClient::try_lock`], run by `.await`.
/// Resolves to `Ok(None)` when someone else holds it.
#[must_use = "a lock request does nothing until awaited"]
pub struct TryLockRequest {
    inner: Arc<Inner>,
    name: String,
    lease: Option<Duration>,
}

impl TryLockRequest {
    pub(crate) fn new(client: &LockClient, name: String) -> Self {
        Self {
            inner: client.inner.clone(),
            name,
            lease: None,
        }
    }

    /// Holds the lock for a fixed lease that is never renewed (at least 10 ms). Without it
    /// the client's watchdog keeps the lock for as long as the guard lives.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }
}

impl IntoFuture for TryLockRequest {
    type Output = Result<Option<LockGuard>, LockError>;
    type IntoFuture = BoxFuture<Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let span = tracing::debug_span!("try_lock", name = %crate::error::shorten(&self.name));
        Box::pin(
            async move {
                let keys = LockKeys::new(&self.inner.config.prefix, &self.name)?;
                if let Some(lease) = self.lease {
                    check_lease("lease", lease)?;
                }
                let owner = self.inner.owner_for_current_task();
                match attempt(&self.inner, &keys, &owner, self.lease, false).await? {
                    Attempt::Acquired(guard) => Ok(Some(guard)),
                    Attempt::Busy(_) => Ok(None),
                    Attempt::Late => Err(LockError::Lost { name: keys.name }),
                }
            }
            .instrument(span),
        )
    }
}

impl fmt::Debug for TryLockRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TryLockRequest")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .finish()
    }
}
