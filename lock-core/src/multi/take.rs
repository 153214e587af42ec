//! One acquisition of a multi-lock: all names in one script where they share a slot, or one by
//! one in key order with rollback where they do not (a Cluster).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use super::guard::MultiLockGuard;
use crate::driver::{Primitive, Request, Started};
use crate::engine::{Attempt, Engine};
use crate::error::LockError;
use crate::hold::Hold;
use crate::kind::{ChannelRole, HoldKind};
use crate::mutex::{LockGuard, Mutex};
use crate::name::Keys;
use crate::named::Named;
use crate::wire::mutex;

/// The most names one multi-lock takes: 64 (`MultiLock::MAX_NAMES`).
pub(super) const MAX_NAMES: usize = 64;

/// A request to take several locks, before it starts.
pub(super) struct Take {
    /// The names joined by `+`, for spans and errors.
    label: Named,
    names: Vec<String>,
    atomic: bool,
}

/// One acquisition of several locks, started.
pub(super) struct Taking {
    label: Named,
    /// The holds, sorted by key, so every request takes the owner's turns in the same order.
    holds: Vec<Arc<Hold>>,
    /// `order[i]`: where the i-th sorted hold's name was in the caller's list.
    order: Vec<usize>,
    request: Request,
    /// Names in different Cluster slots: taken one by one.
    in_order: bool,
    /// The hold found busy by the last attempt.
    busy: Option<usize>,
}

impl Take {
    pub(super) fn new(engine: Arc<Engine>, names: Vec<String>, atomic: bool) -> Self {
        Take {
            label: Named::unkeyed(engine, names.join("+")),
            names,
            atomic,
        }
    }

    /// The names' keys, sorted, each with where it was in the caller's list.
    fn sorted_keys(&self) -> Result<Vec<(Keys, usize)>, LockError> {
        let engine = &self.label.engine;
        if self.names.is_empty() || self.names.len() > MAX_NAMES {
            return Err(LockError::InvalidOption {
                option: "names",
                reason: format!(
                    "a multi-lock takes 1 to {} names, not {}",
                    MAX_NAMES,
                    self.names.len()
                ),
            });
        }
        let mut keyed: Vec<(Keys, usize)> = Vec::with_capacity(self.names.len());
        for (index, name) in self.names.iter().enumerate() {
            keyed.push((engine.keys(name)?, index));
        }
        keyed.sort_by(|a, b| a.0.lock().cmp(b.0.lock()));
        if keyed.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(LockError::InvalidOption {
                option: "names",
                reason: "a multi-lock cannot name the same lock twice".to_owned(),
            });
        }
        Ok(keyed)
    }

    /// Whether the names span Cluster slots (one script can only touch one slot); refused
    /// with `CrossSlot` for an atomic multi-lock.
    fn spans_slots(&self, keyed: &[(Keys, usize)]) -> Result<bool, LockError> {
        let engine = &self.label.engine;
        let Some((first, _)) = keyed.first() else {
            return Ok(false);
        };
        let slot = engine.slot(first.lock());
        match keyed.iter().find(|(k, _)| engine.slot(k.lock()) != slot) {
            Some((other, _)) if self.atomic => Err(LockError::CrossSlot {
                first: first.name().to_owned(),
                second: other.name().to_owned(),
            }),
            Some(_) => Ok(true),
            None => Ok(false),
        }
    }
}

impl Primitive for Take {
    type Guard = MultiLockGuard;
    type Started = Taking;
    const SPAN: &'static str = "multi_lock";
    const KIND: &'static str = "multi";

    fn named(&self) -> &Named {
        &self.label
    }

    fn start(self, request: Request) -> Result<Taking, LockError> {
        let keyed = self.sorted_keys()?;
        let in_order = self.spans_slots(&keyed)?;
        let engine = &self.label.engine;
        let holder = engine.holder_for_current_task();
        let (holds, order) = keyed
            .into_iter()
            .map(|(keys, index)| (engine.hold(HoldKind::Mutex, &keys, holder), index))
            .unzip();
        Ok(Taking {
            label: self.label,
            holds,
            order,
            request,
            in_order,
            busy: None,
        })
    }
}

