//! The plain commands the client sends besides the scripts, as the in-memory server answers
//! them: the native mutex protocol's (`SET` with `NX`/`XX`/`IFEQ`/`GET`/`PX`/`EX`/`KEEPTTL`,
//! `INCR`, `PTTL`, `GET`, `MGET`, `MSETNX`, `DEL`, `DELIFEQ`, `PUBLISH`/`SPUBLISH`), the owner description's
//! (`SET … PX`, `GET`), an application's fenced writes (`fenced`: `EVALSHA` of its script,
//! `HGET`, `HMGET`, `HSET`), and what is asked at connect (`INFO server`, `COMMAND INFO`, `TIME`,
//! `CONFIG GET maxmemory-policy`, `PING`). Anything else is an unknown command.

use redis::Value;

use super::fenced;
use super::keyspace::Ttl;
use super::prelude::px;
use super::script::{Fail, Res, bulk, bulk_or_nil, error_value, int};
use super::server::Ctx;

/// The commands this server has, as `COMMAND INFO` reports them. `WAIT` is not among them:
/// there are no replicas.
const KNOWN: &[&str] = &[
    "COMMAND",
    "CONFIG",
    "DEL",
    "DELIFEQ",
    "EVALSHA",
    "EXISTS",
    "GET",
    "HGET",
    "HMGET",
    "HSET",
    "INCR",
    "INFO",
    "MGET",
    "MSETNX",
    "PEXPIRE",
    "PING",
    "PTTL",
    "PUBLISH",
    "SET",
    "SPUBLISH",
    "SSUBSCRIBE",
    "SUBSCRIBE",
    "TIME",
];

