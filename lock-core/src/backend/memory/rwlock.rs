//! The read-write lock's Lua operations in Rust: `rw_write`, `rw_read`, `rw_read_release`,
//! `rw_read_renew`, `rw_unmark`, `rw_inspect` and `rw_force_unlock` (each as its `.lua`
//! file). A read share is a field of the readers hash: owner → `count|expiry (ms)`.

use redis::Value;

use super::keyspace::Ttl;
use super::prelude::{Start, busy, lock_string, next_token, px, read_lock, start_acquire};
use super::script::{Args, Fail, Res, bulk, bulk_or_nil, foreign, int, number};
use super::server::Ctx;

/// A read share's `count|expiry` (`'^(%d+)|(%d+)$'`); a share of another shape fails the call,
/// as Lua's arithmetic on the nil it would match fails the script.
fn share(text: &str) -> Res<(i64, i64)> {
    text.split_once('|')
        .filter(|(c, e)| all_digits(c) && all_digits(e))
        .and_then(|(c, e)| Some((c.parse().ok()?, e.parse().ok()?)))
        .ok_or_else(|| Fail(format!("ERR a read share reads {text:?}")))
}

/// A share's expiry (`'|(%d+)$'`: the digits after its last `|`), if it has one.
fn expiry(text: &str) -> Option<i64> {
    let (_, digits) = text.rsplit_once('|')?;
    all_digits(digits).then(|| digits.parse().ok()).flatten()
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `rw_write.lua`: a token, `-2 - ms` busy, -1 busy without expiry, 0 lost.
pub(super) fn write(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (key, readers, mark) = (a.key(1)?, a.key(2)?, a.key(3)?);
    let (owner, lease_text, will_wait) = (a.arg(1)?, a.arg(2)?, a.arg(4)?);
    let (now, lease) = (ctx.now_ms(), number(lease_text)?);
    let lock = match start_acquire(ctx, key, owner, a.num(3)?, lease_text)? {
        Start::Done(answer) => return Ok(answer),
        Start::Go(lock) => lock,
    };
    let wait_ms = if lock.owner.is_empty() {
        readers_wait(ctx, readers, now)?
    } else {
        let answer = busy(ctx, key, &lock, will_wait);
        if answer == -1 {
            return Ok(int(-1));
        }
        Some((-2i64).saturating_sub(answer))
    };
    if let Some(wait) = wait_ms {
        if will_wait == "1" {
            let ttl = u64::try_from(lease.min(60_000)).unwrap_or(1);
            ctx.ks
                .set(mark, owner.as_bytes().to_vec(), Ttl::Px(ttl.max(1)));
        }
        return Ok(int((-2i64).saturating_sub(wait)));
    }
    let token = next_token(ctx, lock.token.as_deref())?;
    // Readers held back by a waiting writer's mark wait for this writer's release: flag it.
    let flag = match ctx.ks.get(mark)? {
        Some(waiting) => {
            if waiting == owner.as_bytes() {
                ctx.ks.del(mark);
            }
            "1"
        }
        None => "",
    };
    let value = lock_string(owner, 1, &token, &lock.released, flag);
    ctx.ks.set(key, value, Ttl::Px(px(lease_text)?));
    Ok(int(number(&token)?))
}

/// The read shares still held, their soonest expiry's distance (ms); shares whose lease ran
/// out are dropped.
fn readers_wait(ctx: &mut Ctx<'_>, readers: &str, now: i64) -> Res<Option<i64>> {
    let mut wait: Option<i64> = None;
    for (reader, share) in ctx.ks.hgetall(readers)? {
        let expiry =
            expiry(&share).ok_or_else(|| Fail(format!("ERR a read share reads {share:?}")))?;
        if expiry <= now {
            ctx.ks.hdel(readers, &reader)?;
        } else {
            let left = expiry - now;
            wait = Some(wait.map_or(left, |w| w.min(left)));
        }
    }
    Ok(wait)
}

/// `rw_read.lua`: 1 taken, `-2 - ms` busy, -1 busy without expiry, 0 lost.
pub(super) fn read(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (key, readers, mark) = (a.key(1)?, a.key(2)?, a.key(3)?);
    let owner = a.arg(1)?;
    let (now, expected, lease) = (ctx.now_ms(), a.num(3)?, a.num(2)?);
    let mut count = 0;
    if let Some(mine) = ctx.ks.hget(readers, owner)? {
        let (c, expiry) = share(&mine)?;
        if expiry > now {
            count = c;
        }
    }
    if count == expected.saturating_add(1) {
        return Ok(int(1));
    }
    if count != expected {
        return Ok(int(0));
    }
    let Some(lock) = read_lock(ctx, key)? else {
        return Ok(foreign());
    };
    if !lock.owner.is_empty() && lock.owner != owner {
        return Ok(int(busy(ctx, key, &lock, a.arg(4)?)));
    }
    if expected == 0 && lock.owner.is_empty() {
        let waiting = ctx.ks.get(mark)?;
        if waiting.is_some_and(|w| w != owner.as_bytes()) {
            return Ok(int((-2i64).saturating_sub(ctx.ks.pttl(mark).max(1))));
        }
    }
    let share = format!("{}|{}", count.saturating_add(1), now.saturating_add(lease));
    ctx.ks.hset(readers, owner, share)?;
    if ctx.ks.pttl(readers) < lease {
        ctx.ks.pexpire(readers, lease);
    }
    Ok(int(1))
}

/// `rw_read_release.lua`: 1 released, 2 one share given back, 3 a repeat, 0 not held.
pub(super) fn read_release(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (readers, owner, channel) = (a.key(1)?, a.arg(1)?, a.raw(3)?);
    let (now, expected) = (ctx.now_ms(), a.num(2)?);
    let mine = ctx.ks.hget(readers, owner)?;
    let (count, expiry) = match &mine {
        Some(mine) => share(mine)?,
        None => (0, 0),
    };
    if count == expected && expiry > now {
        if count > 1 {
            ctx.ks.hset(
                readers,
                owner,
                format!("{}|{expiry}", count.saturating_sub(1)),
            )?;
            return Ok(int(2));
        }
        ctx.ks.hdel(readers, owner)?;
        ctx.publish(channel);
        return Ok(int(1));
    }
    if count >= 1 && count == expected.saturating_sub(1) {
        return Ok(int(3));
    }
    if mine.is_some() {
        ctx.ks.hdel(readers, owner)?;
        ctx.publish(channel);
    }
    Ok(int(0))
}

/// `rw_read_renew.lua`: 1 where the share was still held and was renewed.
pub(super) fn read_renew(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (now, lease) = (ctx.now_ms(), a.num(1)?);
    let mut out = Vec::with_capacity(a.key_count());
    for i in 1..=a.key_count() {
        let (key, owner) = (a.key(i)?, a.arg(i + 1)?);
        // `redis.pcall`: a key of another type is not held.
        let held = match ctx.ks.hget(key, owner) {
            Ok(Some(mine)) => share(&mine).ok().filter(|(_, e)| *e > now),
            _ => None,
        };
        if let Some((count, _)) = held {
            ctx.ks
                .hset(key, owner, format!("{count}|{}", now.saturating_add(lease)))?;
            if ctx.ks.pttl(key) < lease {
                ctx.ks.pexpire(key, lease);
            }
        }
        out.push(int(i64::from(held.is_some())));
    }
    Ok(Value::Array(out))
}

/// `rw_unmark.lua`: 1 if the mark was the caller's and is gone.
pub(super) fn unmark(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let mark = a.key(1)?;
    if ctx.ks.get(mark)?.as_deref() == Some(a.raw(1)?) {
        ctx.ks.del(mark);
        ctx.publish(a.raw(2)?);
        return Ok(int(1));
    }
    Ok(int(0))
}

/// `rw_inspect.lua`: `{pttl, value, mark_pttl, now_ms, reader_1, share_1, ...}`.
pub(super) fn inspect(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (key, readers, mark) = (a.key(1)?, a.key(2)?, a.key(3)?);
    let pttl = ctx.ks.pttl(key);
    let value = ctx.ks.get(key)?;
    let mut out = vec![
        int(pttl),
        bulk_or_nil(value),
        int(ctx.ks.pttl(mark)),
        int(ctx.now_ms()),
    ];
    for (reader, share) in ctx.ks.hgetall(readers)? {
        out.push(bulk(reader));
        out.push(bulk(share));
    }
    Ok(Value::Array(out))
}

/// `rw_force_unlock.lua`: 1 if the writer or a live read share was freed, 0 if nothing was
/// held.
pub(super) fn force_unlock(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (key, readers) = (a.key(1)?, a.key(2)?);
    let Some(lock) = read_lock(ctx, key)? else {
        return Ok(foreign());
    };
    let mut freed = false;
    if !lock.owner.is_empty() {
        let token = lock.token.as_deref().unwrap_or("0");
        let value = lock_string("", 0, token, &lock.released, "");
        ctx.ks.set(key, value, Ttl::Px(px(a.arg(2)?)?));
        freed = true;
    }
    let now = ctx.now_ms();
    let shares = ctx.ks.hgetall(readers)?;
    freed |= shares
        .iter()
        .any(|(_, share)| expiry(share).is_some_and(|e| e > now));
    if !shares.is_empty() {
        ctx.ks.del(readers);
    }
    if freed {
        ctx.publish(a.raw(1)?);
    }
    Ok(int(i64::from(freed)))
}
