//! Invariant checkers: record what the lock holders did, then check it.
//!
//! A fault test that only asserts "no error" proves liveness, not safety. These turn the
//! safety properties of a lock into checks that fail when exclusion fails (each has a unit
//! test below showing it catching a violation):
//!
//! - [`FencedStore`]: a resource that refuses writes whose fencing token is not above every
//!   token it has accepted (as in etcd's `contrib/lock`). It turns "two holders" into "the
//!   stale write was rejected".
//! - [`IntervalLog`]: the hold intervals of every owner on one monotonic clock; two owners'
//!   intervals must not overlap.
//! - [`UnsafeCounter`]: a deliberately non-atomic read, yield, write counter (in memory or in
//!   a Redis key). Without mutual exclusion increments get lost, so `actual == expected` at the
//!   end shows that every critical section ran alone (Jepsen's `lock-set` idea).

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use tokio::time::Instant;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicking test thread must not hide the history from the others.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A write refused by a [`FencedStore`]: its token was not above the highest one accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale {
    /// The token the write carried.
    pub token: u64,
    /// The highest token the store had accepted when it refused the write.
    pub max_seen: u64,
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stale write: token {} is not above {}",
            self.token, self.max_seen
        )
    }
}

impl std::error::Error for Stale {}

#[derive(Debug)]
struct FencedState<V> {
    max_seen: Option<u64>,
    value: Option<V>,
    accepted: Vec<(u64, V)>,
    rejected: Vec<(u64, V)>,
}

/// A fencing-aware store: it accepts a write with token `t` only if `t` is strictly greater
/// than every token it accepted before, and records every accepted and rejected write.
///
/// This is what a resource protected by a lease-based lock must do to stay safe when a holder
/// stalls past its lease: the next holder's token is larger, so once it has written, the
/// stalled holder's late write is refused. Thread-safe (a `std` mutex, never held across an
/// await).
///
/// Strictly greater, not greater-or-equal: one holder writes once per token here. Use one
/// store per lock name.
#[derive(Debug)]
pub struct FencedStore<V = String> {
    state: Mutex<FencedState<V>>,
}

impl<V> Default for FencedStore<V> {
    fn default() -> Self {
        Self {
            state: Mutex::new(FencedState {
                max_seen: None,
                value: None,
                accepted: Vec::new(),
                rejected: Vec::new(),
            }),
        }
    }
}

impl<V: Clone> FencedStore<V> {
    /// An empty store (no token seen yet: the first write is accepted).
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes `value` with fencing token `token`: accepted if `token` is above every accepted
    /// token, otherwise refused with [`Stale`] and the value is left unchanged.
    pub fn write(&self, token: u64, value: V) -> Result<(), Stale> {
        let mut st = lock(&self.state);
        match st.max_seen {
            Some(max_seen) if token <= max_seen => {
                st.rejected.push((token, value));
                Err(Stale { token, max_seen })
            }
            _ => {
                st.max_seen = Some(token);
                st.value = Some(value.clone());
                st.accepted.push((token, value));
                Ok(())
            }
        }
    }

    /// The accepted writes, in order.
    pub fn accepted(&self) -> Vec<(u64, V)> {
        lock(&self.state).accepted.clone()
    }

    /// The refused writes, in order.
    pub fn rejected(&self) -> Vec<(u64, V)> {
        lock(&self.state).rejected.clone()
    }

    /// The highest accepted token, if any.
    pub fn max_seen(&self) -> Option<u64> {
        lock(&self.state).max_seen
    }

    /// The value of the last accepted write.
    pub fn value(&self) -> Option<V> {
        lock(&self.state).value.clone()
    }
}

/// One hold interval `[start, end)` of `owner`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    /// Who held (any label: a client, a task, "A"/"B").
    pub owner: String,
    /// When it held for sure (take it *after* the acquisition returned).
    pub start: Instant,
    /// When it stopped believing it held (take it *before* the release is sent, or the last
    /// moment `is_held()` was seen true).
    pub end: Instant,
}

impl Interval {
    /// Whether two half-open intervals share a moment.
    pub fn overlaps(&self, other: &Interval) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// Hold intervals of several owners of one lock, on tokio's monotonic clock (one process, so
/// one clock for everyone).
///
/// Intervals of the *same* owner are never compared (re-entry legitimately nests them); any
/// overlap between two different owners is a violation of mutual exclusion, unless the
/// scenario is one where Redis cannot prevent it (then use [`IntervalLog::overlaps`] to show
/// it happened and that fencing caught it).
#[derive(Debug, Default)]
pub struct IntervalLog {
    intervals: Mutex<Vec<Interval>>,
}

impl IntervalLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `owner` held from `start` to `end`.
    ///
    /// # Panics
    ///
    /// Panics if `end < start`: that is a bug in the test, not in the lock.
    pub fn record(&self, owner: impl Into<String>, start: Instant, end: Instant) {
        let owner = owner.into();
        assert!(
            end >= start,
            "interval of {owner} ends before it starts: a bug in the test"
        );
        lock(&self.intervals).push(Interval { owner, start, end });
    }

