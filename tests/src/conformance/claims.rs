//! The claims, each an async function of a [`Backend`] returning what it showed, or panicking
//! with what broke. They use lock-core's public API only (`info()` to look, `force_unlock()`
//! to take a lock away), so any backend that makes a `LockClient` can run them; the
//! backend's own checks (nothing left behind) run after each one.
//!
//! Scenarios also found in DistributedLock's shared test cases (`DistributedLockCoreTestCases`,
//! the reader-writer and semaphore ones) and ShedLock's `AbstractLockProviderIntegrationTest`
//! are noted where they apply; the code is this crate's own.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::fenced::{self, Fenced};
use lock_core::{LockClient, LockError, LockGuard, WriteGuard};
use tokio::time::Instant;

use super::{Backend, Options, Outcome};
use crate::checkers::{IntervalLog, UnsafeCounter};
use crate::linearizability::{
    Acquired, DEFAULT_BUDGET, EqualToken, MutexHistory, RegisterAnswer, RegisterHistory, Released,
};
use crate::unique::unique_name;

/// A generous bound on anything that should happen promptly (a wake-up, a `lost()`, an
/// expiry a lease away): only a hang exceeds it.
const PROMPTLY: Duration = Duration::from_secs(10);

/// Waits (up to [`PROMPTLY`]) until `check` answers true, asking every 20 ms; panics with
/// `what` if it never does. For state a claim reads through the API (`info()`).
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + PROMPTLY;
    while !check().await {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Awaits `f` for at most [`PROMPTLY`], panicking with `what` if it takes longer.
async fn promptly<T>(what: &str, f: impl IntoFuture<Output = T>) -> T {
    tokio::time::timeout(PROMPTLY, f.into_future())
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {PROMPTLY:?}"))
}

/// Whether anyone holds mutex `name`, as `c` sees it.
async fn held(c: &LockClient, name: &str) -> bool {
    c.mutex(name).info().await.expect("info").held
}

/// One attempt at mutex `name` by `c`: the guard, released at once, or None if busy.
async fn free_for(c: &LockClient, name: &str) -> bool {
    match c.try_lock(name).await.expect("a try") {
        Some(g) => {
            assert!(g.unlock().await.expect("a release"), "released at once");
            true
        }
        None => false,
    }
}

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------------------------------------

/// A lock is granted once: busy for another client and for the same client outside a
/// reentrant scope (DistributedLock: "should not be reentrant"; ShedLock: "should not return
/// a second lock"), held as `info()` says (ShedLock's `assertLocked`), free after the release;
/// another name is another lock, case included; taken again right after each release, ten
/// times (ShedLock: "lock right after unlock").
pub async fn basics(backend: Backend) -> Outcome {
    let (a, b) = (backend.client().await, backend.client().await);
    let name = unique_name("basics");
    let g = a
        .try_lock(&name)
        .await
        .unwrap()
        .expect("a free lock is granted to one try");
    assert!(g.is_held() && !g.remaining().is_zero());
    assert!(
        a.try_lock(&name).await.unwrap().is_none(),
        "the same client, outside a reentrant scope, is another holder"
    );
    assert!(
        b.try_lock(&name).await.unwrap().is_none(),
        "busy for others"
    );
    assert!(held(&b, &name).await, "info() says it is held");
    let other = b
        .try_lock(format!("{name}-2"))
        .await
        .unwrap()
        .expect("another name is another lock");
    let upper = b
        .try_lock(name.to_uppercase())
        .await
        .unwrap()
        .expect("names are case-sensitive");
    assert!(g.unlock().await.unwrap(), "released while held");
    assert!(!held(&b, &name).await, "info() says it is free");
    for round in 0..10 {
        let g = b
            .try_lock(&name)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("round {round}: free right after the release"));
        assert!(a.try_lock(&name).await.unwrap().is_none(), "round {round}");
        assert!(g.unlock().await.unwrap());
    }
    assert!(other.unlock().await.unwrap() && upper.unlock().await.unwrap());
    Outcome::Held("granted once, busy for others and itself, names exact, free at once after each of 10 releases".to_owned())
}

