//! The in-memory server's commands against a real redis-server's: the same commands to both,
//! through `MemoryServer::command` on one side and a connection on the other.
//!
//! Random sequences of calls of every Lua operation (sent to both as `EVAL` of its script, the
//! prelude in front, read from lock-core's sources: the in-memory server runs it in its own
//! Lua, its `redis.call`s answered by its own commands) (hold counts right and wrong, tokens current
//! and stale, waiting or not, values lock-core did not write in the way, keys deleted under a
//! holder) go to both, each call with the same keys and arguments (a token argument is the
//! token that side last granted). After every call the replies, the channels published on and
//! every key (type, value, time to live) must agree. The two clocks differ, so what they read
//! is left out of the comparison: numbers of 10 digits or more (tokens, server times) read as
//! `T` (and sorted-set members scored by a time are compared as a set, not in the order their
//! times put them in), and times to live or waits of a second or more as `ms`; every lease and time to live
//! in the sequences is at least 30 s, longer than a sequence runs.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::time::Duration;

use futures_util::StreamExt;
use lock_core::testing::MemoryServer;
use lock_tests::RedisServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;
use redis::aio::{MultiplexedConnection, PubSubStream};

/// The helpers every operation's script starts with.
const PRELUDE: &str = include_str!("../../lock-core/src/wire/scripts/prelude.lua");

/// Every Lua operation, by name, with its body (`operations_are_all_here` checks the list
/// against the sources).
const OPERATIONS: &[(&str, &str)] = &[
    (
        "acquire",
        include_str!("../../lock-core/src/wire/scripts/acquire.lua"),
    ),
    (
        "batch",
        include_str!("../../lock-core/src/wire/scripts/batch.lua"),
    ),
    (
        "fair_acquire",
        include_str!("../../lock-core/src/wire/scripts/fair_acquire.lua"),
    ),
    (
        "fair_force_unlock",
        include_str!("../../lock-core/src/wire/scripts/fair_force_unlock.lua"),
    ),
    (
        "fair_inspect",
        include_str!("../../lock-core/src/wire/scripts/fair_inspect.lua"),
    ),
    (
        "fair_leave",
        include_str!("../../lock-core/src/wire/scripts/fair_leave.lua"),
    ),
    (
        "fair_release",
        include_str!("../../lock-core/src/wire/scripts/fair_release.lua"),
    ),
    (
        "force_unlock",
        include_str!("../../lock-core/src/wire/scripts/force_unlock.lua"),
    ),
    (
        "inspect",
        include_str!("../../lock-core/src/wire/scripts/inspect.lua"),
    ),
    (
        "multi_acquire",
        include_str!("../../lock-core/src/wire/scripts/multi_acquire.lua"),
    ),
    (
        "rate_inspect",
        include_str!("../../lock-core/src/wire/scripts/rate_inspect.lua"),
    ),
    (
        "rate_limit",
        include_str!("../../lock-core/src/wire/scripts/rate_limit.lua"),
    ),
    (
        "record_put",
        include_str!("../../lock-core/src/wire/scripts/record_put.lua"),
    ),
    (
        "release",
        include_str!("../../lock-core/src/wire/scripts/release.lua"),
    ),
    (
        "release_keep",
        include_str!("../../lock-core/src/wire/scripts/release_keep.lua"),
    ),
    (
        "renew",
        include_str!("../../lock-core/src/wire/scripts/renew.lua"),
    ),
    (
        "rw_force_unlock",
        include_str!("../../lock-core/src/wire/scripts/rw_force_unlock.lua"),
    ),
    (
        "rw_inspect",
        include_str!("../../lock-core/src/wire/scripts/rw_inspect.lua"),
    ),
    (
        "rw_read",
        include_str!("../../lock-core/src/wire/scripts/rw_read.lua"),
    ),
    (
        "rw_read_release",
        include_str!("../../lock-core/src/wire/scripts/rw_read_release.lua"),
    ),
    (
        "rw_read_renew",
        include_str!("../../lock-core/src/wire/scripts/rw_read_renew.lua"),
    ),
    (
        "rw_unmark",
        include_str!("../../lock-core/src/wire/scripts/rw_unmark.lua"),
    ),
    (
        "rw_write",
        include_str!("../../lock-core/src/wire/scripts/rw_write.lua"),
    ),
    (
        "sem_acquire",
        include_str!("../../lock-core/src/wire/scripts/sem_acquire.lua"),
    ),
    (
        "sem_force_unlock",
        include_str!("../../lock-core/src/wire/scripts/sem_force_unlock.lua"),
    ),
    (
        "sem_inspect",
        include_str!("../../lock-core/src/wire/scripts/sem_inspect.lua"),
    ),
    (
        "sem_release",
        include_str!("../../lock-core/src/wire/scripts/sem_release.lua"),
    ),
    (
        "sem_renew",
        include_str!("../../lock-core/src/wire/scripts/sem_renew.lua"),
    ),
    (
        "guarded_update",
        include_str!("../../lock-core/src/wire/scripts/guarded_update.lua"),
    ),
];

