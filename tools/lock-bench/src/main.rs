//! `lock-bench`: lock-core ("ours") against the floor (the minimal correct lock, written in
//! this crate: `SET key token NX PX` + a compare-and-delete script on one multiplexed
//! connection, pub/sub wake-ups where it waits) and against rslock (crates.io), measured in
//! one run on one private redis-server. Every figure is also reported as a ratio.
//!
//! W1, W2 and W6 also run a fourth row that is not a contender: the floor's client sending
//! lock-core's own server calls (`FCALL` of the acquire and release functions lock-core
//! loaded). Its rate over the floor's is what lock-core's server side alone leaves (no client
//! of those calls does better); ours over its rate is what lock-core's client keeps of that.
//!
//! On a server with `DELIFEQ` (Valkey 9; `REDIS_SERVER_BIN` picks the binary the bench
//! starts) every scenario but W5 also runs the *native floor* last: the floor without scripts
//! (`SET NX PX`, `DELIFEQ`, a waiters flag; see `floor.rs`). Every `BENCH` line ends with the
//! server µs per cycle of each row, then the client's CPU µs per cycle of each row (this
//! process's user + system CPU over the row's timed run, over its cycles; see `measure.rs`).
//!
//! ```text
//! cargo run --release -p lock-bench -- [--quick] [--redis URL] [--json FILE] [--svg FILE]
//!                                      [--only W1,W3h,R1,S1,X1,...] [--rslock-retry-ms N] [--pool N]
//!                                      [--runs N] [--x1-procs K]
//! ```
//!
//! | scenario | what |
//! |---|---|
//! | W1 | 1 task, 20,000 acquire + release cycles on distinct names |
//! | W2 | 64 tasks, 100,000 cycles on distinct names |
//! | W3h | 16 tasks in this process on one name, 2,000 sections of 1 ms, strict hand-off |
//! | W3x | the same across 4 processes × 4 tasks (this binary run as child processes) |
//! | W4 | one waiter on another client; the holder releases after 100 ms; 20 trials |
//! | W5 | 100,000 watchdog-leased locks (9 s lease; quick: 25,000 on 3 s) held for 3 renewal periods |
//! | W6 | axum handler behind `DistributedLockLayer` vs the same handler locking itself (W6n: the layer vs the handler calling the floor, both on a `TCP_NODELAY` server) |
//! | W7 | a realistic mix: 64 tasks over 10,000 names drawn Zipf(1.0), 1 ms hold, 200,000 sections or 30 s |
//! | R1 | rate-limit decisions: 64 tasks, 100,000 decisions on one hot key, lock-core's `RateLimit::check` against the fixed-window floor (`INCR` + `PEXPIRE … NX`) |
//! | R2 | the same over 10,000 keys |
//! | S1 | every lock-core server call, one at a time on fresh names (2,000 each): server µs per call, next to the floor's `SET NX PX` and compare-and-delete |
//! | X1 | the server's capacity: 4 processes (`--x1-procs`) × 16 tasks cycling on distinct names for 10 s a contender (quick: 3 s), the server pinned to CPU 0 and the clients to the others where it can be: cycles per second of the server's CPU time |
//!
//! `--runs N` (1 to 9) runs the plan N times in one process against the same server and reports
//! the median across the runs of every figure (`median`); a ratio is the median of the per-run
//! ratios. `BENCH` lines then end with `runs=N` and the ranges; the JSON adds every run's result.
//!
//! `--quick` runs a quarter of the cycles, sections, locks and requests, W7 for a quarter
//! of its sections and time and X1 for 3 s a contender (≤ 2 min); the full run takes about 5
//! minutes. See the README of
//! this directory for what each number means.
//!
//! The modules: `cli` and `plan` (what to run), `run` (a whole run), one per scenario family
//! (`cycles`: W1 and W2; `w3`: W3h and W3x; `w4` to `w7`; `saturate`: X1), `children` (this
//! binary re-run as child processes, for W3x and X1), `measure` (the measuring frame of
//! every timed run), `report` (tables, targets, `BENCH` lines, files), and the contenders and
//! their drivers (`contender`, `floor`, `handoff`, `mix`, `watchdog`, `http`); R1 and R2's
//! scenario is `rate`, its floor `window` (a fixed-window rate limiter); S1's is `calls`.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod allocs;
mod calls;
mod chart;
mod children;
mod cli;
mod contender;
mod ctx;
mod cycles;
mod floor;
mod handoff;
mod http;
mod measure;
mod median;
mod mix;
mod monitor;
mod plan;
mod rate;
mod report;
mod run;
mod saturate;
mod server;
mod stats;
mod sys;
mod w3;
mod w4;
mod w5;
mod w6;
mod w7;
mod watchdog;
mod window;

use std::time::Duration;

fn main() {
    // With the `metrics` feature, lock-core records into a recorder that keeps nothing, so a
    // run measures what the calls cost (every process: W3x and W5 children too).
    #[cfg(feature = "metrics")]
    metrics::set_global_recorder(metrics::NoopRecorder).expect("the first recorder of the process");
    let argv: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match argv.get(1).map(String::as_str) {
        Some("__w3x-child") => {
            let Some(args) = handoff::ChildArgs::parse(&argv[2..]) else {
                eprintln!("bad __w3x-child arguments");
                std::process::exit(2);
            };
            rt.block_on(handoff::child_main(args));
        }
        Some("__x1-child") => {
            let Some(args) = saturate::ChildArgs::parse(&argv[2..]) else {
                eprintln!("bad __x1-child arguments");
                std::process::exit(2);
            };
            rt.block_on(saturate::child_main(args));
        }
        Some("__w5-child") => {
            let Some(args) = watchdog::ChildArgs::parse(&argv[2..]) else {
                eprintln!("bad __w5-child arguments");
                std::process::exit(2);
            };
            rt.block_on(watchdog::child_main(args));
        }
        _ => {
            let args = cli::parse_args(&argv);
            let ok = rt.block_on(run::bench(args));
            // Child processes and the redis-server are gone by now; do not wait for stray
            // background tasks (W5's rslock holders, watchdogs) to notice.
            rt.shutdown_timeout(Duration::from_secs(1));
            std::process::exit(if ok { 0 } else { 1 });
        }
    }
}
