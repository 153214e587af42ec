//! The in-memory server's Lua: an embedded Lua 5.1 (Redis's dialect, through mlua) that runs
//! scripts as Redis does: `KEYS` and `ARGV` as tables of strings, `redis.call` and
//! `redis.pcall` reaching the server's commands (given to [`Interpreter::run`] as a
//! dispatcher), `redis.error_reply` and `redis.status_reply`, and Redis's conversions between
//! Lua values and replies:
//!
//! - a reply to Lua: integer → number, bulk string → string, nil → `false`, array → table,
//!   status → `{ok = …}`, error → raised (`redis.call`) or `{err = …}` (`redis.pcall`);
//! - Lua to a reply: number → integer (truncated), string → bulk string, `false` and `nil` →
//!   nil, `true` → 1, `{ok = …}` → status, `{err = …}` → error, any other table → array (up to
//!   its first nil);
//! - a number given to `redis.call` → its text (whole numbers without decimals).
//!
//! Compiled scripts are kept by their SHA1, as Redis's script cache keeps them (`EVALSHA`).
//! A script runs at most [`MAX_INSTRUCTIONS`] Lua instructions and the interpreter holds at
//! most [`MAX_MEMORY`] bytes: past either the script fails (where Redis would let it run on,
//! busy, until `SCRIPT KILL`), so an operation given absurd arguments (a semaphore of 2^63
//! permits) cannot hang a test.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use mlua::{
    Function, HookTriggers, Lua, LuaOptions, StdLib, Table, Value as Lua5, Variadic, VmState,
};
use redis::Value;

use super::reply::{Fail, Res, error_value};

/// The most Lua instructions one script runs: 10 million (well over what any of lock-core's
/// operations needs for its largest batch).
pub(super) const MAX_INSTRUCTIONS: u32 = 10_000_000;

/// The most memory one server's interpreter holds: 64 MiB.
pub(super) const MAX_MEMORY: usize = 64 << 20;

/// How often the instruction budget is checked.
const TICK: u32 = 10_000;

/// How deep a script's reply may nest tables (deeper is an error, as on Redis).
const MAX_DEPTH: usize = 64;

/// Sets the sandbox up once: no files, the `redis` table with its reply helpers.
const SETUP: &str = r"
dofile, loadfile, load, loadstring, require, module = nil, nil, nil, nil, nil, nil
redis = {}
function redis.error_reply(e)
  if type(e) ~= 'string' then error('wrong number or type of arguments') end
  return {err = e}
end
function redis.status_reply(s)
  if type(s) ~= 'string' then error('wrong number or type of arguments') end
  return {ok = s}
end
";

/// One server's interpreter and script cache.
pub(super) struct Interpreter {
    lua: Lua,
    /// Whether [`SETUP`] ran (on the first script).
    ready: bool,
    /// Compiled scripts by the SHA1 of their source.
    scripts: HashMap<String, Function>,
    /// Instruction ticks ([`TICK`] each) of the running script.
    ticks: Arc<AtomicU32>,
}

impl std::fmt::Debug for Interpreter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interpreter")
            .field("scripts", &self.scripts.len())
            .finish_non_exhaustive()
    }
}

/// An error reply of a command that `redis.call` raises, so the script fails with it.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// Runs one command for a script: its reply, an error reply when it fails.
pub(super) type Dispatch<'a> = dyn FnMut(&[&[u8]]) -> Value + 'a;

