//! The one acquisition driver: attempt → wait → retry → timeout, for every primitive, and the
//! request builders ([`LockRequest`], [`TryLockRequest`]) that start it.
//!
//! A primitive ([`Primitive`]) supplies only what differs: how one attempt is sent and its
//! answer read (through the engine's undoable send), which channel announces a chance to try
//! again, and what to clean up when a wait ends without the lock. The driver owns the rest:
//!
//! 1. One attempt. Acquired → done (one round trip). Busy and not waiting → `Timeout`
//!    (`Ok(None)` for a `try_*`).
//! 2. Subscribe to the channel the attempt named, and try again at once (a release may have
//!    come before the subscription). For exclusive kinds, take this process's turn for the
//!    name first, so only one local waiter per name contends in Redis at a time.
//! 3. Loop: mark messages seen, try; if busy, wait for a message, for the time the attempt
//!    said (the holder's remaining lease: a crashed holder never publishes), or for the
//!    deadline. An outage while waiting is ridden out within the deadline; the first attempt
//!    fails fast.

use std::fmt;
use std::future::IntoFuture;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::convert;
use crate::engine::{Claims, Engine};
use crate::error::LockError;
use crate::hold::Hold;
use crate::metrics::{self, LossReason, Outcome};
use crate::scripts::Call;
use crate::util::{check_lease, shorten};
use crate::waiters::Waiter;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The outcome of one attempt.
pub(crate) enum Attempt<G> {
    Acquired(G),
    /// Held by someone else. Look again within `retry_in` (None: nothing says when), or when
    /// a message arrives on `channel`.
    Busy {
        retry_in: Option<Duration>,
        channel: String,
    },
    /// Granted, but the answer came after the lease (less the drift margin) had run out, so
    /// the lock may already be someone else's: not a success (the grant is being given back).
    /// A first attempt reports [`LockError::Lost`]; a request already waiting tries again.
    Late,
}

impl<G> Attempt<G> {
    /// The same outcome with the acquired value mapped.
    pub(crate) fn map<T>(self, f: impl FnOnce(G) -> T) -> Attempt<T> {
        match self {
            Attempt::Acquired(g) => Attempt::Acquired(f(g)),
            Attempt::Busy { retry_in, channel } => Attempt::Busy { retry_in, channel },
            Attempt::Late => Attempt::Late,
        }
    }
}

/// One attempt on one hold whose script answers with one integer: `token > 0` (or 1 for a
/// read share) granted, `-2 - ms` busy for `ms` more, `-1` busy with no expiry, `0` the hold
/// was lost. Claims the owner's turn, sends the script `build` makes from the owner's current
/// hold count, and records a grant. Returns the hold's generation when acquired.
pub(crate) async fn attempt_one(
    engine: &Arc<Engine>,
    hold: &Arc<Hold>,
    lease: Option<Duration>,
    channel: impl FnOnce() -> String,
    build: impl FnOnce(u32) -> Call,
) -> Result<Attempt<u64>, LockError> {
    let claim = engine.claim(hold.clone()).await?;
    let call = build(claim.expected);
    let sent = engine.send(Claims::one(claim), call, granted).await?;
    let applied = granted(&sent.value);
    let reply: i64 = match convert(sent.value) {
        Ok(reply) => reply,
        Err(e) => {
            // A grant that cannot be read is no grant: give back what it may have taken.
            if applied {
                engine.undo_in_background(sent.claims);
            }
            return Err(e);
        }
    };
    match reply {
        token if token > 0 => {
            let token = if hold.kind.fenced() {
                token.unsigned_abs()
            } else {
                0
            };
            Ok(
                match engine.grant(&sent.claims.first, token, sent.sent_at, lease) {
                    Some(generation) => Attempt::Acquired(generation),
                    None => Attempt::Late,
                },
            )
        }
        0 => {
            hold.mark_current_lost("re-entry found the hold gone", LossReason::Deleted);
            Err(LockError::Lost {
                name: hold.name().to_owned(),
            })
        }
        -1 => Ok(Attempt::Busy {
            retry_in: None,
            channel: channel(),
        }),
        busy => Ok(Attempt::Busy {
            retry_in: Some(Duration::from_millis((-2 - busy).unsigned_abs())),
            channel: channel(),
        }),
    }
}

/// Whether an acquisition's answer is a grant: a token (an integer above 0, or a number as
/// text: the fresh-name path answers the token as it built it).
pub(crate) fn granted(value: &Value) -> bool {
    match value {
        Value::Int(n) => *n > 0,
        Value::BulkString(_) | Value::SimpleString(_) => true,
        _ => false,
    }
}