/// The script of `op` as lock-core sends it to a standalone server: the prelude in front.
fn script(op: &str) -> String {
    let (_, body) = OPERATIONS
        .iter()
        .find(|(name, _)| *name == op)
        .unwrap_or_else(|| panic!("no operation {op}"));
    format!("{PRELUDE}{body}")
}

/// `EVAL` of `op`'s script with `keys` and `args`.
fn eval(op: &str, keys: &[String], args: &[Vec<u8>]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script(op)).arg(keys.len()).arg(keys).arg(args);
    cmd
}

const OWNERS: [&str; 3] = ["c1:1", "c1:2", "c2:7"];
const STEPS: usize = 400;
const SEQUENCES: u64 = 16;

/// An argument: as given, or the token one side last granted `owner` on `key`.
#[derive(Debug, Clone)]
enum Arg {
    Lit(String),
    Token(String, String),
}

/// One call of a sequence.
#[derive(Debug, Clone)]
enum Step {
    Script {
        op: &'static str,
        keys: Vec<String>,
        args: Vec<Arg>,
    },
    /// A plain command: a value lock-core did not write, or a key deleted (eviction).
    Plain(Vec<String>),
}

fn lit(s: impl ToString) -> Arg {
    Arg::Lit(s.to_string())
}

/// Every key and channel of the name `n`.
struct Keys {
    mutex: String,
    released: String,
    fair: [String; 3],
    wake: String,
    rw: [String; 3],
    rw_released: String,
    sem: [String; 2],
    sem_released: String,
}

fn keys(n: &str) -> Keys {
    let p = format!("lock:{{{n}}}");
    Keys {
        mutex: p.clone(),
        released: format!("{p}:released"),
        fair: [
            format!("{p}:fair"),
            format!("{p}:fair:queue"),
            format!("{p}:fair:deadlines"),
        ],
        wake: format!("{p}:fair:wake:"),
        rw: [
            format!("{p}:rw"),
            format!("{p}:rw:readers"),
            format!("{p}:rw:writer-waiting"),
        ],
        rw_released: format!("{p}:rw:released"),
        sem: [format!("{p}:permits"), format!("{p}:permits:size")],
        sem_released: format!("{p}:permits:released"),
    }
}

/// Draws the calls of a sequence.
struct Draw {
    rng: StdRng,
    /// Keys given a value lock-core did not write, deleted again soon.
    foreign: Vec<String>,
}

impl Draw {
    /// Mostly `a`, so calls meet each other's locks.
    fn name(&mut self) -> Keys {
        keys(if self.rng.random_bool(0.75) { "a" } else { "b" })
    }