    /// Every recorded interval, in recording order.
    pub fn intervals(&self) -> Vec<Interval> {
        lock(&self.intervals).clone()
    }

    /// Number of recorded intervals.
    pub fn len(&self) -> usize {
        lock(&self.intervals).len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        lock(&self.intervals).is_empty()
    }

    /// Every pair of intervals of different owners that share a moment (earlier start first).
    pub fn overlaps(&self) -> Vec<(Interval, Interval)> {
        let mut all = self.intervals();
        all.sort_by_key(|i| i.start);
        let mut found = Vec::new();
        for (i, a) in all.iter().enumerate() {
            // Sorted by start: once b starts at or after a's end, no later one overlaps a.
            for b in all[i + 1..].iter().take_while(|b| b.start < a.end) {
                if a.owner != b.owner && a.overlaps(b) {
                    found.push((a.clone(), b.clone()));
                }
            }
        }
        found
    }

    /// Panics, naming the first overlapping pairs, if two owners' intervals overlap.
    pub fn assert_no_overlap(&self) {
        let overlaps = self.overlaps();
        if let Some((a, b)) = overlaps.first() {
            let origin = a.start.min(b.start);
            panic!(
                "{} overlapping hold interval(s); first: {} held [{:?}, {:?}) and {} held [{:?}, {:?}) (relative to the earlier start)",
                overlaps.len(),
                a.owner,
                a.start - origin,
                a.end - origin,
                b.owner,
                b.start - origin,
                b.end - origin,
            );
        }
    }
}

enum CounterStore {
    Memory(Mutex<u64>),
    Redis {
        conn: redis::aio::MultiplexedConnection,
        key: String,
    },
}

/// A counter incremented by a read, a yield (and an optional pause), then a write: no
/// atomicity of its own. Concurrent increments lose updates, so at the end
/// [`actual`](UnsafeCounter::actual) equals [`expected`](UnsafeCounter::expected) (the number
/// of increments that completed) only if every increment ran under mutual exclusion.
///
/// Call [`increment`](UnsafeCounter::increment) inside the critical section and do not cancel
/// it halfway (a write sent but not awaited would count in `actual` but not in `expected`);
/// cancel acquisitions instead.
pub struct UnsafeCounter {
    store: CounterStore,
    /// Pause between the read and the write; zero means just a `yield_now`.
    gap: Duration,
    completed: AtomicU64,
}

impl fmt::Debug for UnsafeCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = match &self.store {
            CounterStore::Memory(_) => "memory".to_owned(),
            CounterStore::Redis { key, .. } => format!("redis key {key}"),
        };
        f.debug_struct("UnsafeCounter")
            .field("store", &store)
            .field("gap", &self.gap)
            .field("expected", &self.expected())
            .finish()
    }
}

impl UnsafeCounter {
    /// A counter in memory, starting at 0.
    pub fn in_memory() -> Self {
        Self {
            store: CounterStore::Memory(Mutex::new(0)),
            gap: Duration::ZERO,
            completed: AtomicU64::new(0),
        }
    }

    /// A counter in the Redis string `key` at `url` (`GET`, pause, `SET`), reset to 0.
    ///
    /// # Panics
    ///
    /// Panics if Redis cannot be reached.
    pub async fn in_redis(url: &str, key: &str) -> Self {
        let client = redis::Client::open(url).expect("a valid Redis URL");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("UnsafeCounter: cannot connect to Redis");
        let () = conn
            .set(key, 0u64)
            .await
            .expect("UnsafeCounter: cannot reset the key");
        Self {
            store: CounterStore::Redis {
                conn,
                key: key.to_owned(),
            },
            gap: Duration::ZERO,
            completed: AtomicU64::new(0),
        }
    }

    /// Sleeps `gap` between the read and the write (widens the race window).
    pub fn with_gap(mut self, gap: Duration) -> Self {
        self.gap = gap;
        self
    }

    /// Reads the value, yields (and sleeps the gap), writes value + 1, then counts the
    /// increment as completed.
    ///
    /// # Panics
    ///
    /// Panics if Redis fails (the test's own connection, not the lock's).
    pub async fn increment(&self) {
        let read = self.read().await;
        tokio::task::yield_now().await;
        if !self.gap.is_zero() {
            tokio::time::sleep(self.gap).await;
        }
        self.write(read + 1).await;
        self.completed.fetch_add(1, Ordering::SeqCst);
    }

    async fn read(&self) -> u64 {
        match &self.store {
            CounterStore::Memory(value) => *lock(value),
            CounterStore::Redis { conn, key } => {
                let value: Option<u64> = conn
                    .clone()
                    .get(key)
                    .await
                    .expect("UnsafeCounter: GET failed");
                value.unwrap_or(0)
            }
        }
    }