/// A wait that runs out is `LockError::Timeout` naming the lock, a single try is `None`, and
/// a wait of zero is one attempt, for the mutex, the fair lock, both sides of the read-write
/// lock and the semaphore (DistributedLock: "timeouts").
pub async fn timeouts(backend: Backend) -> Outcome {
    let (a, b) = (backend.client().await, backend.client().await);
    let name = unique_name("timeouts");
    let short = Duration::from_millis(200);
    let timed_out = |what: &str, r: Result<(), LockError>| match r {
        Err(LockError::Timeout {
            name: n, waited, ..
        }) => {
            assert!(n.ends_with(&name) || n == name, "{what}: names {n}");
            assert!(waited <= PROMPTLY, "{what}: waited {waited:?}");
        }
        other => panic!("{what}: expected a timeout, got {other:?}"),
    };
    let m = a.lock(&name).await.unwrap();
    timed_out("mutex wait", b.lock(&name).wait(short).await.map(drop));
    timed_out(
        "mutex wait 0",
        b.lock(&name).wait(Duration::ZERO).await.map(drop),
    );
    assert!(b.try_lock(&name).await.unwrap().is_none());
    let f = a.fair_lock(&name).lock().await.unwrap();
    timed_out(
        "fair wait",
        b.fair_lock(&name).lock().wait(short).await.map(drop),
    );
    assert!(b.fair_lock(&name).try_lock().await.unwrap().is_none());
    let r = a.read_write_lock(&name).read().await.unwrap();
    timed_out(
        "write wait under a reader",
        b.read_write_lock(&name).write().wait(short).await.map(drop),
    );
    r.unlock().await.unwrap();
    let w = a.read_write_lock(&name).write().await.unwrap();
    timed_out(
        "read wait under a writer",
        b.read_write_lock(&name).read().wait(short).await.map(drop),
    );
    assert!(b.read_write_lock(&name).try_read().await.unwrap().is_none());
    let s = a.semaphore(&name, 1).acquire(1).await.unwrap();
    timed_out(
        "permit wait",
        b.semaphore(&name, 1).acquire(1).wait(short).await.map(drop),
    );
    assert!(
        b.semaphore(&name, 1)
            .try_acquire(1)
            .await
            .unwrap()
            .is_none()
    );
    for released in [
        m.unlock().await,
        f.unlock().await,
        w.unlock().await,
        s.unlock().await,
    ] {
        assert!(released.unwrap());
    }
    Outcome::Held("typed timeouts and empty tries on 5 kinds of lock".to_owned())
}

/// Bad input is a typed error before anything is taken: names, lease and wait bounds,
/// semaphore sizes, multi-lock name lists, a minimum hold above the lease
/// (DistributedLock: "bad arguments").
pub async fn bad_input(backend: Backend) -> Outcome {
    let c = backend.client().await;
    let invalid = |what: &str, r: Result<(), LockError>| {
        assert!(
            matches!(
                r,
                Err(LockError::InvalidName { .. } | LockError::InvalidOption { .. })
            ),
            "{what}: {r:?}"
        );
    };
    let ok = unique_name("bad");
    invalid("an empty name", c.lock("").await.map(drop));
    invalid("a space", c.try_lock("a b").await.map(drop));
    invalid("a brace", c.try_lock("a{b").await.map(drop));
    invalid("513 bytes", c.try_lock("n".repeat(513)).await.map(drop));
    invalid(
        "a lease of zero",
        c.lock(&ok).lease(Duration::ZERO).await.map(drop),
    );
    invalid(
        "a lease of 1 ms",
        c.try_lock(&ok)
            .lease(Duration::from_millis(1))
            .await
            .map(drop),
    );
    invalid(
        "a minimum hold above the lease",
        c.try_lock(&ok)
            .lease(Duration::from_secs(1))
            .hold_at_least(Duration::from_secs(2))
            .await
            .map(drop),
    );
    for (size, n) in [(0, 1), (3, 0), (3, 4)] {
        invalid(
            "a semaphore size or count",
            c.semaphore(&ok, size).try_acquire(n).await.map(drop),
        );
    }
    let none: [&str; 0] = [];
    invalid("no names", c.multi_lock(none).try_lock().await.map(drop));
    invalid(
        "a name twice",
        c.multi_lock([ok.as_str(), "x", ok.as_str()])
            .try_lock()
            .await
            .map(drop),
    );
    assert!(!held(&c, &ok).await, "nothing was taken");
    assert!(free_for(&c, &ok).await);
    Outcome::Held("12 kinds of bad input refused with a typed error, nothing taken".to_owned())
}

// ---------------------------------------------------------------------------------------------
// Exclusion under contention, recorded for the outside judge

/// What the tasks of one lock name share: the checkers and the recorded history.
struct Contended {
    name: String,
    t0: Instant,
    counter: UnsafeCounter,
    log: IntervalLog,
    inside: AtomicUsize,
    history: Mutex<MutexHistory>,
    register: Mutex<RegisterHistory>,
    owners: AtomicU64,
    busy: AtomicUsize,
}

