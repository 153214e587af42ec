//! The sorted-set commands, as Redis answers them: `ZADD` (`NX`/`XX`, `CH`), `ZCARD`,
//! `ZSCORE`, `ZRANGE` by index (`WITHSCORES`), `ZRANGEBYSCORE` and `ZREMRANGEBYSCORE` (bounds
//! with `(` for exclusive, `-inf`/`+inf`), `ZREM`.

use redis::Value;

use super::keyspace::score_text;
use super::reply::{Fail, Res, bulk, bulk_or_nil, count, integer, syntax, text, wrong_arity};
use super::server::Ctx;

/// Runs the sorted-set command `name` (upper case) with `args`; None when it is not one.
pub(super) fn run(ctx: &mut Ctx<'_>, name: &str, args: &[&[u8]]) -> Option<Res<Value>> {
    Some(match name {
        "ZADD" => zadd(ctx, args),
        "ZCARD" => zcard(ctx, args),
        "ZSCORE" => zscore(ctx, args),
        "ZRANGE" => zrange(ctx, args),
        "ZRANGEBYSCORE" => by_score(ctx, args, false),
        "ZREMRANGEBYSCORE" => by_score(ctx, args, true),
        "ZREM" => zrem(ctx, args),
        _ => return None,
    })
}

/// A score argument (`strtod`'s reading: `inf`, `-inf`, `+inf` too); never NaN.
fn score(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    let score = match text.to_ascii_lowercase().as_str() {
        "inf" | "+inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        t if t.contains("inf") || t.contains("nan") => return None,
        t => t.parse().ok()?,
    };
    Some(score)
}

/// `ZADD key [NX | XX] [CH] score member …`: how many members were added (or changed, with
/// `CH`).
fn zadd(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key, rest @ ..] = args else {
        return Err(wrong_arity("ZADD"));
    };
    let (mut nx, mut xx, mut ch) = (false, false, false);
    let mut rest = rest;
    while let Some((option, more)) = rest.split_first() {
        match String::from_utf8_lossy(option)
            .to_ascii_uppercase()
            .as_str()
        {
            "NX" => nx = true,
            "XX" => xx = true,
            "CH" => ch = true,
            _ => break,
        }
        rest = more;
    }
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(syntax());
    }
    if nx && xx {
        return Err(Fail::new(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    let mut pairs = Vec::with_capacity(rest.len() / 2);
    for pair in rest.chunks(2) {
        let score = score(pair[0]).ok_or_else(|| Fail::new("ERR value is not a valid float"))?;
        pairs.push((score, text(pair[1])));
    }
    let key = text(key);
    let mut counted = 0;
    for (score, member) in pairs {
        let (added, changed) = ctx.ks.zadd(&key, score, &member, (nx, xx))?;
        counted += usize::from(if ch { changed } else { added });
    }
    Ok(count(counted))
}

fn zcard(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key] = args else {
        return Err(wrong_arity("ZCARD"));
    };
    Ok(count(ctx.ks.zcard(&text(key))?))
}

fn zscore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key, member] = args else {
        return Err(wrong_arity("ZSCORE"));
    };
    let score = ctx.ks.zscore(&text(key), &text(member))?;
    Ok(bulk_or_nil(score.map(score_text)))
}

/// Members (and their scores, `WITHSCORES`) as a reply.
fn members(all: Vec<(String, f64)>, with_scores: bool) -> Value {
    Value::Array(
        all.into_iter()
            .flat_map(|(m, s)| {
                let score = with_scores.then(|| bulk(score_text(s)));
                std::iter::once(bulk(m)).chain(score)
            })
            .collect(),
    )
}

/// Whether the remaining arguments are `WITHSCORES` (true), nothing (false), or an error.
fn with_scores(rest: &[&[u8]]) -> Res<bool> {
    match rest {
        [] => Ok(false),
        [w] if w.eq_ignore_ascii_case(b"WITHSCORES") => Ok(true),
        _ => Err(syntax()),
    }
}

/// `ZRANGE key start stop [WITHSCORES]`, by index (negative from the end).
fn zrange(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key, start, stop, rest @ ..] = args else {
        return Err(wrong_arity("ZRANGE"));
    };
    let (start, stop, with_scores) = (integer(start)?, integer(stop)?, with_scores(rest)?);
    let all = ctx.ks.zrange(&text(key))?;
    let len = i64::try_from(all.len()).unwrap_or(i64::MAX);
    let from = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let to = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    if from > to || from >= len {
        return Ok(Value::Array(Vec::new()));
    }
    let (from, to) = (
        usize::try_from(from).unwrap_or(0),
        usize::try_from(to).unwrap_or(0),
    );
    let picked = all.into_iter().skip(from).take(to - from + 1).collect();
    Ok(members(picked, with_scores))
}

/// A score bound of `ZRANGEBYSCORE`: the score, and whether it is exclusive (`(`).
fn bound(arg: &[u8]) -> Res<(f64, bool)> {
    let invalid = || Fail::new("ERR min or max is not a float");
    match arg.strip_prefix(b"(") {
        Some(rest) => Ok((score(rest).ok_or_else(invalid)?, true)),
        None => Ok((score(arg).ok_or_else(invalid)?, false)),
    }
}

/// `ZRANGEBYSCORE key min max [WITHSCORES]`, or (`remove`) `ZREMRANGEBYSCORE key min max`:
/// the members in the range, or how many went (a set left empty is gone).
fn by_score(ctx: &mut Ctx<'_>, args: &[&[u8]], remove: bool) -> Res<Value> {
    let name = if remove {
        "ZREMRANGEBYSCORE"
    } else {
        "ZRANGEBYSCORE"
    };
    let [key, min, max, rest @ ..] = args else {
        return Err(wrong_arity(name));
    };
    let ((min, min_ex), (max, max_ex)) = (bound(min)?, bound(max)?);
    let with_scores = match remove {
        true if !rest.is_empty() => return Err(wrong_arity(name)),
        true => false,
        false => with_scores(rest)?,
    };
    let key = text(key);
    let inside = |s: f64| {
        (if min_ex { s > min } else { s >= min }) && (if max_ex { s < max } else { s <= max })
    };
    let picked: Vec<(String, f64)> = ctx
        .ks
        .zrange(&key)?
        .into_iter()
        .filter(|(_, s)| inside(*s))
        .collect();
    if !remove {
        return Ok(members(picked, with_scores));
    }
    for (member, _) in &picked {
        ctx.ks.zrem(&key, member)?;
    }
    Ok(count(picked.len()))
}

/// `ZREM key member…`: how many were there. A set left empty is gone.
fn zrem(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let [key, members @ ..] = args else {
        return Err(wrong_arity("ZREM"));
    };
    if members.is_empty() {
        return Err(wrong_arity("ZREM"));
    }
    let key = text(key);
    let mut removed = 0;
    for member in members {
        removed += usize::from(ctx.ks.zrem(&key, &text(member))?);
    }
    Ok(count(removed))
}
