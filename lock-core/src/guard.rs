//! [`LockGuard`]: proof of holding a lock, and the shared state behind it.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{OwnedMutexGuard, watch};
use tokio::time::Instant;

use crate::client::Inner;
use crate::error::LockError;
use crate::mutex::millis;
use crate::name::LockKeys;
use crate::scripts;

/// How a hold's lease is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// Renewed by the client's watchdog for as long as a guard lives.
    Watchdog,
    /// Set once by the acquisition (or by [`LockGuard::extend`]), never renewed.
    Fixed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Not held (before the first acquisition, or after the last release).
    Idle,
    Held,
    /// Every guard is gone; the release is on its way. Not renewed.
    Releasing,
    Lost,
}

pub(crate) struct HoldState {
    /// The owner's hold count in Redis, as far as this process knows.
    pub(crate) count: u32,
    pub(crate) token: u64,
    pub(crate) lease: Lease,
    pub(crate) status: Status,
    /// The lock is ours until this instant unless a renewal moves it.
    pub(crate) valid_until: Instant,
    /// Bumped by every fresh acquisition, so a late release of an earlier hold is ignored.
    pub(crate) generation: u64,
}

/// What a hold holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A reentrant lock (`keys.hash` is the lock).
    Lock,
    /// This many permits of a semaphore (`keys.hash` is the semaphore's sorted set), with ids
    /// `<owner>:1..=n`.
    Permits(u32),
    /// A read share of a read-write lock (`keys.hash` is the readers' hash).
    Read,
    /// A fair lock (`keys.hash` is the lock; its queue and deadlines are `<hash>:queue` and
    /// `<hash>:deadlines`; `keys.channel` is the prefix of the waiters' wake channels).
    Fair,
}

/// One owner's hold on one lock, shared by all of the owner's guards for it.
pub(crate) struct Hold {
    pub(crate) kind: Kind,
    pub(crate) keys: LockKeys,
    pub(crate) owner: String,
    state: Mutex<HoldState>,
    /// Serialises this owner's commands on this lock, so each carries the right hold count.
    pub(crate) op: Arc<tokio::sync::Mutex<()>>,
    /// Live guards.
    guards: AtomicUsize,
    /// True once the hold is lost or released.
    ended: watch::Sender<bool>,
    client: Weak<Inner>,
}

