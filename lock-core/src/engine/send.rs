//! Sending an acquisition so that it is never left half-done.
//!
//! An acquisition claims the owner's turn on each hold it is about ([`Claim`]), sends one
//! script, and hands the answer back with the turns still claimed, so the caller records the
//! grant before anyone else of the same owner sends a command. If the caller goes away while
//! the script is in flight (a dropped future, a timeout), the request is not abandoned: its
//! future moves to the background, finishes there, and the acquisition is undone after its
//! reply, which orders the undo after the acquisition on the server (sent from the dropped
//! future on another connection, an undo could overtake the acquisition and leave an orphan).
//! On the common path nothing is spawned: the request runs in the caller's future.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Engine;
use crate::error::LockError;
use crate::hold::{CommandTurn, Hold};
use crate::wire::answer::Answer;
use crate::wire::{Command, Next};

type Request = Pin<Box<dyn Future<Output = Result<(Answer, Option<u32>), LockError>> + Send>>;

/// The owner's turn on one hold, and the hold count the acquisition starts from.
pub(crate) struct Claim {
    pub(crate) hold: Arc<Hold>,
    pub(crate) expected: u32,
    _turn: CommandTurn,
}

/// The holds one acquisition is about: at least one.
pub(crate) struct Claims {
    pub(crate) first: Claim,
    pub(crate) rest: Vec<Claim>,
}

impl Claims {
    pub(crate) fn one(claim: Claim) -> Self {
        Self {
            first: claim,
            rest: Vec::new(),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Claim> {
        std::iter::once(&self.first).chain(&self.rest)
    }

    /// How many holds.
    pub(crate) fn len(&self) -> usize {
        1 + self.rest.len()
    }

    /// The `index`-th claim (the first if there is no such one).
    pub(crate) fn get(&self, index: usize) -> &Claim {
        index
            .checked_sub(1)
            .and_then(|i| self.rest.get(i))
            .unwrap_or(&self.first)
    }
}

impl IntoIterator for Claims {
    type Item = Claim;
    type IntoIter = std::iter::Chain<std::iter::Once<Claim>, std::vec::IntoIter<Claim>>;

    fn into_iter(self) -> Self::IntoIter {
        std::iter::once(self.first).chain(self.rest)
    }
}

/// The replica acknowledgement an acquisition waits for
/// ([`min_replicas`](crate::LockClientBuilder::min_replicas)), and the key that routes its
/// `WAIT`.
struct Ack {
    key: String,
    required: u32,
    timeout: Duration,
}

/// An acquisition's answer, with the owner's turns still claimed.
pub(crate) struct Sent {
    pub(crate) answer: Answer,
    /// When the request was sent: the lease runs from here.
    pub(crate) sent_at: Instant,
    pub(crate) claims: Claims,
}

/// A request in flight and what undoing it needs. Dropped before its answer was taken, it
/// finishes the request in the background and undoes what may have been applied.
struct InFlight {
    engine: Arc<Engine>,
    request: Request,
    claims: Option<Claims>,
    done: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Some(claims) = self.claims.take() else {
            return;
        };
        let request = std::mem::replace(&mut self.request, Box::pin(std::future::pending()));
        let engine = self.engine.clone();
        self.engine.background(async move {
            let result = request.await;
            if needs_undo(&result.map(|(answer, _)| answer)) {
                engine.undo(claims).await;
            }
        });
    }
}

/// Whether an acquisition's outcome may have left something applied: a grant, or an error
/// after it may have been sent (a reply that could not be read included).
fn needs_undo(result: &Result<Answer, LockError>) -> bool {
    match result {
        Ok(answer) => answer.is_granted(),
        Err(e) => !e.never_sent(),
    }
}

impl Engine {
    /// Claims the owner's turn on `hold` and reads the count an acquisition starts from.
    pub(crate) async fn claim(&self, hold: Arc<Hold>) -> Result<Claim, LockError> {
        let turn = hold.command_turn().await;
        self.open()?;
        let expected = hold.expected_count()?;
        Ok(Claim {
            hold,
            expected,
            _turn: turn,
        })
    }

