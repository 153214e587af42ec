//! The watchdog: one background task per client that renews every watchdog-leased hold.
//!
//! Every `lease / 3` it sends one renew script per batch of up to 256 holds of one kind (and,
//! on a Cluster, of one slot), up to 32 batches at once. A hold Redis says is gone is marked
//! lost at once. A hold whose last confirmed renewal is older than its lease (measured from
//! when that renewal was sent, minus a drift margin) is marked lost when that moment passes,
//! whether Redis answered with errors or not at all: the task wakes then, and a round of
//! renewals still waiting for a frozen server is cut off at that moment. Holds whose guards are all gone
//! (released, dropped) are never renewed again. The task ends when the client is dropped.
//!
//! Alongside, once per period, it refreshes the client's owner description, if it has one
//! (see `description`).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::cluster_routing::Slot;
use tokio::time::Instant;

use crate::description;
use crate::engine::Engine;
use crate::hold::Hold;
use crate::metrics::{self, LossReason, RenewalOutcome};
use crate::wire::Command;
use crate::wire::{self, kind::Renewal};

/// Holds renewed per script call.
const BATCH: usize = 256;

/// Renew scripts in flight at once (on a Cluster, scripts to one node share its connection, so
/// they are pipelined there).
const CONCURRENT_BATCHES: usize = 32;

pub(crate) async fn run(engine: Weak<Engine>, lease: Duration) {
    let period = lease / 3;
    // The description was recorded at build, just before this task started.
    let mut described = Instant::now();
    let mut next = described + period;
    loop {
        tokio::time::sleep_until(next).await;
        let Some(engine) = engine.upgrade() else {
            return;
        };
        let started = Instant::now();
        // A hold whose lease ran out (its renewals unanswered) is lost now, before anything
        // is sent: a frozen server's silence never delays the news.
        let holds: Vec<_> = engine
            .watched()
            .into_iter()
            .filter(|(hold, _)| !hold.expire_if_due(started))
            .collect();
        let first_end = holds
            .iter()
            .map(|(hold, _)| hold.snapshot().valid_until)
            .min();
        // Retries after a failed renewal come sooner than a period: the description waits.
        let describe = started >= described + period;
        let failed = {
            let engine = &engine;
            let renewals = futures_util::stream::iter(batches(engine, &holds))
                .map(
                    |(kind, batch)| async move { renew(engine, kind, &batch, lease, period).await },
                )
                .buffer_unordered(CONCURRENT_BATCHES)
                .fold(false, |failed, ok| async move { failed | !ok });
            // No round of renewals outlasts the first lease it could still save: past that
            // moment its hold is lost, whatever the server answers later.
            let renewals = async {
                match first_end {
                    Some(end) => tokio::time::timeout_at(end, renewals).await.unwrap_or(true),
                    None => renewals.await,
                }
            };
            let description = async {
                if describe {
                    description::refresh(engine, period).await;
                }
            };
            tokio::join!(renewals, description).0
        };
        if describe {
            described = started;
        }
        let now = Instant::now();
        let mut earliest = None::<Instant>;
        for (hold, _) in &holds {
            if !hold.expire_if_due(now) {
                let until = hold.snapshot().valid_until;
                earliest = Some(earliest.map_or(until, |e| e.min(until)));
            }
        }
        next = if failed {
            // Try again soon, and be awake when the first hold runs out of lease.
            let retry = now + (period / 4).max(Duration::from_millis(5));
            earliest.map_or(retry, |e| retry.min(e))
        } else {
            started + period
        };
        drop(holds);
    }
}

type Batch = Vec<(Arc<Hold>, u64)>;

