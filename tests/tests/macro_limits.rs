//! `#[distributed_lock]` checks literal leases and permit counts at compile time against
//! copies of lock-core's limits (lock-macros cannot depend on lock-core, which re-exports it).
//! This pins the copies to lock-core's constants: the macro's hidden `__limits!()` expands to
//! the values its checks use (lock-macros' unit tests check that the checks use them, bounds
//! included), and each must equal lock-core's.

use lock_core::{LockClient, Semaphore};

/// The macro's limits, as compiled into it.
const MACRO: (u64, u64, u32) = lock_macros::__limits!();

#[test]
fn the_macro_checks_literals_against_lock_cores_limits() {
    let (min_lease_ms, max_lease_ms, max_permits) = MACRO;
    assert_eq!(
        u128::from(min_lease_ms),
        LockClient::MIN_LEASE.as_millis(),
        "shortest lease"
    );
    assert_eq!(
        u128::from(max_lease_ms),
        LockClient::MAX_LEASE.as_millis(),
        "longest lease (and hold_at_least)"
    );
    assert_eq!(max_permits, Semaphore::MAX_SIZE, "largest semaphore");
    // Whole milliseconds: a literal at the bound means exactly lock-core's bound.
    assert_eq!(LockClient::MIN_LEASE.subsec_nanos() % 1_000_000, 0);
    assert_eq!(LockClient::MAX_LEASE.subsec_nanos() % 1_000_000, 0);
}
