//! Giving holds back: releases (retried in the background when their answer is lost), undoing
//! interrupted acquisitions, and extending a lease.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Engine;
use super::send::Claim;
use crate::error::LockError;
use crate::hold::{CommandTurn, Hold, Released, Retry};
use crate::kind::HoldKind;
use crate::metrics::{self, LossReason};
use crate::wire;
use crate::wire::Command;
use crate::wire::answer::GaveBack;

impl Engine {
    /// Gives back one hold of `generation`. Returns whether the owner still held it (for
    /// permits: all of them).
    ///
    /// When the release fails (the connection broke, Redis did not answer) its outcome is
    /// unknown, and the hold it was to give back must not be forgotten: the error is returned,
    /// and the same release (safe to repeat: the scripts recognise a repeat) is sent again in
    /// the background until Redis answers or the lease runs out. The owner's turn is kept
    /// meanwhile, so its next release or re-entry starts from the right hold count.
    ///
    /// With `keep_until` (a guard's [`hold_at_least`](crate::LockRequest::hold_at_least)),
    /// the last hold of a mutex is not freed before that instant: its lease is set to what is
    /// left, and the lock expires then.
    pub(crate) async fn release(
        self: &Arc<Self>,
        hold: &Arc<Hold>,
        generation: u64,
        keep_until: Option<Instant>,
    ) -> Result<bool, LockError> {
        let turn = hold.command_turn().await;
        let Some((count, token)) = hold.to_release(generation) else {
            return Ok(false);
        };
        let call = self.give_back_call(hold, count, token, keep_until);
        let ours = hold.valid(generation);
        let reply = self
            .invoke_batched(call)
            .await
            .and_then(|r| r.command.gave_back(r.reply, ours && r.resent));
        match reply {
            Ok(reply) => apply_release(hold, generation, reply),
            Err(e) => {
                tracing::warn!(lock = %hold.name(), error = %e,
                    "release failed; retrying it in the background");
                let (engine, hold) = (self.clone(), hold.clone());
                let retry = Giveback {
                    generation,
                    count,
                    token,
                    keep_until,
                };
                self.background(async move { engine.retry_release(hold, retry, turn).await });
                Err(e)
            }
        }
    }

    /// Releases one hold of `generation` in the background (a guard's `Drop`), then forgets
    /// the hold if nothing else uses it.
    pub(crate) fn release_in_background(
        self: &Arc<Self>,
        hold: Arc<Hold>,
        generation: u64,
        keep_until: Option<Instant>,
    ) {
        let engine = self.clone();
        self.background(async move {
            if let Err(e) = engine.release(&hold, generation, keep_until).await {
                tracing::warn!(lock = %hold.name(), error = %e,
                    "background release failed; the lease will expire the lock");
            }
            engine.forget(hold);
        });
    }

