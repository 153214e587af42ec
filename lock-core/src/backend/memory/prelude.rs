//! `scripts/prelude.lua` in Rust: the lock string (`owner|count|token|released|waiters`), the
//! next fencing token, the busy answer, re-entry, the start of an acquisition, the release of
//! a hold, freeing, and the fair queue's clean-up and wake-up. Each function does what the Lua
//! function of the same name does, call for call.

use redis::Value;

use super::keyspace::Ttl;
use super::script::{Fail, Res, bulk, foreign, int, is_error, number};
use super::server::Ctx;

/// A lock string, read (`parse_lock`'s results): for a missing key `value` is None, `owner`
/// empty, `count` 0 and `token` None.
#[derive(Debug, Clone, Default)]
pub(super) struct Lock {
    pub(super) value: Option<Vec<u8>>,
    pub(super) owner: String,
    pub(super) count: i64,
    pub(super) token: Option<String>,
    pub(super) released: String,
    pub(super) waiters: String,
}

impl Lock {
    /// This lock string with the hold count `count` (its other fields as they are).
    fn with_count(&self, count: i64) -> Vec<u8> {
        let token = self.token.as_deref().unwrap_or("0");
        lock_string(&self.owner, count, token, &self.released, &self.waiters)
    }
}

/// `parse_lock`: None for a value this library did not write (Lua's `false`).
pub(super) fn parse_lock(value: Option<Vec<u8>>) -> Option<Lock> {
    let Some(bytes) = value else {
        return Some(Lock::default());
    };
    let text = std::str::from_utf8(&bytes).ok()?;
    let mut fields = text.split('|');
    let (owner, count, token, released, waiters) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let well_formed = fields.next().is_none()
        && !count.is_empty()
        && digits(count)
        && !token.is_empty()
        && digits(token)
        && digits(released)
        && (waiters.is_empty() || waiters == "1");
    if !well_formed {
        return None;
    }
    Some(Lock {
        owner: owner.to_owned(),
        count: count.parse().ok()?,
        token: Some(token.to_owned()),
        released: released.to_owned(),
        waiters: waiters.to_owned(),
        value: Some(bytes),
    })
}

/// `read_lock`: the lock string at `key` (`GET` raises on a key of another type).
pub(super) fn read_lock(ctx: &mut Ctx<'_>, key: &str) -> Res<Option<Lock>> {
    Ok(parse_lock(ctx.ks.get(key)?))
}

pub(super) fn lock_string(
    owner: &str,
    count: i64,
    token: &str,
    released: &str,
    waiters: &str,
) -> Vec<u8> {
    format!("{owner}|{count}|{token}|{released}|{waiters}").into_bytes()
}

/// `seed`: the server clock `t` (µs) as a token.
pub(super) fn seed(t: u64) -> String {
    t.to_string()
}

/// `next_token`: the last token + 1, or for a key without a counter the call's clock in µs.
pub(super) fn next_token(ctx: &Ctx<'_>, token: Option<&str>) -> Res<String> {
    match token {
        Some(token) => Ok(number(token)?.saturating_add(1).to_string()),
        None => Ok(seed(ctx.time_us())),
    }
}

/// A lease or time to live (`PX` argument): a positive number of ms.
pub(super) fn px(text: &str) -> Res<u64> {
    match text.parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(ms),
        _ => Err(Fail("ERR invalid expire time in 'set' command".to_owned())),
    }
}

/// `free_string`: the lock at `key` becomes a free lock string that keeps its counter `last`
/// and `released` for `fence_ttl` ms.
pub(super) fn free_string(
    ctx: &mut Ctx<'_>,
    key: &str,
    last: &str,
    released: &str,
    fence_ttl: &str,
) -> Res<()> {
    let value = lock_string("", 0, last, released, "");
    ctx.ks.set(key, value, Ttl::Px(px(fence_ttl)?));
    Ok(())
}