impl Interpreter {
    pub(super) fn new() -> Self {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::new()).unwrap_or_else(|_| Lua::new());
        let ticks = Arc::new(AtomicU32::new(0));
        let counted = ticks.clone();
        let every = HookTriggers::new().every_nth_instruction(TICK);
        // Without these limits a script still runs (unbounded), so their errors are ignored.
        let _ = lua.set_hook(every, move |_, _| {
            if counted.fetch_add(1, Ordering::Relaxed) >= MAX_INSTRUCTIONS / TICK {
                return Err(mlua::Error::RuntimeError(format!(
                    "the script ran more than {MAX_INSTRUCTIONS} Lua instructions \
                     (the in-memory server's limit)"
                )));
            }
            Ok(VmState::Continue)
        });
        let _ = lua.set_memory_limit(MAX_MEMORY);
        Interpreter {
            lua,
            ready: false,
            scripts: HashMap::new(),
            ticks,
        }
    }

    /// Whether the script of SHA1 `sha` is cached (`SCRIPT EXISTS`).
    pub(super) fn has(&self, sha: &str) -> bool {
        self.scripts.contains_key(&sha.to_ascii_lowercase())
    }

    /// Compiles `source` into the cache under `sha`, its SHA1, unless it is there
    /// (`SCRIPT LOAD`; `EVAL` before it runs); the error when it does not compile.
    pub(super) fn load(&mut self, sha: &str, source: impl FnOnce() -> String) -> Res<()> {
        if self.has(sha) {
            return Ok(());
        }
        let function = self
            .lua
            .load(source())
            .set_name("=user_script")
            .into_function()
            .map_err(|e| {
                Fail(format!(
                    "ERR Error compiling script (new function): {}",
                    message(&e)
                ))
            })?;
        self.scripts.insert(sha.to_ascii_lowercase(), function);
        Ok(())
    }

    /// Empties the cache (`SCRIPT FLUSH`).
    pub(super) fn flush(&mut self) {
        self.scripts.clear();
    }

    /// Runs the cached script `sha` with `keys` and `argv`, its `redis.call`s answered by
    /// `dispatch`: the script's reply (an error value when it fails, `NOSCRIPT` when it is not
    /// cached).
    pub(super) fn run(
        &mut self,
        sha: &str,
        keys: &[&[u8]],
        argv: &[&[u8]],
        dispatch: &mut Dispatch<'_>,
    ) -> Value {
        let Some(function) = self.scripts.get(&sha.to_ascii_lowercase()).cloned() else {
            return error_value("NOSCRIPT No matching script. Please use EVAL.");
        };
        if !self.ready {
            if let Err(e) = self.lua.load(SETUP).exec() {
                return error_value(&format!("ERR the Lua sandbox: {}", message(&e)));
            }
            self.ready = true;
        }
        self.ticks.store(0, Ordering::Relaxed);
        let lua = &self.lua;
        let dispatch = RefCell::new(dispatch);
        let reply = lua.scope(|scope| {
            let call = scope.create_function(|lua, args: Variadic<Lua5>| {
                let args = arguments(&args)?;
                let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                let reply = (dispatch.borrow_mut())(&args);
                match reply {
                    Value::ServerError(error) => Err(mlua::Error::external(Raised(line(&error)))),
                    reply => to_lua(lua, &reply),
                }
            })?;
            let pcall = scope.create_function(|lua, args: Variadic<Lua5>| {
                let args = match arguments(&args) {
                    Ok(args) => args,
                    Err(e) => return error_table(lua, &format!("ERR {}", message(&e))),
                };
                let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                let reply = (dispatch.borrow_mut())(&args);
                to_lua(lua, &reply)
            })?;
            let redis: Table = lua.globals().raw_get("redis")?;
            redis.raw_set("call", call)?;
            redis.raw_set("pcall", pcall)?;
            let strings = |items: &[&[u8]]| -> mlua::Result<Table> {
                let table = lua.create_table_with_capacity(items.len(), 0)?;
                for (i, item) in items.iter().enumerate() {
                    table.raw_set(i + 1, lua.create_string(item)?)?;
                }
                Ok(table)
            };
            lua.globals().raw_set("KEYS", strings(keys)?)?;
            lua.globals().raw_set("ARGV", strings(argv)?)?;
            let out: Lua5 = function.call(())?;
            Ok(from_lua(&out, 0))
        });
        reply.unwrap_or_else(|e| match raised(&e) {
            Some(line) => error_value(line),
            None => error_value(&format!("ERR {}", message(&e))),
        })
    }
}