impl Contended {
    fn now(&self) -> i64 {
        us(self.t0.elapsed())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Acquisitions and releases of one task, recorded; a critical section that increments the
/// non-atomic counter, records its interval, and writes and reads the fenced resource (when
/// there is one) with its token.
async fn contend(
    c: LockClient,
    shared: Arc<Contended>,
    label: String,
    rounds: usize,
    mut resource: Option<redis::aio::MultiplexedConnection>,
) {
    let resource_key = format!("conformance:{}:resource", shared.name);
    for round in 0..rounds {
        let owner = shared.owners.fetch_add(1, Ordering::Relaxed);
        let single_try = round % 4 == 3;
        let invoked = shared.now();
        let got = if single_try {
            c.try_lock(&shared.name).await.unwrap()
        } else {
            Some(c.lock(&shared.name).wait(PROMPTLY * 3).await.unwrap())
        };
        let returned = shared.now();
        let Some(g) = got else {
            shared.busy.fetch_add(1, Ordering::Relaxed);
            lock(&shared.history).acquire(owner, invoked, returned, Acquired::Busy);
            continue;
        };
        let believed_until = shared.now() + us(g.remaining());
        lock(&shared.history).acquire(
            owner,
            invoked,
            returned,
            Acquired::Granted {
                token: g.fencing_token(),
                believed_until,
            },
        );
        let start = Instant::now();
        assert_eq!(
            shared.inside.fetch_add(1, Ordering::SeqCst),
            0,
            "two holders inside the critical section of {}",
            shared.name
        );
        shared.counter.increment().await;
        if let Some(conn) = resource.as_mut() {
            let token = g.fencing_token();
            let sent = shared.now();
            let wrote = fenced::set(conn, &resource_key, owner.to_string(), token)
                .await
                .expect("a fenced write");
            let answer = match wrote {
                Fenced::Written => RegisterAnswer::Written,
                Fenced::Refused { stored } => RegisterAnswer::Refused { stored },
            };
            let answered = shared.now();
            lock(&shared.register).write(owner, token, sent, Some((answered, answer)));
            let sent = shared.now();
            let read: Option<(String, u64)> = fenced::get(conn, &resource_key)
                .await
                .expect("a fenced read");
            let answered = shared.now();
            lock(&shared.register).read(sent, answered, read.map(|(_, t)| t));
        }
        shared.inside.fetch_sub(1, Ordering::SeqCst);
        shared.log.record(label.clone(), start, Instant::now());
        let sent = shared.now();
        let released = g.unlock().await.unwrap();
        let answered = shared.now();
        lock(&shared.history).release(
            owner,
            sent,
            Some(answered),
            if released {
                Released::Held
            } else {
                Released::NotHeld
            },
        );
        assert!(released, "{label}: a release within the lease");
    }
}

/// Three clients × four tasks contend for two names (ShedLock's fuzz test: two jobs, one
/// short task; DistributedLock's parallelism test), mostly waiting, every fourth attempt a
/// single try. Inside: a read-sleep-write counter, the hold interval, and a fenced write and
/// read of a resource on the backend's server. Then every check: the counter is exact, no
/// two intervals overlap, nobody met another inside, and the outside judge finds each name's
/// history linearizable as a lease mutex (tokens growing, busy answers meeting a holder) and
/// each resource's as a fenced register.
pub async fn exclusion(backend: Backend) -> Outcome {
    const CLIENTS: usize = 3;
    const TASKS: usize = 4;
    const ROUNDS: usize = 10;
    let t0 = Instant::now();
    let names = [unique_name("contended-a"), unique_name("contended-b")];
    let shared: Vec<Arc<Contended>> = names
        .iter()
        .map(|name| {
            Arc::new(Contended {
                name: name.clone(),
                t0,
                counter: UnsafeCounter::in_memory().with_gap(Duration::from_millis(1)),
                log: IntervalLog::new(),
                inside: AtomicUsize::new(0),
                history: Mutex::new(MutexHistory::new(name.clone(), true)),
                register: Mutex::new(RegisterHistory::new(
                    format!("{name} resource"),
                    EqualToken::Accepted,
                )),
                owners: AtomicU64::new(0),
                busy: AtomicUsize::new(0),
            })
        })
        .collect();
    let resource = match backend.server() {
        Some(server) => Some(
            redis::Client::open(server.url())
                .expect("the resource's URL")
                .get_multiplexed_async_connection()
                .await
                .expect("a connection to the resource"),
        ),
        None => None,
    };
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..CLIENTS {
        let c = backend.client().await;
        for task in 0..TASKS {
            let which = (client + task) % 2;
            // One short task, as in ShedLock's fuzz test.
            let rounds = if client == 0 && task == 0 { 3 } else { ROUNDS };
            tasks.spawn(contend(
                c.clone(),
                shared[which].clone(),
                format!("client {client} task {task}"),
                rounds,
                resource.clone(),
            ));
        }
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    let mut shown = Vec::new();
    for s in &shared {
        s.counter.assert_consistent().await;
        s.log.assert_no_overlap();
        let sections = s.log.len();
        assert!(sections > 0, "{}: nobody got the lock", s.name);
        assert_eq!(s.counter.expected(), sections as u64);
        let mutex = lock(&s.history).check(DEFAULT_BUDGET);
        assert!(mutex.ok(), "the outside judge: {mutex}");
        let register = lock(&s.register).clone();
        let fence = if register.is_empty() {
            "fenced register not judged: no Redis to keep the resource on".to_owned()
        } else {
            let v = register.check(DEFAULT_BUDGET);
            assert!(v.ok(), "the outside judge: {v}");
            format!("fenced register linearizable ({} ops)", v.ops)
        };
        shown.push(format!(
            "{sections} sections and {} busy tries, counter exact, no overlap, lease mutex linearizable ({} ops), {fence}",
            s.busy.load(Ordering::Relaxed),
            mutex.ops
        ));
    }
    Outcome::Held(shown.join("; "))
}

// ---------------------------------------------------------------------------------------------

/// A guard with a fencing token, of any family.
enum Tokened {
    Lock(LockGuard),
    Write(WriteGuard),
}

impl Tokened {
    fn token(&self) -> u64 {
        match self {
            Tokened::Lock(g) => g.fencing_token(),
            Tokened::Write(g) => g.fencing_token(),
        }
    }

    fn lost(&self) -> lock_core::Lost {
        match self {
            Tokened::Lock(g) => g.lost(),
            Tokened::Write(g) => g.lost(),
        }
    }

    async fn unlock(self) -> bool {
        match self {
            Tokened::Lock(g) => g.unlock().await,
            Tokened::Write(g) => g.unlock().await,
        }
        .unwrap()
    }
}

/// The families of locks with fencing tokens.
#[derive(Debug, Clone, Copy)]
enum Family {
    Mutex,
    Fair,
    Write,
}

impl Family {
    async fn take(self, c: &LockClient, name: &str, lease: Option<Duration>) -> Tokened {
        let wait = PROMPTLY;
        match (self, lease) {
            (Family::Mutex, None) => Tokened::Lock(c.lock(name).wait(wait).await.unwrap()),
            (Family::Mutex, Some(l)) => {
                Tokened::Lock(c.lock(name).wait(wait).lease(l).await.unwrap())
            }
            (Family::Fair, None) => {
                Tokened::Lock(c.fair_lock(name).lock().wait(wait).await.unwrap())
            }
            (Family::Fair, Some(l)) => {
                Tokened::Lock(c.fair_lock(name).lock().wait(wait).lease(l).await.unwrap())
            }
            (Family::Write, None) => {
                Tokened::Write(c.read_write_lock(name).write().wait(wait).await.unwrap())
            }
            (Family::Write, Some(l)) => Tokened::Write(
                c.read_write_lock(name)
                    .write()
                    .wait(wait)
                    .lease(l)
                    .await
                    .unwrap(),
            ),
        }
    }

    async fn force_unlock(self, c: &LockClient, name: &str) -> bool {
        match self {
            Family::Mutex => c.mutex(name).force_unlock().await,
            Family::Fair => c.fair_lock(name).force_unlock().await,
            Family::Write => c.read_write_lock(name).force_unlock().await,
        }
        .unwrap()
    }
}

/// Fencing tokens strictly increase per name across holders on different clients, after a
/// release, after a fixed lease ran out, and after a force-unlock; for the mutex, the fair
/// lock and the write side of the read-write lock.
pub async fn tokens(backend: Backend) -> Outcome {
    let clients = [backend.client().await, backend.client().await];
    let mut shown = Vec::new();
    for family in [Family::Mutex, Family::Fair, Family::Write] {
        let name = unique_name("tokens");
        let mut seen = Vec::new();
        // After a release.
        let g = family.take(&clients[0], &name, None).await;
        seen.push(g.token());
        assert!(g.unlock().await);
        let g = family.take(&clients[1], &name, None).await;
        seen.push(g.token());
        assert!(g.unlock().await);
        // After an expiry.
        let g = family
            .take(&clients[0], &name, Some(Duration::from_millis(200)))
            .await;
        seen.push(g.token());
        promptly("lost() of a fixed lease", g.lost()).await;
        let next = family.take(&clients[1], &name, None).await;
        seen.push(next.token());
        assert!(!g.unlock().await, "{family:?}: the expired hold's release");
        // After a force-unlock.
        assert!(family.force_unlock(&clients[0], &name).await);
        let after = family.take(&clients[0], &name, None).await;
        seen.push(after.token());
        assert!(
            !next.unlock().await,
            "{family:?}: the forced-out hold's release"
        );
        assert!(after.unlock().await);
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "{family:?}: tokens {seen:?} do not strictly increase"
        );
        shown.push(format!("{family:?} {}", seen.len()));
    }
    Outcome::Held(format!(
        "strictly increasing across release, expiry and force-unlock ({} tokens)",
        shown.join(", ")
    ))
}

/// Inside `lock_core::reentrant`, taking a held lock again re-enters it (`hold_count()` 2, the
/// same token), `reenter()` adds a hold, each release takes one, and the lock is free when the
/// count is back to zero; another client finds it busy until then. Outside a scope the same
/// client waits for itself.
pub async fn reentry(backend: Backend) -> Outcome {
    let (a, b) = (backend.client().await, backend.client().await);
    let name = unique_name("reentry");
    let counts = lock_core::reentrant(async {
        let outer = a.lock(&name).await.unwrap();
        let inner = a.lock(&name).await.unwrap();
        assert_eq!((outer.hold_count(), inner.hold_count()), (2, 2));
        assert_eq!(outer.fencing_token(), inner.fencing_token());
        let third = inner.reenter().await.unwrap();
        assert_eq!(third.hold_count(), 3);
        assert!(b.try_lock(&name).await.unwrap().is_none());
        assert!(third.unlock().await.unwrap());
        assert!(inner.unlock().await.unwrap());
        assert_eq!(outer.hold_count(), 1);
        assert!(b.try_lock(&name).await.unwrap().is_none(), "one hold left");
        assert!(outer.unlock().await.unwrap());
        [2, 3, 1]
    })
    .await;
    assert!(free_for(&b, &name).await, "free once the count is zero");
    let g = a.lock(&name).await.unwrap();
    assert!(
        a.try_lock(&name).await.unwrap().is_none(),
        "outside a scope: another holder"
    );
    assert!(g.unlock().await.unwrap());
    Outcome::Held(format!(
        "hold counts {counts:?}, free at zero, no re-entry outside a scope"
    ))
}

/// With a watchdog lease of 400 ms, a lock stays held across four leases: every try of
/// another client in between is busy, the guard is held, `lost()` has not fired, and the
/// release finds it still held (ShedLock's "extend": the watchdog extends it).
pub async fn renewal(backend: Backend) -> Outcome {
    let lease = Duration::from_millis(400);
    let a = backend.client_with(Options::lease(lease)).await;
    let b = backend.client().await;
    let name = unique_name("renewal");
    let g = a.lock(&name).await.unwrap();
    let mut lost = g.lost();
    let started = Instant::now();
    let mut tries = 0;
    while started.elapsed() < lease * 4 && tries < 100 {
        tries += 1;
        assert!(
            b.try_lock(&name).await.unwrap().is_none(),
            "taken by another after {:?}",
            started.elapsed()
        );
        assert!(g.is_held(), "not held after {:?}", started.elapsed());
        tokio::select! {
            () = &mut lost => panic!("lost() fired after {:?}", started.elapsed()),
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
    assert!(started.elapsed() >= lease * 4, "the loop ended early");
    assert!(g.unlock().await.unwrap(), "still held at the release");
    Outcome::Held(format!(
        "held over {:?} with a {lease:?} lease ({tries} busy tries by another client)",
        started.elapsed()
    ))
}

/// A lock force-unlocked by another client (deleted under its holder) fires the holder's
/// `lost()` and `is_held()` turns false; another client takes it; the old guard's release
/// answers `false` and leaves the new holder alone (DistributedLock: "handle lost").
pub async fn lost_on_deletion(backend: Backend) -> Outcome {
    let a = backend
        .client_with(Options::lease(Duration::from_secs(1)))
        .await;
    let b = backend.client().await;
    let name = unique_name("deleted");
    let g = a.lock(&name).await.unwrap();
    assert!(b.mutex(&name).force_unlock().await.unwrap());
    promptly("lost() after a force-unlock", g.lost()).await;
    assert!(!g.is_held());
    let h = promptly("another client's wait", b.lock(&name).wait(PROMPTLY))
        .await
        .unwrap();
    assert!(!g.unlock().await.unwrap(), "the deleted hold's release");
    assert!(
        h.is_held() && held(&b, &name).await,
        "the new holder kept it"
    );
    assert!(a.try_lock(&name).await.unwrap().is_none());
    assert!(h.unlock().await.unwrap());
    Outcome::Held(
        "lost() fired, the old release answered false and left the new holder alone".to_owned(),
    )
}

/// A fixed lease is not renewed: `lost()` fires, `is_held()` is false, another client gets the
/// lock, and the stale guard's release answers `false` and leaves it alone (ShedLock: "should
/// timeout", "cannot extend an expired lock").
pub async fn lost_on_expiry(backend: Backend) -> Outcome {
    let (a, b) = (backend.client().await, backend.client().await);
    let name = unique_name("expired");
    let g = a
        .try_lock(&name)
        .lease(Duration::from_millis(300))
        .await
        .unwrap()
        .expect("free");
    promptly("lost() of a fixed lease", g.lost()).await;
    assert!(!g.is_held() && g.remaining().is_zero());
    let h = promptly("another client's wait", b.lock(&name).wait(PROMPTLY))
        .await
        .unwrap();
    assert!(
        matches!(
            g.extend(Duration::from_secs(5)).await,
            Err(LockError::Lost { .. })
        ),
        "an expired lock cannot be extended"
    );
    assert!(!g.unlock().await.unwrap(), "the expired hold's release");
    assert!(
        h.is_held() && held(&b, &name).await,
        "the new holder kept it"
    );
    assert!(h.unlock().await.unwrap());
    Outcome::Held(
        "lost() fired, extend refused, the stale release left the new holder alone".to_owned(),
    )
}

/// A holder whose process went away without releasing (its client's runtime shut down, so
/// nothing renews or releases it) keeps the lock only until its lease: a waiter gets it
/// (DistributedLock: "lock abandonment", "cross-process abandonment with kill").
pub async fn abandonment(backend: Backend) -> Outcome {
    let lease = Duration::from_millis(500);
    let name = unique_name("abandoned");
    let orphaned = {
        let (backend, name) = (backend.clone(), name.clone());
        let doomed = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("a runtime for the doomed holder");
            let guard = rt.block_on(async {
                let c = backend.client_with(Options::lease(lease)).await;
                c.lock(&name).await.unwrap()
            });
            rt.shutdown_background();
            guard
        });
        tokio::task::block_in_place(|| doomed.join()).expect("the doomed holder's thread")
    };
    let b = backend.client().await;
    assert!(b.try_lock(&name).await.unwrap().is_none(), "held at first");
    let waited = Instant::now();
    let g = promptly(
        "a waiter after the holder's lease",
        b.lock(&name).wait(PROMPTLY),
    )
    .await
    .unwrap();
    let took = waited.elapsed();
    drop(orphaned);
    assert!(g.unlock().await.unwrap());
    Outcome::Held(format!(
        "the abandoned lock went to a waiter after {took:?} (lease {lease:?})"
    ))
}

/// Dropping an acquisition leaves nothing held: a waiter cancelled while the lock is busy (a
/// mutex and a fair lock, whose queue it leaves), and acquisitions of a free lock cancelled at
/// twenty points from before sending to after the answer (DistributedLock: "cancellation").
pub async fn cancellation(backend: Backend) -> Outcome {
    let (a, b) = (backend.client().await, backend.client().await);
    let name = unique_name("cancelled");
    // A waiter cancelled while it waits.
    let g = a.lock(&name).await.unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(200), b.lock(&name)).await;
    assert!(waiting.is_err(), "the waiter was cancelled, not answered");
    assert!(g.unlock().await.unwrap());
    eventually("nothing held after the cancelled waiter", || async {
        !held(&b, &name).await
    })
    .await;
    assert!(free_for(&a, &name).await);
    // A fair-lock waiter cancelled: it leaves the queue.
    let fair = a.fair_lock(&name).lock().await.unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(200), b.fair_lock(&name).lock()).await;
    assert!(waiting.is_err());
    assert!(fair.unlock().await.unwrap());
    eventually("the fair queue empty and the lock free", || async {
        let info = b.fair_lock(&name).info().await.unwrap();
        info.queued == 0 && !info.lock.held
    })
    .await;
    let next = b.fair_lock(&name).try_lock().await.unwrap();
    assert!(next.expect("free for the next").unlock().await.unwrap());
    // Acquisitions of a free lock dropped after 0 to 19 polls: before anything was sent,
    // with the request in flight, after the answer. The dropping client
    // has a 1 s lease, so an orphan (an acquisition applied and never undone) is told apart
    // from a background undo (milliseconds) by how long the lock stays taken.
    let lease = Duration::from_secs(1);
    let c = backend.client_with(Options::lease(lease)).await;
    let (mut completed, mut cut, mut orphans) = (0, 0, Vec::new());
    for turns in 0..20 {
        let mut attempt = Box::pin(c.lock(&name).into_future());
        let mut answered = false;
        for step in 0..turns {
            // One poll, and a turn of the scheduler after every other one.
            let ready = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(attempt.as_mut().poll(cx).map(|g| drop(g.unwrap())))
            })
            .await;
            if ready.is_ready() {
                answered = true;
                break;
            }
            if step % 2 == 1 {
                tokio::task::yield_now().await;
            }
        }
        if answered {
            completed += 1;
        } else if turns > 0 {
            cut += 1;
        }
        drop(attempt); // cancelled here, wherever it was
        let dropped = Instant::now();
        let what =
            format!("nothing held within a lease of an acquisition dropped after {turns} turns");
        // Another client's try, until it gets the lock: a request moved to the background
        // may land after a first look found the lock free, and is undone after it.
        eventually(&what, || free_for(&a, &name)).await;
        if dropped.elapsed() > lease / 2 {
            orphans.push(turns);
        }
    }
    assert!(cut > 0, "no acquisition was dropped in flight");
    assert!(
        orphans.is_empty(),
        "acquisitions dropped after {orphans:?} polls left the lock taken until their {lease:?} lease ran out"
    );
    Outcome::Held(format!(
        "nothing held after a cancelled waiter, a cancelled fair waiter, and 20 dropped \
         acquisitions ({cut} in flight, {completed} answered first): each free for another \
         client within half a lease"
    ))
}

