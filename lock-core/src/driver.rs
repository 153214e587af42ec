//! The one acquisition driver: attempt → wait → retry → timeout, for every primitive.
//!
//! A primitive ([`Primitive`]) is what a request asks to take; [`Primitive::start`] checks the
//! request and makes its [`Started`] acquisition, which supplies only what differs between
//! kinds: how one attempt is sent (through the engine's [`attempt`](Engine::attempt)), which
//! channel announces a chance to try again, and what to clean up when a wait ends without the
//! lock. The driver owns the rest:
//!
//! 1. One attempt. Acquired → done (one round trip). Busy and not waiting → `Timeout`
//!    (`Ok(None)` for a `try_*`). A request that will wait may send a first attempt that does
//!    not ask how long the holder keeps the lock (a native mutex's leaves out its `PTTL`):
//!    found busy, it subscribes and tries again at once, asking.
//! 2. Subscribe to the channel the attempt named, and try again at once (a release may have
//!    come before the subscription). For exclusive kinds, take this process's place in the
//!    name's local queue first, so only one local waiter per name contends in Redis at a time.
//! 3. Loop: mark messages seen, try; if busy, wait for a message, for the time the attempt
//!    said (the holder's remaining lease: a crashed holder never publishes), or for the
//!    deadline. An outage while waiting is ridden out within the deadline; the first attempt
//!    fails fast.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::engine::{Attempt, Engine};
use crate::error::LockError;
use crate::metrics::{self, Labels, Outcome};
use crate::named::Named;
use crate::util::check_lease;
use crate::waiters::Waiter;

/// One kind of lock, as the driver sees it before a request starts: a value made per
/// acquisition request.
pub(crate) trait Primitive: Send + Sync + 'static {
    type Guard: Send + 'static;

    /// The acquisition once started.
    type Started: Started<Guard = Self::Guard>;

    /// The name of the acquisition's tracing span.
    const SPAN: &'static str;

    /// The `kind` label of the acquisition's metrics (`mutex`, `fair`, `read`, `write`,
    /// `semaphore`, `multi`).
    const KIND: &'static str;

    /// Whether local waiters for one name queue in this process, so only one at a time
    /// contends in Redis (exclusive kinds). The place at the head of the queue goes with a
    /// grant to its hold when the kind keeps it ([`Started::keep_queue_place`]).
    const LOCAL_QUEUE: bool = false;

    /// What it takes: the name, on an engine.
    fn named(&self) -> &Named;

    /// The engine the acquisition runs on.
    fn engine(&self) -> &Arc<Engine> {
        &self.named().engine
    }

    /// The lock's name, for errors and spans.
    fn name(&self) -> &str {
        self.named().name()
    }

    /// Checks the request and prepares the acquisition (owner, holds), before any attempt.
    fn start(self, request: Request) -> Result<Self::Started, LockError>;
}

/// A started acquisition: what one attempt sends, and what waiting for another needs.
pub(crate) trait Started: Send + Sync + 'static {
    type Guard: Send + 'static;

    /// What it takes: the name, on an engine.
    fn named(&self) -> &Named;

    /// The engine the acquisition runs on.
    fn engine(&self) -> &Arc<Engine> {
        &self.named().engine
    }

    /// The lock's name, for errors.
    fn name(&self) -> &str {
        self.named().name()
    }

    /// The name a timeout reports: the lock found busy last (the multi-lock's busy name).
    fn busy_name(&self) -> &str {
        self.name()
    }

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

    /// The channel that announces a chance to take the `index`-th lock of an attempt that
    /// found it busy.
    fn channel(&self, index: usize) -> String;

    /// The longest wait between attempts.
    fn max_sleep(&self) -> Option<Duration> {
        None
    }

    /// One attempt.
    fn attempt(&mut self) -> impl Future<Output = Result<Attempt<Self::Guard>, LockError>> + Send;

    /// Keeps `place` (this process's place at the head of the name's local queue, see
    /// [`Primitive::LOCAL_QUEUE`]) with the hold `guard` is of, until that hold ends. By
    /// default it is given back at once.
    fn keep_queue_place(&self, _guard: &Self::Guard, _place: OwnedSemaphorePermit) {}

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

/// Calls [`Started::abandon`] when dropped while armed: a wait that ends without the lock, by
/// an error, a timeout or the caller going away, cleans up after itself.
struct AbandonOnDrop<S: Started> {
    started: S,
    armed: bool,
}

impl<S: Started> Drop for AbandonOnDrop<S> {
    fn drop(&mut self) {
        if self.armed {
            self.started.abandon();
        }
    }
}

