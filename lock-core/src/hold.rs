//! [`Hold`]: one owner's hold on one lock, shared by all of the owner's guards for it.
//!
//! State and transitions only: what the owner holds (its hold count, fencing token, lease and
//! validity), whether it is held, releasing or lost, and a generation bumped by every fresh
//! acquisition so that late news about an earlier hold never touches a newer one. No Redis
//! I/O and no reference to the client: the engine above sends the commands and reports their
//! answers here.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

use crate::error::LockError;
use crate::lease::LeaseState;
use crate::metrics::{self, Labels, LossReason};
use crate::name::Keys;
use crate::util::{lock, validity};

/// How a hold's lease is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// Renewed by the client's watchdog for as long as a guard lives.
    Watchdog,
    /// Set once by the acquisition (or by an extension), never renewed.
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

/// What a hold holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// A mutex: the lock string `P{N}`.
    Lock,
    /// A fair lock: the lock string `P{N}:fair`, with its queue.
    Fair,
    /// The write side of a read-write lock: the lock string `P{N}:rw`.
    Write,
    /// A read share of a read-write lock, in `P{N}:rw:readers`.
    Read,
    /// This many permits of a semaphore, ids `<owner>:1..=n` in `P{N}:permits`.
    Permits(u32),
}

impl Kind {
    /// The key this hold lives in.
    pub(crate) fn key(self, keys: &Keys) -> Cow<'_, str> {
        match self {
            Kind::Lock => Cow::Borrowed(keys.lock()),
            Kind::Fair => Cow::Owned(keys.fair()),
            Kind::Write => Cow::Owned(keys.rw_writer()),
            Kind::Read => Cow::Owned(keys.rw_readers()),
            Kind::Permits(_) => Cow::Owned(keys.permits()),
        }
    }

    /// Whether this kind of hold carries a fencing token.
    pub(crate) fn fenced(self) -> bool {
        matches!(self, Kind::Lock | Kind::Fair | Kind::Write)
    }

    /// The `kind` label of this hold's metrics.
    pub(crate) const fn metric(self) -> &'static str {
        match self {
            Kind::Lock => "mutex",
            Kind::Fair => "fair",
            Kind::Write => "write",
            Kind::Read => "read",
            Kind::Permits(_) => "semaphore",
        }
    }

    /// A name for logs and spans.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Lock => "mutex",
            Kind::Fair => "fair lock",
            Kind::Write => "write lock",
            Kind::Read => "read share",
            Kind::Permits(_) => "permits",
        }
    }
}

/// The mutable part of a hold.
struct State {
    /// The owner's hold count in Redis, as far as this process knows.
    count: u32,
    token: u64,
    lease: Lease,
    status: Status,
    /// The lock is ours until this instant unless a renewal moves it.
    valid_until: Instant,
    /// Bumped by every fresh acquisition, so a late answer about an earlier hold is ignored.
    generation: u64,
    /// Why the hold of this generation was lost, once it was.
    lost_reason: Option<&'static str>,
    /// When this generation was granted (its first acquisition's answer).
    granted_at: Instant,
    /// The last renewal of this generation failed while it was still valid (counted in the
    /// `lock_at_risk` gauge while set); a confirmed renewal clears it.
    at_risk: bool,
    /// This process's place at the head of the name's local queue, kept from the grant until
    /// the hold ends, so the next local waiter asks Redis only once the lock is given back
    /// (see [`Hold::keep_queue_place`]).
    queue_place: Option<OwnedSemaphorePermit>,
}

/// A copy of a hold's state at one moment ([`Hold::snapshot`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot {
    pub(crate) generation: u64,
    pub(crate) token: u64,
    /// The owner's hold count in Redis, as far as this process knows.
    pub(crate) count: u32,
    pub(crate) lease: Lease,
    pub(crate) status: Status,
    /// The lock is ours until this instant unless a renewal moves it.
    pub(crate) valid_until: Instant,
}

impl State {
    /// Whether the hold counts as held in Redis (the `lock_held` gauge): granted and neither
    /// released nor lost.
    fn counted(&self) -> bool {
        matches!(self.status, Status::Held | Status::Releasing)
    }
}