impl Hold {
    pub(crate) fn new(kind: Kind, keys: LockKeys, owner: String, client: Weak<Inner>) -> Self {
        Self {
            kind,
            keys,
            owner,
            state: Mutex::new(HoldState {
                count: 0,
                token: 0,
                lease: Lease::Fixed,
                status: Status::Idle,
                valid_until: Instant::now(),
                generation: 0,
            }),
            op: Arc::new(tokio::sync::Mutex::new(())),
            guards: AtomicUsize::new(0),
            ended: watch::Sender::new(false),
            client,
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, HoldState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a successful acquisition sent at `sent_at`; returns the hold's generation.
    pub(crate) fn acquired(
        &self,
        token: u64,
        sent_at: Instant,
        lease: Lease,
        lease_len: Duration,
    ) -> u64 {
        let mut st = self.state();
        let valid_until = sent_at + validity(lease_len);
        if matches!(st.status, Status::Held | Status::Releasing) {
            st.valid_until = st.valid_until.max(valid_until);
            if lease == Lease::Watchdog {
                st.lease = Lease::Watchdog;
            }
            st.count += 1;
        } else {
            st.generation += 1;
            st.valid_until = valid_until;
            st.lease = lease;
            st.count = 1;
            self.ended.send_replace(false);
        }
        st.status = Status::Held;
        st.token = token;
        st.generation
    }

    /// The number of live guards of this hold.
    pub(crate) fn guards(&self) -> usize {
        self.guards.load(Ordering::Acquire)
    }

    /// Records a renewal (watchdog or extend) sent at `sent_at` that Redis confirmed.
    pub(crate) fn renewed(&self, generation: u64, sent_at: Instant, lease_len: Duration) {
        let mut st = self.state();
        if st.generation == generation && matches!(st.status, Status::Held | Status::Releasing) {
            // A renewal sets the lease to exactly `lease_len` on the server (even if an
            // `extend` had set a longer one), so the validity follows it exactly.
            st.valid_until = sent_at + validity(lease_len);
        }
    }

    /// Marks the hold lost, wakes `lost()` futures and says so in the log.
    /// Only the given generation is marked: a late answer about an earlier hold of this owner
    /// never touches a newer one.
    pub(crate) fn mark_lost(&self, generation: u64, why: &'static str) {
        let mut st = self.state();
        if st.generation != generation {
            return;
        }
        if matches!(st.status, Status::Held | Status::Releasing) {
            let was_held = st.status == Status::Held;
            st.status = Status::Lost;
            drop(st);
            if was_held {
                tracing::warn!(lock = %self.keys.name, reason = why, "distributed lock lost");
            }
        }
        self.ended.send_replace(true);
    }

    /// Checks whether a held hold has run past its validity, and marks it lost if so.
    pub(crate) fn expire_if_due(&self, now: Instant) -> bool {
        let (due, generation) = {
            let st = self.state();
            (
                st.status == Status::Held && now >= st.valid_until,
                st.generation,
            )
        };
        if due {
            self.mark_lost(generation, "no renewal succeeded within the lease");
        }
        due
    }

    fn is_held(&self, generation: u64) -> bool {
        let st = self.state();
        st.generation == generation && st.status == Status::Held && Instant::now() < st.valid_until
    }

    /// Gives back one hold in Redis. Returns whether the owner still held the lock.
    ///
    /// When the release fails (the connection broke, Redis did not answer) its outcome is
    /// unknown, and the hold it was to give back must not be forgotten: the error is returned,
    /// and the same release (safe to repeat: the script recognises a repeat) is sent again in
    /// the background until Redis answers or the lease runs out. The owner's operation lock is
    /// kept meanwhile, so its next release or re-entry starts from the right hold count.
    pub(crate) async fn release_one(
        self: &Arc<Self>,
        inner: &Arc<Inner>,
        generation: u64,
    ) -> Result<bool, LockError> {
        let op = self.op.clone().lock_owned().await;
        let (count, token) = {
            let st = self.state();
            if st.count == 0 || st.generation != generation {
                return Ok(false);
            }
            (st.count, st.token)
        };
        if let Kind::Permits(n) = self.kind {
            let valid = self.release_permits(inner, n).await?;
            let mut st = self.state();
            st.count = 0;
            st.status = Status::Idle;
            drop(st);
            self.ended.send_replace(true);
            return Ok(valid == i64::from(n));
        }
        match inner
            .backend
            .invoke::<i64>(&self.release_script(inner, count, token))
            .await
        {
            Ok(reply) => self.released(generation, reply),
            Err(e) => {
                tracing::warn!(lock = %self.keys.name, error = %e,
                    "release failed; retrying it in the background");
                let (hold, inner) = (self.clone(), inner.clone());
                tokio::spawn(async move {
                    hold.retry_release(&inner, generation, count, token, op)
                        .await;
                });
                Err(e)
            }
        }
    }

    /// Applies a release script's answer to the local state.
    fn released(&self, generation: u64, reply: i64) -> Result<bool, LockError> {
        match reply {
            1..=3 => {
                let mut st = self.state();
                st.count = st.count.saturating_sub(1);
                if st.count == 0 {
                    st.status = Status::Idle;
                    drop(st);
                    self.ended.send_replace(true);
                }
                Ok(true)
            }
            0 => {
                self.mark_lost(generation, "released after the lock was gone");
                self.state().count = 0;
                Ok(false)
            }
            other => Err(LockError::UnexpectedReply(format!(
                "release script returned {other}"
            ))),
        }
    }

    /// Sends a failed release again until Redis answers, or until the lease has run out (the
    /// lock is then gone from Redis, whatever happened to the release).
    async fn retry_release(
        &self,
        inner: &Inner,
        generation: u64,
        count: u32,
        token: u64,
        _op: OwnedMutexGuard<()>,
    ) {
        let mut backoff = Duration::from_millis(50);
        loop {
            tokio::time::sleep(backoff).await;
            {
                let st = self.state();
                if st.generation != generation || st.count != count {
                    return;
                }
                if Instant::now() >= st.valid_until {
                    drop(st);
                    self.mark_lost(generation, "the lease ran out while a release was retried");
                    self.state().count = 0;
                    return;
                }
            }
            let script = self.release_script(inner, count, token);
            match inner.backend.invoke::<i64>(&script).await {
                Ok(reply) => {
                    if let Err(e) = self.released(generation, reply) {
                        tracing::warn!(lock = %self.keys.name, error = %e, "retried release");
                    }
                    return;
                }
                Err(e) => {
                    tracing::debug!(lock = %self.keys.name, error = %e, "release retry failed");
                }
            }
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// The script that gives back one hold when the owner's count is `count` (every kind but
    /// permits): answers 1 released, 2 decremented, 3 a repeat, 0 not held.
    fn release_script(
        &self,
        inner: &Inner,
        count: u32,
        token: u64,
    ) -> redis::ScriptInvocation<'static> {
        let mut invocation = match self.kind {
            Kind::Read => inner.publish.rw_read_release.key(&self.keys.hash),
            Kind::Fair => {
                let mut invocation = inner.publish.fair_release.key(&self.keys.hash);
                invocation
                    .key(format!("{}:queue", self.keys.hash))
                    .key(format!("{}:deadlines", self.keys.hash));
                invocation
            }
            Kind::Lock | Kind::Permits(_) => inner.publish.release.key(&self.keys.hash),
        };
        invocation.arg(&self.owner).arg(count);
        if self.kind == Kind::Read {
            invocation.arg(&self.keys.channel);
        } else {
            invocation
                .arg(token)
                .arg(&self.keys.channel)
                .arg(millis(inner.config.fence_ttl));
        }
        invocation
    }

    async fn release_permits(&self, inner: &Inner, n: u32) -> Result<i64, LockError> {
        inner
            .backend
            .invoke(
                inner
                    .publish
                    .sem_release
                    .key(&self.keys.hash)
                    .arg(&self.owner)
                    .arg(n)
                    .arg(&self.keys.channel),
            )
            .await
    }

    /// Undoes an acquisition whose reply never arrived (cancelled or failed in flight): gives
    /// back the hold it may have added. Harmless when the acquisition was not applied.
    pub(crate) async fn compensate(&self, inner: &Inner, expected: u32, _op: OwnedMutexGuard<()>) {
        let result = match self.kind {
            Kind::Permits(n) => self.release_permits(inner, n).await,
            _ => {
                // A fresh acquisition's token is unknown: 0 never matches a recorded release.
                let token = if expected == 0 { 0 } else { self.state().token };
                inner
                    .backend
                    .invoke(&self.release_script(inner, expected + 1, token))
                    .await
            }
        };
        if let Err(e) = result {
            tracing::warn!(lock = %self.keys.name, error = %e,
                "could not undo an interrupted acquisition; its lease will expire it");
        }
    }

    pub(crate) fn guard_added(&self) {
        self.guards.fetch_add(1, Ordering::AcqRel);
    }

    /// Returns true when this was the last guard: renewal stops at once.
    pub(crate) fn guard_removed(&self) -> bool {
        if self.guards.fetch_sub(1, Ordering::AcqRel) == 1 {
            let mut st = self.state();
            if st.status == Status::Held {
                st.status = Status::Releasing;
            }
            true
        } else {
            false
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(inner) = self.client.upgrade() {
            inner.forget_hold(&self.keys.hash, &self.owner);
        }
    }
}

/// The part of a lease we count on: lease − (1% of the lease + 2 ms) for clock drift and the
/// time the request spent on its way to Redis.
pub(crate) fn validity(lease: Duration) -> Duration {
    lease.saturating_sub(lease / 100 + Duration::from_millis(2))
}

/// A cheap, cloneable view of a held lock: its name, fencing token and lost signal, without
/// the power to release it. Hand it to code that must check the lock is still ours (a request
/// handler, a database update), e.g. from [`LockGuard::handle`] or
/// [`current_lock`](crate::current_lock).
#[derive(Clone)]
pub struct HeldLock {
    hold: Arc<Hold>,
    generation: u64,
}

impl HeldLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.hold.keys.name
    }

    /// The fencing token of the hold; see [`LockGuard::fencing_token`].
    pub fn fencing_token(&self) -> u64 {
        self.hold.state().token
    }

    /// True while the hold is not released, not lost, and within its lease.
    pub fn is_held(&self) -> bool {
        self.hold.is_held(self.generation)
    }

    /// Resolves when the hold is known or presumed lost, or released; see
    /// [`LockGuard::lost`].
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        lost_future(self.hold.clone(), self.generation)
    }
}

impl fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldLock")
            .field("name", &self.name())
            .field("fencing_token", &self.fencing_token())
            .field("held", &self.is_held())
            .finish()
    }
}