    fn owner(&mut self) -> &'static str {
        OWNERS[self.rng.random_range(0..OWNERS.len())]
    }

    /// A hold count: mostly `from` (what the owner's client would send), sometimes one or
    /// two more (a repeat, or a hold lost meanwhile).
    fn count(&mut self, from: u32) -> Arg {
        if self.rng.random_bool(0.6) {
            lit(from)
        } else {
            lit(self.rng.random_range(from + 1..from + 3))
        }
    }

    fn flag(&mut self) -> Arg {
        lit(u8::from(self.rng.random_bool(0.5)))
    }

    fn token(&mut self, key: &str, owner: &str) -> Arg {
        if self.rng.random_bool(0.85) {
            Arg::Token(key.to_owned(), owner.to_owned())
        } else {
            lit(12345)
        }
    }

    /// A lock string's key: a mutex's, a fair lock's or a writer's, with its channel.
    fn lock_string(&mut self) -> (String, String) {
        let k = self.name();
        match self.rng.random_range(0..3) {
            0 => (k.mutex, k.released),
            1 => (k.fair[0].clone(), k.wake),
            _ => (k.rw[0].clone(), k.rw_released),
        }
    }

    fn step(&mut self) -> Step {
        let script = |op, keys: Vec<String>, args| Step::Script { op, keys, args };
        let owner = self.owner();
        match self.rng.random_range(0..100) {
            0..=9 => {
                let (key, _) = self.lock_string();
                let args = vec![lit(owner), lit(60_000), self.count(0), self.flag()];
                script("acquire", vec![key], args)
            }
            10..=16 => {
                let (key, channel) = self.lock_string();
                let token = self.token(&key, owner);
                let args = vec![
                    lit(owner),
                    self.count(1),
                    token,
                    lit(channel),
                    lit(3_600_000),
                ];
                script("release", vec![key], args)
            }
            17..=18 => script(
                "release_keep",
                vec![self.name().mutex],
                vec![lit(owner), lit(30_000)],
            ),
            19..=20 => {
                let (a, b) = (self.lock_string().0, self.lock_string().0);
                let args = vec![lit(60_000), lit(owner), lit(self.owner())];
                script("renew", vec![a, b], args)
            }
            21 => {
                let k = self.name();
                script(
                    "force_unlock",
                    vec![k.mutex],
                    vec![lit(k.released), lit(3_600_000)],
                )
            }
            22..=23 => script("inspect", vec![self.lock_string().0], vec![]),
            24..=27 => {
                let (a, b) = (keys("a").mutex, keys("b").mutex);
                let mut args = vec![lit(owner), lit(60_000), self.flag()];
                args.extend([self.count(0), self.count(0)]);
                script("multi_acquire", vec![a, b], args)
            }
            28..=30 => self.batch(owner),
            31 if self.rng.random_bool(0.5) => self.record_put(),
            31 => self.rate_limit(),
            32..=61 => self.fair_or_rw(owner),
            62..=89 => self.semaphore_or_rw(owner),
            90..=93 => self.guarded_update(owner),
            94 => {
                let k = self.name();
                let key = [
                    k.mutex,
                    k.rw[1].clone(),
                    k.sem[0].clone(),
                    k.fair[1].clone(),
                ][self.rng.random_range(0..4)]
                .clone();
                let value = ["garbage", "x|1|2|3|4"][self.rng.random_range(0..2)];
                self.foreign.push(key.clone());
                let set = ["SET", &key, value, "PX", "60000"];
                Step::Plain(set.iter().map(|s| s.to_string()).collect())
            }
            _ if !self.foreign.is_empty() && self.rng.random_bool(0.5) => {
                let key = self.foreign.swap_remove(0);
                Step::Plain(vec!["DEL".into(), key])
            }
            _ => {
                let k = self.name();
                let all = [
                    &k.mutex, &k.fair[0], &k.fair[1], &k.rw[0], &k.rw[1], &k.rw[2], &k.sem[0],
                ];
                let key = all[self.rng.random_range(0..all.len())].clone();
                Step::Plain(vec!["DEL".into(), key])
            }
        }
    }

    /// One command of the native protocol (as `wire/native/` builds them), on a mutex's key, the
    /// fencing counter, or a key of another type; now and then a script that makes such a key.
    fn native_step(&mut self) -> Step {
        let plain = |args: &[&str]| Step::Plain(args.iter().map(|a| a.to_string()).collect());
        let k = self.name();
        let (owner, other) = (self.owner(), self.owner());
        let key = if self.rng.random_bool(0.9) {
            k.mutex.as_str()
        } else {
            k.rw[1].as_str()
        };
        let counter = if self.rng.random_bool(0.9) {
            "lock:fence"
        } else {
            key
        };
        match self.rng.random_range(0..24) {
            0..=1 => plain(&["SET", counter, "1767225600000000", "NX"]),
            2..=3 => plain(&["INCR", counter]),
            4..=7 => plain(&["SET", key, owner, "NX", "PX", "60000", "GET"]),
            8..=9 => plain(&["PTTL", key]),
            10..=11 => plain(&["SET", key, owner, "IFEQ", other, "PX", "60000"]),
            12 => plain(&["SET", key, owner, "IFEQ", other, "KEEPTTL"]),
            13..=15 => plain(&["DELIFEQ", key, other]),
            16 => plain(&["PUBLISH", &k.released, "1767225600000001"]),
            17 => plain(&["DEL", key]),
            18..=19 => plain(&["GET", key]),
            20 => plain(&[
                "SET",
                key,
                "|0|1767225600000000|1767225600000000|",
                "PX",
                "3600000",
            ]),
            21 => plain(&["SET", key, owner]),
            22 => plain(&["SET", key, owner, "XX", "EX", "60", "GET"]),
            _ => {
                let args = vec![lit(owner), lit(60_000), lit(0), lit(0)];
                Step::Script {
                    op: "rw_read",
                    keys: vec![k.mutex.clone(), k.rw[1].clone(), k.rw[2].clone()],
                    args,
                }
            }
        }
    }

    /// A guarded update (`guarded_update.lua`) under a lock string, by its holder or not, with
    /// a current or stale token, a new or repeated sequence number, of one to three operations
    /// on a counter, a hash and a plain key (a take sometimes beyond its floor, an operation
    /// sometimes on a key of the wrong type).
    fn guarded_update(&mut self, owner: &str) -> Step {
        let (key, _) = self.lock_string();
        let token = self.token(&key, owner);
        let record = format!("{}:updated", keys("a").mutex);
        let seq = lit(self.rng.random_range(1..4u32));
        let mut keys = vec![key, record];
        let mut args = vec![lit(owner), token, seq, lit(60_000)];
        for _ in 0..self.rng.random_range(1..4) {
            let n = self.rng.random_range(1..3u32);
            let (key, op): (&str, [Arg; 4]) = match self.rng.random_range(0..9) {
                0..=2 => ("stock:{a}", [lit("take"), lit(n), lit(0), lit("")]),
                3 => ("stock:{a}", [lit("add"), lit(n), lit(""), lit("")]),
                4 => ("stock:{a}", [lit("set"), lit(3), lit(""), lit("")]),
                5 => ("h:{a}", [lit("hset"), lit("f"), lit("v"), lit("")]),
                6 => ("h:{a}", [lit("hadd"), lit("n"), lit(n), lit("")]),
                7 => (
                    ["stock:{a}", "h:{a}"][self.rng.random_range(0..2)],
                    [lit("pexpire"), lit(60_000), lit(""), lit("")],
                ),
                _ => (
                    ["stock:{a}", "h:{a}"][self.rng.random_range(0..2)],
                    [lit("del"), lit(""), lit(""), lit("")],
                ),
            };
            keys.push(key.to_owned());
            args.extend(op);
        }
        Step::Script {
            op: "guarded_update",
            keys,
            args,
        }
    }

    /// A record put (`record_put.lua`): mostly on a record's key, now and then on a lock
    /// string (refused as not a record, or written over a free key).
    fn record_put(&mut self) -> Step {
        let k = self.name();
        let key = if self.rng.random_bool(0.85) {
            format!("{}:record", k.mutex)
        } else {
            k.mutex
        };
        let token = self.rng.random_range(1..5u32);
        let value = format!("{token}:v{}", self.rng.random_range(0..3));
        Step::Script {
            op: "record_put",
            keys: vec![key],
            args: vec![lit(value), lit(token), lit(60_000)],
        }
    }

    /// A rate limit's decision (`rate_limit.lua`): mostly on a limit's key, now and then on a
    /// lock string (refused as not a limit's), and now and then a read of its state. One
    /// permit a minute, so none comes back while a sequence runs.
    fn rate_limit(&mut self) -> Step {
        let k = self.name();
        let key = if self.rng.random_bool(0.85) {
            format!("{}:rate", k.mutex)
        } else {
            k.mutex
        };
        if self.rng.random_bool(0.4) {
            return Step::Script {
                op: "rate_inspect",
                keys: vec![key],
                args: vec![],
            };
        }
        let burst = self.rng.random_range(1..4u32);
        let n = self.rng.random_range(0..=burst);
        Step::Script {
            op: "rate_limit",
            keys: vec![key],
            args: vec![lit(60_000_000), lit(burst), lit(n)],
        }
    }

    fn batch(&mut self, owner: &str) -> Step {
        let mut keys = Vec::new();
        let mut args = vec![lit(3_600_000)];
        for _ in 0..self.rng.random_range(1..4) {
            let k = self.name();
            let owner = if self.rng.random_bool(0.5) {
                owner
            } else {
                self.owner()
            };
            let roll = self.rng.random_range(0..10);
            if roll < 2 {
                // A rate limit's decision, on its own key (or now and then a lock string's).
                let burst = self.rng.random_range(1..4u32);
                let n = self.rng.random_range(0..=burst);
                args.extend([lit("g"), lit(60_000_000), lit(burst), lit(n), lit(0)]);
                keys.push(match roll {
                    0 => format!("{}:rate", k.mutex),
                    _ => k.mutex,
                });
                continue;
            }
            if roll < 6 {
                args.extend([
                    lit("a"),
                    lit(owner),
                    lit(60_000),
                    self.count(0),
                    self.flag(),
                ]);
            } else {
                let token = self.token(&k.mutex, owner);
                args.extend([lit("r"), lit(owner), self.count(1), token, lit(&k.released)]);
            }
            keys.push(k.mutex);
        }
        Step::Script {
            op: "batch",
            keys,
            args,
        }
    }

    fn fair_or_rw(&mut self, owner: &str) -> Step {
        let k = self.name();
        let fair = k.fair.to_vec();
        let (op, keys, args) = match self.rng.random_range(0..10) {
            0..=2 => {
                let ttl = lit([0, 60_000, 60_000][self.rng.random_range(0..3)]);
                (
                    "fair_acquire",
                    fair,
                    vec![lit(owner), lit(60_000), self.count(0), ttl],
                )
            }
            3..=4 => {
                let token = self.token(&k.fair[0], owner);
                let args = vec![
                    lit(owner),
                    self.count(1),
                    token,
                    lit(&k.wake),
                    lit(3_600_000),
                ];
                ("fair_release", fair, args)
            }
            5 => ("fair_leave", fair, vec![lit(owner), lit(&k.wake)]),
            6 => ("fair_inspect", fair, vec![lit(owner)]),
            7 => (
                "fair_force_unlock",
                fair,
                vec![lit(&k.wake), lit(3_600_000)],
            ),
            _ => {
                let args = vec![lit(owner), lit(60_000), self.count(0), self.flag()];
                ("rw_write", k.rw.to_vec(), args)
            }
        };
        Step::Script { op, keys, args }
    }

    fn semaphore_or_rw(&mut self, owner: &str) -> Step {
        let (k, other) = (self.name(), self.name());
        let sem = k.sem.to_vec();
        // Each owner takes its own number of permits (1 to 3).
        let n = || lit(1 + owner.bytes().last().map_or(0, |b| b % 3));
        let (op, keys, args) = match self.rng.random_range(0..16) {
            0..=2 => {
                let size = lit(["3", "3", "3", "2"][self.rng.random_range(0..4)]);
                ("sem_acquire", sem, vec![lit(owner), n(), size, lit(60_000)])
            }
            3..=4 => (
                "sem_release",
                sem,
                vec![lit(owner), n(), lit(&k.sem_released)],
            ),
            5 => {
                let keys = [k.sem.to_vec(), other.sem.to_vec()].concat();
                let second = self.owner();
                let m = lit(1 + second.bytes().last().map_or(0, |b| b % 3));
                let args = vec![lit(60_000), lit(owner), n(), lit(second), m];
                ("sem_renew", keys, args)
            }
            6 => ("sem_inspect", sem, vec![]),
            7 => ("sem_force_unlock", sem, vec![lit(&k.sem_released)]),
            8..=10 => {
                let args = vec![lit(owner), lit(60_000), self.count(0), self.flag()];
                ("rw_read", k.rw.to_vec(), args)
            }
            11 => {
                let args = vec![lit(owner), self.count(1), lit(&k.rw_released)];
                ("rw_read_release", vec![k.rw[1].clone()], args)
            }
            12 => {
                let keys = vec![k.rw[1].clone(), other.rw[1].clone()];
                (
                    "rw_read_renew",
                    keys,
                    vec![lit(60_000), lit(owner), lit(self.owner())],
                )
            }
            13 => (
                "rw_unmark",
                vec![k.rw[2].clone()],
                vec![lit(owner), lit(&k.rw_released)],
            ),
            14 => ("rw_inspect", k.rw.to_vec(), vec![]),
            _ => {
                let keys = vec![k.rw[0].clone(), k.rw[1].clone()];
                (
                    "rw_force_unlock",
                    keys,
                    vec![lit(&k.rw_released), lit(3_600_000)],
                )
            }
        };
        Step::Script { op, keys, args }
    }
}

