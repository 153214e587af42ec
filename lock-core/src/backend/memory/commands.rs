//! The in-memory server's command table: every command it answers, for a client (the native
//! mutex protocol, an owner description, an application's [`Connection`](crate::Connection),
//! what is asked at connect) and for a script's `redis.call` alike.
//!
//! - keys: `DEL`, `EXISTS` (of one key or many), `PTTL`, `TTL`, `PEXPIRE`, `EXPIRE`, `TYPE`;
//!   strings (`strings`), hashes
//!   (`hashes`), sorted sets (`zsets`); `PUBLISH`/`SPUBLISH`; `TIME`, `PING`, `INFO server`,
//!   `COMMAND INFO`, `CONFIG GET maxmemory-policy`;
//! - scripts (not from a script): `EVAL`, `EVALSHA`, `SCRIPT LOAD | EXISTS | FLUSH`, run by
//!   the server's Lua interpreter (`lua`), and lock-core's own operations (`op`), each its
//!   `.lua` file with the prelude in front, as a script is sent to Redis.
//!
//! Anything else is an unknown command.

use redis::Value;

use super::lua::Interpreter;
use super::reply::{Fail, Res, bulk, count, int, integer, text, wrong_arity};
use super::server::Ctx;
use super::{hashes, strings, zsets};
use crate::wire::script::{Call, Scripts};

/// The commands this server has, as `COMMAND INFO` reports them. `WAIT` is not among them:
/// there are no replicas.
const KNOWN: &[&str] = &[
    "COMMAND",
    "CONFIG",
    "DEL",
    "DECR",
    "DECRBY",
    "DELIFEQ",
    "EVAL",
    "EVALSHA",
    "EXISTS",
    "EXPIRE",
    "GET",
    "GETDEL",
    "HDEL",
    "HGET",
    "HGETALL",
    "HINCRBY",
    "HMGET",
    "HSET",
    "INCR",
    "INCRBY",
    "INFO",
    "MGET",
    "MSET",
    "MSETNX",
    "PEXPIRE",
    "PING",
    "PTTL",
    "PUBLISH",
    "SCRIPT",
    "SET",
    "SPUBLISH",
    "SSUBSCRIBE",
    "SUBSCRIBE",
    "TIME",
    "TTL",
    "TYPE",
    "ZADD",
    "ZCARD",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZREM",
    "ZREMRANGEBYSCORE",
    "ZSCORE",
];

