//! [`RedLock`]: one lock over N independent Redis masters (see its docs).
//!
//! This file holds the handle, its builder and the acquisition; below it, from the bottom:
//! `nodes` (the nodes and options the handle and its guards share, one attempt on one node),
//! `track` (whether a guard's lock is held and until when: status, validity, at risk, the
//! `lost()` future and the [`HeldLock`](crate::HeldLock) view), `release` (giving node
//! guards back, after a failed attempt or from a guard), `renewal` (an extension or renewal
//! on every node, and the background renewal task) and `guard` ([`RedLockGuard`] itself).

mod guard;
mod nodes;
mod release;
mod renewal;
mod track;

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;
use tracing::Instrument;

use crate::client::LockClient;
use crate::driver::Options;
use crate::error::LockError;
use crate::mutex::LockGuard;
use crate::request::{ErasedTake, LockRequest, TryLockRequest};
use crate::util::{MIN_LEASE, Short, check_lease};

use nodes::{Config, Inner, NodeAttempt, redis_source, spawn_node_attempt};
use release::release_all;

pub use guard::RedLockGuard;

const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
const DEFAULT_RETRY_DELAY_MIN: Duration = Duration::from_millis(50);
const DEFAULT_RETRY_DELAY_MAX: Duration = Duration::from_millis(250);
const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);

/// The fewest nodes RedLock accepts.
const MIN_NODES: usize = 3;

