//! The command line: which scenarios to run, how much of them, and where.

use std::path::PathBuf;

use lock_core::MutexProtocol;

use crate::contender::parse_protocol;

/// Every scenario, in the order they run.
pub(crate) const SCENARIOS: [&str; 12] = [
    "W1", "W2", "W3h", "W3x", "W4", "W5", "W6", "W7", "R1", "R2", "S1", "X1",
];

/// The parsed command line.
pub(crate) struct Args {
    pub(crate) quick: bool,
    pub(crate) redis: Option<String>,
    pub(crate) json: Option<PathBuf>,
    pub(crate) svg: Option<PathBuf>,
    pub(crate) only: Option<Vec<String>>,
    pub(crate) rslock_retry_ms: u64,
    pub(crate) pool: u32,
    /// How many times to run the plan (`--runs`, 1..=9); the output is the median.
    pub(crate) runs: usize,
    /// lock-core's mutex protocol (`--mutex-protocol`, default `auto`).
    pub(crate) mutex_protocol: MutexProtocol,
    /// X1's client processes (`--x1-procs`, 1..=64, default 4).
    pub(crate) x1_procs: usize,
}

const USAGE: &str = "usage: lock-bench [--quick] [--redis URL] [--json FILE] [--svg FILE] \
                     [--only W1,W2,W3h,W3x,W4,W5,W6,W7,R1,R2,S1,X1] [--rslock-retry-ms N] [--pool N] [--runs N] \
                     [--mutex-protocol auto|native|hybrid|scripted] [--x1-procs K]\n\
                     --runs N (1..=9, default 1): run the plan N times against the same server \
                     and report the median across the runs of every figure (a ratio: the median \
                     of the per-run ratios); BENCH lines then end with runs=N and each value's \
                     and ratio's range (<field>_min=, <field>_max=), --json adds each run's \
                     result under \"runs\"\n\
                     --mutex-protocol P (default auto): the protocol ours speaks, to compare \
                     them on one server (a protocol the server cannot speak fails at connect)\n\
                     --x1-procs K (1..=64, default 4): X1's client processes";

/// Parses `argv` (with the program name); exits with usage on a bad argument.
pub(crate) fn parse_args(argv: &[String]) -> Args {
    let mut args = Args {
        quick: false,
        redis: None,
        json: None,
        svg: None,
        only: None,
        rslock_retry_ms: 10,
        pool: 16,
        runs: 1,
        mutex_protocol: MutexProtocol::Auto,
        x1_procs: 4,
    };
    let mut it = argv[1.min(argv.len())..].iter();
    let value = |it: &mut std::slice::Iter<'_, String>, flag: &str| -> String {
        it.next().cloned().unwrap_or_else(|| {
            eprintln!("{flag} needs a value; {USAGE}");
            std::process::exit(2)
        })
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => args.quick = true,
            "--redis" => args.redis = Some(value(&mut it, a)),
            "--json" => args.json = Some(value(&mut it, a).into()),
            "--svg" => args.svg = Some(value(&mut it, a).into()),
            "--only" => {
                let list = value(&mut it, a);
                let only: Vec<String> = list.split(',').map(|s| s.trim().to_owned()).collect();
                if let Some(bad) = only.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
                    eprintln!("unknown scenario {bad:?}; known: {SCENARIOS:?}");
                    std::process::exit(2);
                }
                args.only = Some(only);
            }
            "--rslock-retry-ms" => {
                args.rslock_retry_ms =
                    number(a, &value(&mut it, a), None, "a number of milliseconds")
            }
            "--pool" => args.pool = number(a, &value(&mut it, a), None, "a number"),
            "--mutex-protocol" => {
                let name = value(&mut it, a);
                args.mutex_protocol = parse_protocol(&name).unwrap_or_else(|| {
                    eprintln!("--mutex-protocol needs auto, native, hybrid or scripted");
                    std::process::exit(2)
                })
            }
            "--runs" => {
                args.runs = number(a, &value(&mut it, a), Some(1..=9), "a number from 1 to 9")
            }
            "--x1-procs" => {
                args.x1_procs = number(a, &value(&mut it, a), Some(1..=64), "a number from 1 to 64")
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => {
                eprintln!("unknown argument {other:?}; {USAGE}");
                std::process::exit(2);
            }
        }
    }
    args
}

/// `text`, the value of `flag`, as a number (within `range`, if one is given); else exits
/// saying that `flag` needs `what`.
fn number<T: std::str::FromStr + PartialOrd>(
    flag: &str,
    text: &str,
    range: Option<std::ops::RangeInclusive<T>>,
    what: &str,
) -> T {
    text.parse()
        .ok()
        .filter(|n| range.as_ref().is_none_or(|r| r.contains(n)))
        .unwrap_or_else(|| {
            eprintln!("{flag} needs {what}; {USAGE}");
            std::process::exit(2)
        })
}

impl Args {
    /// Whether `--only` (if given) names `scenario`.
    pub(crate) fn wants(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|s| s == scenario))
    }
}
