//! Heap allocations of this process, counted where the `allocs` feature is on (the system
//! allocator behind `stats_alloc`'s counters); `None` where it is off.
//!
//! Unlike CPU time, a count per cycle does not move with the machine's load: it shows what a
//! change to a client's path saves even where the run-to-run noise hides it in the rates.

#[cfg(feature = "allocs")]
#[global_allocator]
static GLOBAL: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Allocations and reallocations by every thread of this process so far, where counted.
pub(crate) fn count() -> Option<u64> {
    #[cfg(feature = "allocs")]
    {
        let s = GLOBAL.stats();
        Some((s.allocations + s.reallocations) as u64)
    }
    #[cfg(not(feature = "allocs"))]
    None
}

#[cfg(all(test, feature = "allocs"))]
mod tests {
    #[test]
    fn an_allocation_is_counted() {
        let before = super::count().unwrap();
        let v = std::hint::black_box(Vec::<u8>::with_capacity(64));
        assert!(super::count().unwrap() > before);
        drop(v);
    }
}