/// One kind of lock, as the driver sees it: a value made per acquisition request.
pub(crate) trait Primitive: Send + Sync + 'static {
    type Guard: Send + 'static;

    /// The name of the acquisition's tracing span.
    const SPAN: &'static str;

    /// The `kind` label of the acquisition's metrics (`mutex`, `fair`, `read`, `write`,
    /// `semaphore`, `multi`).
    const KIND: &'static str;

    /// Whether local waiters for one name queue in this process, so only one at a time
    /// contends in Redis (exclusive kinds). The turn goes with a grant to its hold when the
    /// kind keeps it ([`keep_turn`](Self::keep_turn)).
    const LOCAL_QUEUE: bool = false;

    /// The engine the acquisition runs on.
    fn engine(&self) -> &Arc<Engine>;

    /// The lock's name, for errors and spans.
    fn name(&self) -> &str;

    /// The name a timeout reports: the lock found busy last (the multi-lock's busy name).
    fn busy_name(&self) -> &str {
        self.name()
    }

    /// Checks the request and prepares the acquisition (owner, holds), before any attempt.
    fn start(&mut self, request: Request) -> Result<(), LockError>;

    /// A channel to subscribe before the first attempt, when the attempt may queue the caller
    /// for a wake-up meant for it alone.
    fn early_channel(&self) -> Option<String> {
        None
    }

    /// The channel that announces this lock's releases, when known before an attempt and the
    /// request may queue behind a local waiter (not a re-entry, which would wait for itself).
    fn queue_channel(&self) -> Option<String> {
        None
    }

    /// The longest wait between attempts.
    fn max_sleep(&self) -> Option<Duration> {
        None
    }

    /// One attempt.
    fn attempt(&mut self) -> impl Future<Output = Result<Attempt<Self::Guard>, LockError>> + Send;

    /// Keeps `turn` (this process's turn to contend for the name, see
    /// [`LOCAL_QUEUE`](Self::LOCAL_QUEUE)) with the hold `guard` is of, until that hold
    /// ends. By default it is given back at once.
    fn keep_turn(&self, _guard: &Self::Guard, _turn: OwnedSemaphorePermit) {}

    /// Called when a wait ends without the lock (timeout, error, cancellation): leave a
    /// queue, remove a mark.
    fn abandon(&mut self) {}
}

/// What one acquisition asks for.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Request {
    /// A fixed lease (checked), or None for the watchdog's.
    pub(crate) lease: Option<Duration>,
    /// False for a single attempt.
    pub(crate) will_wait: bool,
    /// When the wait ends (None: never).
    pub(crate) deadline: Option<Instant>,
    /// How long the lock stays taken at least, even if released sooner (mutexes only).
    pub(crate) hold_at_least: Option<Duration>,
}

/// What a request's builder methods set.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    /// How long to wait (None: as long as it takes; zero: one attempt).
    pub(crate) wait: Option<Duration>,
    /// A fixed lease (None: the watchdog's).
    pub(crate) lease: Option<Duration>,
    /// See [`Request::hold_at_least`].
    pub(crate) hold_at_least: Option<Duration>,
}

/// The hold a started primitive attempts on.
pub(crate) fn started(hold: &Option<Arc<Hold>>) -> &Arc<Hold> {
    let Some(hold) = hold else {
        unreachable!("the driver starts a primitive before its first attempt");
    };
    hold
}

/// Runs `abandon` when dropped while armed.
struct Driving<P: Primitive> {
    primitive: P,
    armed: bool,
}

impl<P: Primitive> Drop for Driving<P> {
    fn drop(&mut self) {
        if self.armed {
            self.primitive.abandon();
        }
    }
}

/// Takes the lock, waiting up to `wait` (None: forever; zero: one attempt), and records how
/// the request ended in the metrics.
async fn acquire<P: Primitive>(primitive: P, options: Options) -> Result<P::Guard, LockError> {
    let start = Instant::now();
    let labels = primitive.engine().labels(P::KIND, primitive.name());
    let mut waiting_since = None;
    let result = drive(primitive, options, start, labels, &mut waiting_since).await;
    let outcome = match &result {
        Ok(_) => Outcome::Acquired,
        Err(LockError::Timeout { .. }) if options.wait == Some(Duration::ZERO) => Outcome::Busy,
        Err(LockError::Timeout { .. }) => Outcome::Timeout,
        Err(e) if e.is_lost() => Outcome::Lost,
        Err(e) if e.is_unavailable() => Outcome::Unavailable,
        Err(_) => Outcome::Invalid,
    };
    metrics::acquisition(labels, outcome, start);
    if let Some(since) = waiting_since {
        metrics::waited(labels, since);
    }
    result
}