/// One owner's hold on one lock.
pub(crate) struct Hold {
    pub(crate) kind: Kind,
    /// The labels of its metrics.
    pub(crate) labels: Labels,
    pub(crate) keys: Keys,
    /// The owner is `<client id>:<holder>`.
    pub(crate) holder: u64,
    state: Mutex<State>,
    /// Serialises this owner's commands on this lock, so each carries the right hold count.
    commands: Semaphore,
    /// Live guards.
    guards: AtomicUsize,
    /// Bumped by every change of the hold's [`LeaseState`] (at risk, recovered, lost,
    /// released): what `lost()` futures and lease watches wait on.
    changes: watch::Sender<u64>,
}

/// The answer of a release script, as the hold sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Given back (freed, decremented, or a repeat of an applied release).
    Yes,
    /// The owner did not hold it any more.
    NotHeld,
}

/// What a release that failed should do next.
pub(crate) enum Retry {
    /// Send it again.
    Again,
    /// Stop: the hold moved on (another release or acquisition changed it).
    Stop,
    /// Stop: the lease ran out meanwhile, the lock is gone whatever happened.
    Expired,
}

impl Hold {
    pub(crate) fn new(kind: Kind, keys: Keys, holder: u64, labels: Labels) -> Self {
        Self {
            kind,
            labels,
            keys,
            holder,
            state: Mutex::new(State {
                count: 0,
                token: 0,
                lease: Lease::Fixed,
                status: Status::Idle,
                valid_until: Instant::now(),
                generation: 0,
                lost_reason: None,
                granted_at: Instant::now(),
                at_risk: false,
                queue_place: None,
            }),
            commands: Semaphore::new(1),
            guards: AtomicUsize::new(0),
            changes: watch::Sender::new(0),
        }
    }

