//! [`unique_name`]: names unique within and across processes.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Returns `"{prefix}-{hex}"`, unique within the process (a counter is part
/// of it) and, with overwhelming probability, across processes (pid, clock
/// and a randomly seeded hash are mixed in). Useful for lock and key names.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(nanos);
    hasher.write_u64(count);
    format!("{prefix}-{:016x}{count:x}", hasher.finish())
}