    /// Sends an acquisition call about `claims` (all in the slot of the first one's key) and
    /// reads its answer. With
    /// [`min_replicas`](crate::LockClientBuilder::min_replicas) it is followed by `WAIT`, and
    /// an applied acquisition that too few replicas confirmed is given back before
    /// [`LockError::NotReplicated`] returns. Dropping the returned future at any point leaves
    /// nothing applied (see the module docs).
    pub(crate) async fn send(
        self: &Arc<Self>,
        claims: Claims,
        call: Command,
    ) -> Result<Sent, LockError> {
        let first = &claims.first.hold;
        // What `WAIT` needs (the key routes it): not built on the common path.
        let ack = self.config.min_replicas.map(|(required, timeout)| Ack {
            key: first.keys.hold(first.kind).into_owned(),
            required,
            timeout,
        });
        let (engine, holds) = (self.clone(), claims.len());
        let sent_at = Instant::now();
        let mut flight = InFlight {
            engine: self.clone(),
            request: Box::pin(async move { engine.invoke_acquisition(call, holds, ack).await }),
            claims: Some(claims),
            done: false,
        };
        let result = (&mut flight.request).await;
        flight.done = true;
        let Some(claims) = flight.claims.take() else {
            unreachable!("only InFlight's Drop takes the claims, and it has not run");
        };
        let (answer, acked) = match result {
            Ok(answer) => answer,
            Err(e) => {
                if !e.never_sent() {
                    // It may have been applied: undo it, after its (lost) reply.
                    self.undo_in_background(claims);
                }
                return Err(e);
            }
        };
        if let (Some((required, timeout)), Some(acked)) = (self.config.min_replicas, acked)
            && answer.is_granted()
            && acked < required
        {
            let name = claims.first.hold.name().to_owned();
            tracing::warn!(lock = %name, acked, required,
                "too few replicas confirmed the acquisition; giving it back");
            self.undo_before_returning(claims).await;
            return Err(LockError::NotReplicated {
                name,
                acked,
                required,
                timeout,
            });
        }
        Ok(Sent {
            answer,
            sent_at,
            claims,
        })
    }

    /// The call (batched with others where the engine batches), then `WAIT` when replicas
    /// must confirm (`ack`); its answer, read for `holds` holds. What the reply asks to send
    /// next (a native acquisition's give-back, or a scripted lock string to clear out of its
    /// way before it is sent again) is sent as [`Next`] says.
    async fn invoke_acquisition(
        self: &Arc<Self>,
        mut call: Command,
        holds: usize,
        ack: Option<Ack>,
    ) -> Result<(Answer, Option<u32>), LockError> {
        let mut retries = 0;
        loop {
            let (reply, acked) = match &ack {
                Some(ack) => {
                    let (reply, acked) = self.acked(&call, ack).await?;
                    (reply, Some(acked))
                }
                // Batched where the engine batches.
                None => {
                    let replied = self.invoke_batched(call).await?;
                    call = replied.command;
                    (replied.reply, None)
                }
            };
            match call.next(reply, holds, retries)? {
                Next::Done(answer) => return Ok((answer, acked)),
                Next::SendThenDone(send, answer) => {
                    self.invoke_raw(&send).await?;
                    return Ok((answer, acked));
                }
                Next::ClearThenRetry(clear) => {
                    self.invoke_raw(&clear).await?;
                    retries += 1;
                }
            }
        }
    }

    /// The call, then `WAIT`; the reply as sent.
    async fn acked(&self, call: &Command, ack: &Ack) -> Result<(Value, u32), LockError> {
        self.invoke_acked_raw(call, &ack.key, ack.required, ack.timeout)
            .await
    }

    /// Undoes `claims` in the background (their turns kept until it is done).
    pub(crate) fn undo_in_background(self: &Arc<Self>, claims: Claims) {
        let engine = self.clone();
        self.background(async move { engine.undo(claims).await });
    }

    /// Undoes `claims` and waits until that is done, so an error returned afterwards means
    /// "not held". The undo runs in the background: a caller that goes away meanwhile does
    /// not cut it short.
    async fn undo_before_returning(self: &Arc<Self>, claims: Claims) {
        let (done, finished) = oneshot::channel();
        let engine = self.clone();
        self.background(async move {
            engine.undo(claims).await;
            let _ = done.send(());
        });
        let _ = finished.await;
    }

    /// Records the grant of `claim` (sent at `sent_at`; token 0 for kinds without one) and
    /// returns the hold's generation. A grant whose answer came after its lease (less the
    /// drift margin) ran out may already be someone else's: it is given back (after the
    /// claim's turn ends) and `None` returned.
    pub(crate) fn grant(
        self: &Arc<Self>,
        claim: &Claim,
        token: u64,
        sent_at: Instant,
        lease: Option<Duration>,
    ) -> Option<u64> {
        let (kind, len) = self.lease(lease);
        let hold = &claim.hold;
        let generation = hold.acquired(token, sent_at, kind, len);
        if hold.is_held(generation) {
            return Some(generation);
        }
        tracing::debug!(lock = %hold.name(), "granted after its lease ran out; giving it back");
        self.give_back_unguarded(hold.clone(), generation);
        None
    }

    /// Gives back a grant of `generation` that no guard will own, in the background.
    pub(crate) fn give_back_unguarded(self: &Arc<Self>, hold: Arc<Hold>, generation: u64) {
        hold.release_unguarded();
        self.release_in_background(hold, generation, None);
    }
}