/// The renew scripts of one period: one script kind each, one slot each on a Cluster (a
/// script's keys must share a slot there), at most [`BATCH`] holds each.
fn batches(engine: &Engine, holds: &[(Arc<Hold>, u64)]) -> Vec<(Renewal, Batch)> {
    let mut groups: HashMap<(Renewal, Option<Slot>), Batch> = HashMap::new();
    for (hold, generation) in holds {
        let slot = engine.slot(hold.keys.lock());
        groups
            .entry((Renewal::of(engine.protocol(), hold.kind), slot))
            .or_default()
            .push((hold.clone(), *generation));
    }
    groups
        .into_iter()
        .flat_map(|((kind, _), group)| {
            group
                .chunks(BATCH)
                .map(|chunk| (kind, chunk.to_vec()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The renew call for one batch.
fn renew_call(engine: &Engine, kind: Renewal, batch: &Batch, lease: Duration) -> Command {
    let holds = batch.iter().map(|(hold, _)| engine.target(hold));
    wire::kind::renew(engine.protocol(), kind, holds, lease)
}

/// Renews one batch; returns false when Redis could not be asked or did not answer. Then
/// every hold of the batch is at risk (until a renewal succeeds, or its lease runs out).
async fn renew(
    engine: &Engine,
    kind: Renewal,
    batch: &Batch,
    lease: Duration,
    limit: Duration,
) -> bool {
    let call = renew_call(engine, kind, batch, lease);
    metrics::renewal_batch(batch.len());
    let sent_at = Instant::now();
    let reply = tokio::time::timeout(limit, answer(engine, &call, batch)).await;
    let error = match reply {
        Ok(Ok(replies)) if replies.len() == batch.len() => {
            renewed(batch, &replies, sent_at, lease);
            return true;
        }
        Ok(Ok(replies)) => {
            tracing::warn!(
                sent = batch.len(),
                got = replies.len(),
                "unexpected renew reply"
            );
            format!(
                "{} answers to a renewal of {} locks",
                replies.len(),
                batch.len()
            )
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, locks = batch.len(), "lock renewal failed");
            e.to_string()
        }
        Err(_) => {
            tracing::warn!(locks = batch.len(), "lock renewal timed out");
            format!("no answer within {limit:?}")
        }
    };
    metrics::renewals(RenewalOutcome::Failed, batch.len());
    for (hold, generation) in batch {
        hold.renewal_failed(*generation, &error);
    }
    false
}

/// The answer to the renewal `call` of `batch`. An answer that has not come within the
/// response timeout puts every hold of the batch at risk at once (a frozen or unreachable
/// server can hold a call for longer: the connection is healed and the call sent again), and
/// the answer is still awaited: if it confirms the renewal, they are held again.
async fn answer(
    engine: &Engine,
    call: &Command,
    batch: &Batch,
) -> Result<Vec<bool>, crate::error::LockError> {
    let invoke = engine.renew(call);
    tokio::pin!(invoke);
    let patience = engine.config().response_timeout;
    tokio::select! {
        reply = &mut invoke => return reply,
        () = tokio::time::sleep(patience) => {}
    }
    let unanswered = format!("no answer within {patience:?}");
    for (hold, generation) in batch {
        hold.renewal_failed(*generation, &unanswered);
    }
    invoke.await
}

/// Applies a renewal's answer, one per hold of `batch`: renewed (on time or late), or gone.
fn renewed(batch: &Batch, replies: &[bool], sent_at: Instant, lease: Duration) {
    let (mut ok, mut late, mut failed) = (0, 0, 0);
    for ((hold, generation), held) in batch.iter().zip(replies) {
        if *held {
            if hold.renewed(*generation, sent_at, lease) {
                late += 1;
            } else {
                ok += 1;
            }
        } else {
            failed += 1;
            hold.mark_lost(
                *generation,
                "the watchdog found the lock gone",
                LossReason::Deleted,
            );
        }
    }
    metrics::renewals(RenewalOutcome::Ok, ok);
    metrics::renewals(RenewalOutcome::Late, late);
    metrics::renewals(RenewalOutcome::Failed, failed);
}
