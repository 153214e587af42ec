//! Sending a guarded update (`crate::update`): one call of `guarded_update.lua`, sent once
//! more when its reply was lost, and what its answer tells the hold.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Engine;
use crate::error::{LockError, is_connection_error};
use crate::hold::Hold;
use crate::metrics::LossReason;
use crate::update::{RECORD_TTL, Step, Updated, Updater};
use crate::wire::{self, Wire};

/// The sequence numbers of updates: increasing over every update of the process, so over
/// each hold's (whose updates go one at a time).
static SEQ: AtomicU64 = AtomicU64::new(1);

impl Engine {
    async fn guarded_update(
        &self,
        hold: &Arc<Hold>,
        generation: u64,
        steps: &[Step],
    ) -> Result<Updated, LockError> {
        if !hold.kind.fenced() {
            return Err(LockError::Unsupported {
                feature: "guarded update",
                missing: "a lock with one owner and a fencing token",
                detail: Some(format!(
                    "a {} has no single owner to check (use a mutex, a fair lock or a write lock)",
                    hold.kind.label()
                )),
            });
        }
        let lock_key = hold.keys.hold(hold.kind);
        if let Some(slot) = self.slot(&lock_key) {
            for step in steps {
                if self.slot(step.key()) != Some(slot) {
                    return Err(LockError::InvalidOption {
                        option: "update",
                        reason: format!(
                            "key {:?} is not in the Cluster slot of lock `{}`; make it with key_in_slot",
                            step.key(),
                            hold.name()
                        ),
                    });
                }
            }
        }
        // One update at a time per hold (and after its other commands), so the sequence
        // numbers reach Redis in the order they were drawn.
        let _turn = hold.command_turn().await;
        let now = hold.snapshot();
        if now.generation != generation {
            // Given back and taken again since: this update's hold is gone.
            return Ok(Updated::NotHeld);
        }
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        // Kept for the lease the client believes is left (its server copy is a little longer)
        // and a margin.
        let keep = hold.remaining(generation).saturating_add(RECORD_TTL);
        let record_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX);
        let call = wire::update::call(&self.target(hold), now.token, seq, steps, record_ms);
        let (reply, repeated) = match self.invoke_wire(Wire::Script(&call)).await {
            // The reply was lost: the update may or may not have been applied. Sent once
            // more, the script recognises it by its sequence number and answers what it
            // applied.
            Err(e) if lost_reply(&e) => {
                tracing::debug!(lock = %hold.name(), error = %e,
                    "a guarded update's reply was lost; sending it once more");
                (self.invoke_script(&call).await?, true)
            }
            reply => reply?,
        };
        let updated = wire::update::read(reply)?;
        if updated == Updated::NotHeld {
            hold.mark_lost(
                generation,
                "a guarded update found the lock held by no one or by another owner",
                LossReason::Deleted,
            );
            if repeated {
                // A repeat finds its update's record only while no other holder has updated
                // since: the first send may have been applied before the lock passed on.
                return Err(LockError::OutcomeUnknown {
                    what: format!("guarded update under lock `{}`", hold.name()),
                });
            }
        }
        Ok(updated)
    }
}

/// Whether `e` leaves a call's outcome unknown: no answer in time, or the connection failed
/// under it.
fn lost_reply(e: &LockError) -> bool {
    match e {
        LockError::ResponseTimeout(_) => true,
        LockError::Redis(e) => is_connection_error(e),
        _ => false,
    }
}

impl Updater for Engine {
    fn update<'a>(
        &'a self,
        hold: &'a Arc<Hold>,
        generation: u64,
        steps: &'a [Step],
    ) -> Pin<Box<dyn Future<Output = Result<Updated, LockError>> + Send + 'a>> {
        Box::pin(self.guarded_update(hold, generation, steps))
    }
}