    /// Sends a failed release again until Redis answers, or until the lease has run out (the
    /// lock is then gone from Redis, whatever happened to the release).
    async fn retry_release(self: Arc<Self>, hold: Arc<Hold>, retry: Giveback, _turn: CommandTurn) {
        let Giveback {
            generation,
            count,
            token,
            keep_until,
        } = retry;
        let mut backoff = Duration::from_millis(50);
        loop {
            tokio::time::sleep(backoff).await;
            match hold.retry(generation, count) {
                Retry::Again => {}
                Retry::Stop | Retry::Expired => return,
            }
            let call = self.give_back_call(&hold, count, token, keep_until);
            metrics::release_retry();
            let ours = hold.valid(generation);
            match self.give_back(&call, ours, true).await {
                Ok(reply) => {
                    if let Err(e) = apply_release(&hold, generation, reply) {
                        tracing::warn!(lock = %hold.name(), error = %e, "retried release");
                    }
                    return;
                }
                Err(e) => {
                    tracing::debug!(lock = %hold.name(), error = %e, "release retry failed");
                }
            }
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// The call that gives back one hold: the release, or, for the last hold of a mutex
    /// that must stay taken until `keep_until`, the call that leaves it to expire then.
    fn give_back_call(
        &self,
        hold: &Hold,
        count: u32,
        token: u64,
        keep_until: Option<Instant>,
    ) -> Command {
        let left = keep_until.map(|t| t.saturating_duration_since(Instant::now()));
        match left {
            Some(left) if count == 1 && hold.kind == HoldKind::Mutex && left.as_millis() >= 1 => {
                wire::mutex::keep(self.protocol(), self.target(hold), left)
            }
            _ => wire::kind::release(self.protocol(), self.target(hold), count, token),
        }
    }

    /// Undoes acquisitions whose answer never reached their caller (cancelled, or failed in
    /// flight): gives back the hold each may have added. Harmless where it was not applied.
    /// Each claim's turn is kept until its undo is done.
    pub(crate) async fn undo(&self, claims: impl IntoIterator<Item = Claim>) {
        for claim in claims {
            let hold = &claim.hold;
            // A fresh acquisition's token is unknown: 0 never matches a recorded release.
            let token = if claim.expected == 0 {
                0
            } else {
                hold.snapshot().token
            };
            let call = wire::kind::release(
                self.protocol(),
                self.target(hold),
                claim.expected + 1,
                token,
            );
            if let Err(e) = self.give_back_patiently(&call).await {
                // Once per 10 s per client: an outage fails every request's undo.
                if let Some(suppressed) = self.undo_warnings.admit() {
                    tracing::warn!(lock = %hold.name(), kind = hold.kind.label(), error = %e,
                        suppressed,
                        "could not undo an interrupted acquisition; its lease will expire it \
                         (at most one such line per 10 s; `suppressed`: how many since the last)");
                }
            }
        }
    }

    /// Sets the lease of a lock-string hold (mutex, fair, write) to `lease` from now, if it
    /// is still the owner's; [`LockError::Lost`] (and the hold marked lost) if not.
    pub(crate) async fn extend(
        &self,
        hold: &Arc<Hold>,
        generation: u64,
        lease: Duration,
    ) -> Result<(), LockError> {
        crate::util::check_lease("lease", lease)?;
        let lost = || LockError::Lost {
            name: hold.name().to_owned(),
        };
        if !hold.is_held(generation) {
            return Err(lost());
        }
        let _turn = hold.command_turn().await;
        if !hold.is_held(generation) {
            return Err(lost());
        }
        let sent_at = Instant::now();
        let call = wire::mutex::renew(self.protocol(), [self.target(hold)], lease);
        if self.renew(&call).await?.first() == Some(&true) {
            hold.renewed(generation, sent_at, lease);
            Ok(())
        } else {
            hold.mark_lost(
                generation,
                "extend found the lock gone",
                LossReason::Deleted,
            );
            Err(lost())
        }
    }
}

/// A release to send again: of which hold generation, from which count and token, kept
/// until when.
struct Giveback {
    generation: u64,
    count: u32,
    token: u64,
    keep_until: Option<Instant>,
}

/// Applies a give-back's answer to the hold: whether the owner still held it (for permits:
/// all of them).
fn apply_release(hold: &Hold, generation: u64, reply: GaveBack) -> Result<bool, LockError> {
    let (released, held) = match (hold.kind, reply) {
        (HoldKind::Permits(n), GaveBack::Permits(held)) => (Released::Yes, held == i64::from(n)),
        (HoldKind::Permits(_), _) | (_, GaveBack::Permits(_)) => {
            return Err(LockError::UnexpectedReply(format!(
                "a release of a {} answered {reply:?}",
                hold.kind.label()
            )));
        }
        (_, GaveBack::Held) => (Released::Yes, true),
        (_, GaveBack::NotHeld) => (Released::NotHeld, false),
    };
    hold.released(generation, released);
    Ok(held)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use redis::Value;

    use super::*;
    use crate::hold::Lease;
    use crate::metrics::Labels;
    use crate::name::Keys;
    use crate::util::arbitrary::{config, int, value};

    fn kind() -> impl Strategy<Value = HoldKind> {
        prop_oneof![
            Just(HoldKind::Mutex),
            Just(HoldKind::Fair),
            Just(HoldKind::Write),
            Just(HoldKind::Read),
            prop_oneof![1u32..=4, Just(u32::MAX)].prop_map(HoldKind::Permits),
        ]
    }

    proptest! {
        #![proptest_config(config(1000))]

        /// Any reply to a release script, as the engine reads and applies it: the documented
        /// outcome for 0 to 3 (permits: whether all were still held, for any count), a typed
        /// [`LockError::UnexpectedReply`] before the hold is touched for anything else, never
        /// a panic.
        #[test]
        fn any_release_reply_is_applied_or_an_unexpected_reply(
            kind in kind(),
            reply in prop_oneof![int().prop_map(Value::Int), value()],
        ) {
            let hold = Hold::new(
                kind,
                Keys::new("lock:", "order:42").unwrap(),
                1,
                Labels::new(kind.metric(), None, "order:42"),
            );
            let generation =
                hold.acquired(7, Instant::now(), Lease::Watchdog, Duration::from_secs(30));
            let number = wire::convert::<i64>(reply.clone()).ok();
            let gave_back = match wire::kind::scripted_gave_back(kind, reply) {
                Ok(gave_back) => gave_back,
                Err(e) => {
                    prop_assert!(matches!(e, LockError::UnexpectedReply(_)), "{:?}", e);
                    prop_assert!(hold.is_held(generation));
                    return Ok(());
                }
            };
            let result = apply_release(&hold, generation, gave_back);
            prop_assert!(!hold.is_held(generation));
            match (kind, number) {
                (HoldKind::Permits(n), Some(held)) => {
                    prop_assert_eq!(result.ok(), Some(held == i64::from(n)));
                }
                (_, Some(1..=3)) => prop_assert_eq!(result.ok(), Some(true)),
                (_, Some(0)) => prop_assert_eq!(result.ok(), Some(false)),
                _ => prop_assert!(false, "{:?} read as {:?}", number, gave_back),
            }
        }
    }
}