pub(crate) fn lost_future(
    hold: Arc<Hold>,
    generation: u64,
) -> impl Future<Output = ()> + Send + 'static {
    let mut ended = hold.ended.subscribe();
    async move {
        loop {
            let deadline = {
                let st = hold.state();
                if st.status != Status::Held || st.generation != generation {
                    return;
                }
                st.valid_until
            };
            if *ended.borrow_and_update() {
                return;
            }
            tokio::select! {
                changed = ended.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep_until(deadline) => {
                    hold.expire_if_due(Instant::now());
                }
            }
        }
    }
}

/// What every guard shares: its hold and generation, and whether it was given back. Dropped
/// without [`GuardCore::release`], it releases in the background.
pub(crate) struct GuardCore {
    pub(crate) hold: Arc<Hold>,
    pub(crate) inner: Arc<Inner>,
    pub(crate) generation: u64,
    done: bool,
}

impl GuardCore {
    pub(crate) fn new(hold: Arc<Hold>, inner: Arc<Inner>, generation: u64) -> Self {
        hold.guard_added();
        Self {
            hold,
            inner,
            generation,
            done: false,
        }
    }

    /// Not given back, not lost, and within its lease as last confirmed by Redis.
    pub(crate) fn is_held(&self) -> bool {
        !self.done && self.hold.is_held(self.generation)
    }

