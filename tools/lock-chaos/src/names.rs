//! The lock names a run contends on, and their prefix and semaphore size.

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