/// The line of an error reply (`CODE message`).
fn line(error: &redis::ServerError) -> String {
    match error.details() {
        Some(details) => format!("{} {details}", error.code()),
        None => error.code().to_owned(),
    }
}

/// The error reply a `redis.call` raised, if `e` is one.
fn raised(e: &mlua::Error) -> Option<&str> {
    match e {
        mlua::Error::CallbackError { cause, .. } => raised(cause),
        mlua::Error::ExternalError(inner) => inner.downcast_ref::<Raised>().map(|r| r.0.as_str()),
        _ => None,
    }
}

/// A Lua error's message, without mlua's wrapping and tracebacks.
fn message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => message(cause),
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// `redis.call`'s arguments as a command: strings as they are, numbers as their text.
fn arguments(args: &[Lua5]) -> mlua::Result<Vec<Vec<u8>>> {
    if args.is_empty() {
        return Err(mlua::Error::RuntimeError(
            "Please specify at least one argument for this redis lib call".to_owned(),
        ));
    }
    args.iter()
        .map(|arg| match arg {
            Lua5::String(s) => Ok(s.as_bytes().to_vec()),
            Lua5::Integer(n) => Ok(n.to_string().into_bytes()),
            Lua5::Number(n) => Ok(number_text(*n).into_bytes()),
            _ => Err(mlua::Error::RuntimeError(
                "Lua redis lib command arguments must be strings or integers".to_owned(),
            )),
        })
        .collect()
}

/// A Lua number as Redis gives it to a command: a whole number without decimals, any other
/// as the shortest text that reads back the same.
fn number_text(n: f64) -> String {
    if n.is_nan() {
        "nan".to_owned()
    } else if n.is_infinite() {
        if n > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else if n.fract() == 0.0 && n.abs() < 1.0e17 {
        format!("{n:.0}")
    } else {
        format!("{n}")
    }
}

/// `{err = line}`.
fn error_table(lua: &Lua, line: &str) -> mlua::Result<Lua5> {
    let table = lua.create_table()?;
    table.raw_set("err", line)?;
    Ok(Lua5::Table(table))
}

/// A reply as a Lua value.
fn to_lua(lua: &Lua, reply: &Value) -> mlua::Result<Lua5> {
    Ok(match reply {
        Value::Int(n) => Lua5::Number(*n as f64),
        Value::BulkString(bytes) => Lua5::String(lua.create_string(bytes)?),
        Value::SimpleString(s) => {
            let table = lua.create_table()?;
            table.raw_set("ok", s.as_str())?;
            Lua5::Table(table)
        }
        Value::Okay => {
            let table = lua.create_table()?;
            table.raw_set("ok", "OK")?;
            Lua5::Table(table)
        }
        Value::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Lua5::Table(table)
        }
        Value::ServerError(error) => error_table(lua, &line(error))?,
        _ => Lua5::Boolean(false),
    })
}

