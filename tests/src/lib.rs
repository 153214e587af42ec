//! Test harness for the distributed-lock workspace.
//!
//! - [`RedisServer`]: a private, throwaway `redis-server` process per test
//!   (free loopback port, temporary directory, no persistence) that can be
//!   killed, restarted on the same port, paused and resumed.
//! - [`FaultProxy`]: a TCP proxy between a client and Redis that can delay
//!   traffic, black-hole it, lose exactly one reply, or cut connections.
//! - [`checkers`]: invariant checkers (fencing-aware store, hold-interval log, non-atomic
//!   counter) that turn "two holders at once" into a failing assertion.
//! - [`RedisCluster`]: a private Redis Cluster (3 primaries + 3 replicas by
//!   default) with slot migration (including the `ASK` window), crash and
//!   manual failover, and slot/owner lookups.
//! - [`SentinelGroup`]: a primary, a replica and three sentinels, with crash
//!   and graceful failover.
//! - [`TlsFiles`]: a throwaway CA with server and client certificates, for
//!   servers started with [`RedisServer::start_tls`] (and TLS clusters).
//! - [`logs`]: `tracing` events captured for a test to check.
//! - [`conformance`]: lock-core's behavioural claims, written once and run against every
//!   backend of the run (`tests/tests/conformance.rs`).
//! - [`linearizability`]: an outside judge of lock histories (stateright's linearizability
//!   tester over a lease-mutex model and a fenced-register model).
//! - [`init_tracing`] and [`unique_name`]: small helpers for test bodies.
//!
//! The harness never touches a Redis server it did not start itself.

pub mod checkers;
pub mod cluster;
pub mod conformance;
pub mod fixtures;
pub mod linearizability;
pub mod logs;
pub mod proxy;
pub mod sentinel;
pub mod server;
pub mod tls;
mod unique;

pub use cluster::RedisCluster;
pub use proxy::{FaultProxy, Mode};
pub use sentinel::SentinelGroup;
pub use server::{
    RedisServer, Reply, free_port, query_at, query_many_at, send_signal, server_binary,
    server_binary_runs,
};
pub use tls::{ClientAuth, TlsFiles};
pub use unique::unique_name;

/// Installs a `tracing` fmt subscriber writing to the test output, filtered
/// by `RUST_LOG` (default: nothing but errors). Safe to call from every
/// test: only the first call in a process has an effect.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// The workspace README's examples, compiled as doc tests with the published crates as a
/// service would depend on them (here, since the README belongs to no published crate).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct WorkspaceReadme;

// The guide's chapters, compiled as doc tests in the same way.
#[cfg(doctest)]
mod guide;

/// lock-macros' README example, which needs lock-core (lock-macros cannot depend on it).
#[cfg(doctest)]
#[doc = include_str!("../../lock-macros/README.md")]
struct LockMacrosReadme;
