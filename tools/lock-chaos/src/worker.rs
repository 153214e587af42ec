//! A worker process (`lock-chaos worker ...`): one lock client, a few tasks that take every
//! kind of lock on the run's shared names, and an axum server whose routes take them through
//! the tower layer (the tasks of every worker send it requests).
//!
//! Every critical section is recorded the same way, whoever runs it (a task or an HTTP
//! handler): `acq` once the lock is ours (with the fencing tokens), then a write at the fenced
//! store, a hold, a second write, and `end` — written *before* the release is sent, so a
//! `SIGKILL` after it cannot lose it — then `rel` with what the release said. While it holds,
//! the section samples how long the client believes the lock is still its own
//! (`remaining()`, or `is_held()` for the layer's `HeldLock`): the latest such moment is the
//! section's *valid* end, which the checkers compare with other holders. The section ignores
//! `lost()` on purpose (it records when it fired): a holder that goes on writing after its
//! lease is exactly what the fencing token must stop.

use std::collections::HashMap;
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use axum::extract::Query;
use axum::http::Method;
use axum::routing::{get, post};
use axum::{Extension, Router};
use lock_core::{Guard, HeldLock, LockClient, LockError, Lost, MultiLockGuard, Update, Updated};
use lock_tower::{DistributedLockLayer, PathParam};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::cli::{Deploy, WorkerArgs};
use super::event::{emit, now_us};
use super::names::{FAIR_NAMES, MUTEX_NAMES, RW_NAMES, SEM_NAMES, SEM_SIZE, stock_key};
use super::rng::Rng;
use super::store::{ClientStore, Fence, Write};

/// How long an HTTP request waits for a busy lock (the layer's `wait`).
pub(crate) const HTTP_WAIT: Duration = Duration::from_secs(1);
/// The layer's acquire timeout beyond its wait (its default).
const HTTP_ACQUIRE_SLACK: Duration = Duration::from_secs(2);
/// How much longer than its wait an acquisition may take: its last attempt may meet a broken
/// connection (a response timeout, 0.5 s), the pool's repair (a connect timeout, 1 s) and
/// one more try (0.5 s); the rest is for a loaded two-core machine. The liveness bound is
/// `wait + ACQ_SLACK`.
pub(crate) const ACQ_SLACK: Duration = Duration::from_secs(4);
/// The liveness bound of a release (the same reasoning, without a wait).
pub(crate) const UNLOCK_BOUND: Duration = Duration::from_secs(4);
/// Past its bound by this much, a call is abandoned and recorded as hung.
const HUNG_AFTER: Duration = Duration::from_secs(10);
/// No task runs more operations than this (every loop is bounded).
const MAX_OPS: u64 = 10_000_000;

/// What a section holds of one lock.
#[derive(Debug, Clone)]
struct Part {
    family: &'static str,
    name: String,
    token: Option<u64>,
}

/// Everything the tasks and handlers of a worker share.
struct Ctx {
    args: WorkerArgs,
    client: LockClient,
    fence: Fence,
    /// Whether sections also write to the stores on the lock server ([`ClientStore`]): on
    /// the standalone server only.
    client_stores: bool,
    http: reqwest::Client,
    /// Other workers' HTTP ports (and this one's): `(worker id, port)`.
    peers: StdMutex<Vec<(usize, u16)>>,
    stopping: AtomicBool,
    seq: AtomicU64,
}

impl Ctx {
    fn next_id(&self, kind: &str) -> String {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        format!("{kind}{}.{}.{n}", self.args.id, self.args.incarnation)
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }
}

/// Runs a worker until the coordinator says `exit` (or goes away). Returns the exit code.
pub fn worker_main(args: WorkerArgs) -> i32 {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            emit(&json!({"ev": "fatal", "msg": format!("no runtime: {e}")}));
            return 2;
        }
    };
    let code = runtime.block_on(run(args));
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// Standard input, line by line, read on a thread of its own (a blocked read never holds up
/// the runtime's shutdown); `None` at its end.
fn stdin_lines() -> mpsc::UnboundedReceiver<Option<String>> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(line) => {
                    if tx.send(Some(line)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(None);
    });
    rx
}

