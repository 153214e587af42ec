//! The watchdog: one background task per client that renews every watchdog-leased hold.
//!
//! Every `lease / 3` it sends one renew script per batch of up to [`BATCH`] locks of one kind
//! (and, on a Cluster, of one slot), several batches at once. A hold
//! Redis says is gone is marked lost at once. A hold whose last confirmed renewal is older
//! than its lease (measured from when that renewal was sent, minus a drift margin) is marked
//! lost when that moment passes, whether Redis answered with errors or not at all. Holds whose
//! guards are all gone (released, dropped) are never renewed again. The task ends when the
//! client is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::cluster_routing::Slot;
use tokio::time::Instant;

use crate::backend::Topology;
use crate::client::Inner;
use crate::guard::{Hold, Kind};
use crate::mutex::millis;
use crate::scripts;

/// Locks renewed per script call.
pub(crate) const BATCH: usize = 256;

/// Renew scripts in flight at once (on a Cluster, scripts to one node share its connection, so
/// they are pipelined there).
const CONCURRENT_BATCHES: usize = 32;

pub(crate) async fn run(inner: Weak<Inner>, lease: Duration) {
    let period = lease / 3;
    let mut next = Instant::now() + period;
    loop {
        tokio::time::sleep_until(next).await;
        let Some(inner) = inner.upgrade() else { return };
        let holds = inner.watched_holds();
        let started = Instant::now();
        let failed = {
            let inner = &inner;
            futures_util::stream::iter(batches(inner, &holds))
                .map(|batch| async move { renew(inner, &batch, lease, period).await })
                .buffer_unordered(CONCURRENT_BATCHES)
                .fold(false, |failed, ok| async move { failed | !ok })
                .await
        };
        let now = Instant::now();
        let mut earliest = None::<Instant>;
        for (hold, _) in &holds {
            if !hold.expire_if_due(now) {
                let until = hold.state().valid_until;
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

/// The renew scripts of one period: one kind of hold each, one slot each on a Cluster (a
/// script's keys must share a slot there), at most [`BATCH`] holds each.
fn batches(inner: &Inner, holds: &[(Arc<Hold>, u64)]) -> Vec<Vec<(Arc<Hold>, u64)>> {
    let mut groups: HashMap<(std::mem::Discriminant<Kind>, Option<Slot>), Vec<_>> = HashMap::new();
    for (hold, generation) in holds {
        let kind = std::mem::discriminant(&renewed_as(hold.kind));
        let slot = inner.backend.slot(&hold.keys.hash);
        groups
            .entry((kind, slot))
            .or_default()
            .push((hold.clone(), *generation));
    }
    groups
        .into_values()
        .flat_map(|group| group.chunks(BATCH).map(<[_]>::to_vec).collect::<Vec<_>>())
        .collect()
}

/// A fair lock renews like a lock: its lease is on the same kind of string.
fn renewed_as(kind: Kind) -> Kind {
    match kind {
        Kind::Fair => Kind::Lock,
        other => other,
    }
}

/// Renews one batch; returns false when Redis could not be asked or did not answer.
async fn renew(
    inner: &Inner,
    batch: &[(Arc<Hold>, u64)],
    lease: Duration,
    limit: Duration,
) -> bool {
    // A batch holds one kind only (see `run`).
    let mut invocation = match batch.first().map(|(hold, _)| hold.kind) {
        Some(Kind::Permits(_)) => scripts::SEM_RENEW.prepare_invoke(),
        Some(Kind::Read) => scripts::RW_READ_RENEW.prepare_invoke(),
        _ => scripts::RENEW.prepare_invoke(),
    };
    invocation.arg(millis(lease));
    for (hold, _) in batch {
        invocation.key(&hold.keys.hash).arg(&hold.owner);
        if let Kind::Permits(n) = hold.kind {
            invocation.arg(n);
        }
    }
    let sent_at = Instant::now();
    let reply = tokio::time::timeout(limit, inner.backend.invoke::<Vec<i64>>(&invocation)).await;
    match reply {
        Ok(Ok(replies)) if replies.len() == batch.len() => {
            for ((hold, generation), held) in batch.iter().zip(replies) {
                if held == 1 {
                    hold.renewed(*generation, sent_at, lease);
                } else {
                    hold.mark_lost(*generation, "the watchdog found the lock gone");
                }
            }
            true
        }
        Ok(Ok(replies)) => {
            tracing::warn!(
                sent = batch.len(),
                got = replies.len(),
                "unexpected renew reply"
            );
            false
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, locks = batch.len(), "lock renewal failed");
            false
        }
        Err(_) => {
            tracing::warn!(locks = batch.len(), "lock renewal timed out");
            false
        }
    }
}
