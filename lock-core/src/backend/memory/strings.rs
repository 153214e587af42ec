//! The string commands, as Redis answers them: `GET`, `GETDEL`, `SET` (`NX`/`XX`/`IFEQ`,
//! `GET`, `PX`/`EX`/`KEEPTTL`), the counters `INCR`, `DECR`, `INCRBY`, `DECRBY`, `MGET`,
//! `MSET`, `MSETNX` and Valkey 9's `DELIFEQ`.

use redis::Value;

use super::keyspace::Ttl;
use super::reply::{
    Fail, Res, bulk_or_nil, count, int, integer, not_integer, syntax, text, wrong_arity,
};
use super::server::Ctx;

/// Runs the string command `name` (upper case) with `args`; None when it is not one.
pub(super) fn run(ctx: &mut Ctx<'_>, name: &str, args: &[&[u8]]) -> Option<Res<Value>> {
    Some(match name {
        "GET" => get(ctx, args),
        "SET" => set(ctx, args),
        "GETDEL" => getdel(ctx, args),
        "INCR" | "DECR" | "INCRBY" | "DECRBY" => incr(ctx, name, args),
        "MGET" => mget(ctx, args),
        "MSET" => mset(ctx, args),
        "MSETNX" => msetnx(ctx, args),
        "DELIFEQ" => delifeq(ctx, args),
        _ => return None,
    })
}

fn get(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key] = args else {
        return Err(wrong_arity("GET"));
    };
    Ok(bulk_or_nil(ctx.ks.get(&text(key))?))
}

/// When a `SET` writes.
enum Condition<'a> {
    Always,
    Missing,
    Present,
    Equal(&'a [u8]),
}

/// A `SET`'s time to live in ms (`PX`, or `EX` × 1000): positive.
fn expire_time(arg: &[u8], scale: u64) -> Res<u64> {
    let invalid = || Fail::new("ERR invalid expire time in 'set' command");
    let n: i64 = std::str::from_utf8(arg)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(not_integer)?;
    match u64::try_from(n) {
        Ok(n) if n > 0 => n.checked_mul(scale).ok_or_else(invalid),
        _ => Err(invalid()),
    }
}

/// `SET key value [NX | XX | IFEQ v] [GET] [PX ms | EX s | KEEPTTL]`.
fn set(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key, value, options @ ..] = args else {
        return Err(wrong_arity("SET"));
    };
    let key = text(key);
    let (mut condition, mut get, mut ttl) = (Condition::Always, false, None);
    let mut options = options.iter();
    while let Some(option) = options.next() {
        let option = String::from_utf8_lossy(option).to_ascii_uppercase();
        let mut operand = || options.next().copied().ok_or_else(syntax);
        let new_condition = match option.as_str() {
            "NX" => Some(Condition::Missing),
            "XX" => Some(Condition::Present),
            "IFEQ" => Some(Condition::Equal(operand()?)),
            "GET" => {
                get = true;
                None
            }
            "KEEPTTL" | "PX" | "EX" if ttl.is_some() => return Err(syntax()),
            "KEEPTTL" => {
                ttl = Some(Ttl::Keep);
                None
            }
            "PX" => {
                ttl = Some(Ttl::Px(expire_time(operand()?, 1)?));
                None
            }
            "EX" => {
                ttl = Some(Ttl::Px(expire_time(operand()?, 1000)?));
                None
            }
            _ => return Err(syntax()),
        };
        if let Some(new) = new_condition {
            if !matches!(condition, Condition::Always) {
                return Err(syntax());
            }
            condition = new;
        }
    }
    let exists = ctx.ks.exists(&key);
    let old = match ctx.ks.get(&key) {
        Ok(old) => old,
        Err(wrong) if get || matches!(condition, Condition::Equal(_)) => return Err(wrong.into()),
        Err(_) => None,
    };
    let write = match condition {
        Condition::Always => true,
        Condition::Missing => !exists,
        Condition::Present => exists,
        Condition::Equal(expected) => old.as_deref() == Some(expected),
    };
    if write {
        ctx.ks
            .set(&key, value.to_vec(), ttl.unwrap_or(Ttl::Forever));
    }
    Ok(match (get, write) {
        (true, _) => bulk_or_nil(old),
        (false, true) => Value::Okay,
        (false, false) => Value::Nil,
    })
}

/// `GETDEL key`: the string, and the key deleted (nil for a missing key).
fn getdel(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key] = args else {
        return Err(wrong_arity("GETDEL"));
    };
    let key = text(key);
    let value = ctx.ks.get(&key)?;
    if value.is_some() {
        ctx.ks.del(&key);
    }
    Ok(bulk_or_nil(value))
}

/// `INCR key`, `DECR key`, `INCRBY key n`, `DECRBY key n`: the counter after the step; a
/// missing key counts from 0 and the key keeps its time to live.
fn incr(ctx: &mut Ctx<'_>, name: &str, args: &[&[u8]]) -> Res<Value> {
    let (key, step) = match (name, args) {
        ("INCR", [key]) => (key, 1),
        ("DECR", [key]) => (key, -1),
        ("INCRBY", [key, n]) => (key, integer(n)?),
        ("DECRBY", [key, n]) => (
            key,
            integer(n)?
                .checked_neg()
                .ok_or_else(|| Fail::new("ERR decrement would overflow"))?,
        ),
        _ => return Err(wrong_arity(name)),
    };
    let key = text(key);
    let current = match ctx.ks.get(&key)? {
        None => 0,
        Some(value) => std::str::from_utf8(&value)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
            .ok_or_else(not_integer)?,
    };
    let next = current
        .checked_add(step)
        .ok_or_else(|| Fail::new("ERR increment or decrement would overflow"))?;
    ctx.ks.set(&key, next.to_string().into_bytes(), Ttl::Keep);
    Ok(int(next))
}

/// `MGET`: each key's string, nil for a missing key or one of another type.
fn mget(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    if args.is_empty() {
        return Err(wrong_arity("MGET"));
    }
    let values = args
        .iter()
        .map(|k| bulk_or_nil(ctx.ks.get(&text(k)).unwrap_or(None)))
        .collect();
    Ok(Value::Array(values))
}

/// `MSET key value …`: every pair written, each key without a time to live.
fn mset(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    if args.is_empty() || !args.len().is_multiple_of(2) {
        return Err(wrong_arity("MSET"));
    }
    for pair in args.chunks(2) {
        ctx.ks.set(&text(pair[0]), pair[1].to_vec(), Ttl::Forever);
    }
    Ok(Value::Okay)
}

/// `MSETNX key value …`: all written (1) when no key exists, else none (0).
fn msetnx(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    if args.is_empty() || !args.len().is_multiple_of(2) {
        return Err(wrong_arity("MSETNX"));
    }
    let free = args.chunks(2).all(|pair| !ctx.ks.exists(&text(pair[0])));
    if free {
        for pair in args.chunks(2) {
            ctx.ks.set(&text(pair[0]), pair[1].to_vec(), Ttl::Forever);
        }
    }
    Ok(int(i64::from(free)))
}

/// `DELIFEQ key value`: deletes the key when it holds `value`; whether it did.
fn delifeq(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key, value] = args else {
        return Err(wrong_arity("DELIFEQ"));
    };
    let key = text(key);
    let equal = ctx.ks.get(&key)?.is_some_and(|v| v == *value);
    Ok(count(usize::from(equal && ctx.ks.del(&key))))
}