/// Waiters of a fair lock, from two clients, each queued before the next arrives, get it in
/// arrival order.
pub async fn fair_order(backend: Backend) -> Outcome {
    let clients = [backend.client().await, backend.client().await];
    let name = unique_name("fair");
    let holder = clients[0].fair_lock(&name).lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    const WAITERS: u32 = 6;
    for i in 0..WAITERS {
        let fair = clients[i as usize % 2].fair_lock(&name);
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let g = fair.lock().wait(PROMPTLY * 3).await.unwrap();
            lock(&order).push(i);
            assert!(g.unlock().await.unwrap());
        }));
        let probe = clients[1].fair_lock(&name);
        eventually("the waiter queued", || async {
            probe.info().await.unwrap().queued == i + 1
        })
        .await;
    }
    assert!(holder.unlock().await.unwrap());
    for w in waiters {
        promptly("a fair waiter", w).await.unwrap();
    }
    let order = lock(&order).clone();
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "arrival order");
    Outcome::Held(format!(
        "{WAITERS} waiters from 2 clients served in arrival order"
    ))
}

/// Readers of two clients hold at once; a writer cannot; a writer that waits holds new
/// readers back; when the readers leave it gets the lock and excludes readers and writers;
/// readers come back after it (DistributedLock: "multiple readers, single writer", "writer
/// trumps reader").
pub async fn read_write(backend: Backend) -> Outcome {
    let (a, b, c) = (
        backend.client().await,
        backend.client().await,
        backend.client().await,
    );
    let name = unique_name("rw");
    let r1 = a.read_write_lock(&name).read().await.unwrap();
    let r2 = b
        .read_write_lock(&name)
        .try_read()
        .await
        .unwrap()
        .expect("readers share");
    assert_eq!(a.read_write_lock(&name).info().await.unwrap().readers, 2);
    assert!(
        c.read_write_lock(&name)
            .try_write()
            .await
            .unwrap()
            .is_none()
    );
    let writer = {
        let rw = c.read_write_lock(&name);
        tokio::spawn(async move { rw.write().wait(PROMPTLY * 3).await.unwrap() })
    };
    eventually("the writer waits", || async {
        a.read_write_lock(&name)
            .info()
            .await
            .unwrap()
            .writer_waiting
    })
    .await;
    assert!(
        b.read_write_lock(&name).try_read().await.unwrap().is_none(),
        "a waiting writer holds new readers back"
    );
    assert!(r1.unlock().await.unwrap());
    assert!(
        !writer.is_finished(),
        "the writer got in while a reader reads"
    );
    assert!(r2.unlock().await.unwrap());
    let w = promptly("the writer after the readers", writer)
        .await
        .unwrap();
    assert!(a.read_write_lock(&name).try_read().await.unwrap().is_none());
    assert!(
        b.read_write_lock(&name)
            .try_write()
            .await
            .unwrap()
            .is_none()
    );
    assert!(w.unlock().await.unwrap());
    let r = a
        .read_write_lock(&name)
        .try_read()
        .await
        .unwrap()
        .expect("readers again after the writer");
    assert!(r.unlock().await.unwrap());
    Outcome::Held(
        "2 readers shared, the waiting writer held a third back, then excluded both sides"
            .to_owned(),
    )
}