/// Sets the waiters flag of `lock` (held by another owner) at `key` when the caller will wait
/// (`will_wait` '1') and it is not set yet, so the holder's release publishes.
pub(super) fn flag_waiters(ctx: &mut Ctx<'_>, key: &str, lock: &Lock, will_wait: &str) {
    if will_wait == "1" && lock.waiters.is_empty() {
        let mut flagged = lock.value.clone().unwrap_or_default();
        flagged.push(b'1');
        ctx.ks.set(key, flagged, Ttl::Keep);
    }
}

/// `busy`: -2 - pttl, or -1 without an expiry; sets the waiters flag (`flag_waiters`).
pub(super) fn busy(ctx: &mut Ctx<'_>, key: &str, lock: &Lock, will_wait: &str) -> i64 {
    flag_waiters(ctx, key, lock, will_wait);
    let pttl = ctx.ks.pttl(key);
    if pttl < 0 {
        -1
    } else {
        (-2i64).saturating_sub(pttl)
    }
}

/// `take_again`: the owner takes the lock string it holds once more (count + 1 when its
/// `expected` count is the current one; nothing for a repeat). The token, or 0 (lost).
pub(super) fn take_again(
    ctx: &mut Ctx<'_>,
    key: &str,
    lock: &Lock,
    expected: i64,
    lease: &str,
) -> Res<i64> {
    let token = lock.token.as_deref().unwrap_or("0");
    if lock.count == expected {
        let next = lock.with_count(lock.count.saturating_add(1));
        let lease_ms = number(lease)?;
        let ttl = if ctx.ks.pttl(key) < lease_ms {
            Ttl::Px(px(lease)?)
        } else {
            Ttl::Keep
        };
        ctx.ks.set(key, next, ttl);
    } else if lock.count != expected.saturating_add(1) {
        return Ok(0);
    }
    number(token)
}

/// What `start_acquire` found: a final answer, or the lock to go on with.
pub(super) enum Start {
    Done(Value),
    Go(Lock),
}

/// `start_acquire`.
pub(super) fn start_acquire(
    ctx: &mut Ctx<'_>,
    key: &str,
    caller: &str,
    expected: i64,
    lease: &str,
) -> Res<Start> {
    let Some(lock) = read_lock(ctx, key)? else {
        return Ok(Start::Done(foreign()));
    };
    if lock.owner == caller {
        return Ok(Start::Done(int(take_again(
            ctx, key, &lock, expected, lease,
        )?)));
    }
    if expected != 0 {
        return Ok(Start::Done(int(0)));
    }
    Ok(Start::Go(lock))
}

/// What `give_back` did: None for a foreign value; else 1 freed, 2 one hold given back, 3 a
/// repeat, 0 not held, with whether someone waits when freed.
pub(super) fn give_back(
    ctx: &mut Ctx<'_>,
    key: &str,
    owner: &str,
    expected: &str,
    token: &str,
    fence_ttl: &str,
) -> Res<Option<(i64, bool)>> {
    let Some(lock) = read_lock(ctx, key)? else {
        return Ok(None);
    };
    if lock.value.is_none() {
        return Ok(Some((0, false)));
    }
    let expected = number(expected)?;
    let last = lock.token.as_deref().unwrap_or("0");
    if lock.owner == owner {
        if lock.count == expected {
            if lock.count > 1 {
                let value = lock.with_count(lock.count.saturating_sub(1));
                ctx.ks.set(key, value, Ttl::Keep);
                return Ok(Some((2, false)));
            }
            free_string(ctx, key, last, token, fence_ttl)?;
            return Ok(Some((1, lock.waiters == "1")));
        }
        return Ok(Some((
            if lock.count == expected.saturating_sub(1) {
                3
            } else {
                0
            },
            false,
        )));
    }
    if expected == 1 && lock.released == token {
        return Ok(Some((3, false)));
    }
    Ok(Some((0, false)))
}

/// `free_lock`: frees the lock string at `key` whoever holds it. None for a foreign value;
/// else 1 freed, 0 it was free.
pub(super) fn free_lock(ctx: &mut Ctx<'_>, key: &str, fence_ttl: &str) -> Res<Option<i64>> {
    let Some(lock) = read_lock(ctx, key)? else {
        return Ok(None);
    };
    if lock.owner.is_empty() {
        return Ok(Some(0));
    }
    let token = lock.token.as_deref().unwrap_or("0");
    free_string(ctx, key, token, &lock.released, fence_ttl)?;
    Ok(Some(1))
}

