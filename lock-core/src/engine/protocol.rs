//! The calls on a mutex's key, in the protocol this client speaks (see
//! [`MutexProtocol`]): the one place that chooses between this crate's scripts and the
//! server's native compare-and-set commands (`crate::wire::native`). The fair lock and the
//! read-write lock's writer keep lock strings of the scripts whatever the protocol.

use std::time::Duration;

use redis::cluster_routing::Slot;

use super::Engine;
use super::send::Claims;
use crate::capabilities::MutexProtocol;
use crate::hold::{Hold, Kind};
use crate::name::{Keys, RELEASED, RW_RELEASED};
use crate::util::millis;
use crate::wire::Command;
use crate::wire::native;
use crate::wire::script::{Call, Op};

impl Engine {
    /// Whether a hold of `kind` speaks the native protocol: a mutex's, when the client does.
    pub(crate) fn native(&self, kind: Kind) -> bool {
        kind == Kind::Lock && self.capabilities.mutex_protocol == MutexProtocol::Native
    }

    /// `PUBLISH`, or `SPUBLISH` where waiters listen per shard (a Cluster).
    fn publish(&self) -> &'static str {
        if self.backend.is_sharded() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// The server's clock in microseconds now, as read at connect and advanced by this
    /// process's monotonic clock: the seed of a fencing counter that is missing.
    fn seed(&self) -> u64 {
        let (at_connect, read_at) = self.clock;
        let since = u64::try_from(read_at.elapsed().as_micros()).unwrap_or(u64::MAX);
        at_connect.saturating_add(since)
    }

    /// The fencing counter of the slot `key` is in (the server's only one where keys do not
    /// live in slots).
    fn counter(&self, key: &str) -> String {
        let slot: Option<Slot> = self.backend.slot(key);
        native::counter(&self.config.prefix, slot)
    }

    /// The call that takes a hold on a lock string with `expected` holds already (0: a fresh
    /// acquisition, else a re-entry), with a lease of `lease` (the hold's own, for a re-entry
    /// that must not shorten it, is at least what is left of it).
    pub(crate) fn acquire_command(
        &self,
        hold: &Hold,
        expected: u32,
        lease: Duration,
        will_wait: bool,
    ) -> Command {
        let key = hold.kind.key(&hold.keys);
        let owner = self.owner_arg(hold.holder);
        if self.native(hold.kind) {
            return if expected == 0 {
                native::Call::acquire(native::Acquire {
                    key: &key,
                    owner,
                    owner_bytes: owner.to_string().into_bytes(),
                    lease_ms: millis(lease),
                    counter: &self.counter(&key),
                    seed: self.seed(),
                })
            } else {
                let now = hold.snapshot();
                let left = now
                    .valid_until
                    .saturating_duration_since(tokio::time::Instant::now());
                native::Call::reenter(&key, owner, millis(lease.max(left)), now.token)
            }
            .into();
        }
        let mut call = Call::new(Op::Acquire);
        call.key(key.as_ref())
            .arg(owner)
            .arg(millis(lease))
            .arg(expected)
            .arg(if will_wait { "1" } else { "0" });
        call.into()
    }

    /// The call that takes several mutexes at once, all or none, each with the count its
    /// claim expects (0: fresh, else a re-entry), with a lease of `lease`.
    pub(crate) fn multi_acquire_command(
        &self,
        claims: &Claims,
        lease: Duration,
        will_wait: bool,
    ) -> Command {
        let owner = self.owner_arg(claims.first.hold.holder);
        if self.native(Kind::Lock) {
            let locks = claims
                .iter()
                .map(|claim| {
                    let hold = &claim.hold;
                    native::MultiLock {
                        key: hold.keys.lock().to_owned(),
                        channel: hold.keys.released(),
                        reentry: (claim.expected > 0).then(|| hold.snapshot().token),
                    }
                })
                .collect();
            let first = claims.first.hold.keys.lock();
            let acquire = native::Acquire {
                key: first,
                owner,
                owner_bytes: owner.to_string().into_bytes(),
                lease_ms: millis(lease),
                counter: &self.counter(first),
                seed: self.seed(),
            };
            return native::Call::multi_acquire(acquire, locks, self.publish()).into();
        }
        let mut call = Call::new(Op::MultiAcquire);
        call.arg(owner)
            .arg(millis(lease))
            .arg(if will_wait { "1" } else { "0" });
        for claim in claims.iter() {
            call.key(claim.hold.keys.lock()).arg(claim.expected);
        }
        call.into()
    }