/// Takes the lock, waiting up to `options.wait` (None: forever; zero: one attempt), and
/// records how the request ended in the metrics.
pub(crate) async fn acquire<P: Primitive>(
    primitive: P,
    options: Options,
) -> Result<P::Guard, LockError> {
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
    labels: Labels,
    waiting_since: &mut Option<Instant>,
) -> Result<P::Guard, LockError> {
    if let Some(lease) = options.lease {
        check_lease("lease", lease)?;
    }
    let will_wait = options.wait != Some(Duration::ZERO);
    let deadline = options.wait.and_then(|w| start.checked_add(w));
    let started = primitive.start(Request {
        lease: options.lease,
        will_wait,
        deadline,
        hold_at_least: options.hold_at_least,
    })?;
    let engine = started.engine().clone();
    let lease = engine.config().watchdog_lease;
    let mut run = Driving {
        waiter: Waiter::new(deadline, lease, engine.connect_timeout()),
        engine,
        run: AbandonOnDrop {
            started,
            armed: will_wait,
        },
        place: None,
        start,
    };
    if will_wait {
        run.prepare_to_wait::<P>(waiting_since).await?;
    }
    loop {
        let first = run.waiter.mark_seen();
        if !first {
            metrics::retried(labels);
        }
        let (retry_in, index) = match run.run.started.attempt().await {
            Ok(Attempt::Acquired(guard)) => return Ok(run.acquired(guard)),
            Ok(Attempt::Busy { index, retry_in }) => (retry_in, index),
            Ok(Attempt::BusyAskAgain { index }) => {
                if !will_wait || run.waiter.expired() {
                    return Err(run.timeout(None));
                }
                waiting_since.get_or_insert_with(Instant::now);
                run.subscribe_for::<P>(index, None).await?;
                continue;
            }
            Ok(Attempt::Late) if first || run.waiter.expired() => {
                return Err(LockError::Lost {
                    name: run.run.started.name().to_owned(),
                });
            }
            Ok(Attempt::Late) => continue,
            Err(e) => {
                run.waiter.ride_out(e).await?;
                continue;
            }
        };
        if !will_wait || run.waiter.expired() {
            return Err(run.timeout(retry_in));
        }
        waiting_since.get_or_insert_with(Instant::now);
        if run.subscribe_for::<P>(index, retry_in).await? {
            continue;
        }
        run.sleep(retry_in).await;
        metrics::wakeup(labels);
    }
}

/// A started acquisition and its waiting state, for the driver's loop.
struct Driving<S: Started> {
    run: AbandonOnDrop<S>,
    engine: Arc<Engine>,
    waiter: Waiter,
    /// This process's place at the head of the name's local queue, once taken.
    place: Option<OwnedSemaphorePermit>,
    start: Instant,
}

impl<S: Started> Driving<S> {
    /// Before the first attempt of a request that waits: subscribes to the early channel,
    /// and (exclusive kinds) while a local waiter contends for the name, queues behind it
    /// rather than send an attempt that would find the lock busy (a task that just released
    /// it and asks again, say).
    async fn prepare_to_wait<P: Primitive>(
        &mut self,
        waiting_since: &mut Option<Instant>,
    ) -> Result<(), LockError> {
        if let Some(channel) = self.run.started.early_channel() {
            self.waiter.subscribe(self.engine.waiters(), &channel).await;
        }
        if P::LOCAL_QUEUE
            && self.engine.waiters().any_channel()
            && let Some(channel) = self.run.started.queue_channel()
            && self.engine.waiters().is_contended(&channel)
        {
            *waiting_since = Some(Instant::now());
            self.waiter.subscribe(self.engine.waiters(), &channel).await;
            self.queue_locally(None).await?;
        }
        Ok(())
    }

    /// Subscribes to the channel of the `index`-th lock, found busy; when the subscription is
    /// new (then true: try again at once, a release may have come before it), also takes
    /// this process's place in the name's local queue (exclusive kinds).
    async fn subscribe_for<P: Primitive>(
        &mut self,
        index: usize,
        retry_in: Option<Duration>,
    ) -> Result<bool, LockError> {
        let channel = self.run.started.channel(index);
        if !self.waiter.subscribe(self.engine.waiters(), &channel).await {
            return Ok(false);
        }
        if P::LOCAL_QUEUE && self.place.is_none() {
            self.queue_locally(retry_in).await?;
        }
        Ok(true)
    }

    /// Waits for this process's place at the head of the subscribed name's local queue
    /// (FIFO), within the deadline.
    async fn queue_locally(&mut self, retry_in: Option<Duration>) -> Result<(), LockError> {
        match self.waiter.local_turn().await {
            Some(place) => {
                self.place = place;
                Ok(())
            }
            None => Err(self.timeout(retry_in)),
        }
    }

    /// Waits for a message, the time the attempt said (bounded by the kind's longest
    /// sleep), or the deadline.
    async fn sleep(&mut self, retry_in: Option<Duration>) {
        let retry_in = match (retry_in, self.run.started.max_sleep()) {
            (Some(r), Some(m)) => Some(r.min(m)),
            (r, m) => r.or(m),
        };
        self.waiter.sleep(retry_in).await;
    }

    fn acquired(&mut self, guard: S::Guard) -> S::Guard {
        self.run.armed = false;
        if let Some(place) = self.place.take() {
            self.run.started.keep_queue_place(&guard, place);
        }
        guard
    }

    fn timeout(&self, holder_ttl: Option<Duration>) -> LockError {
        LockError::Timeout {
            name: self.run.started.busy_name().to_owned(),
            waited: self.start.elapsed(),
            holder_ttl,
        }
    }
}
