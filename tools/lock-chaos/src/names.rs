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
/// The counters the sections of exclusive locks take units from with a guarded update (one
/// per name of a mutex, a fair lock and a read-write lock, at [`stock_key`]), set to
/// [`STOCK_INITIAL`] before the workers start on a standalone run; the checkers compare what
/// is left with the takes the history saw.
pub(crate) const STOCK_NAMES: [&str; 7] = ["m:0", "m:1", "m:2", "f:0", "f:1", "r:0", "r:1"];
/// Each counter's units at the start: enough for most runs, so that both "taken" and, late in
/// a long run, "not enough" occur.
pub(crate) const STOCK_INITIAL: i64 = 600;

/// The key of lock `name`'s counter: `chaos-stock:{name}`, in the lock's Cluster slot (none
/// for a name with a `{`).
pub(crate) fn stock_key(name: &str) -> Option<String> {
    lock_core::update::key_in_slot("chaos-stock:", name).ok()
}