async fn connect(args: &WorkerArgs) -> Result<LockClient, LockError> {
    let builder = match &args.deploy {
        Deploy::Standalone(url) => LockClient::builder(url),
        Deploy::Sentinel { service, urls } => {
            LockClient::builder_sentinel(urls.iter().cloned(), service)
        }
        Deploy::Cluster(urls) => LockClient::builder_cluster(urls.iter().cloned()),
    };
    let mut builder = builder
        .watchdog_lease(args.lease)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_millis(500))
        .pool_size(4);
    if args.min_replicas > 0 {
        builder = builder.min_replicas(args.min_replicas, Duration::from_millis(200));
    }
    builder.build().await
}

/// Tries `f` every 250 ms, at most `attempts` times.
async fn retry<T, E: std::fmt::Display, F: Future<Output = Result<T, E>>>(
    what: &str,
    attempts: u32,
    mut f: impl FnMut() -> F,
) -> Result<T, String> {
    let mut last = String::new();
    for _ in 0..attempts {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("{what}: {last}"))
}

/// Connects the lock client, the fenced store and the HTTP client.
async fn setup(args: &WorkerArgs) -> Result<Arc<Ctx>, String> {
    let client = retry("connect", 60, || connect(args)).await?;
    let fence = retry("check server", 20, || Fence::connect(&args.check_url)).await?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(4)
        .build()
        .map_err(|e| format!("http client: {e}"))?;
    Ok(Arc::new(Ctx {
        client_stores: matches!(args.deploy, Deploy::Standalone(_)),
        args: args.clone(),
        client,
        fence,
        http,
        peers: StdMutex::new(Vec::new()),
        stopping: AtomicBool::new(false),
        seq: AtomicU64::new(0),
    }))
}

/// The HTTP side: the worker's routes on a free port until `shutdown`. Returns the port and
/// the server's task (none where no listener could be bound).
async fn serve_http(
    ctx: &Arc<Ctx>,
    shutdown: &Arc<Notify>,
) -> (Option<u16>, Option<tokio::task::JoinHandle<()>>) {
    match tokio::net::TcpListener::bind(("127.0.0.1", 0)).await {
        Ok(listener) => {
            let port = listener.local_addr().ok().map(|a| a.port());
            let app = router(ctx);
            let stop = shutdown.clone();
            let server = tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move { stop.notified().await })
                    .await;
            });
            (port, Some(server))
        }
        Err(e) => {
            emit(&json!({"ev": "note", "msg": format!("no HTTP listener: {e}")}));
            (None, None)
        }
    }
}

/// Follows the coordinator's messages until `stop` (false) or until it is gone (true).
async fn follow(
    input: &mut mpsc::UnboundedReceiver<Option<String>>,
    ctx: &Ctx,
    probe: &mut Option<lock_core::LockGuard>,
) -> bool {
    loop {
        match input.recv().await {
            Some(Some(line)) => {
                let line = line.trim();
                if line == "probed" {
                    if let Some(g) = probe.take() {
                        let _ = tokio::time::timeout(UNLOCK_BOUND, g.unlock()).await;
                    }
                } else if let Some(list) = line.strip_prefix("peers ") {
                    *ctx.peers.lock().unwrap_or_else(|p| p.into_inner()) = parse_peers(list);
                } else if line == "stop" {
                    return false;
                }
            }
            Some(None) | None => return true,
        }
    }
}

/// Every operation is bounded, so the tasks end; waits for them (and says if one did not).
async fn drain(mut tasks: tokio::task::JoinSet<()>) {
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(60), drain)
        .await
        .is_err()
    {
        emit(&json!({"ev": "note", "msg": "tasks still running 60 s after stop; aborted"}));
        tasks.abort_all();
    }
}

