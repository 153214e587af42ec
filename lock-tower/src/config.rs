//! The policies a layer is told (public enums) and the small pieces its settings are made
//! of: key rules, the settings that cannot work, hold times, logged routes. No behaviour
//! lives here.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use http::Method;

/// What to do with a request whose extractor finds no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MissingKey {
    /// Answer `400 Bad Request` without calling the inner service. The default.
    #[default]
    Reject,
    /// Call the inner service without a lock (and without the
    /// [`HeldLock`](lock_core::HeldLock) extension). Only choose this when the handler
    /// rejects such requests itself or does not need the lock for them.
    PassThrough,
}

/// What to do when Redis cannot be reached, does not answer in time or fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FailMode {
    /// Fail closed: answer `503 Service Unavailable` with `Retry-After` and do not run the
    /// inner service. The default: the lock exists because running two requests for one key
    /// at once is wrong, and without Redis nothing prevents it.
    #[default]
    Closed,
    /// Fail open: run the inner service without a lock (and without the
    /// [`HeldLock`](lock_core::HeldLock) extension), logging a warning. For locks that only
    /// save work, where an occasional overlap is harmless.
    Open,
}

/// What to do when the lock is lost while the request is running (its lease ran out: Redis
/// was unreachable for longer than the lease, a fixed lease was too short, or someone deleted
/// it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LeaseLost {
    /// Stop the request: drop the handler's future (it is cancelled at its current `.await`)
    /// and answer `503` with `Retry-After`; if the response body is already streaming, end it
    /// with an error. The default, since another request may now hold the lock. A response
    /// the handler finished after the loss (ready in the same step in which the lease was
    /// found to have run out, or released after Redis had let the lock go) is dropped and
    /// answered `503` too: the layer never sends a success made without the lock.
    #[default]
    Abort,
    /// Let the request finish. The handler can watch
    /// [`HeldLock::is_held`](lock_core::HeldLock::is_held) or
    /// [`HeldLock::lost`](lock_core::HeldLock::lost) and pass the
    /// [`fencing token`](lock_core::HeldLock::fencing_token) to the resource it updates, so
    /// late writes are refused.
    Continue,
}

/// When a request gives its lock back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Release {
    /// When the response body is complete (or dropped, if the client goes away): the lock
    /// covers everything the body still produces, e.g. a stream read from the database. A
    /// small body (size hint at most [`BUFFER_LIMIT`](crate::lock::BUFFER_LIMIT), 64 KiB) is
    /// read in full under the lock, which is given back before the response is handed on; a
    /// larger one streams, and the release completes before its last frame is handed out. The
    /// default.
    #[default]
    AfterBody,
    /// When the handler has returned its response, before the response is handed on. For
    /// handlers whose body does not depend on the locked resource; a slow client then does
    /// not keep the lock.
    AfterHandler,
}

/// Which side of a read-write lock a request takes; see
/// [`DistributedLockLayer::read_write`](crate::DistributedLockLayer::read_write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A read share: requests that read overlap with each other.
    Read,
    /// The write lock: alone, with no reader and no other writer.
    Write,
}

impl Side {
    /// The default rule: `GET`, `HEAD` and `OPTIONS` read, every other method writes.
    pub fn of_method(method: &Method) -> Side {
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            Side::Read
        } else {
            Side::Write
        }
    }
}

/// How a request's key becomes a lock name.
#[derive(Debug, Clone)]
pub(crate) struct KeyRules {
    /// Put in front of every key.
    pub(crate) prefix: String,
    /// The longest key, in bytes.
    pub(crate) max_key_len: usize,
    /// Hash keys that break the rules instead of refusing them.
    pub(crate) hash_keys: bool,
}

/// How much longer than `wait` an acquisition may take before the layer gives up on Redis.
pub(crate) const REDIS_ALLOWANCE: Duration = Duration::from_secs(2);

/// A moving average of how long requests held their locks, for `Retry-After`.
#[derive(Debug, Default)]
pub(crate) struct HoldTimes {
    /// Microseconds; 0 until the first request ends.
    average: AtomicU64,
}

impl HoldTimes {
    /// Counts one hold (an exponential moving average with weight 1/8).
    pub(crate) fn record(&self, held: Duration) {
        let held = u64::try_from(held.as_micros()).unwrap_or(u64::MAX);
        let _ = self
            .average
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |average| {
                Some(if average == 0 {
                    held.max(1)
                } else {
                    average - average / 8 + held / 8
                })
            });
    }

    /// The average hold, if any request ended yet.
    pub(crate) fn average(&self) -> Option<Duration> {
        match self.average.load(Ordering::Relaxed) {
            0 => None,
            micros => Some(Duration::from_micros(micros)),
        }
    }
}

/// The routes a layer has logged a problem for, so that each is logged once and not once per
/// request.
#[derive(Debug, Default)]
pub(crate) struct LoggedRoutes {
    /// Route patterns (`None`: requests that matched no route).
    routes: Mutex<HashSet<Option<String>>>,
}

impl LoggedRoutes {
    /// The most routes remembered: a layer is on a bounded number of routes, but a custom
    /// extractor could name anything. Past it, nothing more is logged.
    pub(crate) const MAX: usize = 1024;

    /// True the first time `route` is seen (among the first [`Self::MAX`] routes).
    pub(crate) fn first(&self, route: Option<&str>) -> bool {
        let mut routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        routes.len() < Self::MAX && routes.insert(route.map(str::to_owned))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_side_of_a_method() {
        assert_eq!(Side::of_method(&Method::GET), Side::Read);
        assert_eq!(Side::of_method(&Method::HEAD), Side::Read);
        assert_eq!(Side::of_method(&Method::OPTIONS), Side::Read);
        assert_eq!(Side::of_method(&Method::POST), Side::Write);
        assert_eq!(Side::of_method(&Method::DELETE), Side::Write);
    }

    #[test]
    fn each_route_is_logged_once_and_the_memory_is_bounded() {
        let logged = LoggedRoutes::default();
        assert!(logged.first(Some("/a/{id}")));
        assert!(!logged.first(Some("/a/{id}")));
        assert!(logged.first(None));
        assert!(!logged.first(None));
        assert!(logged.first(Some("/b/{id}")));
        for i in 0..2 * LoggedRoutes::MAX {
            logged.first(Some(&format!("/r{i}")));
        }
        assert_eq!(logged.routes.lock().unwrap().len(), LoggedRoutes::MAX);
        assert!(!logged.first(Some("/new")), "nothing more once full");
    }

    #[test]
    fn hold_times_average() {
        let times = HoldTimes::default();
        assert_eq!(times.average(), None);
        times.record(Duration::from_millis(80));
        assert_eq!(times.average(), Some(Duration::from_millis(80)));
        for _ in 0..64 {
            times.record(Duration::from_millis(8));
        }
        let average = times.average().unwrap();
        assert!(average < Duration::from_millis(9), "{average:?}");
    }
}