    /// Tells `lost()` futures and lease watches that the state changed.
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver of the hold's changes, with the current one seen.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The lock's name.
    pub(crate) fn name(&self) -> &str {
        self.keys.name()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// What the hold is now, copied out (its lock is not kept).
    pub(crate) fn snapshot(&self) -> Snapshot {
        let st = self.state();
        Snapshot {
            generation: st.generation,
            token: st.token,
            count: st.count,
            lease: st.lease,
            status: st.status,
            valid_until: st.valid_until,
        }
    }

    /// Takes the owner's turn to send a command about this hold.
    pub(crate) async fn command_turn(self: &Arc<Self>) -> CommandTurn {
        // The semaphore is never closed; if it were, going on unserialised beats hanging.
        let owned = match self.commands.acquire().await {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        };
        CommandTurn {
            hold: self.clone(),
            owned,
        }
    }

    /// The hold count an acquisition starts from (call with the owner's turn). A hold that was
    /// lost while guards of it still live cannot be re-entered.
    pub(crate) fn expected_count(&self) -> Result<u32, LockError> {
        let mut st = self.state();
        match st.status {
            Status::Held | Status::Releasing => Ok(st.count),
            Status::Lost if self.guards() > 0 => Err(LockError::Lost {
                name: self.name().to_owned(),
            }),
            Status::Idle | Status::Lost => {
                st.count = 0;
                Ok(0)
            }
        }
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
        let fresh = !st.counted();
        if fresh {
            st.generation += 1;
            st.valid_until = valid_until;
            st.lease = lease;
            st.count = 1;
            st.lost_reason = None;
            st.granted_at = Instant::now();
            st.at_risk = false;
        } else {
            st.valid_until = st.valid_until.max(valid_until);
            if lease == Lease::Watchdog {
                st.lease = Lease::Watchdog;
            }
            st.count += 1;
        }
        st.status = Status::Held;
        st.token = token;
        let (generation, count) = (st.generation, st.count);
        drop(st);
        if fresh {
            metrics::hold_started(self.labels);
        }
        tracing::debug!(lock = %self.name(), kind = self.kind.label(), token, count,
            "lock acquired");
        generation
    }

    /// Records a renewal sent at `sent_at` that Redis confirmed: the lease is exactly
    /// `lease_len` from then on the server (even if an extension had set a longer one), and
    /// a hold at risk is safe again. Returns whether it came late: after the hold's validity
    /// had already passed here.
    pub(crate) fn renewed(&self, generation: u64, sent_at: Instant, lease_len: Duration) -> bool {
        let mut st = self.state();
        let late = Instant::now() >= st.valid_until;
        if st.generation != generation || !st.counted() {
            return late;
        }
        st.valid_until = sent_at + validity(lease_len);
        if std::mem::take(&mut st.at_risk) {
            let remaining = st.valid_until.saturating_duration_since(Instant::now());
            drop(st);
            metrics::at_risk_ended(self.labels);
            tracing::info!(lock = %self.name(), kind = self.kind.label(), ?remaining,
                "lock renewal succeeded again; the lock is no longer at risk");
            self.changed();
        }
        late
    }

    /// Records that a renewal of `generation` failed (`error`: why) while the hold may still
    /// be valid: it is at risk until a renewal is confirmed, lost if none is before its
    /// validity passes. Said once per such episode: one `warn`, and the `lock_at_risk` gauge.
    pub(crate) fn renewal_failed(&self, generation: u64, error: &str) {
        let mut st = self.state();
        let remaining = st.valid_until.saturating_duration_since(Instant::now());
        if st.generation != generation
            || st.status != Status::Held
            || st.lease != Lease::Watchdog
            || st.at_risk
            || remaining.is_zero()
        {
            return;
        }
        st.at_risk = true;
        drop(st);
        metrics::at_risk_started(self.labels);
        tracing::warn!(lock = %self.name(), kind = self.kind.label(), ?remaining, error,
            "lock renewal failed; the lock is at risk until a renewal succeeds, and lost if \
             none does before its lease runs out");
        self.changed();
    }

    /// Ends an at-risk episode without a renewal (the hold is lost or released).
    fn clear_risk(&self, st: &mut State) {
        if std::mem::take(&mut st.at_risk) {
            metrics::at_risk_ended(self.labels);
        }
    }

    /// Keeps `place`, this process's place at the head of the name's local queue (see the
    /// driver), until the hold of `generation` ends (released for good, or lost). Local
    /// waiters queue behind it, so the next one sends its attempt after the release instead
    /// of one that finds the lock busy and another after the release. Only a watchdog-leased
    /// hold keeps it: the watchdog marks it lost (ending it) when renewals stop, whereas a
    /// fixed lease may run out in Redis while its guard lives, and waiters must then be free
    /// to take the lock. Dropped at once otherwise, or if the hold already ended.
    pub(crate) fn keep_queue_place(&self, generation: u64, place: OwnedSemaphorePermit) {
        let mut st = self.state();
        if st.generation == generation && st.status == Status::Held && st.lease == Lease::Watchdog {
            st.queue_place = Some(place);
        }
    }

    /// Marks the hold of `generation` lost, wakes `lost()` futures and says so in the log
    /// (one `warn` per loss of a lock whose guard still lives). `cause` is what Redis or the
    /// clock said; a "gone" from Redis after the lease had already run out here counts as
    /// [`LossReason::Expired`].
    pub(crate) fn mark_lost(&self, generation: u64, why: &'static str, cause: LossReason) {
        let mut st = self.state();
        if st.generation != generation {
            return;
        }
        // Given back after the state's lock: the next local waiter may start at once.
        let place = st.queue_place.take();
        if st.counted() {
            let was_held = st.status == Status::Held;
            st.status = Status::Lost;
            st.lost_reason = Some(why);
            self.clear_risk(&mut st);
            let reason = if cause == LossReason::Deleted && Instant::now() >= st.valid_until {
                LossReason::Expired
            } else {
                cause
            };
            let (granted_at, token) = (st.granted_at, st.token);
            drop(st);
            metrics::hold_ended(self.labels, granted_at);
            if was_held {
                metrics::lost(self.labels, reason);
                tracing::warn!(
                    lock = %self.name(),
                    kind = self.kind.label(),
                    fencing_token = self.kind.fenced().then_some(token),
                    reason = reason.as_str(),
                    held_for = ?granted_at.elapsed(),
                    why,
                    "distributed lock lost"
                );
            }
        } else {
            drop(st);
        }
        drop(place);
        self.changed();
    }

    /// Marks the hold's current generation lost (see [`mark_lost`](Self::mark_lost)): for news
    /// that is about whatever the owner holds now (a re-entry told the hold is gone).
    pub(crate) fn mark_current_lost(&self, why: &'static str, cause: LossReason) {
        let generation = self.state().generation;
        self.mark_lost(generation, why, cause);
    }

    /// Marks a held hold lost if its validity has passed; returns whether it did.
    pub(crate) fn expire_if_due(&self, now: Instant) -> bool {
        let (due, generation, lease) = {
            let st = self.state();
            (
                st.status == Status::Held && now >= st.valid_until,
                st.generation,
                st.lease,
            )
        };
        if due {
            match lease {
                Lease::Fixed => self.mark_lost(
                    generation,
                    "the fixed lease ran out while the lock was held",
                    LossReason::Expired,
                ),
                Lease::Watchdog => self.mark_lost(
                    generation,
                    "no renewal succeeded within the lease",
                    LossReason::Unreachable,
                ),
            }
        }
        due
    }

    /// Why the hold of `generation` was lost; `None` while it is not (or was released).
    pub(crate) fn lost_reason(&self, generation: u64) -> Option<&'static str> {
        let st = self.state();
        (st.generation == generation && st.status == Status::Lost)
            .then_some(st.lost_reason)
            .flatten()
    }

