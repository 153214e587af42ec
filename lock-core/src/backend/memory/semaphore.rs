//! The semaphore's Lua operations in Rust: `sem_acquire`, `sem_release`, `sem_renew`,
//! `sem_inspect` and `sem_force_unlock` (each as its `.lua` file). Permits are members
//! `<owner>:<k>` of a sorted set scored by their expiry (server ms).

use redis::Value;

use super::keyspace::Ttl;
use super::mutex::table;
use super::prelude::px;
use super::script::{Args, Fail, Res, bulk, bulk_or_nil, int, score, score_text};
use super::server::Ctx;

/// The most permits a group may have here: the largest semaphore's size (`Semaphore::MAX_SIZE`;
/// the engine sends at most 1,000). More fails the call instead of looping for ever, where
/// Redis would run the script until its time limit.
const MAX_PERMITS: i64 = 100_000;

/// A group's permit count, `ARGV[i]`.
fn permits(a: &Args<'_>, i: usize) -> Res<i64> {
    match a.num(i)? {
        n if n > MAX_PERMITS => Err(Fail(format!("ERR {n} permits in one group"))),
        n => Ok(n),
    }
}

/// `sem_acquire.lua`: `{1}` taken, `{0, 1, ms}` not enough permits, `{2, recorded}` another
/// size recorded.
pub(super) fn acquire(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (set, size_key, owner) = (a.key(1)?, a.key(2)?, a.arg(1)?);
    let (now, n, size, lease) = (ctx.now_ms(), permits(a, 2)?, a.num(3)?, a.num(4)?);
    let first = ctx.ks.zscore(set, &format!("{owner}:1"))?;
    if first.is_some_and(|s| s > now as f64) {
        return Ok(table(&[1]));
    }
    ctx.ks.zremrange_upto(set, now as f64)?;
    let held = i64::try_from(ctx.ks.zcard(set)?).unwrap_or(i64::MAX);
    if held > 0
        && let Some(recorded) = ctx.ks.get(size_key)?
    {
        let recorded = std::str::from_utf8(&recorded)
            .ok()
            .and_then(|r| r.parse::<i64>().ok());
        if recorded != Some(size) {
            // `tonumber` of something else is nil, which ends the table.
            return Ok(table(&recorded.map_or(vec![2], |r| vec![2, r])));
        }
    }
    if held.saturating_add(n) > size {
        let oldest = ctx.ks.zfirst(set)?;
        let Some((_, expiry)) = oldest else {
            return Err(Fail(
                "ERR more permits wanted than the semaphore has".to_owned(),
            ));
        };
        return Ok(table(&[0, 1, (expiry as i64).saturating_sub(now).max(1)]));
    }
    let expiry = score(now.saturating_add(lease));
    for k in 1..=n {
        ctx.ks
            .zadd(set, expiry, &format!("{owner}:{k}"), (false, false))?;
    }
    if ctx.ks.pttl(set) < lease {
        ctx.ks.pexpire(set, lease);
    }
    let ttl = px(&ctx.ks.pttl(set).to_string())?;
    ctx.ks.set(size_key, a.raw(3)?.to_vec(), Ttl::Px(ttl));
    Ok(table(&[1]))
}

/// `sem_release.lua`: how many of the group's permits were still held until now.
pub(super) fn release(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (set, size_key, owner) = (a.key(1)?, a.key(2)?, a.arg(1)?);
    let now = ctx.now_ms() as f64;
    let (mut valid, mut removed) = (0, 0);
    for k in 1..=permits(a, 2)? {
        let member = format!("{owner}:{k}");
        if let Some(score) = ctx.ks.zscore(set, &member)? {
            if score > now {
                valid += 1;
            }
            removed += i64::from(ctx.ks.zrem(set, &member)?);
        }
    }
    if removed > 0 {
        if !ctx.ks.exists(set) {
            ctx.ks.del(size_key);
        }
        ctx.publish(a.raw(3)?);
    }
    Ok(int(valid))
}

/// `sem_renew.lua`: 1 where every permit of the group was still held and was renewed.
pub(super) fn renew(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (now, lease) = (ctx.now_ms(), a.num(1)?);
    let expiry = score(now.saturating_add(lease));
    let mut out = Vec::with_capacity(a.key_count() / 2);
    for i in 1..=a.key_count() / 2 {
        let (set, size_key) = (a.key(2 * i - 1)?, a.key(2 * i)?);
        let (owner, n) = (a.arg(2 * i)?, permits(a, 2 * i + 1)?);
        // `redis.pcall`: a key of another type is not held.
        let held = (1..=n).all(|k| {
            matches!(ctx.ks.zscore(set, &format!("{owner}:{k}")), Ok(Some(s)) if s > now as f64)
        });
        if held {
            for k in 1..=n {
                ctx.ks
                    .zadd(set, expiry, &format!("{owner}:{k}"), (false, true))?;
            }
            if ctx.ks.pttl(set) < lease {
                ctx.ks.pexpire(set, lease);
            }
            let pttl = ctx.ks.pttl(set);
            ctx.ks.pexpire(size_key, pttl);
        }
        out.push(int(i64::from(held)));
    }
    Ok(Value::Array(out))
}

/// `sem_inspect.lua`: `{now_ms, size, permit_1, expiry_1, ...}`.
pub(super) fn inspect(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (set, size_key) = (a.key(1)?, a.key(2)?);
    let mut out = vec![int(ctx.now_ms()), bulk_or_nil(ctx.ks.get(size_key)?)];
    for (permit, expiry) in ctx.ks.zrange(set)? {
        out.push(bulk(permit));
        out.push(bulk(score_text(expiry)));
    }
    Ok(Value::Array(out))
}

/// `sem_force_unlock.lua`: 1 if a live permit was freed, 0 if none was held.
pub(super) fn force_unlock(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (set, size_key) = (a.key(1)?, a.key(2)?);
    let now = ctx.now_ms() as f64;
    ctx.ks.zremrange_upto(set, now)?;
    let held = ctx.ks.zcard(set)?;
    ctx.ks.del(set);
    ctx.ks.del(size_key);
    if held > 0 {
        ctx.publish(a.raw(1)?);
        return Ok(int(1));
    }
    Ok(int(0))
}
