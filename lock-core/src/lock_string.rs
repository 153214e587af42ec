//! The lock string (`owner|count|token|released|waiters`) that a mutex, a fair lock and a
//! read-write lock's writer each live in: one attempt or re-entry on it, and the guard methods
//! every lock-string guard has (fencing token, hold count, re-entry, extension).

use std::sync::Arc;
use std::time::Duration;

use crate::engine::{Attempt, Engine};
use crate::error::LockError;
use crate::guard::GuardCore;
use crate::hold::{Hold, Lease};
use crate::wire::mutex;
use tokio::time::Instant;

/// One attempt (or re-entry) on a lock string hold (mutex, fair lock re-entry, write lock
/// re-entry), in the protocol the client speaks for its kind. `holder_ttl`: whether a busy
/// answer must say how long the holder keeps the lock (else it may be
/// [`Attempt::BusyAskAgain`]).
pub(crate) async fn attempt_lock_string(
    engine: &Arc<Engine>,
    hold: &Arc<Hold>,
    lease: Option<Duration>,
    will_wait: bool,
    holder_ttl: bool,
) -> Result<Attempt<u64>, LockError> {
    let (_, lease_len) = engine.lease(lease);
    engine
        .attempt(hold, lease, |expected| {
            let reentry = (expected > 0).then(|| {
                let now = hold.snapshot();
                mutex::Reentry {
                    token: now.token,
                    left: now.valid_until.saturating_duration_since(Instant::now()),
                }
            });
            let target = engine.target(hold);
            mutex::acquire(
                engine.protocol(),
                target,
                expected,
                lease_len,
                (will_wait, holder_ttl),
                reentry,
            )
        })
        .await
}

/// Re-enters the hold behind `core` with the same owner: a new guard core sharing its hold,
/// fencing token and (what is left of) its lease.
pub(crate) async fn reenter(core: &GuardCore) -> Result<GuardCore, LockError> {
    let lost = || LockError::Lost {
        name: core.name().to_owned(),
    };
    if !core.is_held() {
        return Err(lost());
    }
    let lease = match core.hold.snapshot().lease {
        Lease::Watchdog => None,
        Lease::Fixed => Some(core.remaining().max(crate::util::MIN_LEASE)),
    };
    let attempt = attempt_lock_string(&core.engine, &core.hold, lease, false, true).await?;
    match attempt {
        Attempt::Acquired(generation) => Ok(GuardCore::new(
            core.hold.clone(),
            core.engine.clone(),
            generation,
        )),
        Attempt::Busy { .. } | Attempt::BusyAskAgain { .. } | Attempt::Late => Err(lost()),
    }
}

/// The methods of guards on a lock string (a mutex or fair lock's [`LockGuard`], a
/// [`WriteGuard`](crate::WriteGuard)): the fencing token as a number, the hold count,
/// re-entry and extension.
macro_rules! lock_string_guard {
    ($guard:ident) => {
        impl $guard {
            /// The fencing token of this hold: strictly greater than the token of every
            /// earlier holder of this name (re-entries of one hold share its token). This
            /// kind always has one, hence the plain `u64`; code that takes any guard gets the
            /// same number as `Some` from [`Guard::fencing_token`]($crate::Guard::fencing_token)
            /// and [`HeldLock::fencing_token`]($crate::HeldLock::fencing_token).
            pub fn fencing_token(&self) -> u64 {
                self.core.hold.snapshot().token
            }

            /// The owner's hold count: how many guards (re-entries) share this hold.
            pub fn hold_count(&self) -> u32 {
                self.core.hold.snapshot().count
            }

            /// Re-enters the lock with the same owner: a second guard that shares this hold
            /// (and its fencing token), raising the hold count by one. The lock is released
            /// when the count returns to zero. [`LockError::Lost`](crate::LockError::Lost) if
            /// it is no longer held.
            pub async fn reenter(&self) -> Result<$guard, $crate::error::LockError> {
                Ok($guard {
                    core: $crate::lock_string::reenter(&self.core).await?,
                })
            }

            /// A guarded update of your keys: applied in one step only while this hold is
            /// still the lock's (its owner id and fencing token checked in Redis), or not
            /// at all ([`Updated::NotHeld`]($crate::Updated::NotHeld), and this guard is
            /// marked lost). See [`update`]($crate::update) for the operations, the
            /// answers and what it promises.
            pub fn update(&self) -> $crate::update::Update {
                self.core.update()
            }

            /// The key `base` + `{name}`, in this lock's Redis Cluster slot (its hash tag is
            /// the lock's name), for a guarded [`update`](Self::update): e.g.
            /// `stock:{item:42}` for `base` `"stock:"` under the lock `item:42`. A `base`
            /// with a `{` is [`LockError::InvalidOption`]($crate::LockError::InvalidOption).
            pub fn key_in_slot(&self, base: &str) -> Result<String, $crate::error::LockError> {
                $crate::update::key_in_slot(base, self.core.name())
            }

            /// Sets the lease to `lease` (10 ms to 30 days) from now, if the lock is still
            /// ours. For a watchdog lease the watchdog goes on renewing it afterwards (to its
            /// own lease).
            pub async fn extend(
                &self,
                lease: ::std::time::Duration,
            ) -> Result<(), $crate::error::LockError> {
                self.core
                    .engine
                    .extend(&self.core.hold, self.core.generation, lease)
                    .await
            }
        }
    };
}

pub(crate) use lock_string_guard;