/// One lock over N independent Redis masters, held while a majority of them grant it.
///
/// A [`LockClient`] lock lives on one server, so it is only as available as that server, and a
/// failover to a replica that had not received the lock can grant it twice. [`RedLock`] takes
/// the lock on every master of a set of independent ones (no replication between them) and
/// counts it as held only while a majority (`N / 2 + 1`) has it, following the algorithm on the
/// Redis "Distributed Locks with Redis" page:
///
/// 1. Read a monotonic clock, then ask every node at once with a short per-node timeout
///    ([`RedLockBuilder::node_timeout`], 50 ms by default).
/// 2. The lock is taken only if a majority said yes **and** time is left: the validity is
///    `lease − elapsed − drift`, where `elapsed` runs from before the first request to the
///    last answer (or timeout) and `drift = 1 % of the lease + 2 ms` for clocks that run at
///    slightly different rates. The guard counts the lock as held until
///    `start + lease − drift` and no longer.
/// 3. Otherwise it is released on **every** node, including those whose answer came too
///    late (their acquisition is undone when the answer arrives), and tried again after a
///    random delay ([`RedLockBuilder::retry_delay`], 50–250 ms) until the wait runs out.
///
/// Without a fixed lease the guard renews itself: a task of its own extends the lease on all
/// nodes every lease/3 (the lease is [`RedLockBuilder::watchdog_lease`], 30 s by default), and
/// a renewal counts only when a majority confirms it before the current validity ends. Nodes
/// that lost the lock (one restarted empty, or was down when the lock was taken) are taken
/// again during renewals and extensions when they are free, so the lock regains them. When a
/// majority can no longer be confirmed within the validity, the guard is lost:
/// [`RedLockGuard::is_held`] turns false and [`RedLockGuard::lost`] resolves.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_core::{LockClient, LockError, RedLock};
///
/// # async fn run() -> Result<(), LockError> {
/// let mut clients = Vec::new();
/// for url in ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"] {
///     clients.push(LockClient::connect(url).await?);
/// }
/// let redlock = RedLock::builder(clients)
///     .node_timeout(Duration::from_millis(50))
///     .build()?;
/// redlock.check_distinct().await?; // refuse two clients on one server at startup
///
/// // Wait up to 5 s; the guard renews itself on a majority for as long as it lives.
/// let guard = redlock.lock("invoice:42").wait(Duration::from_secs(5)).await?;
/// tokio::select! {
///     _ = guard.lost() => tracing::warn!("lost the majority; stopping"),
///     _ = do_work(guard.node_tokens()) => {}
/// }
/// guard.unlock().await?;
///
/// // One attempt with a fixed 10 s lease, never renewed.
/// if let Some(guard) = redlock.try_lock("nightly").lease(Duration::from_secs(10)).await? {
///     println!("valid for {:?}", guard.remaining());
/// }
/// # Ok(()) }
/// # async fn do_work(_tokens: &[Option<u64>]) {}
/// ```
///
/// # Errors
///
/// RedLock failures map onto [`LockError`] as follows. *Answered* means a node replied in
/// time, granting the lock or saying someone else holds it.
///
/// | situation | `lock()` (with `.wait(d)`) | `try_lock()` |
/// |---|---|---|
/// | a quorum answered but fewer than a quorum granted (held elsewhere, or a split vote) | retried until `d`, then [`LockError::Timeout`] (`holder_ttl: None`) | `Ok(None)` |
/// | fewer than a quorum answered at all (nodes down, unreachable or slower than the per-node timeout) | retried until `d`, then [`LockError::Unavailable`] (`source`: the first Redis error seen in that attempt, if any) | `Unavailable` |
/// | a quorum granted, but after the validity was used up | retried until `d`, then [`LockError::ResponseTimeout`] with the time the attempt took | `ResponseTimeout` |
/// | bad name or lease | [`LockError::InvalidName`], [`LockError::InvalidOption`] at once | the same |
///
/// Without `.wait()`, `lock()` waits for as long as the lock is *busy*, but returns
/// `Unavailable` / `ResponseTimeout` at once (as [`LockClient::lock`] does when its server is
/// down) instead of retrying an outage forever. [`RedLockGuard::extend`] returns
/// [`LockError::Lost`] when the lock is gone on so many nodes that no majority is possible, or
/// when the validity passed, and [`LockError::Unavailable`] when too few nodes answered
/// (the guard then keeps its current validity and may still be renewed).
/// [`RedLock::new`] refuses fewer than three nodes with [`LockError::InvalidOption`]
/// (`option: "clients"`), and [`RedLock::check_distinct`] refuses two clients that reach one
/// key space the same way.
///
/// # Configuration checks
///
/// * **N < 3 is refused.** With one node RedLock adds nothing to [`LockClient`]; with two the
///   quorum is two, so either node failing stops all locking. Use at least three (five is the
///   usual choice: it survives two failures).
/// * **An even N is accepted with a warning** in the log: N = 4 needs 3 and survives one
///   failure, no better than N = 3.
/// * **Duplicates cannot be seen from a [`LockClient`]** (it does not expose its server), so
///   [`RedLock::new`] cannot refuse them. [`RedLock::check_distinct`] finds them on the
///   servers themselves: it takes a probe lock on each node and looks for it through every
///   other client, so two entries for one server are caught even under different host names.
///   Run it at startup. It cannot see two clients on one server that use different databases
///   or key prefixes; do not configure those either: one server failing would take two votes.
///
/// # Keys and wake-up
///
/// On each node RedLock uses that node's ordinary lock key (`P{N}` under the client's key
/// prefix `P`, see [`Mutex`](crate::Mutex)), taken with a fixed lease through
/// [`LockClient::try_lock`] and extended through [`LockGuard::extend`], so a RedLock lock
/// and a [`LockClient`] lock of the same name on one of the nodes exclude each other. There is
/// no pub/sub: a waiter polls, one attempt on all nodes after each random retry delay (the
/// delay also breaks up split votes between contenders).
///
/// # What RedLock does not promise
///
/// * **Timing.** Safety rests on bounded process pauses, bounded network delay and clocks that
///   run at about the same rate (Kleppmann, "How to do distributed locking"; antirez, "Is
///   Redlock safe?"). Time spent before the last answer is measured and subtracted; a pause
///   *after* that is not, as with any lease. A node whose clock jumps forward, or that
///   restarts without persistence and at once grants the lock again, can give a second client
///   a majority. Run the masters with `appendfsync always`, or keep a crashed master out for
///   longer than the longest lease before it rejoins.
/// * **Fencing.** A RedLock has no fencing token: a token comes from each node
///   ([`RedLockGuard::node_tokens`]), and no single number made of them (their maximum,
///   [`RedLockGuard::max_node_token`]) is guaranteed to increase from one holder to the next.
///
/// Cheap to clone (an `Arc` inside); every clone uses the same clients.
#[derive(Clone)]
pub struct RedLock {
    inner: Arc<Inner>,
}

impl RedLock {
    /// The default clock drift factor: 1 % of the lease is set aside for clocks that run at
    /// different rates.
    pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;

    /// The part of the drift allowance that does not depend on the lease: 2 ms, for the
    /// granularity of Redis expiry.
    pub const DRIFT_MARGIN: Duration = nodes::DRIFT_MARGIN;

    /// A RedLock over `clients` (one per independent master) with the default options.
    /// Fails with [`LockError::InvalidOption`] for fewer than three clients; see
    /// [`RedLockBuilder::build`].
    pub fn new(clients: impl IntoIterator<Item = LockClient>) -> Result<RedLock, LockError> {
        Self::builder(clients).build()
    }