/// A number as compared: clock readings and long durations by their class only.
fn number(n: i64) -> String {
    match n {
        n if n >= 1_000_000_000 => "T".into(),
        n if n <= -1_000_000_000 => "-T".into(),
        n if n >= 1000 => "ms".into(),
        n if n <= -1000 => "-ms".into(),
        n => n.to_string(),
    }
}

/// Text as compared: every run of 10 digits or more (a token, a time) reads `T`.
fn text(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    if let Ok(n) = s.parse::<i64>() {
        return format!("'{}'", number(n));
    }
    let mut out = String::new();
    let mut digits = String::new();
    for c in s.chars().chain(std::iter::once('\0')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        out.push_str(if digits.len() >= 10 { "T" } else { &digits });
        digits.clear();
        if c != '\0' {
            out.push(c);
        }
    }
    format!("'{out}'")
}

/// A reply as compared (an error by its code).
fn reply(value: &Value) -> String {
    match value {
        Value::Nil => "nil".into(),
        Value::Int(n) => number(*n),
        Value::BulkString(b) => text(b),
        Value::Okay => "OK".into(),
        Value::SimpleString(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(reply).collect::<Vec<_>>().join(", ")
        ),
        Value::ServerError(e) => format!("error {}", e.code()),
        other => format!("{other:?}"),
    }
}

