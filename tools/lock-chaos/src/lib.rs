//! The runner of `lock-chaos`, a randomized fault soak of lock-core, Jepsen-style (see
//! `tools/lock-chaos/README.md`); `src/main.rs` is its command line and `tests/chaos.rs` its CI
//! form.
//!
//! `run` (the coordinator) starts the lock servers (one redis-server, a Sentinel group or a
//! Cluster, from the test harness), a *check* server the nemesis never touches (the fenced
//! store), a `FaultProxy` per worker (standalone) and the worker processes (the binary's
//! `worker` sub-command, or the CI test's own binary: see [`Launcher`]). The workers take
//! every kind of lock — mutex, fair lock, read-write lock, semaphore, multi-lock, and the
//! tower layer over HTTP — on a few shared names and report every acquisition and critical
//! section on their standard output. A nemesis injects
//! faults on a schedule computed from the seed. After the run, the checkers (`check`) read the
//! whole history, and so does an outside judge (`judge`: stateright's linearizability tester).

mod check;
mod cli;
mod coordinator;
mod event;
mod history;
mod judge;
mod nemesis;
mod report;
mod rng;
mod store;
mod topology;
mod worker;

pub use cli::{Command, RunConfig, USAGE, WorkerArgs, default_seed, parse};
pub use coordinator::{Launcher, run_blocking};
pub use report::Report;
pub use worker::worker_main;

/// The name of every kind of fault the nemesis knows (`--faults` takes a list of them).
pub fn fault_kind_names() -> Vec<&'static str> {
    nemesis::FaultKind::ALL.iter().map(|k| k.name()).collect()
}

/// The key prefix of every lock (the client's default).
pub(crate) const KEY_PREFIX: &str = "lock:";
/// The shared names: a few of each kind, so that contention is high.
pub(crate) const MUTEX_NAMES: [&str; 3] = ["m:0", "m:1", "m:2"];
pub(crate) const FAIR_NAMES: [&str; 2] = ["f:0", "f:1"];
pub(crate) const RW_NAMES: [&str; 2] = ["r:0", "r:1"];
pub(crate) const SEM_NAMES: [&str; 2] = ["s:0", "s:1"];
/// Every user of a semaphore name must give the same size.
pub(crate) const SEM_SIZE: u32 = 2;
/// Every lock name of a run (the Cluster's slot migrations pick among them).
pub(crate) const ALL_NAMES: [&str; 9] = [
    "m:0", "m:1", "m:2", "f:0", "f:1", "r:0", "r:1", "s:0", "s:1",
];