    /// Starts configuring a RedLock over `clients`, one per independent master.
    pub fn builder(clients: impl IntoIterator<Item = LockClient>) -> RedLockBuilder {
        RedLockBuilder {
            clients: clients.into_iter().collect(),
            config: Config {
                node_timeout: DEFAULT_NODE_TIMEOUT,
                retry_min: DEFAULT_RETRY_DELAY_MIN,
                retry_max: DEFAULT_RETRY_DELAY_MAX,
                drift_factor: RedLock::DEFAULT_DRIFT_FACTOR,
                watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            },
        }
    }

    /// Takes the lock `name` on a majority of the nodes, retrying after a random delay while
    /// it is busy; see [`LockRequest`] for the wait and lease options, and the table above
    /// for the errors. Without `.wait()` it waits for as long as the lock is busy, but fails
    /// at once when too few nodes answer.
    pub fn lock(&self, name: impl Into<String>) -> LockRequest<RedLockGuard> {
        LockRequest::new(Take {
            inner: self.inner.clone(),
            name: name.into(),
        })
    }

    /// One attempt to take the lock `name` on a majority of the nodes: `Ok(None)` when it is
    /// held elsewhere (or the vote was split).
    pub fn try_lock(&self, name: impl Into<String>) -> TryLockRequest<RedLockGuard> {
        TryLockRequest::new(Take {
            inner: self.inner.clone(),
            name: name.into(),
        })
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.inner.nodes.len()
    }

    /// Always false: a RedLock has at least three nodes. (Here for the `len` convention.)
    pub fn is_empty(&self) -> bool {
        self.inner.nodes.is_empty()
    }

    /// How many nodes must grant (or confirm) the lock: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The clients, in the order given.
    pub fn clients(&self) -> &[LockClient] {
        &self.inner.nodes
    }

    /// Checks on the servers that no two clients reach the same key space (same server,
    /// database and key prefix), which would give one master two votes. Fails with
    /// [`LockError::InvalidOption`] (`option: "clients"`) naming the first such pair.
    ///
    /// It takes a probe lock `redlock-probe:<random>-<i>` on each node `i` and asks every
    /// other client whether it sees it; afterwards the probes' leases are cut to the minimum
    /// and left to expire, so no key stays behind. Nodes that cannot be reached are skipped
    /// (with a warning in the log) rather than failing the check, so that a minority outage
    /// does not prevent a service from starting. Takes a few round trips plus 15 ms.
    pub async fn check_distinct(&self) -> Result<(), LockError> {
        const PROBE_LEASE: Duration = Duration::from_secs(10);
        const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
        let nodes = &self.inner.nodes;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let names: Vec<String> = (0..nodes.len())
            .map(|i| format!("redlock-probe:{id}-{i}"))
            .collect();
        let probes: Vec<Option<LockGuard>> = join_all(nodes.iter().zip(&names).enumerate().map(
            |(i, (c, name))| async move {
                match tokio::time::timeout(PROBE_TIMEOUT, c.try_lock(name).lease(PROBE_LEASE)).await
                {
                    Ok(Ok(Some(guard))) => Some(guard),
                    Ok(Ok(None)) => None,
                    Ok(Err(e)) => {
                        tracing::warn!(node = i, error = %e, "check_distinct: node not checked");
                        None
                    }
                    Err(_) => {
                        tracing::warn!(node = i, "check_distinct: node not checked (timed out)");
                        None
                    }
                }
            },
        ))
        .await;
        let pairs: Vec<(usize, usize)> = probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_some())
            .flat_map(|(i, _)| {
                (0..nodes.len())
                    .filter(move |&j| j != i)
                    .map(move |j| (i, j))
            })
            .collect();
        let seen = join_all(pairs.iter().map(|&(i, j)| {
            let name = &names[i];
            async move {
                matches!(
                    tokio::time::timeout(PROBE_TIMEOUT, nodes[j].mutex(name.as_str()).info()).await,
                    Ok(Ok(info)) if info.held
                )
            }
        }))
        .await;
        let duplicate = pairs
            .into_iter()
            .zip(seen)
            .find_map(|(p, s)| s.then_some(p));
        // A release would keep a free key (with its fencing counter) for the client's
        // fence_ttl; a lease that runs out leaves nothing.
        join_all(probes.iter().flatten().map(|g| g.extend(MIN_LEASE))).await;
        tokio::time::sleep(MIN_LEASE + Duration::from_millis(5)).await;
        drop(probes);
        match duplicate {
            Some((i, j)) => Err(LockError::InvalidOption {
                option: "clients",
                reason: format!(
                    "clients {i} and {j} reach the same Redis key space: one master would \
                     have two votes"
                ),
            }),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for RedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLock")
            .field("nodes", &self.inner.nodes.len())
            .field("quorum", &self.inner.quorum)
            .field("node_timeout", &self.inner.config.node_timeout)
            .field(
                "retry_delay",
                &(self.inner.config.retry_min..=self.inner.config.retry_max),
            )
            .field("drift_factor", &self.inner.config.drift_factor)
            .field("watchdog_lease", &self.inner.config.watchdog_lease)
            .finish()
    }
}

