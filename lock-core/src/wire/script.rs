//! The Lua code and how a call reaches it.
//!
//! Each operation is a body in `scripts/<op>.lua` that reads `KEYS` and `ARGV`; the helpers
//! they share (the lock-string format, the server clock, tokens, the busy answer, acquiring
//! and releasing a lock string) are in `scripts/prelude.lua`. The same sources are sent two
//! ways:
//!
//! - as one Redis **function library** (`FUNCTION LOAD`, Redis 7.0+): the prelude and every
//!   operation as a function, called with `FCALL`. The helpers are created once, when the
//!   library loads, instead of on every call;
//! - as **scripts** (`EVALSHA`, `EVAL` on `NOSCRIPT`), prelude in front of each, where
//!   functions cannot be loaded (a server older than 7.0, or an ACL user without
//!   `FUNCTION LOAD`).
//!
//! The library's and the functions' names carry a hash of the library's text, so clients of
//! different versions never call each other's code. Operations that wake waiters publish with
//! `PUBLISH` on a standalone or Sentinel server and with `SPUBLISH` on a Cluster (where a
//! message then travels only within the lock's shard): the sharded flavour is made from the
//! same sources.

use std::io;
use std::sync::LazyLock;

use redis::{Cmd, RedisWrite, Script, ToRedisArgs};

use super::answer::Shape;

const PRELUDE: &str = include_str!("scripts/prelude.lua");

macro_rules! ops {
    (@fence_ttl) => { None };
    (@fence_ttl $at:literal) => { Some($at) };
    ($($op:ident => $file:literal, $feature:literal $(, fence_ttl = $at:literal)?;)*) => {
        /// One operation of the Lua code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Op {
            $($op,)*
        }

        impl Op {
            pub(crate) const ALL: &'static [Op] = &[$(Op::$op),*];

            /// The operation's name (its file, and its function's suffix).
            pub(crate) fn name(self) -> &'static str {
                match self {
                    $(Op::$op => $file,)*
                }
            }

            /// What needs the operation, for an error that says it cannot run.
            pub(crate) fn feature(self) -> &'static str {
                match self {
                    $(Op::$op => $feature,)*
                }
            }

            /// Where the operation takes how long a free lock keeps its fencing counter (the
            /// client's fence TTL): its `ARGV` index, from 1; None if it takes none.
            pub(crate) fn fence_ttl_arg(self) -> Option<usize> {
                match self {
                    $(Op::$op => ops!(@fence_ttl $($at)?),)*
                }
            }

            /// How the operation's reply is laid out, for an acquisition (None: not one).
            pub(crate) fn shape(self) -> Option<Shape> {
                match self {
                    Op::Acquire | Op::FairAcquire | Op::RwRead | Op::RwWrite => Some(Shape::Int),
                    Op::MultiAcquire | Op::SemAcquire => Some(Shape::Table),
                    _ => None,
                }
            }

            fn source(self) -> &'static str {
                match self {
                    $(Op::$op => include_str!(concat!("scripts/", $file, ".lua")),)*
                }
            }
        }
    };
}

// Each operation: its file, what needs it (named in an error when it cannot run), and the
// `ARGV` index of the fence TTL where it takes one.
ops!(
    Acquire => "acquire", "mutex";
    Release => "release", "mutex", fence_ttl = 5;
    ReleaseKeep => "release_keep", "mutex";
    Batch => "batch", "mutex", fence_ttl = 1;
    Renew => "renew", "mutex";
    ForceUnlock => "force_unlock", "mutex", fence_ttl = 2;
    Inspect => "inspect", "mutex";
    MultiAcquire => "multi_acquire", "multi-lock";
    FairAcquire => "fair_acquire", "fair lock";
    FairRelease => "fair_release", "fair lock", fence_ttl = 5;
    FairLeave => "fair_leave", "fair lock";
    FairInspect => "fair_inspect", "fair lock";
    FairForceUnlock => "fair_force_unlock", "fair lock", fence_ttl = 2;
    RwWrite => "rw_write", "read-write lock";
    RwRead => "rw_read", "read-write lock";
    RwReadRelease => "rw_read_release", "read-write lock";
    RwReadRenew => "rw_read_renew", "read-write lock";
    RwUnmark => "rw_unmark", "read-write lock";
    RwInspect => "rw_inspect", "read-write lock";
    RwForceUnlock => "rw_force_unlock", "read-write lock", fence_ttl = 2;
    SemAcquire => "sem_acquire", "semaphore";
    SemRelease => "sem_release", "semaphore";
    SemRenew => "sem_renew", "semaphore";
    SemInspect => "sem_inspect", "semaphore";
    SemForceUnlock => "sem_force_unlock", "semaphore";
    RecordPut => "record_put", "records";
    RateLimit => "rate_limit", "rate limit";
    RateInspect => "rate_inspect", "rate limit";
    GuardedUpdate => "guarded_update", "guarded update";
);

