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
mod fault;
mod history;
mod judge;
mod names;
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
    fault::FaultKind::ALL.iter().map(|k| k.name()).collect()
}
