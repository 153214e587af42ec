//! A randomized fault soak of lock-core, Jepsen-style (see `examples/lock-chaos/README.md`).
//!
//! `run` (the coordinator) starts the lock servers (one redis-server, a Sentinel group or a
//! Cluster, from the test harness), a *check* server the nemesis never touches (the fenced
//! store), a `FaultProxy` per worker (standalone) and the worker processes (this binary's
//! `worker` sub-command). The workers take every kind of lock — mutex, fair lock, read-write
//! lock, semaphore, multi-lock, and the tower layer over HTTP — on a few shared names and
//! report every acquisition and critical section on their standard output. A nemesis injects
//! faults on a schedule computed from the seed. After the run, the checkers (`check`) read the
//! whole history, and so does an outside judge (`judge`: stateright's linearizability tester).
//!
//! These files are compiled twice: into the `lock-chaos` binary, and into the test suite
//! (`tests/tests/chaos.rs`, with `#[path]`), so they use only crates `lock-tests` also has.

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

// The binary and the test suite each use some of these.
#[allow(unused_imports)]
pub(crate) use cli::{Command, USAGE, default_seed, parse};
#[allow(unused_imports)]
pub(crate) use coordinator::{Launcher, run_blocking};
#[allow(unused_imports)]
pub(crate) use nemesis::FaultKind;
#[allow(unused_imports)]
pub(crate) use worker::worker_main;

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