/// `drop_dead_waiters`: the fair waiters whose deadline is before `now` (ms) leave.
pub(super) fn drop_dead_waiters(
    ctx: &mut Ctx<'_>,
    queue: &str,
    deadlines: &str,
    now: i64,
) -> Res<()> {
    let dead: Vec<String> = ctx
        .ks
        .zrange(deadlines)?
        .into_iter()
        .filter(|(_, deadline)| *deadline <= now as f64)
        .map(|(waiter, _)| waiter)
        .collect();
    for waiter in dead {
        ctx.ks.zrem(queue, &waiter)?;
        ctx.ks.zrem(deadlines, &waiter)?;
    }
    Ok(())
}

/// `wake_head`: after dropping the dead waiters, wakes the head of the queue, if any.
pub(super) fn wake_head(ctx: &mut Ctx<'_>, queue: &str, deadlines: &str, prefix: &str) -> Res<()> {
    let now = ctx.now_ms();
    drop_dead_waiters(ctx, queue, deadlines, now)?;
    if let Some((head, _)) = ctx.ks.zfirst(queue)? {
        ctx.publish(format!("{prefix}{head}").as_bytes());
    }
    Ok(())
}

/// `acquire_lock`: takes a mutex (a lock string) or re-enters it. Answers as `acquire.lua`.
/// (A batch reads the clock once for all its operations; here every operation of a call
/// reads the call's one clock anyway.)
pub(super) fn acquire_lock(
    ctx: &mut Ctx<'_>,
    key: &str,
    (caller, lease, expected, will_wait): (&str, &str, &str, &str),
) -> Res<Value> {
    if expected == "0" {
        // The common case, a name nobody holds: taken by one SET NX.
        let (fresh, ms) = (seed(ctx.time_us()), px(lease)?);
        if !ctx.ks.exists(key) {
            let value = format!("{caller}|1|{fresh}||").into_bytes();
            ctx.ks.set(key, value, Ttl::Px(ms));
            return Ok(bulk(fresh));
        }
    }
    let lock = match start_acquire(ctx, key, caller, number(expected)?, lease)? {
        Start::Done(answer) => return Ok(answer),
        Start::Go(lock) => lock,
    };
    if !lock.owner.is_empty() {
        return Ok(int(busy(ctx, key, &lock, will_wait)));
    }
    let token = next_token(ctx, lock.token.as_deref())?;
    let value = lock_string(caller, 1, &token, &lock.released, "");
    ctx.ks.set(key, value, Ttl::Px(px(lease)?));
    Ok(bulk(token))
}

/// `release_lock`: gives back one hold of a lock string, publishing on `channel` when it is
/// freed and someone waits. Answers as `release.lua`.
pub(super) fn release_lock(
    ctx: &mut Ctx<'_>,
    key: &str,
    (owner, expected, token, channel): (&str, &str, &str, &[u8]),
    fence_ttl: &str,
) -> Res<Value> {
    let value = ctx.ks.get(key)?;
    if let Some(value) = value.filter(|_| expected == "1") {
        // The common case: the only hold of its owner, freed without parsing the rest.
        if value.starts_with(format!("{owner}|1|{token}|").as_bytes()) {
            free_string(ctx, key, token, token, fence_ttl)?;
            if value.last() == Some(&b'1') {
                ctx.publish(channel);
            }
            return Ok(int(1));
        }
    }
    let Some((result, waiters)) = give_back(ctx, key, owner, expected, token, fence_ttl)? else {
        return Ok(foreign());
    };
    if waiters {
        ctx.publish(channel);
    }
    Ok(int(result))
}

/// The answer of an acquisition inside a batch: an error reply becomes nil (Lua's `false`).
pub(super) fn in_batch(answer: Value) -> Value {
    if is_error(&answer) {
        Value::Nil
    } else {
        answer
    }
}