    /// How much longer it is ours unless a renewal extends it; zero once it is not held.
    pub(crate) fn remaining(&self) -> Duration {
        if !self.is_held() {
            return Duration::ZERO;
        }
        self.hold
            .state()
            .valid_until
            .saturating_duration_since(Instant::now())
    }

    /// Resolves when it is known or presumed lost, or released.
    pub(crate) fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        lost_future(self.hold.clone(), self.generation)
    }

    /// Gives it back; returns whether it was still held until now.
    pub(crate) async fn release(mut self) -> Result<bool, LockError> {
        self.done = true;
        self.hold.guard_removed();
        self.hold.release_one(&self.inner, self.generation).await
    }
}

impl Drop for GuardCore {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        self.hold.guard_removed();
        self.inner
            .release_in_background(self.hold.clone(), self.generation);
    }
}

/// Proof that this process holds a lock.
///
/// * [`fencing_token`](LockGuard::fencing_token): a number that grows with every new holder of
///   the name. Pass it to the resource you protect and have it refuse writes carrying a token
///   lower than one it has seen: that makes a holder that stalled past its lease harmless.
/// * [`is_held`](LockGuard::is_held) and [`lost`](LockGuard::lost): whether the lock is still
///   ours, and a future that resolves when it is known or presumed lost.
/// * [`unlock`](LockGuard::unlock) releases it and reports whether it was still held. Dropping
///   the guard releases it too, in the background on the client's runtime (if the runtime is
///   gone, the lease expires it).
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    core: GuardCore,
}

impl LockGuard {
    pub(crate) fn new(hold: Arc<Hold>, inner: Arc<Inner>, generation: u64) -> Self {
        let guard = Self {
            core: GuardCore::new(hold, inner, generation),
        };
        crate::scope::record(guard.handle());
        guard
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.core.hold.keys.name
    }

    /// The fencing token of this hold: strictly greater than the token of every earlier holder
    /// of this name (re-entries of one hold share its token).
    pub fn fencing_token(&self) -> u64 {
        self.core.hold.state().token
    }

    /// The owner's hold count: how many guards (re-entries) share this hold.
    pub fn hold_count(&self) -> u32 {
        self.core.hold.state().count
    }

