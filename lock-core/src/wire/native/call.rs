//! [`Call`]: one native call, its commands and what its reply is read into ([`Op`]), built
//! here for every operation of the native mutex.

use std::sync::Arc;

use redis::Pipeline;

use super::args::{
    Acquire, Compare, ROOM, delete_if_equal, set_if_owner, set_if_owner_with, start,
};
use super::multi::{Multi, MultiLock};
use crate::wire::answer::Answer;
use crate::wire::owner::OwnerId;

/// What a native call does, and what its reply is read into.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// A fresh acquisition by this owner (a repeat finds its id): read into an [`Answer`];
    /// `compare` clears a free lock string of the scripts in its way; `holder_ttl`: whether
    /// its last command is the `PTTL` a busy answer reads.
    Acquire {
        owner: OwnerId,
        compare: Compare,
        holder_ttl: bool,
    },
    /// A re-entry of a hold whose token is this: read into an [`Answer`].
    Reenter { token: u64 },
    /// The last hold's release: read into a [`GaveBack`].
    Release,
    /// An earlier hold's release: read into a [`GaveBack`].
    ReleaseOne,
    /// The last hold kept until its minimum hold: read into a [`GaveBack`].
    Keep,
    /// Renewals, one per lock: renewed, or not held.
    Renew,
    /// What a multi-lock's partial acquisition took, given back (its reply is not read).
    GiveBack,
    /// A free lock string of the scripts deleted where it is unchanged (its reply is not
    /// read).
    Clear,
    /// A force-unlock: freed, or already free.
    ForceUnlock,
    /// The state: the lock's remaining lease and owner.
    Inspect,
    /// Several locks at once: read into an [`Answer`] and what to give back.
    MultiAcquire(Multi),
    /// Several calls at once, each read on its own: where each one's replies are.
    Batch(Vec<Part>),
}

/// Where one call's replies are in a batch's reply (see `batch.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Part {
    /// Inside the batch's transaction (an acquisition).
    pub(super) atomic: bool,
    /// How many of the call's commands are sent.
    pub(super) len: usize,
    /// An acquisition whose counter an earlier acquisition of the batch seeds: its own seed
    /// (its first command) is left out.
    pub(super) seed_shared: bool,
    /// A last release whose *delete if equal* script is left out: one script call deletes
    /// every such release's lock, and its reply's element in order is this call's first
    /// reply.
    pub(super) merged: bool,
}

/// A native call: its commands and how to read their reply.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(super) op: Op,
    pub(super) pipe: Pipeline,
    /// The lock's key, which routes the call on a Cluster (shared with the hold's keys).
    pub(super) key: Arc<str>,
}

/// What the reply to an acquisition found in the lock's place.
#[derive(Debug, Clone)]
pub(crate) enum Found {
    /// Nothing (taken), a repeat of this acquisition (taken), another holder (busy), or for
    /// a re-entry the owner's hold gone (lost).
    Answer(Answer),
    /// Not all of a multi-lock's names could be had: what was taken must go back (`give_back`)
    /// before the answer (busy, or lost) is given.
    Partial { answer: Answer, give_back: Call },
    /// A free lock string of the scripted protocol (kept for its fencing counter): it must
    /// go before the name can be taken natively. The call that deletes it if it is unchanged
    /// (its reply is not read), to send before the acquisition is sent once more.
    Scripted(Call),
}

impl Call {
    /// A fresh acquisition (see the module docs).
    pub(crate) fn acquire(a: Acquire<'_>) -> Self {
        let key = &*a.key;
        let room = key.len() + a.counter.len() + ROOM;
        let mut pipe = Pipeline::with_capacity(4);
        pipe.atomic();
        start(&mut pipe, "SET", room)
            .arg(a.counter)
            .arg(a.seed)
            .arg("NX");
        start(&mut pipe, "INCR", room).arg(a.counter);
        start(&mut pipe, "SET", room)
            .arg(key)
            .arg(&a.owner)
            .arg("NX")
            .arg("PX")
            .arg(a.lease_ms)
            .arg("GET");
        if a.holder_ttl {
            start(&mut pipe, "PTTL", room).arg(key);
        }
        let op = Op::Acquire {
            owner: a.owner,
            compare: a.compare,
            holder_ttl: a.holder_ttl,
        };
        Self::new(op, pipe, a.key)
    }

    /// A re-entry by `owner`, whose hold's token is `token`: the lease becomes `lease_ms`.
    pub(crate) fn reenter(
        compare: Compare,
        key: Arc<str>,
        owner: impl redis::ToRedisArgs,
        lease_ms: u64,
        token: u64,
    ) -> Self {
        let mut pipe = Pipeline::with_capacity(1);
        set_if_owner(&mut pipe, compare, &key, &owner, lease_ms);
        Self::new(Op::Reenter { token }, pipe, key)
    }

