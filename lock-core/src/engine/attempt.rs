//! One attempt to acquire, for every primitive: claim the owner's command turn on each hold,
//! send the call (undone if its caller goes away), read the [`Answer`], and record the grants
//! on the holds. A primitive says only what to send.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Engine;
use super::outcome::Attempt;
use super::send::{Claim, Claims, Sent};
use crate::error::LockError;
use crate::hold::Hold;
use crate::metrics::LossReason;
use crate::wire::Command;
use crate::wire::answer::{Answer, Tokens};

impl Engine {
    /// One attempt on one hold: `build` makes the call from the hold count the owner has now
    /// (with its command turn claimed). Acquired with the hold's generation.
    pub(crate) async fn attempt(
        self: &Arc<Self>,
        hold: &Arc<Hold>,
        lease: Option<Duration>,
        build: impl FnOnce(u32) -> Command,
    ) -> Result<Attempt<u64>, LockError> {
        let claims = Claims::one(self.claim(hold.clone()).await?);
        let call = build(claims.first.expected);
        let attempt = self.attempt_claims(claims, call, lease).await?;
        Ok(attempt.map(|(first, _)| first))
    }

    /// One attempt on several holds at once, all or none (a multi-lock): their command turns
    /// are claimed in the order given; `build` makes the call from their claims. Acquired with
    /// the holds' generations, in the same order.
    pub(crate) async fn attempt_all(
        self: &Arc<Self>,
        holds: &[Arc<Hold>],
        lease: Option<Duration>,
        build: impl FnOnce(&Claims) -> Command,
    ) -> Result<Attempt<Vec<u64>>, LockError> {
        let mut claimed = Vec::with_capacity(holds.len());
        for hold in holds {
            claimed.push(self.claim(hold.clone()).await?);
        }
        let mut claimed = claimed.into_iter();
        let Some(first) = claimed.next() else {
            return Err(LockError::InvalidOption {
                option: "names",
                reason: "an acquisition takes at least one lock".to_owned(),
            });
        };
        let claims = Claims {
            first,
            rest: claimed.collect(),
        };
        let call = build(&claims);
        let attempt = self.attempt_claims(claims, call, lease).await?;
        Ok(attempt.map(|(first, rest)| std::iter::once(first).chain(rest).collect()))
    }

    /// Sends `call` about `claims`, reads its answer and records it.
    async fn attempt_claims(
        self: &Arc<Self>,
        claims: Claims,
        call: Command,
        lease: Option<Duration>,
    ) -> Result<Attempt<(u64, Vec<u64>)>, LockError> {
        let Sent {
            answer,
            sent_at,
            claims,
        } = self.send(claims, call).await?;
        let name = |index: usize| claims.get(index).hold.name().to_owned();
        match answer {
            Answer::Granted(tokens) => Ok(self.grant_all(&claims, &tokens, sent_at, lease)),
            Answer::Busy { index, retry_in } => Ok(Attempt::Busy { index, retry_in }),
            Answer::BusyAskAgain { index } => Ok(Attempt::BusyAskAgain { index }),
            Answer::Lost { index } => {
                claims
                    .get(index)
                    .hold
                    .mark_current_lost("re-entry found the hold gone", LossReason::Deleted);
                Err(LockError::Lost { name: name(index) })
            }
            Answer::SizeMismatch { recorded } => Err(LockError::SizeMismatch {
                name: name(0),
                requested: 0,
                recorded,
            }),
        }
    }

    /// Records a grant on every claim (with its token, for kinds that have one). If any came
    /// too late to be trusted, all of them are given back and the attempt is [`Attempt::Late`].
    fn grant_all(
        self: &Arc<Self>,
        claims: &Claims,
        tokens: &Tokens,
        sent_at: Instant,
        lease: Option<Duration>,
    ) -> Attempt<(u64, Vec<u64>)> {
        let token = |i: usize, claim: &Claim| {
            if claim.hold.kind.fenced() {
                tokens.get(i)
            } else {
                0
            }
        };
        let first = self.grant(&claims.first, token(0, &claims.first), sent_at, lease);
        let mut rest = Vec::with_capacity(claims.rest.len());
        for (i, claim) in claims.rest.iter().enumerate() {
            rest.push(self.grant(claim, token(i + 1, claim), sent_at, lease));
        }
        match (first, rest.iter().all(Option::is_some)) {
            (Some(first), true) => Attempt::Acquired((first, rest.into_iter().flatten().collect())),
            (first, _) => {
                // Those granted in time go back too: all or none.
                let granted = std::iter::once(first).chain(rest).zip(claims.iter());
                for (generation, claim) in granted {
                    if let Some(generation) = generation {
                        self.give_back_unguarded(claim.hold.clone(), generation);
                    }
                }
                Attempt::Late
            }
        }
    }
}
