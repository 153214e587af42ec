//! Not public API: the items `#[distributed_lock]` expands to. They may change in any release.