/// Options of a [`RedLock`]: made by [`RedLock::builder`], finished by
/// [`build`](RedLockBuilder::build).
#[must_use = "a builder does nothing until built"]
pub struct RedLockBuilder {
    clients: Vec<LockClient>,
    config: Config,
}

impl RedLockBuilder {
    /// How long each node may take to answer an acquisition, extension or renewal before it
    /// counts as failed (default 50 ms; the Redis page suggests
    /// 5–50 ms for a 10 s lease). Keep it far below the lease: a node that does not answer
    /// costs this much of the validity, and if the answers take longer than the lease minus
    /// the drift allowance the lock is refused. A node that answers late is not counted, and
    /// its acquisition is undone when the answer arrives.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.config.node_timeout = timeout;
        self
    }

    /// Before another attempt, wait a random time between `min` and `max` (default
    /// 50–250 ms). The randomness breaks up split votes between contenders.
    pub fn retry_delay(mut self, min: Duration, max: Duration) -> Self {
        self.config.retry_min = min;
        self.config.retry_max = max;
        self
    }

    /// The share of every lease set aside for clocks running at different rates (default
    /// [`RedLock::DEFAULT_DRIFT_FACTOR`], 1 %); [`RedLock::DRIFT_MARGIN`] (2 ms) is added to
    /// it. Must be in `0.0..0.5`.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.config.drift_factor = factor;
        self
    }

    /// The lease of locks taken without `.lease()`, renewed every third of it by the guard's
    /// own task (default 30 s; 10 ms to 30 days).
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.config.watchdog_lease = lease;
        self
    }

    /// Checks the options and makes the RedLock.
    ///
    /// Fails with [`LockError::InvalidOption`] for fewer than three clients (`"clients"`), a
    /// zero node timeout, a retry delay whose minimum exceeds its maximum, a drift factor
    /// outside `0.0..0.5`, or a watchdog lease outside 10 ms..=30 days. An
    /// even number of clients is accepted with a warning in the log. Duplicate clients cannot
    /// be detected here; see [`RedLock::check_distinct`].
    pub fn build(self) -> Result<RedLock, LockError> {
        let n = self.clients.len();
        if n < MIN_NODES {
            return Err(LockError::InvalidOption {
                option: "clients",
                reason: format!(
                    "RedLock needs at least {MIN_NODES} independent masters, got {n}: with 2 the \
                     quorum is 2 and either one failing stops all locking (use LockClient for \
                     a single server)"
                ),
            });
        }
        if n.is_multiple_of(2) {
            tracing::warn!(
                nodes = n,
                "RedLock over an even number of masters tolerates no more failures than one \
                 master fewer"
            );
        }
        let c = &self.config;
        if c.node_timeout.is_zero() {
            return Err(LockError::InvalidOption {
                option: "node_timeout",
                reason: "must be positive".to_owned(),
            });
        }
        if c.retry_min > c.retry_max {
            return Err(LockError::InvalidOption {
                option: "retry_delay",
                reason: format!("min {:?} exceeds max {:?}", c.retry_min, c.retry_max),
            });
        }
        if !(0.0..0.5).contains(&c.drift_factor) {
            return Err(LockError::InvalidOption {
                option: "drift_factor",
                reason: format!("{} is outside 0.0..0.5", c.drift_factor),
            });
        }
        check_lease("watchdog_lease", c.watchdog_lease)?;
        Ok(RedLock {
            inner: Arc::new(Inner {
                quorum: n / 2 + 1,
                nodes: self.clients,
                config: self.config,
            }),
        })
    }
}

impl fmt::Debug for RedLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLockBuilder")
            .field("nodes", &self.clients.len())
            .field("config", &self.config)
            .finish()
    }
}

/// What one attempt on all nodes came to.
enum Outcome {
    Acquired(RedLockGuard),
    /// A quorum answered, fewer than a quorum granted.
    Busy,
    /// Fewer than a quorum answered; the first Redis error seen, if any.
    Unreachable(Option<crate::error::ConnectError>),
    /// A quorum granted, after the validity was used up; how long the attempt took.
    TooSlow(Duration),
}