async fn run(args: WorkerArgs) -> i32 {
    let max_life = args.max_life;
    tokio::spawn(async move {
        tokio::time::sleep(max_life).await;
        emit(&json!({"ev": "fatal", "msg": "maximum lifetime reached"}));
        std::process::exit(3);
    });
    let mut input = stdin_lines();
    let ctx = match setup(&args).await {
        Ok(ctx) => ctx,
        Err(e) => {
            emit(&json!({"ev": "fatal", "msg": e}));
            return 2;
        }
    };
    let shutdown = Arc::new(Notify::new());
    let (http_port, server) = if args.http {
        serve_http(&ctx, &shutdown).await
    } else {
        (None, None)
    };

    // The probe: a lock held until the coordinator has read its owner id from Redis (the
    // client id it needs to check that a killed worker's locks expire).
    let probe_name = format!("probe:w{}.{}", args.id, args.incarnation);
    let mut probe = retry("probe", 40, || {
        ctx.client
            .lock(probe_name.clone())
            .wait(Duration::from_secs(1))
            .into_future()
    })
    .await
    .ok();
    emit(&json!({
        "ev": "hello",
        "pid": std::process::id(),
        "http": http_port,
        "probe": probe.as_ref().map(|_| probe_name.clone()),
    }));

    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..args.tasks {
        tasks.spawn(task_loop(ctx.clone(), task));
    }
    let gone = follow(&mut input, &ctx, &mut probe).await;
    ctx.stopping.store(true, Ordering::Relaxed);
    if let Some(g) = probe.take() {
        let _ = tokio::time::timeout(UNLOCK_BOUND, g.unlock()).await;
    }
    drain(tasks).await;
    emit(&json!({"ev": "drained", "t": now_us()}));
    // Keep serving the other workers' last requests until `exit`.
    if !gone {
        let wait_exit = async {
            while let Some(Some(line)) = input.recv().await {
                if line.trim() == "exit" {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(120), wait_exit).await;
    }
    shutdown.notify_waiters();
    if let Some(server) = server {
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    }
    emit(&json!({"ev": "bye", "t": now_us()}));
    0
}

fn parse_peers(list: &str) -> Vec<(usize, u16)> {
    list.split(',')
        .filter_map(|p| {
            let (id, port) = p.split_once(':')?;
            Some((id.parse().ok()?, port.parse().ok()?))
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Mutex,
    MutexTry,
    Fair,
    FairTry,
    Read,
    Write,
    WriteTry,
    Permit,
    TwoPermits,
    PermitTry,
    Multi,
    Http,
}

const OPS: [(Op, u32); 12] = [
    (Op::Mutex, 12),
    (Op::MutexTry, 5),
    (Op::Fair, 8),
    (Op::FairTry, 3),
    (Op::Read, 6),
    (Op::Write, 6),
    (Op::WriteTry, 2),
    (Op::Permit, 6),
    (Op::TwoPermits, 2),
    (Op::PermitTry, 2),
    (Op::Multi, 4),
    (Op::Http, 14),
];

async fn task_loop(ctx: Arc<Ctx>, task: usize) {
    let salt = ((ctx.args.id as u64) << 40) | (u64::from(ctx.args.incarnation) << 20) | task as u64;
    let mut rng = Rng::new(ctx.args.seed).fork(salt);
    let weights: Vec<u32> = OPS
        .iter()
        .map(|&(op, w)| {
            if matches!(op, Op::Http) && !ctx.args.http {
                0
            } else {
                w
            }
        })
        .collect();
    for _ in 0..MAX_OPS {
        if ctx.stopping() {
            break;
        }
        let op = OPS[rng.weighted(&weights)].0;
        run_op(&ctx, &mut rng, op).await;
        tokio::time::sleep(rng.ms(0, 10)).await;
    }
}

/// What an acquisition is, for the history.
struct Attempt {
    prim: &'static str,
    /// The family of lock names the checkers group it with (mutex, fair, rw, sem).
    family: &'static str,
    name: String,
    wait: Option<Duration>,
    fixed: Option<Duration>,
    kind: &'static str,
    permits: u32,
    via: &'static str,
}

fn pick<'a>(rng: &mut Rng, names: &[&'a str]) -> &'a str {
    names[rng.index(names.len())]
}

async fn run_op(ctx: &Arc<Ctx>, rng: &mut Rng, op: Op) {
    let lease = ctx.args.lease;
    let fixed = rng.chance(0.25).then_some(lease);
    let wait = rng.ms(100, 2000);
    let client = &ctx.client;
    match op {
        Op::Mutex | Op::MutexTry => {
            let name = pick(rng, &MUTEX_NAMES);
            let handle = client.mutex(name);
            let a = attempt_of("mutex", "mutex", name, op, wait, fixed, "excl", 1);
            if matches!(op, Op::MutexTry) {
                let r = with_lease_try(handle.try_lock(), fixed);
                attempt(ctx, rng, a, r.into_future()).await;
            } else {
                let r = with_lease(handle.lock().wait(wait), fixed);
                attempt(ctx, rng, a, some(r.into_future())).await;
            }
        }
        Op::Fair | Op::FairTry => {
            let name = pick(rng, &FAIR_NAMES);
            let handle = client.fair_lock(name);
            let a = attempt_of("fair", "fair", name, op, wait, fixed, "excl", 1);
            if matches!(op, Op::FairTry) {
                let r = with_lease_try(handle.try_lock(), fixed);
                attempt(ctx, rng, a, r.into_future()).await;
            } else {
                let r = with_lease(handle.lock().wait(wait), fixed);
                attempt(ctx, rng, a, some(r.into_future())).await;
            }
        }
        Op::Read => {
            let name = pick(rng, &RW_NAMES);
            let a = attempt_of("read", "rw", name, op, wait, fixed, "read", 1);
            let r = with_lease(client.read_write_lock(name).read().wait(wait), fixed);
            attempt(ctx, rng, a, some(r.into_future())).await;
        }
        Op::Write | Op::WriteTry => {
            let name = pick(rng, &RW_NAMES);
            let handle = client.read_write_lock(name);
            let a = attempt_of("write", "rw", name, op, wait, fixed, "write", 1);
            if matches!(op, Op::WriteTry) {
                let r = with_lease_try(handle.try_write(), fixed);
                attempt(ctx, rng, a, r.into_future()).await;
            } else {
                let r = with_lease(handle.write().wait(wait), fixed);
                attempt(ctx, rng, a, some(r.into_future())).await;
            }
        }
        Op::Permit | Op::TwoPermits | Op::PermitTry => {
            let name = pick(rng, &SEM_NAMES);
            let n = if matches!(op, Op::TwoPermits) { 2 } else { 1 };
            let handle = client.semaphore(name, SEM_SIZE);
            let a = attempt_of("semaphore", "sem", name, op, wait, fixed, "permit", n);
            if matches!(op, Op::PermitTry) {
                let r = with_lease_try(handle.try_acquire(n), fixed);
                attempt(ctx, rng, a, r.into_future()).await;
            } else {
                let r = with_lease(handle.acquire(n).wait(wait), fixed);
                attempt(ctx, rng, a, some(r.into_future())).await;
            }
        }
        Op::Multi => multi_op(ctx, rng, wait, fixed).await,
        Op::Http => http_op(ctx, rng).await,
    }
}

/// A multi-lock of two different mutex names.
async fn multi_op(ctx: &Arc<Ctx>, rng: &mut Rng, wait: Duration, fixed: Option<Duration>) {
    let first = rng.index(MUTEX_NAMES.len());
    let second = (first + 1 + rng.index(MUTEX_NAMES.len() - 1)) % MUTEX_NAMES.len();
    let names = [MUTEX_NAMES[first], MUTEX_NAMES[second]];
    let mut a = attempt_of(
        "multi",
        "mutex",
        &names.join("+"),
        Op::Multi,
        wait,
        fixed,
        "excl",
        1,
    );
    a.via = "multi";
    let r = with_lease(ctx.client.multi_lock(names).lock().wait(wait), fixed);
    attempt(ctx, rng, a, some(r.into_future())).await;
}

#[allow(clippy::too_many_arguments)]
fn attempt_of(
    prim: &'static str,
    family: &'static str,
    name: &str,
    op: Op,
    wait: Duration,
    fixed: Option<Duration>,
    kind: &'static str,
    permits: u32,
) -> Attempt {
    let tries = matches!(
        op,
        Op::MutexTry | Op::FairTry | Op::WriteTry | Op::PermitTry
    );
    Attempt {
        prim,
        family,
        name: name.to_owned(),
        wait: (!tries).then_some(wait),
        fixed,
        kind,
        permits,
        via: "direct",
    }
}

fn with_lease<G>(
    r: lock_core::LockRequest<G>,
    fixed: Option<Duration>,
) -> lock_core::LockRequest<G> {
    match fixed {
        Some(lease) => r.lease(lease),
        None => r,
    }
}

fn with_lease_try<G>(
    r: lock_core::TryLockRequest<G>,
    fixed: Option<Duration>,
) -> lock_core::TryLockRequest<G> {
    match fixed {
        Some(lease) => r.lease(lease),
        None => r,
    }
}

async fn some<G>(f: impl Future<Output = Result<G, LockError>>) -> Result<Option<G>, LockError> {
    f.await.map(Some)
}

/// The kind of an error, for the history.
pub(crate) fn classify(e: &LockError) -> &'static str {
    match e {
        LockError::Timeout { .. } => "busy",
        LockError::Lost { .. } => "lost",
        LockError::Unavailable { .. } => "unavailable",
        LockError::ResponseTimeout(_) => "response-timeout",
        LockError::NoPrimary { .. } => "no-primary",
        LockError::NotReplicated { .. } => "not-replicated",
        LockError::Redis(r) => {
            if e.is_unavailable() {
                "connection"
            } else if r.to_string().contains("NOSCRIPT") {
                "noscript"
            } else {
                "redis-error"
            }
        }
        _ => "unexpected",
    }
}

