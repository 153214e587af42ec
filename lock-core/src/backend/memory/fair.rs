//! The fair lock's Lua operations in Rust: `fair_acquire`, `fair_release`, `fair_leave`,
//! `fair_inspect` and `fair_force_unlock` (each as its `.lua` file).

use redis::Value;

use super::keyspace::Ttl;
use super::prelude::{
    Start, drop_dead_waiters, free_lock, give_back, lock_string, next_token, px, read_lock,
    start_acquire, wake_head,
};
use super::script::{Args, Fail, Res, bulk_or_nil, foreign, int, number, score};
use super::server::Ctx;

/// `fair_acquire.lua`: a token, `-2 - ms` (queued or not), or 0 (lost).
pub(super) fn acquire(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (key, queue, deadlines) = (a.key(1)?, a.key(2)?, a.key(3)?);
    let (owner, lease) = (a.arg(1)?, a.arg(2)?);
    let now = ctx.now_ms();
    drop_dead_waiters(ctx, queue, deadlines, now)?;
    let lock = match start_acquire(ctx, key, owner, a.num(3)?, lease)? {
        Start::Done(answer) => return Ok(answer),
        Start::Go(lock) => lock,
    };
    let mut hint = if lock.owner.is_empty() {
        let head = ctx.ks.zfirst(queue)?.map(|(head, _)| head);
        match head.filter(|head| head != owner) {
            None => {
                let token = next_token(ctx, lock.token.as_deref())?;
                let value = lock_string(owner, 1, &token, &lock.released, "");
                ctx.ks.set(key, value, Ttl::Px(px(lease)?));
                ctx.ks.zrem(queue, owner)?;
                ctx.ks.zrem(deadlines, owner)?;
                return Ok(int(number(&token)?));
            }
            Some(head) => {
                let deadline = ctx.ks.zscore(deadlines, &head)?;
                let deadline =
                    deadline.ok_or_else(|| Fail("ERR the head has no deadline".into()))?;
                (deadline as i64).saturating_sub(now).max(1)
            }
        }
    } else {
        ctx.ks.pttl(key).max(1)
    };
    let ttl = a.num(4)?;
    if ttl > 0 {
        let arrival = ctx.time_us() as f64;
        ctx.ks.zadd(queue, arrival, owner, (true, false))?;
        ctx.ks.zadd(
            deadlines,
            score(now.saturating_add(ttl)),
            owner,
            (false, false),
        )?;
        ctx.ks.pexpire(queue, ttl.saturating_mul(2));
        ctx.ks.pexpire(deadlines, ttl.saturating_mul(2));
        hint = hint.min(ttl);
    }
    Ok(int((-2i64).saturating_sub(hint)))
}

/// `fair_release.lua`: as `release.lua`; a full release wakes the head of the queue.
pub(super) fn release(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (key, queue, deadlines) = (a.key(1)?, a.key(2)?, a.key(3)?);
    let given = give_back(ctx, key, a.arg(1)?, a.arg(2)?, a.arg(3)?, a.arg(5)?)?;
    let Some((result, _)) = given else {
        return Ok(foreign());
    };
    if result == 1 {
        wake_head(ctx, queue, deadlines, a.arg(4)?)?;
    }
    Ok(int(result))
}

/// `fair_leave.lua`: 1 if the waiter was queued; a free lock's new head is woken.
pub(super) fn leave(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (key, queue, deadlines, owner) = (a.key(1)?, a.key(2)?, a.key(3)?, a.arg(1)?);
    let removed = ctx.ks.zrem(queue, owner)?;
    ctx.ks.zrem(deadlines, owner)?;
    let free = read_lock(ctx, key)?.is_some_and(|lock| lock.owner.is_empty());
    if free && let Some((head, _)) = ctx.ks.zfirst(queue)? {
        ctx.publish(format!("{}{head}", a.arg(2)?).as_bytes());
    }
    Ok(int(i64::from(removed)))
}

/// `fair_inspect.lua`: `{pttl, value, queued, position}`.
pub(super) fn inspect(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (key, queue, deadlines, caller) = (a.key(1)?, a.key(2)?, a.key(3)?, a.arg(1)?);
    let now = ctx.now_ms() as f64;
    let (mut queued, mut position) = (0, -1);
    for (waiter, _) in ctx.ks.zrange(queue)?.into_iter().take(1000) {
        let deadline = ctx.ks.zscore(deadlines, &waiter)?;
        if deadline.is_some_and(|d| d > now) {
            if waiter == caller {
                position = queued;
            }
            queued += 1;
        }
    }
    let pttl = ctx.ks.pttl(key);
    let value = ctx.ks.get(key)?;
    Ok(Value::Array(vec![
        int(pttl),
        bulk_or_nil(value),
        int(queued),
        int(position),
    ]))
}

/// `fair_force_unlock.lua`: 1 freed (and the head woken), 0 free.
pub(super) fn force_unlock(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let (key, queue, deadlines) = (a.key(1)?, a.key(2)?, a.key(3)?);
    let Some(freed) = free_lock(ctx, key, a.arg(2)?)? else {
        return Ok(foreign());
    };
    if freed == 1 {
        wake_head(ctx, queue, deadlines, a.arg(1)?)?;
    }
    Ok(int(freed))
}
