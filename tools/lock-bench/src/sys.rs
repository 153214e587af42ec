//! The process's own clock, CPU time and memory, read from the kernel.

/// `CLOCK_MONOTONIC` in nanoseconds: the clock behind `std::time::Instant` on Linux, and the
/// same in every process on the machine, so timestamps taken in the W3x child processes can
/// be compared with each other.
pub(crate) fn mono_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// User + system CPU time of this process so far, in microseconds
/// (`clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`: every thread of the process, nanosecond
/// resolution).
pub(crate) fn cpu_us() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 * 1e6 + t.tv_nsec as f64 / 1e3
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