    /// Of this generation, held or being given back, and within its validity: the lock is
    /// still the owner's as far as this process knows.
    pub(crate) fn valid(&self, generation: u64) -> bool {
        let st = self.state();
        st.generation == generation && st.counted() && Instant::now() < st.valid_until
    }

    /// Held, of this generation, and within its validity.
    pub(crate) fn is_held(&self, generation: u64) -> bool {
        let st = self.state();
        st.generation == generation && st.status == Status::Held && Instant::now() < st.valid_until
    }

    /// How much longer it is ours unless a renewal extends it; zero once it is not held.
    pub(crate) fn remaining(&self, generation: u64) -> Duration {
        let st = self.state();
        if st.generation != generation || st.status != Status::Held {
            return Duration::ZERO;
        }
        st.valid_until.saturating_duration_since(Instant::now())
    }

    /// The fencing token, for kinds that have one.
    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.kind.fenced().then(|| self.state().token)
    }

    /// The hold count and token a release of `generation` starts from; None when there is
    /// nothing to give back.
    pub(crate) fn to_release(&self, generation: u64) -> Option<(u32, u64)> {
        let st = self.state();
        (st.count > 0 && st.generation == generation).then_some((st.count, st.token))
    }

    /// Applies a release's answer about `generation`.
    pub(crate) fn released(&self, generation: u64, answer: Released) {
        match answer {
            Released::Yes => {
                let mut st = self.state();
                st.count = st.count.saturating_sub(1);
                if st.count == 0 {
                    let counted = st.counted();
                    st.status = Status::Idle;
                    self.clear_risk(&mut st);
                    let granted_at = st.granted_at;
                    let place = st.queue_place.take();
                    drop(st);
                    drop(place);
                    if counted {
                        metrics::hold_ended(self.labels, granted_at);
                        tracing::debug!(lock = %self.name(), kind = self.kind.label(),
                            held_for = ?granted_at.elapsed(), "lock released");
                    }
                    self.changed();
                }
            }
            Released::NotHeld => {
                self.mark_lost(
                    generation,
                    "released after the lock was gone",
                    LossReason::Deleted,
                );
                self.state().count = 0;
            }
        }
    }

    /// After a failed release of `count` holds of `generation`: whether to try again.
    pub(crate) fn retry(&self, generation: u64, count: u32) -> Retry {
        let st = self.state();
        if st.generation != generation || st.count != count {
            return Retry::Stop;
        }
        if Instant::now() >= st.valid_until {
            drop(st);
            self.mark_lost(
                generation,
                "the lease ran out while a release was retried",
                LossReason::Unreachable,
            );
            self.state().count = 0;
            return Retry::Expired;
        }
        Retry::Again
    }

    /// The number of live guards of this hold.
    pub(crate) fn guards(&self) -> usize {
        self.guards.load(Ordering::Acquire)
    }

    pub(crate) fn guard_added(&self) {
        self.guards.fetch_add(1, Ordering::AcqRel);
    }

    /// A grant that no guard will own (it came too late to be trusted) is being given back:
    /// it is not renewed from now on.
    pub(crate) fn release_unguarded(&self) {
        self.stop_renewing();
    }

    /// Returns true when this was the last guard: renewal stops at once.
    pub(crate) fn guard_removed(&self) -> bool {
        if self.guards.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.stop_renewing();
            true
        } else {
            false
        }
    }

    /// A held hold is being given back: not renewed from now on, and no longer held (nor at
    /// risk) for its views.
    fn stop_renewing(&self) {
        let mut st = self.state();
        if st.status == Status::Held {
            st.status = Status::Releasing;
            self.clear_risk(&mut st);
            drop(st);
            self.changed();
        }
    }

    /// How the lease of `generation` stands now (see [`LeaseState`]).
    pub(crate) fn lease_state(&self, generation: u64) -> LeaseState {
        let st = self.state();
        if st.generation != generation
            || st.status != Status::Held
            || Instant::now() >= st.valid_until
        {
            LeaseState::Ended
        } else if st.at_risk {
            LeaseState::AtRisk
        } else {
            LeaseState::Held
        }
    }

    /// When the hold of `generation` runs out unless a renewal moves it; None once it is not
    /// held.
    pub(crate) fn deadline(&self, generation: u64) -> Option<Instant> {
        let st = self.state();
        (st.generation == generation && st.status == Status::Held).then_some(st.valid_until)
    }

    /// Resolves when the hold of `generation` is known or presumed lost, or released: it
    /// checks the validity deadline itself, so it fires even if the watchdog is starved.
    pub(crate) async fn ended(self: Arc<Self>, generation: u64) {
        let mut changes = self.changes();
        loop {
            changes.borrow_and_update();
            let Some(deadline) = self.deadline(generation) else {
                return;
            };
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                () = tokio::time::sleep_until(deadline) => {
                    self.expire_if_due(Instant::now());
                }
            }
        }
    }
}