/// What the server says it is (`INFO server`): the name `lock-core-memory` and this crate's
/// version.
fn info() -> String {
    format!(
        "# Server\r\nredis_version:{}\r\nserver_name:lock-core-memory\r\nredis_mode:standalone\r\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// A pipeline's (or an atomic pipeline's `EXEC`'s) replies, one per command; a command that
/// fails has its error in its place. The whole pipeline runs at once, so a `MULTI` … `EXEC`
/// written into it runs its commands as they are queued: `MULTI` answers `OK`, each command
/// inside `QUEUED`, and `EXEC` their replies.
pub(super) fn pipeline(ctx: &mut Ctx<'_>, lua: &mut Interpreter, pipe: &redis::Pipeline) -> Value {
    let mut replies = Vec::with_capacity(pipe.len());
    let mut queued: Option<Vec<Value>> = None;
    for cmd in pipe.cmd_iter() {
        let name = match cmd.args_iter().next() {
            Some(redis::Arg::Simple(name)) => name,
            _ => &[][..],
        };
        match (&mut queued, name) {
            (None, n) if n.eq_ignore_ascii_case(b"MULTI") => {
                queued = Some(Vec::new());
                replies.push(Value::Okay);
            }
            (Some(_), n) if n.eq_ignore_ascii_case(b"EXEC") => {
                replies.push(Value::Array(queued.take().unwrap_or_default()));
            }
            (Some(inside), _) => {
                inside.push(command(ctx, lua, cmd));
                replies.push(Value::SimpleString("QUEUED".to_owned()));
            }
            (None, _) => replies.push(command(ctx, lua, cmd)),
        }
    }
    Value::Array(replies)
}

/// One command's reply (an error value when it fails).
pub(super) fn command(ctx: &mut Ctx<'_>, lua: &mut Interpreter, cmd: &redis::Cmd) -> Value {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        })
        .collect();
    let Some((name, rest)) = args.split_first() else {
        return Fail::new("ERR empty command").value();
    };
    let name = String::from_utf8_lossy(name).to_ascii_uppercase();
    let reply = match name.as_str() {
        "EVAL" => eval(ctx, lua, rest, true),
        "EVALSHA" => eval(ctx, lua, rest, false),
        "SCRIPT" => script(lua, rest),
        _ => return plain(ctx, &name, rest),
    };
    reply.unwrap_or_else(|fail| fail.value())
}

/// Runs lock-core's operation `call` as Redis runs its script (`EVAL`): the plain flavour
/// (`PUBLISH`), compiled once per server.
pub(super) fn op(ctx: &mut Ctx<'_>, lua: &mut Interpreter, call: &Call) -> Value {
    let op = call.op();
    let sha = Scripts::get(false).script(op).get_hash();
    if let Err(fail) = lua.load(sha, || op.script_text()) {
        return fail.value();
    }
    let keys: Vec<&[u8]> = call.keys().collect();
    let args: Vec<&[u8]> = call.args().collect();
    lua.run(sha, &keys, &args, &mut |args| in_script(ctx, args))
}

/// `EVAL script numkeys key… arg…` (`source`), or `EVALSHA sha numkeys key… arg…`.
fn eval(ctx: &mut Ctx<'_>, lua: &mut Interpreter, rest: &[&[u8]], source: bool) -> Res<Value> {
    let name = if source { "EVAL" } else { "EVALSHA" };
    let [script, numkeys, rest @ ..] = rest else {
        return Err(wrong_arity(name));
    };
    let numkeys = usize::try_from(integer(numkeys)?)
        .map_err(|_| Fail::new("ERR Number of keys can't be negative"))?;
    if numkeys > rest.len() {
        return Err(Fail::new(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let (keys, args) = rest.split_at(numkeys);
    let sha = if source {
        let source = text(script);
        let sha = redis::Script::new(&source).get_hash().to_owned();
        lua.load(&sha, || source)?;
        sha
    } else {
        text(script)
    };
    Ok(lua.run(&sha, keys, args, &mut |args| in_script(ctx, args)))
}

/// `SCRIPT LOAD source`, `SCRIPT EXISTS sha…`, `SCRIPT FLUSH`.
fn script(lua: &mut Interpreter, rest: &[&[u8]]) -> Res<Value> {
    let Some((sub, rest)) = rest.split_first() else {
        return Err(wrong_arity("SCRIPT"));
    };
    match (
        String::from_utf8_lossy(sub).to_ascii_uppercase().as_str(),
        rest,
    ) {
        ("LOAD", [source]) => {
            let source = text(source);
            let sha = redis::Script::new(&source).get_hash().to_owned();
            lua.load(&sha, || source)?;
            Ok(bulk(sha))
        }
        ("EXISTS", shas) if !shas.is_empty() => Ok(Value::Array(
            shas.iter()
                .map(|sha| int(i64::from(lua.has(&text(sha)))))
                .collect(),
        )),
        ("FLUSH", _) => {
            lua.flush();
            Ok(Value::Okay)
        }
        _ => Err(Fail::new("ERR unknown or malformed SCRIPT subcommand")),
    }
}

/// What a script's `redis.call` reaches: every command but the scripting ones.
fn in_script(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Value {
    let Some((name, rest)) = args.split_first() else {
        return Fail::new("ERR empty command").value();
    };
    let name = String::from_utf8_lossy(name).to_ascii_uppercase();
    match name.as_str() {
        "EVAL" | "EVALSHA" | "SCRIPT" | "SUBSCRIBE" | "SSUBSCRIBE" => {
            Fail::new("ERR This Redis command is not allowed from script").value()
        }
        _ => plain(ctx, &name, rest),
    }
}

/// A command that is not about scripts: `name` (upper case) with `args`.
fn plain(ctx: &mut Ctx<'_>, name: &str, args: &[&[u8]]) -> Value {
    let reply = strings::run(ctx, name, args)
        .or_else(|| hashes::run(ctx, name, args))
        .or_else(|| zsets::run(ctx, name, args))
        .unwrap_or_else(|| keys(ctx, name, args));
    reply.unwrap_or_else(|fail| fail.value())
}

/// The commands on keys of any type, and the keyless ones.
fn keys(ctx: &mut Ctx<'_>, name: &str, args: &[&[u8]]) -> Res<Value> {
    Ok(match (name, args) {
        ("DEL" | "EXISTS", keys) if !keys.is_empty() => {
            let keys = keys.iter().map(|k| text(k));
            let n = match name {
                "DEL" => keys.filter(|k| ctx.ks.del(k)).count(),
                _ => keys.filter(|k| ctx.ks.exists(k)).count(),
            };
            count(n)
        }
        ("PTTL", [key]) => int(ctx.ks.pttl(&text(key))),
        // Whole seconds, rounded as Redis rounds them (to the nearest).
        ("TTL", [key]) => match ctx.ks.pttl(&text(key)) {
            ms if ms < 0 => int(ms),
            ms => int((ms + 500) / 1000),
        },
        ("PEXPIRE" | "EXPIRE", [key, time]) => {
            let scale = if name == "EXPIRE" { 1000 } else { 1 };
            let ms = integer(time)?
                .checked_mul(scale)
                .ok_or_else(|| Fail(format!("ERR invalid expire time in '{name}' command")))?;
            int(i64::from(ctx.ks.pexpire(&text(key), ms)))
        }
        ("PEXPIRE" | "EXPIRE", [_, _, ..]) => {
            return Err(Fail(format!(
                "ERR {name}'s options (NX, XX, GT, LT) are not supported by lock-core's in-memory backend"
            )));
        }
        ("TYPE", [key]) => Value::SimpleString(ctx.ks.kind(&text(key)).to_owned()),
        ("PUBLISH" | "SPUBLISH", [channel, _]) => count(ctx.publish(channel)),
        _ => return about(ctx, name, args),
    })
}

/// The keyless commands: about the server rather than its keys.
fn about(ctx: &mut Ctx<'_>, name: &str, args: &[&[u8]]) -> Res<Value> {
    let sub = args
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
            args[1..]
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
        ("CONFIG", Some("GET")) => match args.get(1) {
            Some(p) if p.eq_ignore_ascii_case(b"maxmemory-policy") => {
                Value::Array(vec![bulk("maxmemory-policy"), bulk("noeviction")])
            }
            _ => Value::Array(vec![]),
        },
        _ if KNOWN.contains(&name) => return Err(wrong_arity(name)),
        _ => {
            return Err(Fail(format!(
                "ERR unknown command '{name}': lock-core's in-memory backend (the `testing` feature) runs only the commands listed in its docs (guide: Testing)"
            )));
        }
    })
}