impl Op {
    /// The operation as a script, the prelude in front: exactly the text the plain flavour
    /// ([`Scripts::get`]`(false)`) sends with `EVAL`, for the in-memory server's interpreter.
    #[cfg(feature = "testing")]
    pub(crate) fn script_text(self) -> String {
        format!("{PRELUDE}{}", self.source())
    }
}

/// How calls reach the Lua code on a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `FCALL` into the loaded function library.
    Function,
    /// `EVALSHA` (`EVAL` after a `NOSCRIPT`).
    Script,
}

/// The Lua code of one flavour (plain or sharded publishing).
pub(crate) struct Scripts {
    /// The `FUNCTION LOAD` text.
    library: String,
    /// Each operation's function name, by `Op` index.
    functions: Vec<String>,
    /// Each operation as a script, by `Op` index.
    scripts: Vec<Script>,
}

impl Scripts {
    /// The code for a topology: sharded (`SPUBLISH`) for a Cluster.
    pub(crate) fn get(sharded: bool) -> &'static Scripts {
        static PLAIN: LazyLock<Scripts> = LazyLock::new(|| Scripts::build(false));
        static SHARDED: LazyLock<Scripts> = LazyLock::new(|| Scripts::build(true));
        if sharded { &SHARDED } else { &PLAIN }
    }

    fn build(sharded: bool) -> Self {
        let flavour = |text: &str| {
            if sharded {
                text.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'")
            } else {
                text.to_owned()
            }
        };
        let prelude = flavour(PRELUDE);
        let scripts = Op::ALL
            .iter()
            .map(|op| Script::new(&format!("{prelude}{}", flavour(op.source()))))
            .collect();
        // The body of every operation, as a function taking KEYS and ARGV.
        let mut bodies = String::new();
        for op in Op::ALL {
            let name = op.name();
            bodies.push_str(&format!(
                "local function op_{name}(KEYS, ARGV)\n{}\nend\n",
                flavour(op.source())
            ));
        }
        let hash = Script::new(&format!("{prelude}{bodies}")).get_hash()[..12].to_owned();
        let prefix = format!("lockcore_{hash}");
        let functions: Vec<String> = Op::ALL
            .iter()
            .map(|op| format!("{prefix}_{}", op.name()))
            .collect();
        let mut library = format!("#!lua name={prefix}\n{prelude}{bodies}");
        for (op, function) in Op::ALL.iter().zip(&functions) {
            library.push_str(&format!(
                "redis.register_function('{function}', op_{})\n",
                op.name()
            ));
        }
        Scripts {
            library,
            functions,
            scripts,
        }
    }

    /// The function library's text, for `FUNCTION LOAD REPLACE`.
    pub(crate) fn library(&self) -> &str {
        &self.library
    }

    /// Every operation as a script, for `SCRIPT LOAD`.
    pub(crate) fn scripts(&self) -> &[Script] {
        &self.scripts
    }

    fn index(op: Op) -> usize {
        Op::ALL.iter().position(|o| *o == op).unwrap_or(0)
    }

    /// The script of `op`.
    pub(crate) fn script(&self, op: Op) -> &Script {
        &self.scripts[Self::index(op)]
    }
}

/// One call of an operation: its keys and arguments, written as they are given (one buffer
/// for all, not one allocation per argument; a key is marked as one), sent as `FCALL` or
/// `EVALSHA` with its keys first.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    op: Op,
    args: Args,
}

impl Call {
    pub(crate) fn new(op: Op) -> Self {
        Self {
            op,
            // Room for a typical call (a key or two, an owner id and a few numbers), so
            // writing it does not grow the buffers argument by argument.
            args: Args::with_capacity(12, 224),
        }
    }

    pub(crate) fn op(&self) -> Op {
        self.op
    }

    /// Whether the call may go out in a [`batch`](Self::batch) with others: a mutex's
    /// acquisition or release, a rate limit's decision.
    pub(crate) fn batches(&self) -> bool {
        matches!(self.op, Op::Acquire | Op::Release | Op::RateLimit)
    }

    /// Whether a repeat of an applied call is recognised or changes nothing, so that a backend
    /// may send it again after its connection broke: every operation's is, but a rate
    /// limit's decision (a repeat would take a second permit), alone or in a batch.
    pub(crate) fn repeat_safe(&self) -> bool {
        match self.op {
            Op::RateLimit => false,
            // A batch's arguments: the fence TTL, then per request its tag and four.
            Op::Batch => !self
                .args
                .of(false)
                .skip(1)
                .step_by(5)
                .any(|tag| tag == b"g"),
            _ => true,
        }
    }