/// An error with its sources (`Redis command failed: ...`).
fn chain(e: &LockError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Takes a lock, records the attempt, and runs a section if it was had.
async fn attempt<G, F>(ctx: &Arc<Ctx>, rng: &mut Rng, a: Attempt, acquire: F)
where
    G: Recorded + 'static,
    F: Future<Output = Result<Option<G>, LockError>>,
{
    let req = ctx.next_id("r");
    let bound = a.wait.unwrap_or_default() + ACQ_SLACK;
    let t0 = now_us();
    let result = tokio::time::timeout(bound + HUNG_AFTER, acquire).await;
    let t1 = now_us();
    let (out, err, guard) = match result {
        Err(_) => ("hung", None, None),
        Ok(Ok(Some(g))) => ("acquired", None, Some(g)),
        Ok(Ok(None)) => ("busy", None, None),
        Ok(Err(e)) => (classify(&e), Some(chain(&e)), None),
    };
    emit(&json!({
        "ev": "op", "req": req, "prim": a.prim, "via": a.via, "name": a.name,
        "wait": a.wait.map(|w| w.as_millis() as u64), "fixed": a.fixed.is_some(),
        "t0": t0, "t1": t1, "out": out, "err": err, "bound": bound.as_millis() as u64,
    }));
    let Some(guard) = guard else { return };
    let parts = guard.parts(a.family);
    let hold = pick_hold(rng, a.fixed);
    let remaining = || {
        let r = guard.remaining();
        (!r.is_zero()).then_some(r)
    };
    let mut sec = Section::begin(ctx, a.via, a.kind, a.permits, parts, &req, &remaining);
    sec.write_all().await;
    sec.take_unit(&guard).await;
    sec.hold_for(hold, &remaining, guard.lost()).await;
    // After the hold: where a holder stopped past its lease takes late (refused).
    sec.take_unit(&guard).await;
    sec.write_all().await;
    sec.sample(&remaining);
    let id = sec.id.clone();
    sec.end();
    drop(sec);
    let t0 = now_us();
    let released = tokio::time::timeout(UNLOCK_BOUND + HUNG_AFTER, guard.unlock()).await;
    let res = match released {
        Err(_) => "hung".to_owned(),
        Ok(Ok(true)) => "held".to_owned(),
        Ok(Ok(false)) => "not-held".to_owned(),
        Ok(Err(e)) => format!("error:{}", classify(&e)),
    };
    emit(&json!({"ev": "rel", "sec": id, "t0": t0, "t1": now_us(), "res": res}));
}

/// What a guard holds, as the history records it: one part per lock name.
trait Recorded: Guard {
    fn parts(&self, family: &'static str) -> Vec<Part> {
        vec![Part {
            family,
            name: self.name().to_owned(),
            token: self.fencing_token(),
        }]
    }

    /// A guarded take of one unit from `key` (floor 0), for a guard with one owner.
    fn take(&self, _key: &str) -> Option<Update> {
        None
    }
}

impl Recorded for MultiLockGuard {
    fn parts(&self, family: &'static str) -> Vec<Part> {
        self.guards()
            .iter()
            .map(|g| Part {
                family,
                name: g.name().to_owned(),
                token: Some(g.fencing_token()),
            })
            .collect()
    }
}
impl Recorded for lock_core::LockGuard {
    fn take(&self, key: &str) -> Option<Update> {
        Some(self.update().take(key, 1, 0))
    }
}
impl Recorded for lock_core::ReadGuard {}
impl Recorded for lock_core::WriteGuard {
    fn take(&self, key: &str) -> Option<Update> {
        Some(self.update().take(key, 1, 0))
    }
}
impl Recorded for lock_core::SemaphoreGuard {}

/// How long a section holds: mostly a few ms, sometimes across a renewal or two; with a fixed
/// lease at most half of it (a section that outlives its fixed lease is a bug of the caller,
/// not of the lock, and would only add documented overlaps).
fn pick_hold(rng: &mut Rng, fixed: Option<Duration>) -> Duration {
    let hold = match rng.weighted(&[70, 25, 5]) {
        0 => rng.ms(2, 20),
        1 => rng.ms(50, 300),
        _ => rng.ms(600, 1200),
    };
    match fixed {
        Some(lease) => hold.min(lease / 2),
        None => hold,
    }
}

/// One critical section being recorded.
struct Section {
    ctx: Arc<Ctx>,
    id: String,
    parts: Vec<Part>,
    /// The latest moment the holder is known to have believed the lock its own.
    valid: i64,
    /// When `lost()` fired.
    lost: Option<i64>,
    writes: Vec<Write>,
    /// A write sent and not answered yet: if the section is cut off here (the layer cancels
    /// a handler whose lock was lost), the store may have applied it, so it is recorded as a
    /// write of unknown outcome.
    in_flight: Option<Write>,
    ended: bool,
}

type Remaining<'a> = &'a (dyn Fn() -> Option<Duration> + Sync);

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

impl Section {
    fn begin(
        ctx: &Arc<Ctx>,
        via: &str,
        kind: &str,
        permits: u32,
        parts: Vec<Part>,
        req: &str,
        remaining: Remaining<'_>,
    ) -> Section {
        let t = now_us();
        // Not believed held at the start: a valid end before the start.
        let valid = remaining().map_or(t - 1, |r| t + us(r));
        let id = ctx.next_id("s");
        let json_parts: Vec<Value> = parts
            .iter()
            .map(|p| json!([p.family, p.name, p.token]))
            .collect();
        emit(&json!({
            "ev": "acq", "sec": id, "via": via, "kind": kind, "n": permits,
            "parts": json_parts, "t": t, "valid": valid, "req": req,
        }));
        Section {
            ctx: ctx.clone(),
            id,
            parts,
            valid,
            lost: None,
            writes: Vec::new(),
            in_flight: None,
            ended: false,
        }
    }

    /// Notes how long the holder believes the lock is its own, from now (the time is read
    /// first, so `t + remaining` never overstates the belief).
    fn sample(&mut self, remaining: Remaining<'_>) {
        let t = now_us();
        if let Some(r) = remaining() {
            self.valid = self.valid.max(t + us(r));
        }
    }

    /// Writes at the fenced store for every part that has a token.
    async fn write_all(&mut self) {
        for part in &self.parts {
            if let Some(token) = part.token {
                let sent = now_us();
                self.in_flight = Some(Write::unanswered(
                    &part.name,
                    token,
                    sent,
                    sent,
                    "no answer: the section was cut off while the write was in flight".to_owned(),
                ));
                let w = self
                    .ctx
                    .fence
                    .write(part.family, &part.name, token, &self.id)
                    .await;
                self.in_flight = None;
                self.writes.push(w);
                if !self.ctx.client_stores {
                    continue;
                }
                for store in ClientStore::ALL {
                    let key = store.key(part.family, &part.name);
                    let sent = now_us();
                    let why = "no answer: the section was cut off while the write was in flight";
                    self.in_flight = Some(Write::unanswered(&key, token, sent, sent, why.into()));
                    let client = &self.ctx.client;
                    let w = store
                        .write(client, part.family, &part.name, token, &self.id)
                        .await;
                    self.in_flight = None;
                    if w.accepted == Some(false) {
                        // The client sends a write once more when its connection failed under
                        // it; the first send may have been applied, and a newer holder's write
                        // then refused the repeat. So a refusal may follow a write of ours.
                        let why =
                            "its first send may have been applied (the refusal answers a repeat)";
                        self.writes
                            .push(Write::unanswered(&key, token, w.t0, w.t1, why.into()));
                    }
                    self.writes.push(w);
                }
            }
        }
    }

    /// Takes one unit of the section's lock's counter with a guarded update (on a standalone
    /// run, for a guard with one owner), reporting the take before it is sent (a worker
    /// killed meanwhile leaves a take of unknown outcome) and its answer after.
    async fn take_unit<G: Recorded>(&mut self, guard: &G) {
        let Some(part) = self.parts.first() else {
            return;
        };
        let (Some(key), true) = (stock_key(&part.name), self.ctx.client_stores) else {
            return;
        };
        let Some(update) = guard.take(&key) else {
            return;
        };
        let id = self.ctx.next_id("k");
        emit(&json!({
            "ev": "take", "take": id, "sec": self.id, "name": part.name, "token": part.token,
            "t0": now_us(),
        }));
        let answer = tokio::time::timeout(Duration::from_secs(5), update.send()).await;
        let (out, left) = match answer {
            Ok(Ok(Updated::Applied { values })) => ("applied", values.first().copied()),
            Ok(Ok(Updated::NotEnough { .. })) => ("not_enough", None),
            Ok(Ok(Updated::NotHeld)) => ("not_held", None),
            // An error or no answer: the take may have been applied.
            _ => ("unknown", None),
        };
        emit(&json!({"ev": "took", "take": id, "t1": now_us(), "out": out, "left": left}));
    }

    /// Holds for `hold`, sampling the belief every 10 ms and noting when `lost` fires.
    async fn hold_for(&mut self, hold: Duration, remaining: Remaining<'_>, mut lost: Lost) {
        let until = Instant::now() + hold;
        loop {
            self.sample(remaining);
            let now = Instant::now();
            if now >= until {
                break;
            }
            let step = (until - now).min(Duration::from_millis(10));
            tokio::select! {
                () = &mut lost, if self.lost.is_none() => self.lost = Some(now_us()),
                () = tokio::time::sleep(step) => {}
            }
        }
    }

    /// Records the end of the section (before its release is sent).
    fn end(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        let writes: Vec<Value> = self
            .writes
            .iter()
            .chain(&self.in_flight)
            .map(Write::to_json)
            .collect();
        emit(&json!({
            "ev": "end", "sec": self.id, "t": now_us(), "valid": self.valid,
            "lost": self.lost, "writes": writes,
        }));
    }
}

impl Drop for Section {
    fn drop(&mut self) {
        // A handler cancelled by the layer (its lock was lost) ends here.
        self.end();
    }
}

// ---------------------------------------------------------------------------------------
// HTTP: the server side (the layer takes the lock, the handler runs a section) and the
// client side (a task sends a request to some worker).

fn router(ctx: &Arc<Ctx>) -> Router {
    let layer = |prefix: &str, wait: Duration| {
        DistributedLockLayer::new(ctx.client.clone(), PathParam::new("key"))
            .prefix(prefix)
            .wait(wait)
    };
    let handler = |family: &'static str| {
        let ctx = ctx.clone();
        move |method: Method,
              Extension(held): Extension<HeldLock>,
              Query(q): Query<HashMap<String, String>>| {
            let ctx = ctx.clone();
            async move { http_section(ctx, family, method, held, q).await }
        }
    };
    Router::new()
        .route(
            "/m/{key}",
            post(handler("mutex")).route_layer(layer("m:", HTTP_WAIT)),
        )
        .route(
            "/mt/{key}",
            post(handler("mutex")).route_layer(layer("m:", Duration::ZERO)),
        )
        .route(
            "/f/{key}",
            post(handler("fair")).route_layer(layer("f:", HTTP_WAIT).fair()),
        )
        .route(
            "/r/{key}",
            get(handler("rw"))
                .post(handler("rw"))
                .route_layer(layer("r:", HTTP_WAIT).read_write()),
        )
        .route(
            "/s/{key}",
            post(handler("sem")).route_layer(layer("s:", HTTP_WAIT).permits(SEM_SIZE)),
        )
}