    /// A release of one hold of `owner`'s, the last one when `last`, published on `channel`
    /// with `publish` (`PUBLISH`, or `SPUBLISH` on a Cluster) and the hold's token.
    pub(crate) fn release(
        compare: Compare,
        key: Arc<str>,
        owner: impl redis::ToRedisArgs,
        last: bool,
        (publish, channel, token): (&str, impl redis::ToRedisArgs, u64),
    ) -> Self {
        let mut pipe = Pipeline::with_capacity(2);
        let room = key.len() + 2 * ROOM;
        if last {
            delete_if_equal(&mut pipe, compare, &key, &owner);
            start(&mut pipe, publish, room).arg(channel).arg(token);
            Self::new(Op::Release, pipe, key)
        } else {
            set_if_owner_with(&mut pipe, compare, &key, &owner).arg("KEEPTTL");
            Self::new(Op::ReleaseOne, pipe, key)
        }
    }

    /// Sets the lease of `owner`'s lock to `ms` if it is still theirs: a release kept until
    /// its minimum hold.
    pub(crate) fn keep(
        compare: Compare,
        key: Arc<str>,
        owner: impl redis::ToRedisArgs,
        ms: u64,
    ) -> Self {
        let mut pipe = redis::pipe();
        set_if_owner(&mut pipe, compare, &key, &owner, ms);
        Self::new(Op::Keep, pipe, key)
    }

    /// Renews each lock `(key, owner)` to `ms` if it is still its owner's; `route` is the
    /// first key (all in one slot on a Cluster).
    pub(crate) fn renew<'a, O: redis::ToRedisArgs + 'a>(
        compare: Compare,
        locks: impl IntoIterator<Item = (&'a str, O)>,
        ms: u64,
    ) -> Self {
        let mut pipe = redis::pipe();
        let mut route = None;
        for (key, owner) in locks {
            route.get_or_insert_with(|| Arc::from(key));
            set_if_owner(&mut pipe, compare, key, &owner, ms);
        }
        let key = route.unwrap_or_else(|| Arc::from(""));
        Self {
            op: Op::Renew,
            pipe,
            key,
        }
    }

    /// Frees the lock whoever holds it, and publishes on its channel.
    pub(crate) fn force_unlock(key: &str, (publish, channel): (&str, &str)) -> Self {
        let mut pipe = redis::pipe();
        pipe.cmd("DEL").arg(key);
        pipe.cmd(publish).arg(channel).arg("");
        Self::new(Op::ForceUnlock, pipe, key)
    }

    /// Deletes `key` if it still holds `value` (a free lock string of the scripts in the way
    /// of a native acquisition): answers 1 deleted, 0 not.
    pub(super) fn delete_if(compare: Compare, key: &str, value: Vec<u8>) -> Self {
        let mut pipe = redis::pipe();
        delete_if_equal(&mut pipe, compare, key, &value);
        Self::new(Op::Clear, pipe, key)
    }

    /// Reads the lock's state, and its fencing counter (the holder's token is at most it).
    pub(crate) fn inspect(key: &str, counter: &str) -> Self {
        let mut pipe = redis::pipe();
        pipe.cmd("PTTL")
            .arg(key)
            .cmd("GET")
            .arg(key)
            .cmd("GET")
            .arg(counter);
        Self::new(Op::Inspect, pipe, key)
    }

    /// A call of `op` sending `pipe`, routed by `key` (shared, or copied once from a `&str`).
    pub(super) fn new(op: Op, pipe: Pipeline, key: impl Into<Arc<str>>) -> Self {
        Self {
            op,
            pipe,
            key: key.into(),
        }
    }

    /// The commands.
    pub(crate) fn pipeline(&self) -> &Pipeline {
        &self.pipe
    }

    /// Whether there is nothing to send.
    pub(crate) fn is_empty(&self) -> bool {
        self.pipe.cmd_iter().next().is_none()
    }

    /// The key that routes the call.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// A multi-lock's acquisition: every lock in one `MULTI`/`EXEC`, all or none (see
    /// [`Multi::build`]).
    pub(crate) fn multi_acquire(
        a: Acquire<'_>,
        locks: Vec<MultiLock>,
        publish: &'static str,
    ) -> Self {
        let (multi, pipe) = Multi::build(a, locks, publish);
        let key = Arc::from(multi.route());
        Self {
            op: Op::MultiAcquire(multi),
            pipe,
            key,
        }
    }
}