    async fn write(&self, new: u64) {
        match &self.store {
            CounterStore::Memory(value) => *lock(value) = new,
            CounterStore::Redis { conn, key } => {
                let () = conn
                    .clone()
                    .set(key, new)
                    .await
                    .expect("UnsafeCounter: SET failed");
            }
        }
    }

    /// How many increments completed.
    pub fn expected(&self) -> u64 {
        self.completed.load(Ordering::SeqCst)
    }

    /// The value in the store now.
    pub async fn actual(&self) -> u64 {
        self.read().await
    }

    /// Panics unless the stored value equals the number of completed increments (updates were
    /// lost: two increments overlapped).
    pub async fn assert_consistent(&self) {
        let (actual, expected) = (self.actual().await, self.expected());
        assert_eq!(
            actual,
            expected,
            "lost updates: {} of {expected} increments vanished, so critical sections overlapped",
            expected.saturating_sub(actual)
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::server::RedisServer;

    #[test]
    fn fenced_store_rejects_stale_and_equal_tokens() {
        let store = FencedStore::new();
        store.write(5, "a").unwrap();
        store.write(9, "b").unwrap();
        // A holder that stalled with token 7 writes after the holder with token 9.
        assert_eq!(
            store.write(7, "late"),
            Err(Stale {
                token: 7,
                max_seen: 9
            })
        );
        // The same token twice is refused too.
        assert_eq!(
            store.write(9, "again"),
            Err(Stale {
                token: 9,
                max_seen: 9
            })
        );
        assert_eq!(store.accepted(), vec![(5, "a"), (9, "b")]);
        assert_eq!(store.rejected(), vec![(7, "late"), (9, "again")]);
        assert_eq!(store.value(), Some("b"));
        assert_eq!(store.max_seen(), Some(9));
    }

    #[test]
    fn fenced_store_is_shared_between_threads() {
        let store = Arc::new(FencedStore::new());
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let store = store.clone();
                s.spawn(move || {
                    for i in 0..100u64 {
                        let _ = store.write(i * 4 + t, t);
                    }
                });
            }
        });
        let accepted = store.accepted();
        assert!(accepted.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(accepted.len() + store.rejected().len(), 400);
    }

    #[test]
    fn interval_log_finds_overlaps_between_owners_only() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let log = IntervalLog::new();
        log.record("a", t0, t0 + ms(10));
        // Back to back is fine: [10, 20) does not share a moment with [0, 10).
        log.record("b", t0 + ms(10), t0 + ms(20));
        // The same owner nesting (re-entry) is fine.
        log.record("b", t0 + ms(12), t0 + ms(15));
        log.assert_no_overlap();
        // A second owner inside b's interval is a violation.
        log.record("c", t0 + ms(18), t0 + ms(30));
        let overlaps = log.overlaps();
        assert_eq!(overlaps.len(), 1);
        assert_eq!(
            (overlaps[0].0.owner.as_str(), overlaps[0].1.owner.as_str()),
            ("b", "c")
        );
        let caught = std::panic::catch_unwind(|| log.assert_no_overlap());
        assert!(caught.is_err(), "assert_no_overlap missed an overlap");
    }

    #[test]
    fn interval_log_finds_an_interval_inside_a_long_one() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let log = IntervalLog::new();
        log.record("long", t0, t0 + ms(100));
        log.record("x", t0 + ms(100), t0 + ms(110));
        log.record("short", t0 + ms(50), t0 + ms(60));
        assert_eq!(log.overlaps().len(), 1);
        assert_eq!(log.len(), 3);
    }

    /// Without a lock, concurrent read-yield-write increments lose updates.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unsafe_counter_in_memory_loses_updates_without_exclusion() {
        let counter = Arc::new(UnsafeCounter::in_memory());
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let counter = counter.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    counter.increment().await;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(counter.expected(), 400);
        assert!(counter.actual().await < 400, "no update was lost");
        let caught = tokio::spawn(async move { counter.assert_consistent().await }).await;
        assert!(caught.is_err(), "assert_consistent missed lost updates");
    }

    /// With exclusion (here a local mutex) the same load loses nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unsafe_counter_is_consistent_under_exclusion() {
        let counter = Arc::new(UnsafeCounter::in_memory());
        let exclusive = Arc::new(tokio::sync::Mutex::new(()));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (counter, exclusive) = (counter.clone(), exclusive.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    let _held = exclusive.lock().await;
                    counter.increment().await;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        counter.assert_consistent().await;
        assert_eq!(counter.actual().await, 400);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unsafe_counter_in_redis_loses_updates_without_exclusion() {
        let server = RedisServer::start();
        let counter = Arc::new(
            UnsafeCounter::in_redis(&server.url(), "unsafe-counter")
                .await
                .with_gap(Duration::from_millis(1)),
        );
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let counter = counter.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    counter.increment().await;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(counter.expected(), 40);
        let actual = counter.actual().await;
        assert!(actual < 40, "no update was lost ({actual})");
        assert_eq!(server.cmd(&["GET", "unsafe-counter"]), actual.to_string());
    }
}