    /// The call that gives back one hold of a lock string (mutex or writer) when the owner's
    /// count is `count` and the hold's token `token`: answers 1 released, 2 decremented, 3 a
    /// repeat (scripts only), 0 not held.
    pub(crate) fn release_command(&self, hold: &Hold, count: u32, token: u64) -> Command {
        let keys = &hold.keys;
        let owner = self.owner_arg(hold.holder);
        let channel = match hold.kind {
            Kind::Write => keys.with(RW_RELEASED),
            _ => keys.with(RELEASED),
        };
        if self.native(hold.kind) {
            let publish = (self.publish(), channel, token);
            return native::Call::release(keys.lock(), owner, count <= 1, publish).into();
        }
        let mut call = Call::new(Op::Release);
        call.key(hold.kind.key(keys).as_ref())
            .arg(owner)
            .arg(count)
            .arg(token)
            .arg(channel)
            .arg(millis(self.config.fence_ttl));
        call.into()
    }

    /// The call that leaves a mutex's last hold to expire in `left` rather than freeing it
    /// (`hold_at_least`): answers 1 kept, 0 not held.
    pub(crate) fn keep_command(&self, hold: &Hold, left: Duration) -> Command {
        let owner = self.owner_arg(hold.holder);
        if self.native(hold.kind) {
            return native::Call::keep(hold.keys.lock(), owner, millis(left)).into();
        }
        let mut call = Call::new(Op::ReleaseKeep);
        call.key(hold.keys.lock()).arg(owner).arg(millis(left));
        call.into()
    }

    /// The call that sets the lease of lock-string holds (mutex, fair, writer; one protocol,
    /// and on a Cluster one slot, for all) to `lease` where their owners still hold them:
    /// answers an array of 1 renewed / 0 not held.
    pub(crate) fn renew_command<'a>(
        &self,
        holds: impl IntoIterator<Item = &'a Hold>,
        lease: Duration,
    ) -> Command {
        let mut holds = holds.into_iter().peekable();
        if holds.peek().is_some_and(|hold| self.native(hold.kind)) {
            let locks = holds.map(|hold| (hold.keys.lock(), self.owner_arg(hold.holder)));
            return native::Call::renew(locks, millis(lease)).into();
        }
        let mut call = Call::new(Op::Renew);
        call.arg(millis(lease));
        for hold in holds {
            call.key(hold.kind.key(&hold.keys).as_ref())
                .arg(self.owner_arg(hold.holder));
        }
        call.into()
    }

    /// The call that frees a mutex whoever holds it and wakes its waiters: answers 1 freed,
    /// 0 free.
    pub(crate) fn force_unlock_command(&self, keys: &Keys) -> Command {
        if self.native(Kind::Lock) {
            let channel = keys.released();
            return native::Call::force_unlock(keys.lock(), (self.publish(), &channel)).into();
        }
        let mut call = Call::new(Op::ForceUnlock);
        call.key(keys.lock())
            .arg(keys.released())
            .arg(millis(self.config.fence_ttl));
        call.into()
    }

    /// The call that reads a lock string's key (of a hold of `kind`): answers
    /// `{pttl, value}` (a native mutex's value is its owner).
    pub(crate) fn inspect_command(&self, kind: Kind, key: &str) -> Command {
        if self.native(kind) {
            return native::Call::inspect(key).into();
        }
        let mut call = Call::new(Op::Inspect);
        call.key(key);
        call.into()
    }
}
