//! What an application sends through [`Connection`](crate::Connection) for
//! [`fenced`](crate::fenced), as the in-memory server answers it: the hash commands `HGET`,
//! `HMGET` and `HSET`, and `EVALSHA` of [`fenced::set`](crate::fenced::set)'s one script, run by
//! its Rust twin (known by its SHA; any other is `NOSCRIPT`, and there is no Lua to load one).
//! Hash values are kept as text: a value that is not UTF-8 is refused.

use redis::Value;

use super::script::{Fail, Res, bulk_or_nil, int};
use super::server::Ctx;

/// `EVALSHA sha 1 key value token`: fenced's set when `sha` is its script's.
pub(super) fn evalsha(ctx: &mut Ctx<'_>, rest: &[&[u8]]) -> Res<Value> {
    let sha = rest.first().copied().unwrap_or_default();
    if !sha.eq_ignore_ascii_case(crate::fenced::set_script_hash().as_bytes()) {
        return Err(Fail(
            "NOSCRIPT the in-memory server runs only lock-core's own scripts".to_owned(),
        ));
    }
    let [_, keys, key, value, token] = rest else {
        return Err(Fail(
            "ERR wrong number of arguments for fenced set".to_owned(),
        ));
    };
    if *keys != b"1" {
        return Err(Fail("ERR fenced set takes one key".to_owned()));
    }
    let (key, value, token) = (text(key)?, text(value)?, text(token)?);
    let number = |s: &str| s.parse::<f64>().ok();
    if let Some(stored) = ctx.ks.hget(&key, "fence")?
        && number(&stored) > number(&token)
    {
        return Ok(Value::BulkString(stored.into_bytes()));
    }
    ctx.ks.hset(&key, "value", value)?;
    ctx.ks.hset(&key, "fence", token)?;
    Ok(int(0))
}

/// `HGET key field` and `HMGET key field…`: each field's value, or nil.
pub(super) fn hget(ctx: &mut Ctx<'_>, many: bool, rest: &[&[u8]]) -> Res<Value> {
    let Some((key, fields)) = rest.split_first().filter(|(_, f)| !f.is_empty()) else {
        return Err(Fail(
            "ERR wrong number of arguments for 'hget' command".to_owned(),
        ));
    };
    let key = text(key)?;
    let mut values = Vec::with_capacity(fields.len());
    for field in fields {
        values.push(bulk_or_nil(ctx.ks.hget(&key, &text(field)?)?));
    }
    Ok(match many {
        true => Value::Array(values),
        false => values.swap_remove(0),
    })
}

/// `HSET key field value…`: how many fields were new.
pub(super) fn hset(ctx: &mut Ctx<'_>, rest: &[&[u8]]) -> Res<Value> {
    let Some((key, pairs)) = rest
        .split_first()
        .filter(|(_, p)| p.len() >= 2 && p.len() % 2 == 0)
    else {
        return Err(Fail(
            "ERR wrong number of arguments for 'hset' command".to_owned(),
        ));
    };
    let key = text(key)?;
    let mut added = 0;
    for pair in pairs.chunks(2) {
        let field = text(pair[0])?;
        added += i64::from(ctx.ks.hget(&key, &field)?.is_none());
        ctx.ks.hset(&key, &field, text(pair[1])?)?;
    }
    Ok(int(added))
}

fn text(bytes: &[u8]) -> Res<String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        Fail("ERR the in-memory server keeps keys and hash values as UTF-8 text".to_owned())
    })
}
