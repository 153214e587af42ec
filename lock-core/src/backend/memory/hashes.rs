//! The hash commands, as Redis answers them: `HGET`, `HMGET`, `HSET`, `HDEL`, `HGETALL`,
//! `HINCRBY`.
//! Fields and values are kept as text (bytes that are not UTF-8 are read lossily).

use redis::Value;

use super::reply::{Fail, Res, bulk, bulk_or_nil, count, int, integer, text, wrong_arity};
use super::server::Ctx;

/// Runs the hash command `name` (upper case) with `args`; None when it is not one.
pub(super) fn run(ctx: &mut Ctx<'_>, name: &str, args: &[&[u8]]) -> Option<Res<Value>> {
    Some(match name {
        "HGET" => hget(ctx, args),
        "HMGET" => hmget(ctx, args),
        "HSET" => hset(ctx, args),
        "HDEL" => hdel(ctx, args),
        "HGETALL" => hgetall(ctx, args),
        "HINCRBY" => hincrby(ctx, args),
        _ => return None,
    })
}

fn hget(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key, field] = args else {
        return Err(wrong_arity("HGET"));
    };
    Ok(bulk_or_nil(ctx.ks.hget(&text(key), &text(field))?))
}

/// `HMGET key field…`: each field's value, or nil.
fn hmget(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key, fields @ ..] = args else {
        return Err(wrong_arity("HMGET"));
    };
    if fields.is_empty() {
        return Err(wrong_arity("HMGET"));
    }
    let key = text(key);
    let mut values = Vec::with_capacity(fields.len());
    for field in fields {
        values.push(bulk_or_nil(ctx.ks.hget(&key, &text(field))?));
    }
    Ok(Value::Array(values))
}

/// `HSET key field value…`: how many fields were new.
fn hset(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key, pairs @ ..] = args else {
        return Err(wrong_arity("HSET"));
    };
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(wrong_arity("HSET"));
    }
    let key = text(key);
    let mut added = 0;
    for pair in pairs.chunks(2) {
        let field = text(pair[0]);
        added += usize::from(ctx.ks.hget(&key, &field)?.is_none());
        ctx.ks.hset(&key, &field, text(pair[1]))?;
    }
    Ok(count(added))
}

/// `HDEL key field…`: how many fields were there. A hash left empty is gone.
fn hdel(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key, fields @ ..] = args else {
        return Err(wrong_arity("HDEL"));
    };
    if fields.is_empty() {
        return Err(wrong_arity("HDEL"));
    }
    let key = text(key);
    let mut removed = 0;
    for field in fields {
        removed += usize::from(ctx.ks.hdel(&key, &text(field))?);
    }
    Ok(count(removed))
}

/// `HGETALL key`: every field and its value, in the hash's order.
fn hgetall(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key] = args else {
        return Err(wrong_arity("HGETALL"));
    };
    let all = ctx.ks.hgetall(&text(key))?;
    Ok(Value::Array(
        all.into_iter()
            .flat_map(|(f, v)| [bulk(f), bulk(v)])
            .collect(),
    ))
}

/// `HINCRBY key field n`: the field's counter after adding `n` (a missing field counts from
/// 0).
fn hincrby(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key, field, n] = args else {
        return Err(wrong_arity("HINCRBY"));
    };
    let (key, field, n) = (text(key), text(field), integer(n)?);
    let current = match ctx.ks.hget(&key, &field)? {
        None => 0,
        Some(value) => value
            .parse::<i64>()
            .map_err(|_| Fail::new("ERR hash value is not an integer"))?,
    };
    let next = current
        .checked_add(n)
        .ok_or_else(|| Fail::new("ERR increment or decrement would overflow"))?;
    ctx.ks.hset(&key, &field, next.to_string())?;
    Ok(int(next))
}