    /// Adds a key (each key of a call must be in one Cluster slot).
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        let from = self.args.len();
        key.write_redis_args(&mut self.args);
        self.args.mark_keys(from);
        self
    }

    /// Adds an argument.
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// The keys, as given (for the in-memory backend, which runs the operation itself).
    #[cfg(feature = "testing")]
    pub(crate) fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.args.of(true)
    }

    /// The arguments, as given.
    #[cfg(feature = "testing")]
    pub(crate) fn args(&self) -> impl Iterator<Item = &[u8]> {
        self.args.of(false)
    }

    /// One [`Op::Batch`] call doing `calls` (each an [`Op::Acquire`], an [`Op::Release`] or an
    /// [`Op::RateLimit`]) in order, each with its own answer (see `batch.lua`); `None` if any
    /// call is of another operation.
    pub(crate) fn batch(calls: &[&Call]) -> Option<Call> {
        // ARGV[1]: the releases' fence TTL (one value per client).
        let fence_ttl = calls
            .iter()
            .find_map(|c| c.args.of(false).nth(c.op.fence_ttl_arg()?.checked_sub(1)?))
            .unwrap_or(b"0");
        let mut batch = Call::new(Op::Batch);
        batch.arg(fence_ttl);
        for call in calls {
            // Each operation takes four arguments in a batch: its first four (a decision has
            // three, and a 0 after them).
            let (tag, given): (&[u8], usize) = match call.op {
                Op::Acquire => (b"a", 4),
                Op::Release => (b"r", 4),
                Op::RateLimit => (b"g", 3),
                _ => return None,
            };
            let key = call.args.of(true).next()?;
            if call.args.of(false).count() < given {
                return None;
            }
            batch.key(key).arg(tag);
            for arg in call.args.of(false).take(given) {
                batch.arg(arg);
            }
            for _ in given..4 {
                batch.arg(b"0");
            }
        }
        Some(batch)
    }

    /// The command, in `mode`.
    pub(crate) fn cmd(&self, scripts: &Scripts, mode: Mode) -> Cmd {
        let index = Scripts::index(self.op);
        let mut cmd = Cmd::with_capacity(3 + self.args.len(), 64 + self.args.data.len());
        match mode {
            Mode::Function => cmd.arg("FCALL").arg(scripts.functions[index].as_str()),
            Mode::Script => cmd.arg("EVALSHA").arg(scripts.scripts[index].get_hash()),
        };
        cmd.arg(self.args.of(true).count());
        for arg in self.args.of(true).chain(self.args.of(false)) {
            cmd.arg(arg);
        }
        cmd
    }
}

/// Arguments in one buffer: the bytes of each, one after another, and where each ends, with
/// [`KEY`] set on the end of a key.
#[derive(Debug, Clone, Default)]
struct Args {
    data: Vec<u8>,
    ends: Vec<usize>,
}

/// The mark of a key's end in [`Args::ends`] (a call's bytes never come near it).
const KEY: usize = 1 << (usize::BITS - 1);