/// A script's reply (`depth`: how deep in tables it is).
fn from_lua(value: &Lua5, depth: usize) -> Value {
    match value {
        Lua5::String(s) => Value::BulkString(s.as_bytes().to_vec()),
        // Truncated toward zero, as Redis's `(long long)` cast of a number.
        Lua5::Number(n) => Value::Int(*n as i64),
        Lua5::Integer(n) => Value::Int(*n),
        Lua5::Boolean(true) => Value::Int(1),
        Lua5::Table(_) if depth >= MAX_DEPTH => error_value("ERR reached lua stack limit"),
        Lua5::Table(table) => {
            if let Ok(Lua5::String(err)) = table.raw_get::<Lua5>("err") {
                let err = err.to_string_lossy();
                return error_value(err.strip_prefix('-').unwrap_or(&err));
            }
            if let Ok(Lua5::String(ok)) = table.raw_get::<Lua5>("ok") {
                return match ok.to_string_lossy().as_str() {
                    "OK" => Value::Okay,
                    status => Value::SimpleString(status.to_owned()),
                };
            }
            let mut items = Vec::new();
            for i in 1.. {
                match table.raw_get::<Lua5>(i) {
                    Ok(Lua5::Nil) | Err(_) => break,
                    Ok(item) => items.push(from_lua(&item, depth + 1)),
                }
            }
            Value::Array(items)
        }
        _ => Value::Nil,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(source: &str, dispatch: &mut Dispatch<'_>) -> Value {
        let mut lua = Interpreter::new();
        lua.load("sha", || source.to_owned()).unwrap();
        lua.run("sha", &[b"k"], &[b"a", b"2"], dispatch)
    }

    fn quiet(_: &[&[u8]]) -> Value {
        Value::Nil
    }

    #[test]
    fn replies_convert_as_on_redis() {
        let script =
            "return {1.9, -1.9, 'x', false, true, {ok = 'PONG'}, KEYS[1], ARGV[2], nil, 5}";
        let expected = Value::Array(vec![
            Value::Int(1),
            Value::Int(-1),
            Value::BulkString(b"x".to_vec()),
            Value::Nil,
            Value::Int(1),
            Value::SimpleString("PONG".into()),
            Value::BulkString(b"k".to_vec()),
            Value::BulkString(b"2".to_vec()),
        ]);
        assert_eq!(eval(script, &mut quiet), expected);
        let error = eval("return redis.error_reply('WRONGTYPE no')", &mut quiet);
        assert!(
            matches!(&error, Value::ServerError(e) if e.code() == "WRONGTYPE"),
            "{error:?}"
        );
        assert_eq!(
            eval("return redis.status_reply('OK')", &mut quiet),
            Value::Okay
        );
    }

    #[test]
    fn call_raises_and_pcall_returns_an_error_reply() {
        let mut seen = Vec::new();
        let mut dispatch = |args: &[&[u8]]| {
            seen.push(args.iter().map(|a| a.to_vec()).collect::<Vec<_>>());
            match args[0] {
                b"BAD" => error_value("WRONGTYPE Operation against a key"),
                b"NIL" => Value::Nil,
                _ => Value::Array(vec![Value::Int(7), Value::Nil]),
            }
        };
        let script = "local a = redis.call('GET', 12, 1.5)
            local e = redis.pcall('BAD')
            assert(redis.call('NIL') == false)
            return {a[1], tostring(a[2]), e.err}";
        let reply = eval(script, &mut dispatch);
        assert_eq!(
            reply,
            Value::Array(vec![
                Value::Int(7),
                Value::BulkString(b"false".to_vec()),
                Value::BulkString(b"WRONGTYPE Operation against a key".to_vec()),
            ])
        );
        let raised = eval("redis.call('BAD') return 1", &mut dispatch);
        assert!(
            matches!(&raised, Value::ServerError(e) if e.code() == "WRONGTYPE"),
            "{raised:?}"
        );
        assert_eq!(seen[0], [&b"GET"[..], b"12", b"1.5"]);
        let runtime = eval("return nil + 1", &mut quiet);
        assert!(
            matches!(&runtime, Value::ServerError(e) if e.code() == "ERR"),
            "{runtime:?}"
        );
        let cyclic = eval("local t = {} t[1] = t return t", &mut quiet);
        assert!(format!("{cyclic:?}").contains("stack limit"), "{cyclic:?}");
        let endless = eval("while true do end", &mut quiet);
        assert!(
            format!("{endless:?}").contains("instructions"),
            "{endless:?}"
        );
        let greedy = eval("local t = {} for i = 1, 1e9 do t[i] = i end", &mut quiet);
        assert!(
            matches!(&greedy, Value::ServerError(e) if e.code() == "ERR"),
            "{greedy:?}"
        );
    }

    #[test]
    fn a_script_that_does_not_compile_is_refused_and_an_unknown_one_is_noscript() {
        let mut lua = Interpreter::new();
        assert!(lua.load("bad", || "return (".to_owned()).is_err());
        assert!(!lua.has("bad"));
        let reply = lua.run("none", &[], &[], &mut quiet);
        assert!(
            matches!(&reply, Value::ServerError(e) if e.code() == "NOSCRIPT"),
            "{reply:?}"
        );
    }
}