async fn http_section(
    ctx: Arc<Ctx>,
    family: &'static str,
    method: Method,
    held: HeldLock,
    q: HashMap<String, String>,
) -> &'static str {
    let kind = match family {
        "rw" if method == Method::GET => "read",
        "rw" => "write",
        "sem" => "permit",
        _ => "excl",
    };
    let req = q.get("req").cloned().unwrap_or_default();
    let hold = q
        .get("hold")
        .and_then(|h| h.parse().ok())
        .map_or(Duration::from_millis(5), Duration::from_millis)
        .min(Duration::from_secs(2));
    let view = held.clone();
    let remaining = move || view.is_held().then_some(Duration::ZERO);
    let parts = vec![Part {
        family,
        name: held.name().to_owned(),
        token: held.fencing_token(),
    }];
    let mut sec = Section::begin(&ctx, "http", kind, 1, parts, &req, &remaining);
    sec.write_all().await;
    sec.hold_for(hold, &remaining, held.lost()).await;
    sec.write_all().await;
    sec.sample(&remaining);
    sec.end();
    "ok"
}

/// The routes a task sends requests to: path, method, family, names.
const ROUTES: [(&str, &str, &[&str], u32); 6] = [
    ("m", "POST", &MUTEX_NAMES, 5),
    ("mt", "POST", &MUTEX_NAMES, 2),
    ("f", "POST", &FAIR_NAMES, 3),
    ("r", "GET", &RW_NAMES, 2),
    ("r", "POST", &RW_NAMES, 2),
    ("s", "POST", &SEM_NAMES, 3),
];