/// The acquisition itself. Sets `waiting_since` when the request starts to wait.
async fn drive<P: Primitive>(
    primitive: P,
    options: Options,
    start: Instant,
    labels: metrics::Labels,
    waiting_since: &mut Option<Instant>,
) -> Result<P::Guard, LockError> {
    let Options {
        wait,
        lease,
        hold_at_least,
    } = options;
    if let Some(lease) = lease {
        check_lease("lease", lease)?;
    }
    let will_wait = wait != Some(Duration::ZERO);
    let mut run = Driving {
        primitive,
        armed: false,
    };
    let deadline = wait.and_then(|w| start.checked_add(w));
    run.primitive.start(Request {
        lease,
        will_wait,
        deadline,
        hold_at_least,
    })?;
    let engine = run.primitive.engine().clone();
    let timeout = |name: &str, holder_ttl| LockError::Timeout {
        name: name.to_owned(),
        waited: start.elapsed(),
        holder_ttl,
    };
    let mut waiter = Waiter::new(
        deadline,
        engine.config().watchdog_lease,
        engine.connect_timeout(),
    );
    if will_wait {
        run.armed = true;
        if let Some(channel) = run.primitive.early_channel() {
            waiter.subscribe(engine.waiters(), &channel).await;
        }
    }
    let mut turn = None;
    // Exclusive kinds: while a local waiter contends for the name, queue behind it rather
    // than send an attempt that would find the lock busy (a task that just released it and
    // asks again, say).
    if will_wait
        && P::LOCAL_QUEUE
        && let Some(channel) = run.primitive.queue_channel()
        && engine.waiters().is_contended(&channel)
    {
        *waiting_since = Some(Instant::now());
        waiter.subscribe(engine.waiters(), &channel).await;
        match waiter.local_turn().await {
            Some(t) => turn = t,
            None => return Err(timeout(run.primitive.busy_name(), None)),
        }
    }
    loop {
        let first = waiter.mark_seen();
        if !first {
            metrics::retried(labels);
        }
        let (retry_in, channel) = match run.primitive.attempt().await {
            Ok(Attempt::Acquired(guard)) => {
                run.armed = false;
                if let Some(turn) = turn.take() {
                    run.primitive.keep_turn(&guard, turn);
                }
                return Ok(guard);
            }
            Ok(Attempt::Busy { retry_in, channel }) => (retry_in, channel),
            Ok(Attempt::Late) if first || waiter.expired() => {
                return Err(LockError::Lost {
                    name: run.primitive.name().to_owned(),
                });
            }
            Ok(Attempt::Late) => continue,
            Err(e) => {
                waiter.ride_out(e).await?;
                continue;
            }
        };
        if !will_wait || waiter.expired() {
            return Err(timeout(run.primitive.busy_name(), retry_in));
        }
        if waiting_since.is_none() {
            *waiting_since = Some(Instant::now());
        }
        // Subscribe first, then (exclusive kinds) take this process's turn, then try again.
        if waiter.subscribe(engine.waiters(), &channel).await {
            if P::LOCAL_QUEUE && turn.is_none() {
                match waiter.local_turn().await {
                    Some(t) => turn = t,
                    None => return Err(timeout(run.primitive.busy_name(), retry_in)),
                }
            }
            continue;
        }
        let retry_in = match (retry_in, run.primitive.max_sleep()) {
            (Some(r), Some(m)) => Some(r.min(m)),
            (r, m) => r.or(m),
        };
        waiter.sleep(retry_in).await;
        metrics::wakeup(labels);
    }
}

/// A primitive's acquisition, boxed so one request type serves every primitive with the
/// same guard.
pub(crate) trait Spec<G>: Send + Sync {
    fn start(self: Box<Self>, options: Options) -> BoxFuture<Result<G, LockError>>;

    /// What it takes, for `Debug`: the span name and the lock's name.
    fn describe(&self) -> (&'static str, &str);
}

impl<P: Primitive> Spec<P::Guard> for P {
    fn start(self: Box<Self>, options: Options) -> BoxFuture<Result<P::Guard, LockError>> {
        let span = tracing::debug_span!("lock", kind = P::SPAN, name = %shorten(self.name()));
        Box::pin(acquire(*self, options).instrument(span))
    }

    fn describe(&self) -> (&'static str, &str) {
        (P::SPAN, self.name())
    }
}

/// A request to take a lock, waiting for it if needed: made by a handle's `lock()` (or
/// [`LockClient::lock`](crate::LockClient::lock)), `read()`, `write()` or `acquire(n)`, run by
/// `.await`, which resolves to the guard `G`.
///
/// * [`wait`](Self::wait): how long to wait for a busy lock (default: as long as it takes).
/// * [`lease`](Self::lease): a fixed lease (default: the client's watchdog lease, renewed
///   while the guard lives).
///
/// Bad input (an invalid name, a lease outside 10 ms..=30 days, a semaphore size of 0) is
/// reported as [`LockError::InvalidName`] or [`LockError::InvalidOption`] by the `.await`,
/// before anything is sent.
#[must_use = "a lock request does nothing until awaited"]
pub struct LockRequest<G> {
    spec: Box<dyn Spec<G>>,
    options: Options,
}

impl<G> LockRequest<G> {
    pub(crate) fn new(spec: impl Spec<G> + 'static) -> Self {
        Self {
            spec: Box::new(spec),
            options: Options::default(),
        }
    }

