//! The mutex's Lua operations in Rust: `acquire`, `release`, `release_keep`, `batch`,
//! `renew`, `force_unlock`, `inspect` and `multi_acquire` (each as its `.lua` file; the
//! fair lock's and the writer's lock strings use the first four too).

use redis::Value;

use super::keyspace::Ttl;
use super::prelude::{
    Lock, acquire_lock, flag_waiters, free_lock, in_batch, lock_string, next_token, parse_lock, px,
    read_lock, release_lock, take_again,
};
use super::script::{Args, Res, bulk_or_nil, foreign, int, number};
use super::server::Ctx;

/// `acquire.lua`.
pub(super) fn acquire(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let args = (a.arg(1)?, a.arg(2)?, a.arg(3)?, a.arg(4)?);
    acquire_lock(ctx, a.key(1)?, args)
}

/// `release.lua`.
pub(super) fn release(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let args = (a.arg(1)?, a.arg(2)?, a.arg(3)?, a.raw(4)?);
    release_lock(ctx, a.key(1)?, args, a.arg(5)?)
}

/// `release_keep.lua`.
pub(super) fn release_keep(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let key = a.key(1)?;
    let Some(lock) = parse_lock(ctx.ks.get(key)?) else {
        return Ok(foreign());
    };
    if lock.owner != a.arg(1)? {
        return Ok(int(0));
    }
    ctx.ks.pexpire(key, a.num(2)?);
    Ok(int(1))
}

/// `batch.lua`: each operation answers as `acquire.lua` or `release.lua`, nil for a foreign
/// value.
pub(super) fn batch(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let fence_ttl = a.arg(1)?;
    let mut out = Vec::with_capacity(a.key_count());
    for i in 1..=a.key_count() {
        let (key, at) = (a.key(i)?, 5 * i - 3);
        let answer = if a.arg(at)? == "a" {
            let args = (
                a.arg(at + 1)?,
                a.arg(at + 2)?,
                a.arg(at + 3)?,
                a.arg(at + 4)?,
            );
            acquire_lock(ctx, key, args)?
        } else {
            let args = (
                a.arg(at + 1)?,
                a.arg(at + 2)?,
                a.arg(at + 3)?,
                a.raw(at + 4)?,
            );
            release_lock(ctx, key, args, fence_ttl)?
        };
        out.push(in_batch(answer));
    }
    Ok(Value::Array(out))
}

/// `renew.lua`: 1 where the owner still held the lock string and its lease was reset.
pub(super) fn renew(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let lease = a.num(1)?;
    let mut out = Vec::with_capacity(a.key_count());
    for i in 1..=a.key_count() {
        let key = a.key(i)?;
        let prefix = format!("{}|", a.arg(i + 1)?);
        // `redis.pcall`: a key of another type is not held rather than an error.
        let held = matches!(ctx.ks.get(key), Ok(Some(v)) if v.starts_with(prefix.as_bytes()));
        if held {
            ctx.ks.pexpire(key, lease);
        }
        out.push(int(i64::from(held)));
    }
    Ok(Value::Array(out))
}

/// `force_unlock.lua`.
pub(super) fn force_unlock(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let Some(freed) = free_lock(ctx, a.key(1)?, a.arg(2)?)? else {
        return Ok(foreign());
    };
    if freed == 1 {
        ctx.publish(a.raw(1)?);
    }
    Ok(int(freed))
}

/// `inspect.lua`: `{pttl, value}`.
pub(super) fn inspect(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let key = a.key(1)?;
    let pttl = ctx.ks.pttl(key);
    let value = ctx.ks.get(key)?;
    Ok(Value::Array(vec![int(pttl), bulk_or_nil(value)]))
}

/// What `multi_acquire.lua` plans for one lock.
enum Plan {
    /// Free: taken fresh, from its counter (None: no key).
    Fresh(Lock),
    /// Held by the owner with the expected count: re-entered.
    Again(Lock),
    /// Held by the owner with one more: a repeat of this call.
    Applied(Option<String>),
}

/// `multi_acquire.lua`: `{1, tokens...}`, `{0, i, pttl}` or `{3, i}`; all or none.
pub(super) fn multi_acquire(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let owner = a.arg(1)?;
    let mut plan = Vec::with_capacity(a.key_count());
    for i in 1..=a.key_count() {
        let key = a.key(i)?;
        let Some(lock) = read_lock(ctx, key)? else {
            return Ok(foreign());
        };
        let expected = a.num(3 + i)?;
        let index = i64::try_from(i).unwrap_or(i64::MAX);
        if lock.owner.is_empty() {
            if expected != 0 {
                return Ok(table(&[3, index]));
            }
            plan.push(Plan::Fresh(lock));
        } else if lock.owner != owner {
            if expected != 0 {
                return Ok(table(&[3, index]));
            }
            flag_waiters(ctx, key, &lock, a.arg(3)?);
            return Ok(table(&[0, index, ctx.ks.pttl(key)]));
        } else if lock.count == expected {
            plan.push(Plan::Again(lock));
        } else if lock.count == expected.saturating_add(1) {
            plan.push(Plan::Applied(lock.token));
        } else {
            return Ok(table(&[3, index]));
        }
    }
    take_planned(ctx, a, owner, plan)
}

/// The second half of `multi_acquire.lua`: a repeat answers its tokens; otherwise every
/// lock is taken.
fn take_planned(ctx: &mut Ctx<'_>, a: &Args<'_>, owner: &str, plan: Vec<Plan>) -> Res<Value> {
    let applied = plan.iter().any(|p| matches!(p, Plan::Applied(_)));
    let pending = plan.iter().any(|p| !matches!(p, Plan::Applied(_)));
    let mut out = vec![1];
    if applied {
        if pending {
            // Some applied and some not: not a repeat of this call.
            let first = plan.iter().position(|p| matches!(p, Plan::Applied(_)));
            let index = first.map_or(1, |i| i + 1);
            return Ok(table(&[3, i64::try_from(index).unwrap_or(i64::MAX)]));
        }
        for p in &plan {
            if let Plan::Applied(token) = p {
                out.push(number(token.as_deref().unwrap_or("0"))?);
            }
        }
        return Ok(table(&out));
    }
    let lease = a.arg(2)?;
    for (i, p) in plan.iter().enumerate() {
        let key = a.key(i + 1)?;
        let token = match p {
            Plan::Fresh(lock) => {
                let token = next_token(ctx, lock.token.as_deref())?;
                let value = lock_string(owner, 1, &token, &lock.released, "");
                ctx.ks.set(key, value, Ttl::Px(px(lease)?));
                number(&token)?
            }
            Plan::Again(lock) => take_again(ctx, key, lock, lock.count, lease)?,
            Plan::Applied(_) => 0,
        };
        out.push(token);
    }
    Ok(table(&out))
}

/// A table of integers.
pub(super) fn table(items: &[i64]) -> Value {
    Value::Array(items.iter().map(|n| int(*n)).collect())
}