async fn http_op(ctx: &Arc<Ctx>, rng: &mut Rng) {
    let peers = ctx.peers.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if peers.is_empty() {
        tokio::time::sleep(Duration::from_millis(50)).await;
        return;
    }
    let (peer, port) = peers[rng.index(peers.len())];
    let weights: Vec<u32> = ROUTES.iter().map(|r| r.3).collect();
    let (route, method, names, _) = ROUTES[rng.weighted(&weights)];
    let key = rng.index(names.len());
    let hold = pick_hold(rng, None).min(Duration::from_millis(800));
    let wait = if route == "mt" {
        Duration::ZERO
    } else {
        HTTP_WAIT
    };
    let bound = wait + HTTP_ACQUIRE_SLACK + hold + ACQ_SLACK;
    let req = ctx.next_id("h");
    let url = format!(
        "http://127.0.0.1:{port}/{route}/{key}?hold={}&req={req}",
        hold.as_millis()
    );
    let method_v = if method == "GET" {
        reqwest::Method::GET
    } else {
        reqwest::Method::POST
    };
    let t0 = now_us();
    let sent = ctx
        .http
        .request(method_v, url)
        .timeout(bound + HUNG_AFTER)
        .send()
        .await;
    let (status, out) = match sent {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let body = resp.text().await.unwrap_or_default();
            let out = match status {
                200 => "acquired",
                409 => "busy",
                503 if body.contains("lock_lost") => "lost",
                503 => "unavailable",
                _ => "unexpected",
            };
            (status, out)
        }
        Err(e) if e.is_timeout() => (0, "hung"),
        Err(e) if e.is_connect() => (0, "connect-error"),
        Err(_) => (0, "http-error"),
    };
    emit(&json!({
        "ev": "http", "req": req, "route": route, "method": method, "key": key,
        "peer": peer, "t0": t0, "t1": now_us(), "status": status, "out": out,
        "bound": bound.as_millis() as u64,
    }));
}
