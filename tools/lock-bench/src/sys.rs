//! The process's own clock, CPU time and memory, read from the kernel.

/// `CLOCK_MONOTONIC` in nanoseconds: the clock behind `std::time::Instant` on Linux, and the
/// same in every process on the machine, so timestamps taken in the W3x child processes can
/// be compared with each other.
pub(crate) fn mono_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// User + system CPU time of this process so far, in milliseconds (`/proc/self/stat`,
/// resolution one clock tick, usually 10 ms).
pub(crate) fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may contain spaces):
    // state is field 3, utime field 14, stime field 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let per_s = rustix::param::clock_ticks_per_second().max(1);
    (ticks(14) + ticks(15)) as f64 * 1000.0 / per_s as f64
}

/// Resident set size of this process in bytes (`/proc/self/statm`).
pub(crate) fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0);
    pages * rustix::param::page_size() as u64
}