/// One try for `n` permits of semaphore `name` of `size`.
async fn try_permits(
    c: &LockClient,
    name: &str,
    size: u32,
    n: u32,
) -> Option<lock_core::SemaphoreGuard> {
    c.semaphore(name, size).try_acquire(n).await.unwrap()
}

/// A semaphore of 3 gives 3 permits to 3 clients at once and no fourth; two permits need two
/// free; a release makes room; every user must give the size the first one recorded
/// (`SizeMismatch`), a new size is taken once nothing is held; under contention the holders
/// never exceed the size and reach it (DistributedLock: "drain", "concurrency handling").
pub async fn semaphore(backend: Backend) -> Outcome {
    const SIZE: u32 = 3;
    let clients = [
        backend.client().await,
        backend.client().await,
        backend.client().await,
    ];
    let name = unique_name("sem");
    let mut permits = Vec::new();
    for c in &clients {
        let p = try_permits(c, &name, SIZE, 1).await.expect("a free permit");
        assert_eq!(p.permits(), 1);
        permits.push(p);
    }
    let info = clients[0].semaphore(&name, SIZE).info().await.unwrap();
    assert_eq!((info.size, info.held, info.free), (Some(SIZE), SIZE, 0));
    assert!(
        try_permits(&clients[0], &name, SIZE, 1).await.is_none(),
        "a fourth permit"
    );
    match clients[1].semaphore(&name, SIZE + 1).try_acquire(1).await {
        Err(LockError::SizeMismatch {
            requested,
            recorded,
            ..
        }) => assert_eq!((requested, recorded), (SIZE + 1, SIZE)),
        other => panic!("another size while permits are held: {other:?}"),
    }
    assert!(permits.pop().unwrap().unlock().await.unwrap());
    assert!(
        try_permits(&clients[2], &name, SIZE, 2).await.is_none(),
        "two permits with one free"
    );
    let one = try_permits(&clients[2], &name, SIZE, 1)
        .await
        .expect("the freed permit");
    for p in permits.drain(..) {
        assert!(p.unlock().await.unwrap());
    }
    assert!(one.unlock().await.unwrap());
    eventually("the size record gone with the last permit", || async {
        clients[0]
            .semaphore(&name, SIZE)
            .info()
            .await
            .unwrap()
            .size
            .is_none()
    })
    .await;
    let resized = try_permits(&clients[0], &name, SIZE + 2, SIZE + 2)
        .await
        .expect("a new size once nothing is held");
    assert!(resized.unlock().await.unwrap());

    // Contention: 6 tasks, 5 rounds each; the first SIZE holders wait for each other inside,
    // so the size is reached; nobody sees more than SIZE inside.
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Barrier::new(SIZE as usize));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..6 {
        let sem = clients[t % 3].semaphore(&name, SIZE);
        let (inside, most, gate) = (inside.clone(), most.clone(), gate.clone());
        tasks.spawn(async move {
            for round in 0..5 {
                let p = sem.acquire(1).wait(PROMPTLY * 3).await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= SIZE as usize, "{now} holders of {SIZE} permits");
                if round == 0 && t < SIZE as usize {
                    promptly("the first holders meet", gate.wait()).await;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(p.unlock().await.unwrap());
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    let most = most.load(Ordering::SeqCst);
    assert_eq!(most, SIZE as usize, "the holders reach the size");
    Outcome::Held(format!(
        "{SIZE} permits counted and refused beyond, SizeMismatch while held, resized when free, contention peaked at exactly {most}"
    ))
}

/// A multi-lock of three names, one of them busy: a try takes none and a wait that runs out
/// leaves none; once the busy one is free the multi-lock takes all three (each with its
/// token), each is busy for others, and its release frees all three.
pub async fn multi_lock(backend: Backend) -> Outcome {
    let (a, b) = (backend.client().await, backend.client().await);
    let names = [
        unique_name("multi-a"),
        unique_name("multi-b"),
        unique_name("multi-c"),
    ];
    let blocker = b.lock(&names[1]).await.unwrap();
    assert!(
        a.multi_lock(names.clone())
            .try_lock()
            .await
            .unwrap()
            .is_none()
    );
    assert!(free_for(&b, &names[0]).await && free_for(&b, &names[2]).await);
    let waited = a
        .multi_lock(names.clone())
        .lock()
        .wait(Duration::from_millis(300))
        .await;
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "{waited:?}"
    );
    assert!(free_for(&b, &names[0]).await && free_for(&b, &names[2]).await);
    let waiter = {
        let multi = a.multi_lock(names.clone());
        tokio::spawn(async move { multi.lock().wait(PROMPTLY * 3).await.unwrap() })
    };
    assert!(blocker.unlock().await.unwrap());
    let all = promptly("the multi-lock", waiter).await.unwrap();
    assert_eq!(all.fencing_tokens().len(), 3);
    for name in &names {
        assert!(
            !free_for(&b, name).await,
            "{name} is held by the multi-lock"
        );
    }
    assert!(all.unlock().await.unwrap());
    for name in &names {
        assert!(free_for(&b, name).await, "{name} is free again");
    }
    Outcome::Held(
        "none of three while one was busy (try and wait), then all three, then none".to_owned(),
    )
}

/// `hold_at_least`: a lock released before its minimum hold stays taken (another client's
/// try is busy) and goes to a waiter no sooner than the minimum hold after the grant (ShedLock:
/// "lock at least for").
pub async fn hold_at_least(backend: Backend) -> Outcome {
    let (a, b) = (backend.client().await, backend.client().await);
    let name = unique_name("at-least");
    let min = Duration::from_millis(800);
    let g = a
        .try_lock(&name)
        .lease(Duration::from_secs(10))
        .hold_at_least(min)
        .await
        .unwrap()
        .expect("free");
    let granted = Instant::now();
    assert!(g.unlock().await.unwrap());
    assert!(
        b.try_lock(&name).await.unwrap().is_none(),
        "released, but kept until its minimum hold"
    );
    let h = promptly(
        "a waiter after the minimum hold",
        b.lock(&name).wait(PROMPTLY),
    )
    .await
    .unwrap();
    let after = granted.elapsed();
    // The lock's own clock started before `granted` was read: allow for that, generously.
    assert!(
        after + Duration::from_millis(200) >= min,
        "taken {after:?} after the grant, minimum hold {min:?}"
    );
    assert!(h.unlock().await.unwrap());
    Outcome::Held(format!(
        "busy after the release, taken by a waiter {after:?} after the grant (minimum {min:?})"
    ))
}

/// One leader at a time: a second campaign's try finds a leader; when the leader steps down
/// the waiting campaign wins with a greater term number; a leader whose lock is taken away
/// (force-unlock) is deposed; the next term is greater again.
pub async fn leader(backend: Backend) -> Outcome {
    let a = backend.client().await;
    let b = backend
        .client_with(Options::lease(Duration::from_secs(1)))
        .await;
    let name = unique_name("leader");
    let first = promptly("a first campaign", a.leader(&name).campaign())
        .await
        .unwrap();
    assert!(first.is_leader());
    assert!(b.leader(&name).try_campaign().await.unwrap().is_none());
    let waiting = {
        let l = b.leader(&name);
        tokio::spawn(async move { l.campaign().await.unwrap() })
    };
    let n1 = first.number();
    assert!(first.step_down().await.unwrap());
    let second = promptly("the waiting campaign", waiting).await.unwrap();
    let n2 = second.number();
    assert!(second.is_leader() && n2 > n1, "terms {n1} then {n2}");
    assert!(a.mutex(&name).force_unlock().await.unwrap());
    promptly("the deposed leader is told", second.deposed()).await;
    assert!(!second.is_leader());
    let third = promptly("a new campaign", a.leader(&name).campaign())
        .await
        .unwrap();
    let n3 = third.number();
    assert!(n3 > n2, "terms {n2} then {n3}");
    assert!(third.step_down().await.unwrap());
    drop(second);
    Outcome::Held(format!(
        "terms {n1} < {n2} < {n3}; a deposed leader was told"
    ))
}
