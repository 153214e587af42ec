//! One acquisition of a multi-lock: all names in one script where they share a slot, or one by
//! one in key order with rollback where they do not (a Cluster).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::Value;
use tokio::time::Instant;

use super::{MultiLock, MultiLockGuard};
use crate::backend::convert;
use crate::driver::{Attempt, Primitive, Request};
use crate::engine::{Claims, Engine};
use crate::error::LockError;
use crate::hold::{Hold, Kind};
use crate::metrics::LossReason;
use crate::mutex::{LockGuard, Mutex};
use crate::name::Keys;
use crate::scripts::{Call, Op};
use crate::util::millis;

/// One acquisition of several locks.
pub(super) struct Take {
    engine: Arc<Engine>,
    names: Vec<String>,
    label: String,
    atomic: bool,
    /// The holds, sorted by key, so every request takes the owner's turns in the same order.
    holds: Vec<Arc<Hold>>,
    /// `order[i]`: where the i-th sorted hold's name was in the caller's list.
    order: Vec<usize>,
    lease: Option<Duration>,
    will_wait: bool,
    deadline: Option<Instant>,
    /// Names in different Cluster slots: taken one by one.
    in_order: bool,
    /// The hold found busy by the last attempt.
    busy: Option<usize>,
}

impl Take {
    pub(super) fn new(engine: Arc<Engine>, names: Vec<String>, atomic: bool) -> Self {
        Take {
            engine,
            label: names.join("+"),
            names,
            atomic,
            holds: Vec::new(),
            order: Vec::new(),
            lease: None,
            will_wait: false,
            deadline: None,
            in_order: false,
            busy: None,
        }
    }
}

impl Primitive for Take {
    type Guard = MultiLockGuard;
    const SPAN: &'static str = "multi_lock";
    const KIND: &'static str = "multi";

    fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    fn name(&self) -> &str {
        &self.label
    }

    fn busy_name(&self) -> &str {
        self.busy
            .and_then(|i| self.holds.get(i))
            .map_or(&self.label, |hold| hold.name())
    }

    fn start(&mut self, request: Request) -> Result<(), LockError> {
        let engine = &self.engine;
        if self.names.is_empty() || self.names.len() > MultiLock::MAX_NAMES {
            return Err(LockError::InvalidOption {
                option: "names",
                reason: format!(
                    "a multi-lock takes 1 to {} names, not {}",
                    MultiLock::MAX_NAMES,
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
        // On a Cluster one script can only touch one slot.
        if let Some((first, _)) = keyed.first() {
            let slot = engine.slot(first.lock());
            if let Some((other, _)) = keyed.iter().find(|(k, _)| engine.slot(k.lock()) != slot) {
                if self.atomic {
                    return Err(LockError::CrossSlot {
                        first: first.name().to_owned(),
                        second: other.name().to_owned(),
                    });
                }
                self.in_order = true;
            }
        }
        let holder = engine.holder_for_current_task();
        for (keys, index) in keyed {
            self.holds.push(engine.hold(Kind::Lock, &keys, holder));
            self.order.push(index);
        }
        self.lease = request.lease;
        self.will_wait = request.will_wait;
        self.deadline = request.deadline;
        Ok(())
    }

    async fn attempt(&mut self) -> Result<Attempt<MultiLockGuard>, LockError> {
        if self.in_order {
            return self.in_order().await.map(Attempt::Acquired);
        }
        let engine = &self.engine;
        let (_, lease_len) = engine.lease(self.lease);
        let mut claims = Vec::with_capacity(self.holds.len());
        for hold in &self.holds {
            claims.push(engine.claim(hold.clone()).await?);
        }
        let mut call = Call::new(Op::MultiAcquire);
        call.arg(engine.owner_arg(self.holds[0].holder))
            .arg(millis(lease_len))
            .arg(if self.will_wait { "1" } else { "0" });
        for claim in &claims {
            call.key(claim.hold.keys.lock()).arg(claim.expected);
        }
        let mut claims = claims.into_iter();
        let Some(first) = claims.next() else {
            unreachable!("start refuses an empty multi-lock");
        };
        let claims = Claims {
            first,
            rest: claims.collect(),
        };
        let applied = |v: &Value| matches!(v, Value::Array(a) if a.first() == Some(&Value::Int(1)));
        let sent = engine.send(claims, call, applied).await?;
        let reply: Vec<i64> = convert(sent.value)?;
        let bad = || LockError::UnexpectedReply(format!("multi_acquire returned {reply:?}"));
        let index = |i: i64| {
            usize::try_from(i)
                .ok()
                .and_then(|i| i.checked_sub(1))
                .filter(|i| *i < self.holds.len())
        };
        match reply.as_slice() {
            [1, tokens @ ..] if tokens.len() == self.holds.len() => {
                let mut guards: Vec<Option<LockGuard>> =
                    (0..self.holds.len()).map(|_| None).collect();
                let mut late = false;
                for ((claim, token), position) in sent.claims.iter().zip(tokens).zip(&self.order) {
                    match engine.grant(claim, token.unsigned_abs(), sent.sent_at, self.lease) {
                        Some(generation) => {
                            guards[*position] = Some(LockGuard::new(
                                claim.hold.clone(),
                                engine.clone(),
                                generation,
                            ));
                        }
                        None => late = true,
                    }
                }
                drop(sent.claims);
                if late {
                    // Dropping the guards that were granted in time gives them back too.
                    return Ok(Attempt::Late);
                }
                Ok(Attempt::Acquired(MultiLockGuard::new(
                    self.label.clone(),
                    guards.into_iter().flatten().collect(),
                )))
            }
            [0, i, pttl] => {
                let i = index(*i).ok_or_else(bad)?;
                self.busy = Some(i);
                Ok(Attempt::Busy {
                    retry_in: u64::try_from(*pttl).ok().map(Duration::from_millis),
                    channel: self.holds[i].keys.released(),
                })
            }
            [-1, i] => {
                let hold = &self.holds[index(*i).ok_or_else(bad)?];
                hold.mark_current_lost("re-entry found the lock gone", LossReason::Deleted);
                Err(LockError::Lost {
                    name: hold.name().to_owned(),
                })
            }
            _ => Err(bad()),
        }
    }
}

impl Take {
    /// Takes the locks one by one in the order of their keys (the same order for every
    /// request, so two multi-locks over overlapping names cannot deadlock), each with what is
    /// left of the wait. If one cannot be had, the ones already taken are given back (awaited)
    /// and its error returned. Not atomic: while it waits for a later lock it holds the
    /// earlier ones.
    async fn in_order(&self) -> Result<MultiLockGuard, LockError> {
        let mut taken: Vec<(usize, LockGuard)> = Vec::with_capacity(self.holds.len());
        for (hold, position) in self.holds.iter().zip(&self.order) {
            let mutex = Mutex::new(self.engine.clone(), hold.name().to_owned());
            let mut request = mutex.lock();
            request = match (self.will_wait, self.deadline) {
                (false, _) => request.wait(Duration::ZERO),
                (true, Some(d)) => request.wait(d.saturating_duration_since(Instant::now())),
                (true, None) => request,
            };
            if let Some(lease) = self.lease {
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
            self.label.clone(),
            taken.into_iter().map(|(_, g)| g).collect(),
        ))
    }
}