impl Started for Taking {
    type Guard = MultiLockGuard;

    fn named(&self) -> &Named {
        &self.label
    }

    fn busy_name(&self) -> &str {
        self.busy
            .and_then(|i| self.holds.get(i))
            .map_or(self.label.name(), |hold| hold.name())
    }

    fn channel(&self, index: usize) -> String {
        self.holds.get(index).map_or_else(String::new, |hold| {
            hold.keys.channel(ChannelRole::Released).to_string()
        })
    }

    async fn attempt(&mut self) -> Result<Attempt<MultiLockGuard>, LockError> {
        if self.in_order {
            return self.in_order().await.map(Attempt::Acquired);
        }
        let engine = &self.label.engine;
        let Request {
            lease, will_wait, ..
        } = self.request;
        let (_, lease_len) = engine.lease(lease);
        let attempt = engine
            .attempt_all(&self.holds, lease, |claims| {
                let locks: Vec<mutex::Claimed<'_>> = claims
                    .iter()
                    .map(|claim| mutex::Claimed {
                        keys: &claim.hold.keys,
                        expected: claim.expected,
                        token: claim.hold.snapshot().token,
                    })
                    .collect();
                let owner = engine.owner_arg(claims.first.hold.holder);
                mutex::multi_acquire(engine.protocol(), owner, &locks, lease_len, will_wait)
            })
            .await
            .map_err(|e| match e {
                // A table answer a multi-lock's acquisition never gives.
                LockError::SizeMismatch { recorded, .. } => LockError::UnexpectedReply(format!(
                    "a multi-lock's acquisition answered a semaphore size ({recorded})"
                )),
                e => e,
            })?;
        if let Attempt::Busy { index, .. } = attempt {
            self.busy = Some(index);
        }
        Ok(attempt.map(|generations| {
            // Back in the caller's order.
            let mut guards: Vec<(usize, LockGuard)> = generations
                .into_iter()
                .zip(&self.holds)
                .zip(&self.order)
                .map(|((generation, hold), position)| {
                    let guard = LockGuard::new(hold.clone(), engine.clone(), generation);
                    (*position, guard)
                })
                .collect();
            guards.sort_by_key(|(position, _)| *position);
            let label = self.label.name().to_owned();
            MultiLockGuard::new(label, guards.into_iter().map(|(_, g)| g).collect())
        }))
    }
}

impl Taking {
    /// Takes the locks one by one in the order of their keys (the same order for every
    /// request, so two multi-locks over overlapping names cannot deadlock), each with what is
    /// left of the wait. If one cannot be had, the ones already taken are given back (awaited)
    /// and its error returned. Not atomic: while it waits for a later lock it holds the
    /// earlier ones.
    async fn in_order(&self) -> Result<MultiLockGuard, LockError> {
        let mut taken: Vec<(usize, LockGuard)> = Vec::with_capacity(self.holds.len());
        let Request {
            lease,
            will_wait,
            deadline,
            ..
        } = self.request;
        for (hold, position) in self.holds.iter().zip(&self.order) {
            let mutex = Mutex::new(self.label.engine.clone(), hold.name().to_owned());
            let mut request = mutex.lock();
            request = match (will_wait, deadline) {
                (false, _) => request.wait(Duration::ZERO),
                (true, Some(d)) => request.wait(d.saturating_duration_since(Instant::now())),
                (true, None) => request,
            };
            if let Some(lease) = lease {
                request = request.lease(lease);
            }
            match request.await {
                Ok(guard) => taken.push((*position, guard)),
                Err(e) => {
                    // Roll back: give back what was taken, and wait for it, so that "not
                    // held" is true when the error returns.
                    join_all(taken.into_iter().map(|(_, g)| g.unlock())).await;
                    return Err(e);
                }
            }
        }
        taken.sort_by_key(|(position, _)| *position);
        Ok(MultiLockGuard::new(
            self.label.name().to_owned(),
            taken.into_iter().map(|(_, g)| g).collect(),
        ))
    }
}