impl Args {
    fn with_capacity(args: usize, bytes: usize) -> Self {
        Self {
            data: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(args),
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    /// Marks every argument from the `from`-th on as a key.
    fn mark_keys(&mut self, from: usize) {
        for end in self.ends.iter_mut().skip(from) {
            *end |= KEY;
        }
    }

    /// The keys (`true`) or the other arguments, in the order written.
    fn of(&self, keys: bool) -> impl Iterator<Item = &[u8]> {
        let ends = self.ends.iter().map(|&e| (e & !KEY, e & KEY != 0));
        let starts = std::iter::once(0).chain(ends.clone().map(|(e, _)| e));
        starts
            .zip(ends)
            .filter(move |&(_, (_, key))| key == keys)
            .map(|(s, (e, _))| &self.data[s..e])
    }
}

impl RedisWrite for Args {
    fn write_arg(&mut self, arg: &[u8]) {
        self.data.extend_from_slice(arg);
        self.ends.push(self.data.len());
    }

    fn write_arg_fmt(&mut self, arg: impl std::fmt::Display) {
        use std::io::Write;
        let _ = write!(self.data, "{arg}");
        self.ends.push(self.data.len());
    }

    fn writer_for_next_arg(&mut self) -> impl io::Write + '_ {
        struct Next<'a>(&'a mut Args);
        impl io::Write for Next<'_> {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0.data.extend_from_slice(buf);
                Ok(buf.len())
            }

            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        impl Drop for Next<'_> {
            fn drop(&mut self) {
                self.0.ends.push(self.0.data.len());
            }
        }
        Next(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sharded_flavour_publishes_with_spublish_only() {
        let (plain, sharded) = (Scripts::get(false), Scripts::get(true));
        assert!(plain.library().contains("redis.call('PUBLISH'"));
        assert!(!plain.library().contains("SPUBLISH"));
        assert!(sharded.library().contains("redis.call('SPUBLISH'"));
        assert!(!sharded.library().contains("'PUBLISH'"));
        assert_ne!(plain.functions[0], sharded.functions[0]);
        let release = Scripts::index(Op::Release);
        assert_ne!(
            plain.scripts[release].get_hash(),
            sharded.scripts[release].get_hash()
        );
    }

    #[test]
    fn the_lock_string_format_is_written_in_the_prelude_only() {
        let pattern = "(%d+)|(%d+)|(%d*)|(1?)$";
        assert!(PRELUDE.contains(pattern));
        for op in Op::ALL {
            assert!(
                !op.source().contains(pattern),
                "{op:?} parses lock strings itself"
            );
        }
    }

    #[test]
    fn a_call_renders_as_fcall_or_evalsha() {
        let scripts = Scripts::get(false);
        let mut call = Call::new(Op::Acquire);
        call.key("lock:{a}")
            .arg("owner")
            .arg(30_000u64)
            .arg(0u32)
            .arg("1");
        let text = |cmd: Cmd| String::from_utf8_lossy(&cmd.get_packed_command()).into_owned();
        let f = text(call.cmd(scripts, Mode::Function));
        assert!(
            f.contains("FCALL") && f.contains("_acquire") && f.contains("lock:{a}"),
            "{f}"
        );
        assert!(f.contains("$5\r\n30000\r\n"), "{f}");
        let s = text(call.cmd(scripts, Mode::Script));
        assert!(s.contains("EVALSHA") && s.contains(scripts.script(Op::Acquire).get_hash()));
    }

    #[test]
    fn a_batch_lays_out_each_call_as_batch_lua_reads_it() {
        let mut acquire = Call::new(Op::Acquire);
        acquire
            .key("lock:{a}")
            .arg("o:1")
            .arg(30_000u64)
            .arg(0u32)
            .arg("1");
        let mut release = Call::new(Op::Release);
        release
            .key("lock:{b}")
            .arg("o:2")
            .arg(1u32)
            .arg(77u64)
            .arg("lock:{b}:released")
            .arg(3_600_000u64);
        let mut decide = Call::new(Op::RateLimit);
        decide
            .key("lock:{c}:rate")
            .arg(100_000u64)
            .arg(5u32)
            .arg(1u32);
        let batch = Call::batch(&[&acquire, &release, &decide]).unwrap();
        let keys: Vec<&[u8]> = batch.args.of(true).collect();
        assert_eq!(keys, [&b"lock:{a}"[..], b"lock:{b}", b"lock:{c}:rate"]);
        let args: Vec<String> = batch
            .args
            .of(false)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "3600000",
                "a",
                "o:1",
                "30000",
                "0",
                "1",
                "r",
                "o:2",
                "1",
                "77",
                "lock:{b}:released",
                "g",
                "100000",
                "5",
                "1",
                "0"
            ]
        );
        // Only acquisitions, releases and rate-limit decisions batch.
        assert!(Call::batch(&[&Call::new(Op::Renew)]).is_none());
    }

    #[test]
    fn the_fence_ttl_column_is_where_each_script_reads_it() {
        let documented = |op: Op| {
            op.source().lines().find_map(|line| {
                let rest = line.strip_prefix("-- ARGV[")?;
                let (at, what) = rest.split_once("]: ")?;
                what.starts_with("how long a free lock keeps its fencing counter")
                    .then(|| at.parse::<usize>().ok())
                    .flatten()
            })
        };
        let mut taking = 0;
        for &op in Op::ALL {
            assert_eq!(op.fence_ttl_arg(), documented(op), "{op:?}");
            taking += usize::from(op.fence_ttl_arg().is_some());
        }
        assert_eq!(taking, 6, "the scripts that take a fence TTL");
    }

    #[test]
    fn every_operation_names_what_needs_it() {
        let features = [
            "mutex",
            "multi-lock",
            "fair lock",
            "read-write lock",
            "semaphore",
            "records",
            "rate limit",
            "guarded update",
        ];
        for &op in Op::ALL {
            assert!(features.contains(&op.feature()), "{op:?}: {}", op.feature());
        }
        assert_eq!(Op::FairRelease.feature(), "fair lock");
        assert_eq!(Op::RwReadRenew.feature(), "read-write lock");
        assert_eq!(Op::Batch.feature(), "mutex");
    }

    #[test]
    fn the_library_registers_every_operation_under_a_versioned_name() {
        let scripts = Scripts::get(false);
        assert!(scripts.library().starts_with("#!lua name=lockcore_"));
        for (op, function) in Op::ALL.iter().zip(&scripts.functions) {
            assert!(function.ends_with(op.name()));
            assert!(scripts.library().contains(&format!("'{function}'")));
        }
    }
}