/// What the server says it is (`INFO server`): the name `lock-core-memory` and this crate's
/// version.
fn info() -> String {
    format!(
        "# Server\r\nredis_version:{}\r\nserver_name:lock-core-memory\r\nredis_mode:standalone\r\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// A pipeline's (or a `MULTI`/`EXEC`'s: the call is atomic either way) replies, one per
/// command; a command that fails has its error in its place.
pub(super) fn pipeline(ctx: &mut Ctx<'_>, pipe: &redis::Pipeline) -> Value {
    Value::Array(pipe.cmd_iter().map(|cmd| command(ctx, cmd)).collect())
}

/// One command's reply (an error value when it fails).
pub(super) fn command(ctx: &mut Ctx<'_>, cmd: &redis::Cmd) -> Value {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        })
        .collect();
    run(ctx, &args).unwrap_or_else(|Fail(line)| error_value(&line))
}

fn run(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Res<Value> {
    let Some((name, rest)) = args.split_first() else {
        return Err(Fail("ERR empty command".to_owned()));
    };
    let name = String::from_utf8_lossy(name).to_ascii_uppercase();
    let key = |i: usize| -> Res<String> {
        rest.get(i)
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .ok_or_else(|| wrong_arity(&name))
    };
    Ok(match name.as_str() {
        "SET" => return set(ctx, &key(0)?, rest),
        "GET" => bulk_or_nil(ctx.ks.get(&key(0)?)?),
        "DEL" | "EXISTS" => {
            let del = name == "DEL";
            let keys = rest.iter().map(|k| String::from_utf8_lossy(k));
            let count = keys
                .filter(|k| if del { ctx.ks.del(k) } else { ctx.ks.exists(k) })
                .count();
            int(i64::try_from(count).unwrap_or(i64::MAX))
        }
        "INCR" => return incr(ctx, &key(0)?),
        "MGET" if !rest.is_empty() => Value::Array(
            rest.iter()
                .map(|k| bulk_or_nil(ctx.ks.get(&String::from_utf8_lossy(k)).unwrap_or(None)))
                .collect(),
        ),
        "MSETNX" if !rest.is_empty() && rest.len() % 2 == 0 => {
            let pairs: Vec<(String, &[u8])> = rest
                .chunks(2)
                .map(|p| (String::from_utf8_lossy(p[0]).into_owned(), p[1]))
                .collect();
            let free = pairs.iter().all(|(k, _)| !ctx.ks.exists(k));
            if free {
                for (k, v) in pairs {
                    ctx.ks.set(&k, v.to_vec(), Ttl::Forever);
                }
            }
            int(i64::from(free))
        }
        "MGET" | "MSETNX" => return Err(wrong_arity(&name)),
        "PTTL" => int(ctx.ks.pttl(&key(0)?)),
        "PEXPIRE" => {
            let ms = number(rest.get(1).copied(), &name)?;
            int(i64::from(ctx.ks.pexpire(&key(0)?, ms)))
        }
        "DELIFEQ" => {
            let (key, value) = (key(0)?, rest.get(1).ok_or_else(|| wrong_arity(&name))?);
            let equal = ctx.ks.get(&key)?.is_some_and(|v| v == *value);
            int(i64::from(equal && ctx.ks.del(&key)))
        }
        "EVALSHA" => return fenced::evalsha(ctx, rest),
        "HGET" | "HMGET" => return fenced::hget(ctx, name == "HMGET", rest),
        "HSET" => return fenced::hset(ctx, rest),
        "PUBLISH" | "SPUBLISH" => {
            let channel = rest.first().ok_or_else(|| wrong_arity(&name))?;
            int(i64::try_from(ctx.publish(channel)).unwrap_or(i64::MAX))
        }
        _ => return about(ctx, &name, rest),
    })
}

/// The keyless commands: about the server rather than its keys.
fn about(ctx: &mut Ctx<'_>, name: &str, rest: &[&[u8]]) -> Res<Value> {
    let sub = rest
        .first()
        .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase());
    Ok(match (name, sub.as_deref()) {
        ("PING", _) => Value::SimpleString("PONG".to_owned()),
        ("TIME", _) => {
            let us = ctx.time_us();
            Value::Array(vec![
                bulk((us / 1_000_000).to_string()),
                bulk((us % 1_000_000).to_string()),
            ])
        }
        ("INFO", _) => bulk(info()),
        ("COMMAND", Some("INFO")) => Value::Array(
            rest[1..]
                .iter()
                .map(|c| {
                    let c = String::from_utf8_lossy(c).to_ascii_uppercase();
                    match KNOWN.contains(&c.as_str()) {
                        true => Value::Array(vec![bulk(c.to_ascii_lowercase())]),
                        false => Value::Nil,
                    }
                })
                .collect(),
        ),
        ("CONFIG", Some("GET")) => match rest.get(1) {
            Some(p) if p.eq_ignore_ascii_case(b"maxmemory-policy") => {
                Value::Array(vec![bulk("maxmemory-policy"), bulk("noeviction")])
            }
            _ => Value::Array(vec![]),
        },
        _ => return Err(Fail(format!("ERR unknown command '{name}'"))),
    })
}

/// When a `SET` writes.
enum Condition<'a> {
    Always,
    Missing,
    Present,
    Equal(&'a [u8]),
}

/// `SET key value [NX | XX | IFEQ v] [GET] [PX ms | EX s | KEEPTTL]`.
fn set(ctx: &mut Ctx<'_>, key: &str, rest: &[&[u8]]) -> Res<Value> {
    let value = rest.get(1).ok_or_else(|| wrong_arity("SET"))?;
    let (mut condition, mut get, mut ttl) = (Condition::Always, false, Ttl::Forever);
    let mut options = rest[2..].iter();
    while let Some(option) = options.next() {
        let option = String::from_utf8_lossy(option).to_ascii_uppercase();
        let mut operand = || options.next().copied().ok_or_else(syntax);
        match option.as_str() {
            "NX" => condition = Condition::Missing,
            "XX" => condition = Condition::Present,
            "IFEQ" => condition = Condition::Equal(operand()?),
            "GET" => get = true,
            "KEEPTTL" => ttl = Ttl::Keep,
            "PX" => ttl = Ttl::Px(px(&String::from_utf8_lossy(operand()?))?),
            "EX" => {
                let seconds = px(&String::from_utf8_lossy(operand()?))?;
                ttl = Ttl::Px(seconds.saturating_mul(1000));
            }
            _ => return Err(syntax()),
        }
    }
    let exists = ctx.ks.exists(key);
    let old = match ctx.ks.get(key) {
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
        ctx.ks.set(key, value.to_vec(), ttl);
    }
    Ok(match (get, write) {
        (true, _) => bulk_or_nil(old),
        (false, true) => Value::Okay,
        (false, false) => Value::Nil,
    })
}

/// `INCR`: the counter after the step; a missing key counts from 0 and the key keeps its
/// time to live.
fn incr(ctx: &mut Ctx<'_>, key: &str) -> Res<Value> {
    let not_integer = || Fail("ERR value is not an integer or out of range".to_owned());
    let current = match ctx.ks.get(key)? {
        None => 0,
        Some(text) => std::str::from_utf8(&text)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
            .ok_or_else(not_integer)?,
    };
    let next = current
        .checked_add(1)
        .ok_or_else(|| Fail("ERR increment or decrement would overflow".to_owned()))?;
    ctx.ks.set(key, next.to_string().into_bytes(), Ttl::Keep);
    Ok(int(next))
}

fn number(arg: Option<&[u8]>, command: &str) -> Res<i64> {
    let arg = arg.ok_or_else(|| wrong_arity(command))?;
    String::from_utf8_lossy(arg)
        .parse()
        .map_err(|_| Fail("ERR value is not an integer or out of range".to_owned()))
}

fn wrong_arity(command: &str) -> Fail {
    Fail(format!(
        "ERR wrong number of arguments for '{}' command",
        command.to_ascii_lowercase()
    ))
}

fn syntax() -> Fail {
    Fail("ERR syntax error".to_owned())
}