/// One side: where it runs calls, and the tokens it granted.
struct Side {
    tokens: HashMap<(String, String), String>,
}

impl Side {
    fn resolve(&self, args: &[Arg]) -> Vec<Vec<u8>> {
        args.iter()
            .map(|a| match a {
                Arg::Lit(s) => s.clone().into_bytes(),
                Arg::Token(key, owner) => self
                    .tokens
                    .get(&(key.clone(), owner.clone()))
                    .cloned()
                    .unwrap_or_else(|| "1".into())
                    .into_bytes(),
            })
            .collect()
    }

    /// Keeps the tokens an acquisition granted.
    fn record(&mut self, op: &str, keys: &[String], args: &[Arg], value: &Value) {
        let token = |v: &Value| match v {
            Value::Int(n) if *n >= 1_000_000_000 => Some(n.to_string()),
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        };
        let owner = |i: usize| match args.get(i) {
            Some(Arg::Lit(o)) => o.clone(),
            _ => String::new(),
        };
        let mut keep = |key: &String, owner: String, v: &Value| {
            if let Some(t) = token(v) {
                self.tokens.insert((key.clone(), owner), t);
            }
        };
        match (op, value) {
            ("acquire" | "fair_acquire" | "rw_write", v) => keep(&keys[0], owner(0), v),
            ("multi_acquire", Value::Array(a)) if a.first() == Some(&Value::Int(1)) => {
                for (key, v) in keys.iter().zip(&a[1..]) {
                    keep(key, owner(0), v);
                }
            }
            ("batch", Value::Array(answers)) => {
                for (i, (key, v)) in keys.iter().zip(answers).enumerate() {
                    if matches!(&args[1 + 5 * i], Arg::Lit(t) if t == "a") {
                        keep(key, owner(2 + 5 * i), v);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The redis-server side: its connection, its messages (every channel, `PSUBSCRIBE *`).
struct Redis {
    con: MultiplexedConnection,
    messages: PubSubStream,
    side: Side,
    marks: u64,
}

impl Redis {
    async fn connect(server: &RedisServer) -> Redis {
        let client = redis::Client::open(server.url()).unwrap();
        let con = client.get_multiplexed_async_connection().await.unwrap();
        let mut pubsub = client.get_async_pubsub().await.unwrap();
        pubsub.psubscribe("*").await.unwrap();
        Redis {
            con,
            messages: pubsub.into_on_message(),
            side: Side {
                tokens: HashMap::new(),
            },
            marks: 0,
        }
    }

    async fn run(&mut self, step: &Step) -> String {
        let value = match step {
            Step::Script { op, keys, args } => {
                let cmd = eval(op, keys, &self.side.resolve(args));
                let value = cmd.query_async::<Value>(&mut self.con).await;
                let value = value.unwrap_or_else(|e| Value::ServerError(server_error(&e)));
                self.side.record(op, keys, args, &value);
                value
            }
            Step::Plain(args) => {
                let value = redis::cmd(&args[0])
                    .arg(&args[1..])
                    .query_async::<Value>(&mut self.con)
                    .await;
                value.unwrap_or_else(|e| Value::ServerError(server_error(&e)))
            }
        };
        reply(&value)
    }

    /// The channels published on since the last call: read up to a mark published now.
    async fn published(&mut self) -> Vec<String> {
        self.marks += 1;
        let mark = format!("mark:{}", self.marks);
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&mark)
            .arg(0)
            .query_async(&mut self.con)
            .await
            .unwrap();
        let mut out = Vec::new();
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(10), self.messages.next())
                .await
                .expect("the mark arrives")
                .expect("the pub/sub connection stays");
            let channel = msg.get_channel_name().to_owned();
            if channel == mark {
                return out;
            }
            out.push(channel);
        }
    }

    /// Every key, sorted, with its type, value and time to live, read in one script.
    async fn dump(&mut self) -> Vec<String> {
        let dump = redis::Script::new(DUMP);
        let keys: Vec<(String, String, Vec<Vec<u8>>, i64)> =
            dump.invoke_async(&mut self.con).await.unwrap();
        keys.iter()
            .map(|(key, kind, parts, pttl)| entry(key, kind, parts, *pttl))
            .collect()
    }
}

/// Every key, sorted: `{key, type, value, pttl}` each (a string's value is `{GET}`).
const DUMP: &str = r"
local keys = redis.call('KEYS', '*')
table.sort(keys)
local out = {}
for _, key in ipairs(keys) do
  local kind = redis.call('TYPE', key)['ok']
  local value
  if kind == 'string' then
    value = {redis.call('GET', key)}
  elseif kind == 'hash' then
    value = redis.call('HGETALL', key)
  else
    value = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  end
  out[#out + 1] = {key, kind, value, redis.call('PTTL', key)}
end
return out
";

/// One key as compared. A sorted set's members are listed by their score as compared, then by
/// name: scores that are times read `T`, and so does the order among them, which the two clocks
/// set (two calls a millisecond apart on one side can fall in the same millisecond on the
/// other, and Redis orders equal scores by name).
fn entry(key: &str, kind: &str, parts: &[Vec<u8>], pttl: i64) -> String {
    let mut parts: Vec<String> = parts.iter().map(|p| text(p)).collect();
    if kind == "zset" {
        let mut members: Vec<(String, String)> = parts
            .chunks(2)
            .map(|pair| (pair[1..].concat(), pair[0].clone()))
            .collect();
        members.sort();
        parts = members
            .into_iter()
            .flat_map(|(score, member)| [member, score])
            .collect();
    }
    format!("{key} {kind} [{}] pttl {}", parts.join(" "), number(pttl))
}

/// The error value of a script's error reply (its code and text).
fn server_error(e: &redis::RedisError) -> redis::ServerError {
    let line = format!(
        "-{} {}\r\n",
        e.code().unwrap_or("ERR"),
        e.detail().unwrap_or("")
    );
    match redis::parse_redis_value(line.as_bytes()) {
        Ok(Value::ServerError(error)) => error,
        other => panic!("{e}: not an error reply: {other:?}"),
    }
}

/// The in-memory side.
struct Memory {
    server: MemoryServer,
    side: Side,
}

impl Memory {
    fn run(&mut self, step: &Step) -> String {
        let value = match step {
            Step::Script { op, keys, args } => {
                let value = self
                    .server
                    .command(&eval(op, keys, &self.side.resolve(args)));
                self.side.record(op, keys, args, &value);
                value
            }
            Step::Plain(args) => self.server.command(redis::cmd(&args[0]).arg(&args[1..])),
        };
        reply(&value)
    }

    fn published(&self) -> Vec<String> {
        self.server
            .published()
            .iter()
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect()
    }

    fn dump(&self) -> Vec<String> {
        self.server
            .dump()
            .iter()
            .map(|k| entry(&k.key, k.kind, &k.value, k.pttl))
            .collect()
    }
}

/// Runs `sequences` seeded sequences of `steps` calls drawn by `next` on both sides, from
/// empty servers, comparing after each call; returns the answers each operation (or command)
/// gave.
async fn compare(
    server: &RedisServer,
    (sequences, steps): (u64, usize),
    mut next: impl FnMut(&mut Draw) -> Step,
) -> HashMap<String, BTreeSet<String>> {
    let mut redis = Redis::connect(server).await;
    let mut seen = HashMap::<String, BTreeSet<String>>::new();
    for seed in 0..sequences {
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut redis.con)
            .await
            .unwrap();
        redis.published().await;
        redis.side.tokens.clear();
        let mut memory = Memory {
            server: MemoryServer::new(),
            side: Side {
                tokens: HashMap::new(),
            },
        };
        memory.published();
        let mut draw = Draw {
            rng: StdRng::seed_from_u64(seed),
            foreign: Vec::new(),
        };
        let mut history: Vec<String> = Vec::new();
        for i in 0..steps {
            let step = next(&mut draw);
            let (mut on_redis, mut in_memory) = (redis.run(&step).await, memory.run(&step));
            if matches!(&step, Step::Plain(args) if args[0] == "PUBLISH") {
                // How many heard it: this test's own subscriber on Redis, nobody in memory.
                (on_redis, in_memory) = ("published".into(), "published".into());
            }
            let what = match &step {
                Step::Script { op, .. } => op.to_string(),
                Step::Plain(args) => args[0].clone(),
            };
            seen.entry(what).or_default().insert(on_redis.clone());
            history.push(format!(
                "{i}: {step:?}\n    redis  {on_redis}\n    memory {in_memory}"
            ));
            let context = || history[history.len().saturating_sub(12)..].join("\n");
            assert_eq!(
                on_redis,
                in_memory,
                "seed {seed}, the replies differ:\n{}",
                context()
            );
            let published = (redis.published().await, memory.published());
            assert_eq!(
                published.0,
                published.1,
                "seed {seed}, the messages differ:\n{}",
                context()
            );
            let dumps = (redis.dump().await, memory.dump());
            assert_eq!(
                dumps.0,
                dumps.1,
                "seed {seed}, the keys differ:\n{}",
                context()
            );
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_answers_and_writes_as_its_lua_script_does() {
    let server = RedisServer::start();
    let seen = compare(&server, (SEQUENCES, STEPS), Draw::step).await;
    let missed: Vec<_> = OPERATIONS
        .iter()
        .map(|(op, _)| *op)
        .filter(|op| !seen.contains_key(*op))
        .collect();
    assert!(missed.is_empty(), "never called: {missed:?}");
    // Each operation went down more than one path (granted and busy, held and not, ...).
    let narrow: Vec<_> = seen
        .iter()
        .filter(|(op, answers)| OPERATIONS.iter().any(|(name, _)| name == op) && answers.len() < 2)
        .collect();
    assert!(narrow.is_empty(), "one answer only: {narrow:?}");
}

/// The native mutex protocol's commands (Valkey 9's `SET … IFEQ` and `DELIFEQ`, and the rest of
/// what `wire/native/` sends) against the server's own, where the test server has them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_native_protocols_commands_answer_and_write_as_the_servers_do() {
    let server = RedisServer::start();
    let delifeq = server.cmd(&["COMMAND", "INFO", "DELIFEQ"]);
    if delifeq.trim().is_empty() || delifeq == "(nil)" {
        // Written to the stream itself: the test harness does not capture it, so it is loud.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED the_native_protocols_commands_answer_and_write_as_the_servers_do: the test \
             server has no DELIFEQ (run with REDIS_SERVER_BIN set to scripts/ensure-valkey.sh's \
             valkey-server)"
        );
        return;
    }
    let seen = compare(&server, (SEQUENCES, STEPS), Draw::native_step).await;
    // Each command went down more than one path (a PUBLISH's answer is not compared).
    let narrow: Vec<_> = seen
        .iter()
        .filter(|(command, answers)| *command != "PUBLISH" && answers.len() < 2)
        .collect();
    assert!(narrow.is_empty(), "one answer only: {narrow:?}");
}

/// `OPERATIONS` names every script of lock-core's sources but the prelude.
#[test]
fn operations_are_all_here() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../lock-core/src/wire/scripts");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".lua").map(str::to_owned))
        .filter(|f| f != "prelude")
        .collect();
    files.sort();
    let mut listed: Vec<&str> = OPERATIONS.iter().map(|(op, _)| *op).collect();
    listed.sort();
    assert_eq!(files, listed);
}