    /// The builder's settings, for the builder methods of particular kinds.
    pub(crate) fn options_mut(&mut self) -> &mut Options {
        &mut self.options
    }

    /// Gives up after waiting this long, with [`LockError::Timeout`]. Without it the request
    /// waits until the lock is free. `Duration::ZERO` makes a single attempt.
    ///
    /// If Redis cannot be reached on the first attempt the request fails at once; once it is
    /// waiting, it rides out an outage (a restart, a failover), trying again every 250 ms,
    /// and if its wait ends during one it returns that error rather than
    /// [`LockError::Timeout`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = Some(wait);
        self
    }

    /// Holds the lock for a fixed lease that is never renewed (10 ms to 30 days). Without it
    /// the client's watchdog keeps the lock for as long as the guard lives.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.options.lease = Some(lease);
        self
    }
}

impl<G: Send + 'static> IntoFuture for LockRequest<G> {
    type Output = Result<G, LockError>;
    type IntoFuture = BoxFuture<Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        self.spec.start(self.options)
    }
}

impl<G> fmt::Debug for LockRequest<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, name) = self.spec.describe();
        f.debug_struct("LockRequest")
            .field("kind", &kind)
            .field("name", &name)
            .field("wait", &self.options.wait)
            .field("lease", &self.options.lease)
            .field("hold_at_least", &self.options.hold_at_least)
            .finish()
    }
}

/// A single attempt to take a lock: made by a handle's `try_lock()` (or
/// [`LockClient::try_lock`](crate::LockClient::try_lock)), `try_read()`, `try_write()` or
/// `try_acquire(n)`, run by `.await`, which resolves to `Ok(Some(guard))`, or `Ok(None)` when
/// someone else holds the lock.
#[must_use = "a lock request does nothing until awaited"]
pub struct TryLockRequest<G> {
    spec: Box<dyn Spec<G>>,
    options: Options,
}

impl<G> TryLockRequest<G> {
    pub(crate) fn new(spec: impl Spec<G> + 'static) -> Self {
        Self {
            spec: Box::new(spec),
            options: Options {
                wait: Some(Duration::ZERO),
                ..Options::default()
            },
        }
    }

    /// The builder's settings, for the builder methods of particular kinds.
    pub(crate) fn options_mut(&mut self) -> &mut Options {
        &mut self.options
    }

    /// Holds the lock for a fixed lease that is never renewed (10 ms to 30 days). Without it
    /// the client's watchdog keeps the lock for as long as the guard lives.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.options.lease = Some(lease);
        self
    }
}

impl<G: Send + 'static> IntoFuture for TryLockRequest<G> {
    type Output = Result<Option<G>, LockError>;
    type IntoFuture = BoxFuture<Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let acquire = self.spec.start(self.options);
        Box::pin(async move {
            match acquire.await {
                Ok(guard) => Ok(Some(guard)),
                Err(LockError::Timeout { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }
}

impl<G> fmt::Debug for TryLockRequest<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, name) = self.spec.describe();
        f.debug_struct("TryLockRequest")
            .field("kind", &kind)
            .field("name", &name)
            .field("lease", &self.options.lease)
            .field("hold_at_least", &self.options.hold_at_least)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::util::arbitrary::{config, int, resp2_value};

    proptest! {
        #![proptest_config(config(2000))]

        /// Every reply that [`attempt_one`] reads as a grant (an integer above 0, also as
        /// text) is one that [`granted`] counts as applied, so a grant whose caller went away
        /// (or that too few replicas confirmed) is always given back.
        ///
        /// Over RESP2 only: the redis crate also reads a RESP3 double (truncated) or an
        /// attribute-wrapped integer as an `i64`, which `granted` does not count. No script of
        /// this crate can answer either (a Lua number is an integer reply in both protocols,
        /// and no script returns a double), so such a reply only comes from something that is
        /// not Redis running these scripts; it is then at worst an acquisition not undone when
        /// its caller goes away, which its lease expires.
        #[test]
        fn every_reply_read_as_a_grant_counts_as_applied(
            reply in prop_oneof![
                resp2_value(),
                int().prop_map(Value::Int),
                int().prop_map(|n| Value::BulkString(n.to_string().into_bytes())),
            ]
        ) {
            let read = convert::<i64>(reply.clone());
            if read.as_ref().is_ok_and(|token| *token > 0) {
                prop_assert!(granted(&reply), "{:?} is read as a grant", reply);
            }
            if let Value::Int(n) = reply {
                prop_assert_eq!(granted(&reply), n > 0);
            }
        }
    }
}