impl Drop for Hold {
    // A hold that goes away still counted (its release never ran: the runtime is gone) leaves
    // the gauge, so `lock_held` never leaks.
    fn drop(&mut self) {
        let st = match self.state.get_mut() {
            Ok(st) => st,
            Err(poisoned) => poisoned.into_inner(),
        };
        if st.counted() {
            metrics::hold_ended(self.labels, st.granted_at);
        }
        if st.at_risk {
            metrics::at_risk_ended(self.labels);
        }
    }
}

/// The owner's turn to send a command about a hold; given back when dropped.
pub(crate) struct CommandTurn {
    hold: Arc<Hold>,
    owned: bool,
}

impl Drop for CommandTurn {
    fn drop(&mut self) {
        if self.owned {
            self.hold.commands.add_permits(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold() -> Arc<Hold> {
        Arc::new(Hold::new(
            Kind::Lock,
            Keys::new("lock:", "unit").unwrap(),
            1,
            Labels::new("mutex", None, "unit"),
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn an_acquisition_starts_a_generation_and_reentry_counts() {
        let h = hold();
        let now = Instant::now();
        let g1 = h.acquired(7, now, Lease::Watchdog, Duration::from_secs(30));
        assert!(h.is_held(g1));
        assert_eq!(h.fencing_token(), Some(7));
        let g2 = h.acquired(7, now, Lease::Fixed, Duration::from_secs(1));
        assert_eq!(g1, g2, "re-entry keeps the generation");
        assert_eq!(h.state().count, 2);
        assert_eq!(h.state().lease, Lease::Watchdog, "a watchdog lease stays");
        h.released(g1, Released::Yes);
        h.released(g1, Released::Yes);
        assert_eq!(h.state().status, Status::Idle);
        let g3 = h.acquired(8, Instant::now(), Lease::Fixed, Duration::from_secs(1));
        assert_ne!(g3, g1);
    }

    #[tokio::test(start_paused = true)]
    async fn late_news_never_touches_a_newer_generation() {
        let h = hold();
        let g1 = h.acquired(1, Instant::now(), Lease::Fixed, Duration::from_secs(1));
        h.released(g1, Released::Yes);
        let g2 = h.acquired(2, Instant::now(), Lease::Fixed, Duration::from_secs(1));
        h.mark_lost(g1, "late", LossReason::Deleted);
        assert!(h.is_held(g2));
    }

    #[tokio::test(start_paused = true)]
    async fn ended_resolves_at_the_validity_deadline() {
        let h = hold();
        let g = h.acquired(1, Instant::now(), Lease::Fixed, Duration::from_secs(1));
        let started = Instant::now();
        h.clone().ended(g).await;
        assert!(started.elapsed() >= validity(Duration::from_secs(1)));
        assert_eq!(h.state().status, Status::Lost);
    }

    #[tokio::test(start_paused = true)]
    async fn ended_resolves_when_marked_lost() {
        let h = hold();
        let g = h.acquired(1, Instant::now(), Lease::Watchdog, Duration::from_secs(30));
        let ended = tokio::spawn(h.clone().ended(g));
        tokio::task::yield_now().await;
        h.mark_lost(g, "test", LossReason::Deleted);
        tokio::time::timeout(Duration::from_millis(10), ended)
            .await
            .expect("woken at once")
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_is_at_risk_until_one_succeeds_or_the_lease_runs_out() {
        let h = hold();
        let lease = Duration::from_secs(30);
        let g = h.acquired(1, Instant::now(), Lease::Watchdog, lease);
        assert_eq!(h.lease_state(g), LeaseState::Held);
        let mut changes = h.changes();
        h.renewal_failed(g, "no answer");
        assert!(changes.has_changed().unwrap(), "watchers are told");
        changes.borrow_and_update();
        assert_eq!(h.lease_state(g), LeaseState::AtRisk);
        assert!(h.is_held(g), "at risk is still held");
        h.renewal_failed(g, "no answer again");
        assert!(!changes.has_changed().unwrap(), "one episode, said once");
        h.renewed(g, Instant::now(), lease);
        assert_eq!(h.lease_state(g), LeaseState::Held, "a renewal clears it");
        assert!(changes.has_changed().unwrap());

        h.renewal_failed(g, "no answer");
        tokio::time::sleep(lease).await;
        assert_eq!(h.lease_state(g), LeaseState::Ended, "the lease ran out");
        assert!(h.expire_if_due(Instant::now()));
        assert!(!h.state().at_risk, "a lost hold is not at risk");
        h.renewal_failed(g, "late news");
        assert!(!h.state().at_risk, "nor becomes so");
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_lease_is_never_at_risk_and_a_released_one_is_ended() {
        let fixed = hold();
        let g = fixed.acquired(1, Instant::now(), Lease::Fixed, Duration::from_secs(30));
        fixed.renewal_failed(g, "not renewed");
        assert_eq!(fixed.lease_state(g), LeaseState::Held);

        let h = hold();
        let g = h.acquired(1, Instant::now(), Lease::Watchdog, Duration::from_secs(30));
        h.guard_added();
        h.renewal_failed(g, "no answer");
        assert!(h.guard_removed());
        assert_eq!(h.lease_state(g), LeaseState::Ended, "no guard: not held");
        assert!(!h.state().at_risk);
    }

    #[tokio::test]
    async fn the_owners_commands_take_turns() {
        let h = hold();
        let first = h.command_turn().await;
        let second = tokio::spawn({
            let h = h.clone();
            async move { drop(h.command_turn().await) }
        });
        tokio::task::yield_now().await;
        assert!(!second.is_finished());
        drop(first);
        second.await.unwrap();
    }

    #[test]
    fn a_lost_hold_with_guards_cannot_be_reentered() {
        let h = hold();
        let g = h.acquired(1, Instant::now(), Lease::Fixed, Duration::from_secs(1));
        h.guard_added();
        h.mark_lost(g, "test", LossReason::Deleted);
        assert!(h.expected_count().unwrap_err().is_lost());
        assert!(h.guard_removed());
        assert_eq!(h.expected_count().unwrap(), 0);
    }
}