/// One attempt on all nodes at once.
async fn attempt(inner: &Arc<Inner>, name: &str, lease: Duration, watchdog: bool) -> Outcome {
    let config = &inner.config;
    let timeout = config.node_timeout;
    let start = Instant::now();
    let attempts: Vec<NodeAttempt> = inner
        .nodes
        .iter()
        .map(|c| spawn_node_attempt(c, name, lease, timeout))
        .collect();
    let replies = join_all(attempts).await;
    let elapsed = start.elapsed();
    let mut guards = Vec::with_capacity(replies.len());
    let (mut granted, mut late, mut busy, mut error) = (0, 0, 0, None);
    for reply in replies {
        guards.push(match reply {
            Ok(Ok(Ok(Some(guard)))) => {
                granted += 1;
                Some(guard)
            }
            Ok(Ok(Ok(None))) => {
                busy += 1;
                None
            }
            // The node granted it, but after the lease had run out (and gave it back).
            Ok(Ok(Err(LockError::Lost { .. }))) => {
                late += 1;
                None
            }
            Ok(Ok(Err(e))) => {
                if error.is_none() {
                    error = redis_source(e);
                }
                None
            }
            Ok(Err(_)) | Err(_) => None,
        });
    }
    let validity = lease.saturating_sub(elapsed + config.drift(lease));
    if granted >= inner.quorum && !validity.is_zero() {
        let valid_until = start + lease - config.drift(lease);
        return Outcome::Acquired(RedLockGuard::new(
            inner.clone(),
            name.to_owned(),
            guards,
            valid_until,
            validity,
            watchdog.then_some(lease),
        ));
    }
    release_all(guards.into_iter().flatten().collect(), timeout).await;
    if granted + late >= inner.quorum {
        tracing::debug!(lock = %Short(name), ?elapsed, ?lease, "RedLock quorum came too late");
        Outcome::TooSlow(elapsed)
    } else if granted + busy >= inner.quorum {
        Outcome::Busy
    } else {
        Outcome::Unreachable(error)
    }
}

/// Checks the name and lease of a request; returns the lease to use and whether it is the
/// watchdog's.
fn prepare(
    inner: &Inner,
    name: &str,
    lease: Option<Duration>,
) -> Result<(Duration, bool), LockError> {
    crate::name::validate_name(name)?;
    match lease {
        Some(lease) => {
            check_lease("lease", lease)?;
            Ok((lease, false))
        }
        None => Ok((inner.config.watchdog_lease, true)),
    }
}

async fn acquire(
    inner: Arc<Inner>,
    name: String,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> Result<RedLockGuard, LockError> {
    let start = Instant::now();
    let (lease, watchdog) = prepare(&inner, &name, lease)?;
    let deadline = wait.map(|w| start.checked_add(w).unwrap_or_else(far_future));
    loop {
        let error = match attempt(&inner, &name, lease, watchdog).await {
            Outcome::Acquired(guard) => return Ok(guard),
            Outcome::Busy => LockError::Timeout {
                name: name.clone(),
                waited: start.elapsed(),
                holder_ttl: None,
            },
            Outcome::Unreachable(source) => LockError::Unavailable {
                waited: start.elapsed(),
                source,
            },
            Outcome::TooSlow(took) => LockError::ResponseTimeout(took),
        };
        let now = Instant::now();
        let wake = now + inner.config.retry_delay();
        match deadline {
            Some(deadline) if now >= deadline => return Err(error),
            Some(deadline) => tokio::time::sleep_until(wake.min(deadline)).await,
            // Without a wait only a busy lock is waited for.
            None if !error.is_timeout() => return Err(error),
            None => tokio::time::sleep_until(wake).await,
        }
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

/// One acquisition of a RedLock, started by a [`LockRequest`] or [`TryLockRequest`].
struct Take {
    inner: Arc<Inner>,
    name: String,
}

impl ErasedTake<RedLockGuard> for Take {
    fn start(
        self: Box<Self>,
        options: Options,
    ) -> Pin<Box<dyn Future<Output = Result<RedLockGuard, LockError>> + Send + 'static>> {
        let span = tracing::debug_span!("lock", kind = "redlock", name = %Short(&self.name));
        let Options { wait, lease, .. } = options;
        Box::pin(acquire(self.inner, self.name, wait, lease).instrument(span))
    }

    fn describe(&self) -> (&'static str, &str) {
        ("redlock", &self.name)
    }
}