    /// True while the lock is ours: not released, not lost, and within its lease as last
    /// confirmed by Redis (measured on a monotonic clock from when the request was sent).
    pub fn is_held(&self) -> bool {
        self.core.is_held()
    }

    /// How much longer the lock is ours unless a renewal extends it; zero once it is not held.
    pub fn remaining(&self) -> Duration {
        self.core.remaining()
    }

    /// Resolves when the lock is known or presumed lost: the watchdog found it gone, no
    /// renewal succeeded within the lease, a fixed lease ran out, or it was released.
    ///
    /// Select on it to stop work that must not go on without the lock:
    ///
    /// ```no_run
    /// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
    /// let guard = client.lock("report:daily").await?;
    /// tokio::select! {
    ///     _ = guard.lost() => tracing::warn!("lock lost; stopping"),
    ///     _ = build_report() => {}
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// # async fn build_report() {}
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.core.lost()
    }

    /// A cloneable view of this hold (name, fencing token, lost signal) that cannot release
    /// it.
    pub fn handle(&self) -> HeldLock {
        HeldLock {
            hold: self.core.hold.clone(),
            generation: self.core.generation,
        }
    }

    /// Re-enters the lock with the same owner: a second guard that shares this hold (and its
    /// fencing token), raising the hold count by one. The lock is released when the count
    /// returns to zero.
    pub async fn reenter(&self) -> Result<LockGuard, LockError> {
        if !self.is_held() {
            return Err(LockError::Lost {
                name: self.core.hold.keys.name.clone(),
            });
        }
        let lease = self.core.hold.state().lease;
        let lease = match lease {
            Lease::Watchdog => None,
            Lease::Fixed => Some(self.remaining().max(Duration::from_millis(10))),
        };
        match crate::mutex::attempt(
            &self.core.inner,
            &self.core.hold.keys,
            &self.core.hold.owner,
            lease,
            false,
        )
        .await?
        {
            crate::mutex::Attempt::Acquired(guard) => Ok(guard),
            crate::mutex::Attempt::Busy(_) | crate::mutex::Attempt::Late => Err(LockError::Lost {
                name: self.core.hold.keys.name.clone(),
            }),
        }
    }

    /// Sets the lease to `lease` from now, if the lock is still ours. For a watchdog lease the
    /// watchdog goes on renewing it afterwards.
    pub async fn extend(&self, lease: Duration) -> Result<(), LockError> {
        crate::client::check_lease("lease", lease)?;
        if !self.is_held() {
            return Err(LockError::Lost {
                name: self.core.hold.keys.name.clone(),
            });
        }
        let _op = self.core.hold.op.lock().await;
        if !self.is_held() {
            return Err(LockError::Lost {
                name: self.core.hold.keys.name.clone(),
            });
        }
        let sent_at = Instant::now();
        let reply: Vec<i64> = self
            .core
            .inner
            .backend
            .invoke(
                scripts::RENEW
                    .key(&self.core.hold.keys.hash)
                    .arg(millis(lease))
                    .arg(&self.core.hold.owner),
            )
            .await?;
        if reply.first() == Some(&1) {
            let mut st = self.core.hold.state();
            if st.status == Status::Held && st.generation == self.core.generation {
                st.valid_until = sent_at + validity(lease);
            }
            Ok(())
        } else {
            self.core
                .hold
                .mark_lost(self.core.generation, "extend found the lock gone");
            Err(LockError::Lost {
                name: self.core.hold.keys.name.clone(),
            })
        }
    }

    /// Releases the lock (one hold of it, if re-entered). Returns whether it was still held
    /// until now; `Ok(false)` means it had expired or been taken over, and whatever it
    /// protected may have been touched by someone else meanwhile.
    ///
    /// If Redis cannot be reached the error is returned and the lock is no longer renewed:
    /// its lease expires it.
    pub async fn unlock(self) -> Result<bool, LockError> {
        self.core.release().await
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The owner id stays out: whoever has it can release or extend the lock.
        f.debug_struct("LockGuard")
            .field("name", &self.core.hold.keys.name)
            .field("fencing_token", &self.fencing_token())
            .field("held", &self.is_held())
            .finish()
    }
}
