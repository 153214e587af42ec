//! The coordinator (`lock-chaos run`): starts the lock servers, a check server, a fault proxy
//! per worker and the worker processes; runs the nemesis schedule; collects every event;
//! stops everything; checks the history; returns the report.

use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use lock_tests::{FaultProxy, Mode, RedisServer};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::check::{self, Ctx};
use super::cli::{Deploy, RunConfig, TopologyKind, WorkerArgs};
use super::event::{self, now_us};
use super::history::{Fault, History, Life, PostKill};
use super::judge;
use super::names::{SEM_SIZE, STOCK_INITIAL, STOCK_NAMES, stock_key};
use super::nemesis::{self, FaultKind, Planned};
use super::report::Report;
use super::topology::{self, Topo};

/// How a worker process is started: this binary with `worker ...`, or (in the test suite)
/// the test binary with its arguments in an environment variable.
#[derive(Debug, Clone)]
pub struct Launcher {
    /// The program to start.
    pub program: PathBuf,
    /// Its first arguments.
    pub args: Vec<String>,
    /// When set, the worker's arguments go into this environment variable (separated by
    /// `\u{1f}`) instead of the command line.
    pub env: Option<String>,
}

impl Launcher {
    /// This very binary, `worker` sub-command.
    pub fn this_binary() -> Result<Launcher, String> {
        let program = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        Ok(Launcher {
            program,
            args: vec!["worker".to_owned()],
            env: None,
        })
    }

    fn command(&self, worker_args: Vec<String>) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args);
        match &self.env {
            Some(var) => {
                cmd.env(var, worker_args.join("\u{1f}"));
            }
            None => {
                cmd.args(worker_args);
            }
        }
        cmd
    }
}

/// A worker process that is running.
struct Proc {
    inc: u32,
    pid: u32,
    child: Child,
    stdin: Option<ChildStdin>,
}

#[derive(Debug, Default)]
struct SlotState {
    next_inc: u32,
    /// The running incarnation and its HTTP port.
    current: Option<u32>,
    pid: Option<u32>,
    http: Option<u16>,
}

/// A worker slot: its proxy (standalone runs) and its current process.
struct Slot {
    proxy: Option<FaultProxy>,
    deploy: Deploy,
    proc: tokio::sync::Mutex<Option<Proc>>,
    state: StdMutex<SlotState>,
}

struct Coord {
    cfg: RunConfig,
    launcher: Launcher,
    t0: i64,
    /// The workers' logs (removed at the end unless kept).
    dir: PathBuf,
    topo: Arc<Topo>,
    check_url: String,
    slots: Vec<Slot>,
    hist: StdMutex<History>,
    /// Set once the run is being wound down: a worker that exits is not replaced.
    finishing: AtomicBool,
    /// Post-kill checks under way.
    checks: StdMutex<Vec<tokio::task::JoinHandle<()>>>,
}

fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn say(line: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// Runs a whole soak on a runtime of its own and returns its report.
pub fn run_blocking(cfg: RunConfig, launcher: Launcher) -> Result<Report, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let report = runtime.block_on(run(cfg, launcher));
    runtime.shutdown_timeout(Duration::from_secs(2));
    report
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("harness call failed: {e}"))
}

/// One slot per worker: its proxy (standalone runs) and where its client connects.
async fn slots(topo: &Arc<Topo>, workers: usize) -> Result<Vec<Slot>, String> {
    let mut slots = Vec::new();
    for _ in 0..workers {
        let proxy = match topo.standalone_addr() {
            Some(addr) => Some(FaultProxy::start(addr).await),
            None => None,
        };
        let deploy = {
            let topo = topo.clone();
            let url = proxy.as_ref().map(FaultProxy::url);
            blocking(move || topo.deploy(url)).await?
        };
        slots.push(Slot {
            proxy,
            deploy,
            proc: tokio::sync::Mutex::new(None),
            state: StdMutex::new(SlotState::default()),
        });
    }
    Ok(slots)
}

impl Coord {
    /// Waits (bounded) until every worker said hello, so the nemesis starts on a running load.
    async fn wait_hello(&self) {
        let hello_deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < hello_deadline {
            let ready = {
                let h = lock(&self.hist);
                h.lives.iter().filter(|l| l.hello.is_some()).count()
            };
            if ready >= self.cfg.workers {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Runs the nemesis's plan (and the progress lines and the primaries' watch) for the run's
    /// duration, then winds the run down. Returns how many faults were planned.
    async fn soak(self: &Arc<Self>) -> usize {
        let cfg = &self.cfg;
        let progress = !cfg.progress.is_zero();
        let plan = nemesis::plan(cfg);
        let planned = plan.len();
        if progress {
            say(&format!(
                "lock-chaos: seed {} — {} faults planned over {:?}; workers' logs in {}",
                cfg.seed,
                planned,
                cfg.duration,
                self.dir.display()
            ));
        }
        let start = Instant::now();
        let ticker = progress.then(|| tokio::spawn(self.clone().progress(start)));
        let monitor = (cfg.topology != TopologyKind::Standalone)
            .then(|| tokio::spawn(self.clone().watch_primaries()));
        self.nemesis(start, plan).await;
        let until_end = (start + cfg.duration).saturating_duration_since(Instant::now());
        tokio::time::sleep(until_end).await;
        if let Some(t) = ticker {
            t.abort();
        }
        self.finish().await;
        if let Some(m) = monitor {
            m.abort();
        }
        planned
    }
}

/// The checkers' context of a run that ended at `run_end`: failover windows widened by a
/// lease before and a lease and a second after.
fn check_ctx(cfg: &RunConfig, hist: &History, t0: i64, run_end: i64) -> Ctx {
    let failovers = hist
        .faults
        .iter()
        .filter(|f| f.kind.is_failover())
        .map(|f| {
            let lease = cfg.lease.as_micros() as i64;
            (f.t0 - lease, f.t1 + lease + 1_000_000)
        })
        .collect();
    Ctx {
        t0,
        run_end,
        sem_size: SEM_SIZE,
        failovers,
        min_replicas: cfg.min_replicas,
        client_stores: cfg.topology == TopologyKind::Standalone,
    }
}

async fn run(cfg: RunConfig, launcher: Launcher) -> Result<Report, String> {
    let kind = cfg.topology;
    if !cfg.progress.is_zero() {
        say(&format!(
            "lock-chaos: starting a {} deployment, a check server and {} workers ...",
            kind.name(),
            cfg.workers
        ));
    }
    let topo = Arc::new(blocking(move || Topo::start(kind)).await?);
    let check_server = Arc::new(blocking(RedisServer::start).await?);
    let dir = tempfile::Builder::new()
        .prefix("lock-chaos-")
        .tempdir()
        .map_err(|e| format!("temporary directory: {e}"))?
        .keep();
    if kind == TopologyKind::Standalone {
        let addrs = topo.primaries();
        blocking(move || set_stock(&addrs)).await??;
    }
    let slots = slots(&topo, cfg.workers).await?;
    let coord = Arc::new(Coord {
        cfg: cfg.clone(),
        launcher,
        t0: now_us(),
        dir,
        topo: topo.clone(),
        check_url: check_server.url(),
        slots,
        hist: StdMutex::new(History {
            raw: cfg.history.as_ref().map(|_| Vec::new()),
            ..History::default()
        }),
        finishing: AtomicBool::new(false),
        checks: StdMutex::new(Vec::new()),
    });
    let mono_start = Instant::now();
    for slot in 0..cfg.workers {
        coord.spawn(slot).await?;
    }
    coord.wait_hello().await;
    let planned = coord.soak().await;
    let run_end = now_us();
    let clock_step_ms = ((run_end - coord.t0) - mono_start.elapsed().as_micros() as i64) / 1000;

    // Check the history.
    let hist = std::mem::take(&mut *lock(&coord.hist));
    if let (Some(path), Some(raw)) = (&cfg.history, &hist.raw) {
        write_history(path, raw, &hist).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let ctx = check_ctx(&cfg, &hist, coord.t0, run_end);
    let mut findings = check::check(&hist, &ctx);
    let judged = judge::judge(&hist, &ctx, &mut findings);
    let keep = cfg.keep_logs || !findings.violations.is_empty();
    let log_dir = if keep {
        Some(coord.dir.display().to_string())
    } else {
        let _ = std::fs::remove_dir_all(&coord.dir);
        None
    };
    drop(check_server);
    drop(topo);
    let seconds = (run_end - ctx.t0) as f64 / 1e6;
    let mut report = Report::new(
        &cfg,
        planned,
        &hist,
        findings,
        seconds,
        clock_step_ms,
        log_dir,
    );
    report.judged = judged;
    Ok(report)
}

fn write_history(path: &std::path::Path, raw: &[String], h: &History) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(File::create(path)?);
    for line in raw {
        writeln!(out, "{line}")?;
    }
    for f in &h.faults {
        writeln!(
            out,
            "{}",
            serde_json::json!({"fault": f.kind.name(), "target": f.target, "t0": f.t0, "t1": f.t1, "done": f.done, "detail": f.detail})
        )?;
    }
    for l in &h.lives {
        writeln!(
            out,
            "{}",
            serde_json::json!({"life": l.worker, "inc": l.inc, "pid": l.pid, "started": l.started, "client": l.client_id, "killed": l.killed, "exited": l.exited, "stops": l.stops})
        )?;
    }
    out.flush()
}

impl Coord {
    fn worker_args(&self, slot: usize, inc: u32) -> WorkerArgs {
        WorkerArgs {
            id: slot,
            incarnation: inc,
            deploy: self.slots[slot].deploy.clone(),
            check_url: self.check_url.clone(),
            seed: self.cfg.seed,
            lease: self.cfg.lease,
            tasks: self.cfg.tasks,
            http: self.cfg.http,
            min_replicas: self.cfg.min_replicas,
            max_life: self.cfg.duration + Duration::from_secs(600),
        }
    }

    /// Starts a new process in `slot`.
    async fn spawn(self: &Arc<Self>, slot: usize) -> Result<u32, String> {
        let s = &self.slots[slot];
        let inc = {
            let mut st = lock(&s.state);
            let inc = st.next_inc;
            st.next_inc += 1;
            inc
        };
        let log_path = self.dir.join(format!("worker-{slot}-{inc}.log"));
        let log = File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let mut cmd = self.launcher.command(self.worker_args(slot, inc).to_args());
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .env(
                "RUST_LOG",
                std::env::var("LOCK_CHAOS_WORKER_LOG").unwrap_or_else(|_| "warn".to_owned()),
            );
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start worker {slot}: {e}"))?;
        let pid = child.id().unwrap_or_default();
        let stdout = child.stdout.take();
        let stdin = child.stdin.take();
        lock(&self.hist).lives.push(Life {
            worker: slot,
            inc,
            pid,
            started: now_us(),
            hello: None,
            client_id: None,
            killed: None,
            exited: None,
            drained: None,
            bye: None,
            stops: Vec::new(),
            notes: Vec::new(),
        });
        *s.proc.lock().await = Some(Proc {
            inc,
            pid,
            child,
            stdin,
        });
        {
            let mut st = lock(&s.state);
            st.current = Some(inc);
            st.pid = Some(pid);
            st.http = None;
        }
        if let Some(stdout) = stdout {
            tokio::spawn(self.clone().read_events(slot, inc, stdout));
        }
        Ok(inc)
    }

    /// `spawn` behind a box: `spawn` starts `read_events`, which may call this.
    fn respawn(self: Arc<Self>, slot: usize) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            if let Err(e) = self.spawn(slot).await {
                lock(&self.hist).problems.push(("run", e));
            }
        })
    }

    async fn read_events(self: Arc<Self>, slot: usize, inc: u32, stdout: ChildStdout) {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Some((v, json)) = event::parse(&line) else {
                continue;
            };
            lock(&self.hist).apply(slot, inc, &v, json);
            if event::s(&v, "ev") == "hello" {
                let port = v.get("http").and_then(serde_json::Value::as_u64);
                {
                    let mut st = lock(&self.slots[slot].state);
                    if st.current == Some(inc) {
                        st.http = port.map(|p| p as u16);
                    }
                }
                self.broadcast_peers().await;
                if let Some(probe) = v.get("probe").and_then(serde_json::Value::as_str) {
                    tokio::spawn(self.clone().read_probe(slot, inc, probe.to_owned()));
                }
            }
        }
        // The process ended (or closed its output).
        let killed = {
            let mut h = lock(&self.hist);
            match h.life_mut(slot, inc) {
                Some(life) => {
                    life.exited = Some(now_us());
                    life.killed.is_some()
                }
                None => false,
            }
        };
        if !killed && !self.finishing.load(Ordering::SeqCst) {
            lock(&self.hist).problems.push((
                "crash",
                format!("worker {slot}.{inc} exited on its own (see its log)"),
            ));
            // Keep the load up: reap it and start another.
            let taken = {
                let mut proc = self.slots[slot].proc.lock().await;
                if proc.as_ref().is_some_and(|p| p.inc == inc) {
                    proc.take()
                } else {
                    None
                }
            };
            if let Some(mut p) = taken {
                let _ = tokio::time::timeout(Duration::from_secs(5), p.child.wait()).await;
                lock(&self.slots[slot].state).current = None;
                self.clone().respawn(slot).await;
            }
        }
    }

    /// Reads the probe lock's owner from Redis: the worker's client id. Then lets it go.
    async fn read_probe(self: Arc<Self>, slot: usize, inc: u32, probe: String) {
        let topo = self.topo.clone();
        let id = blocking(move || {
            let addrs = topo.primaries();
            topology::owner_client_id(&addrs, &probe)
        })
        .await
        .ok()
        .flatten();
        if let Some(life) = lock(&self.hist).life_mut(slot, inc) {
            life.client_id = id;
        }
        self.send(slot, inc, "probed").await;
    }

    /// Writes a line to the standard input of `slot`'s process if it is still incarnation
    /// `inc`.
    async fn send(&self, slot: usize, inc: u32, line: &str) {
        let mut proc = self.slots[slot].proc.lock().await;
        if let Some(p) = proc.as_mut().filter(|p| p.inc == inc)
            && let Some(stdin) = p.stdin.as_mut()
        {
            let write = async {
                stdin.write_all(format!("{line}\n").as_bytes()).await?;
                stdin.flush().await
            };
            let _ = tokio::time::timeout(Duration::from_secs(2), write).await;
        }
    }

    /// Tells every worker where every worker's HTTP server is.
    async fn broadcast_peers(&self) {
        let (peers, running): (Vec<String>, Vec<(usize, u32)>) = {
            let mut peers = Vec::new();
            let mut running = Vec::new();
            for (k, s) in self.slots.iter().enumerate() {
                let st = lock(&s.state);
                if let Some(inc) = st.current {
                    running.push((k, inc));
                    if let Some(port) = st.http {
                        peers.push(format!("{k}:{port}"));
                    }
                }
            }
            (peers, running)
        };
        let line = format!("peers {}", peers.join(","));
        for (slot, inc) in running {
            self.send(slot, inc, &line).await;
        }
    }

    /// `SIGKILL`s `slot`'s process; returns its incarnation and when.
    async fn kill(self: &Arc<Self>, slot: usize) -> Option<(u32, i64)> {
        let mut proc = self.slots[slot].proc.lock().await.take()?;
        {
            let mut st = lock(&self.slots[slot].state);
            st.current = None;
            st.http = None;
        }
        let t = now_us();
        if let Some(life) = lock(&self.hist).life_mut(slot, proc.inc) {
            life.killed = Some(t);
        }
        let _ = proc.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), proc.child.wait()).await;
        self.broadcast_peers().await;
        Some((proc.inc, t))
    }

    fn running(&self, slot: usize) -> Option<(u32, u32)> {
        let st = lock(&self.slots[slot].state);
        Some((st.current?, st.pid?))
    }

    /// Records every change of the nodes that claim to be primary (polling every 250 ms):
    /// Sentinel and the Cluster also fail over on their own, and what happens around a
    /// failover is judged apart. A time when Sentinel's two data nodes both claim to be
    /// primary (a split brain) is recorded as one change from its start to its end.
    async fn watch_primaries(self: Arc<Self>) {
        let show = |a: &[SocketAddr]| {
            a.iter()
                .map(|x| format!(":{}", x.port()))
                .collect::<Vec<_>>()
                .join(",")
        };
        let sentinel = self.cfg.topology == TopologyKind::Sentinel;
        // The last stable set and when it was last seen; the start of an unstable time.
        let mut last: Option<(Vec<SocketAddr>, i64)> = None;
        let mut unstable: Option<(i64, Vec<SocketAddr>)> = None;
        loop {
            let before = now_us();
            let topo = self.topo.clone();
            let now = blocking(move || topo.masters())
                .await
                .ok()
                .flatten()
                .unwrap_or_default();
            let stable = !now.is_empty() && (!sentinel || now.len() == 1);
            if stable {
                let mut h = lock(&self.hist);
                if let Some((since, seen)) = unstable.take() {
                    h.faults.push(Fault {
                        kind: FaultKind::PrimaryChanged,
                        target: None,
                        t0: since,
                        t1: now_us(),
                        done: true,
                        detail: format!(
                            "no single primary (primaries: {}) until {}",
                            show(&seen),
                            show(&now)
                        ),
                    });
                } else if let Some((prev, seen)) = &last
                    && *prev != now
                {
                    h.faults.push(Fault {
                        kind: FaultKind::PrimaryChanged,
                        target: None,
                        t0: *seen,
                        t1: now_us(),
                        done: true,
                        detail: format!("primaries {} -> {}", show(prev), show(&now)),
                    });
                }
                last = Some((now, before));
            } else if unstable.is_none() {
                let since = last.as_ref().map_or(before, |(_, seen)| *seen);
                unstable = Some((since, now));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Prints a progress line every `cfg.progress`.
    async fn progress(self: Arc<Self>, start: Instant) {
        let mut tick = tokio::time::interval(self.cfg.progress);
        tick.tick().await;
        loop {
            tick.tick().await;
            let line = {
                let h = lock(&self.hist);
                let acquired = h.ops.iter().filter(|o| o.out == "acquired").count()
                    + h.http.iter().filter(|o| o.out == "acquired").count();
                format!(
                    "[{:>5.0}s] operations {} (acquired {acquired}), sections {}, faults {}, worker processes started {}",
                    start.elapsed().as_secs_f64(),
                    h.ops.len() + h.http.len(),
                    h.secs.len(),
                    h.faults.len(),
                    h.lives.len()
                )
            };
            say(&line);
        }
    }

    /// Runs the schedule: each fault at its time, as a task of its own.
    async fn nemesis(self: &Arc<Self>, start: Instant, plan: Vec<Planned>) {
        let mut running = JoinSet::new();
        for p in plan {
            tokio::time::sleep_until(start + p.at).await;
            running.spawn(self.clone().inject(p));
            while running.try_join_next().is_some() {}
        }
        let all = async { while running.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(180), all)
            .await
            .is_err()
        {
            lock(&self.hist).problems.push((
                "run",
                "a fault was still being injected 180 s after the schedule ended".to_owned(),
            ));
        }
    }

    async fn signal(pid: u32, sig: &str) -> Result<(), String> {
        let status = tokio::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .map_err(|e| format!("kill {sig} {pid}: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill {sig} {pid}: {status}"))
        }
    }

    async fn primaries(&self) -> Vec<SocketAddr> {
        let topo = self.topo.clone();
        blocking(move || topo.primaries()).await.unwrap_or_default()
    }

    /// One command on every primary; what they answered.
    async fn on_primaries(&self, args: &'static [&'static str], timeout: Duration) -> String {
        let mut answers = Vec::new();
        for addr in self.primaries().await {
            let answer = blocking(move || topology::query(addr, args, timeout))
                .await
                .and_then(|r| r.map_err(|e| e.to_string()));
            answers.push(match answer {
                Ok(r) => format!(":{} {}", addr.port(), r.to_string().replace('\n', " ")),
                Err(e) => format!(":{} failed: {e}", addr.port()),
            });
        }
        answers.join("; ")
    }

    /// Injects one fault and waits until it is over.
    async fn inject(self: Arc<Self>, p: Planned) {
        let t0 = now_us();
        let target = match p.kind {
            FaultKind::ClientStop
            | FaultKind::ClientStopPastLease
            | FaultKind::ClientKill
            | FaultKind::ProxyDelay
            | FaultKind::ProxyBlackhole
            | FaultKind::ProxyReset
            | FaultKind::ProxyLoseReply => Some(p.target),
            _ => None,
        };
        let (done, detail) = match p.kind {
            FaultKind::ClientStop | FaultKind::ClientStopPastLease => self.client_stop(&p).await,
            FaultKind::ClientKill => self.clone().client_kill(&p).await,
            FaultKind::DebugSleep => self.debug_sleep(&p).await,
            FaultKind::ClientPause => self.client_pause(&p).await,
            FaultKind::ServerStop => self.server_stop(&p).await,
            FaultKind::ServerRestart => {
                let topo = self.topo.clone();
                match blocking(move || topo.restart_standalone()).await {
                    Ok(Ok(pid)) => (
                        true,
                        format!("redis-server killed and restarted (pid {pid})"),
                    ),
                    Ok(Err(e)) | Err(e) => (false, e),
                }
            }
            FaultKind::ProxyDelay
            | FaultKind::ProxyBlackhole
            | FaultKind::ProxyReset
            | FaultKind::ProxyLoseReply => match self.slots[p.target].proxy.as_ref() {
                None => (false, "no proxy".to_owned()),
                Some(proxy) => proxy_fault(proxy, &p).await,
            },
            FaultKind::ScriptFlush => (
                true,
                self.on_primaries(&["SCRIPT", "FLUSH"], Duration::from_secs(5))
                    .await,
            ),
            FaultKind::PubsubKill => (
                true,
                format!(
                    "connections killed: {}",
                    self.on_primaries(
                        &["CLIENT", "KILL", "TYPE", "pubsub"],
                        Duration::from_secs(5)
                    )
                    .await
                ),
            ),
            kind => {
                let topo = self.topo.clone();
                let arg = p.arg;
                match blocking(move || topo.change(kind, arg)).await {
                    Ok(Ok(detail)) => (true, detail),
                    Ok(Err(e)) | Err(e) => (false, e),
                }
            }
        };
        lock(&self.hist).faults.push(Fault {
            kind: p.kind,
            target,
            t0,
            t1: now_us(),
            done,
            detail,
        });
    }

    /// Stops the target worker (`SIGSTOP`) for the fault's duration, recording the stop in its
    /// life, then resumes it.
    async fn client_stop(&self, p: &Planned) -> (bool, String) {
        let Some((inc, pid)) = self.running(p.target) else {
            return (false, "skipped: the worker was not running".to_owned());
        };
        if let Err(e) = Coord::signal(pid, "-STOP").await {
            return (false, e);
        }
        let stopped = now_us();
        if let Some(life) = lock(&self.hist).life_mut(p.target, inc) {
            life.stops.push((stopped, None));
        }
        tokio::time::sleep(p.duration).await;
        let cont = Coord::signal(pid, "-CONT").await;
        let resumed = now_us();
        if let Some(life) = lock(&self.hist).life_mut(p.target, inc)
            && let Some(last) = life.stops.last_mut()
        {
            last.1 = Some(resumed);
        }
        match cont {
            Ok(()) => (
                true,
                format!("pid {pid} stopped for {} ms", (resumed - stopped) / 1000),
            ),
            Err(e) => (false, e),
        }
    }

    /// Kills the target worker, starts the check that its locks expire, and after the fault's
    /// duration starts its next incarnation (unless the run is ending).
    async fn client_kill(self: Arc<Self>, p: &Planned) -> (bool, String) {
        let Some((inc, killed)) = self.kill(p.target).await else {
            return (false, "skipped: the worker was not running".to_owned());
        };
        let check = tokio::spawn(self.clone().post_kill(p.target, inc, killed));
        lock(&self.checks).push(check);
        tokio::time::sleep(p.duration).await;
        if self.finishing.load(Ordering::SeqCst) {
            return (
                true,
                format!("incarnation {inc} killed; not replaced (the run is ending)"),
            );
        }
        match self.spawn(p.target).await {
            Ok(new) => (
                true,
                format!(
                    "incarnation {inc} killed; {new} started after {} ms",
                    p.duration.as_millis()
                ),
            ),
            Err(e) => (
                true,
                format!("incarnation {inc} killed; restart failed: {e}"),
            ),
        }
    }

    /// `DEBUG SLEEP` on one primary for the fault's duration.
    async fn debug_sleep(&self, p: &Planned) -> (bool, String) {
        let secs = format!("{:.3}", p.duration.as_secs_f64());
        let addrs = self.primaries().await;
        let Some(addr) = addrs
            .get((p.arg % addrs.len().max(1) as u64) as usize)
            .copied()
        else {
            return (false, "no primary".to_owned());
        };
        let timeout = p.duration + Duration::from_secs(5);
        let args = secs.clone();
        let r = blocking(move || topology::query(addr, &["DEBUG", "SLEEP", &args], timeout)).await;
        match r {
            Ok(Ok(_)) => (true, format!(":{} slept {secs} s", addr.port())),
            Ok(Err(e)) => (false, e.to_string()),
            Err(e) => (false, e),
        }
    }

    /// `CLIENT PAUSE` (writes or all) on every primary for the fault's duration.
    async fn client_pause(&self, p: &Planned) -> (bool, String) {
        let mode = if p.arg == 1 { "WRITE" } else { "ALL" };
        let ms = p.duration.as_millis().to_string();
        let mut answers = Vec::new();
        for addr in self.primaries().await {
            let ms = ms.clone();
            let r = blocking(move || {
                topology::query(
                    addr,
                    &["CLIENT", "PAUSE", &ms, mode],
                    Duration::from_secs(5),
                )
            })
            .await;
            answers.push(format!("{r:?}"));
        }
        tokio::time::sleep(p.duration).await;
        (true, format!("CLIENT PAUSE {ms} {mode}"))
    }

    /// Stops the standalone server (`SIGSTOP`) for the fault's duration.
    async fn server_stop(&self, p: &Planned) -> (bool, String) {
        let Some(pid) = self.topo.standalone_pid() else {
            return (false, "no standalone server".to_owned());
        };
        if let Err(e) = Coord::signal(pid, "-STOP").await {
            return (false, e);
        }
        tokio::time::sleep(p.duration).await;
        match Coord::signal(pid, "-CONT").await {
            Ok(()) => (
                true,
                format!("redis-server stopped for {} ms", p.duration.as_millis()),
            ),
            Err(e) => (false, format!("SIGCONT failed: {e}")),
        }
    }

    /// A lease (and 3 s for commands still in flight: a delayed proxy, a paused server)
    /// after a kill: nothing the dead client held may be live.
    async fn post_kill(self: Arc<Self>, slot: usize, inc: u32, killed: i64) {
        let wait = self.cfg.lease + Duration::from_secs(3);
        tokio::time::sleep(wait).await;
        let client_id = lock(&self.hist)
            .life(slot, inc)
            .and_then(|l| l.client_id.clone());
        let mut record = PostKill {
            worker: slot,
            inc,
            killed,
            checked: now_us(),
            client_id: client_id.clone(),
            leftovers: Vec::new(),
            error: None,
        };
        if let Some(id) = client_id {
            let topo = self.topo.clone();
            // A paused server answers late: try a few times.
            let mut scanned = Err("not scanned".to_owned());
            for _ in 0..5 {
                let topo = topo.clone();
                scanned = blocking(move || {
                    let addrs = topo.primaries();
                    topology::scan(&addrs, Duration::from_secs(3)).map_err(|e| e.to_string())
                })
                .await
                .and_then(|r| r);
                if scanned.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            record.checked = now_us();
            match scanned {
                Ok(scan) => {
                    let prefix = format!("{id}:");
                    // A dead fair waiter may stay queued until its deadline: the waiter
                    // timeout (5 s) after its last call, plus the same 3 s.
                    let waiter_bound = killed + 8_000_000;
                    let checked = record.checked;
                    record.leftovers = scan
                        .live
                        .into_iter()
                        .filter(|l| l.owner.starts_with(&prefix))
                        .filter(|l| {
                            !l.waiter || checked + l.left_ms.unwrap_or(0) * 1000 > waiter_bound
                        })
                        .collect();
                }
                Err(e) => record.error = Some(e),
            }
        }
        lock(&self.hist).post_kills.push(record);
    }

    /// Winds the run down: heals everything, stops the workers (they finish their operations
    /// and release), waits for the post-kill checks, and checks the servers are clean.
    async fn finish(self: &Arc<Self>) {
        self.finishing.store(true, Ordering::SeqCst);
        for slot in &self.slots {
            if let Some(proxy) = &slot.proxy {
                proxy.pass();
            }
        }
        let progress = !self.cfg.progress.is_zero();
        if progress {
            say("lock-chaos: stopping the workers ...");
        }
        let running: Vec<(usize, u32)> = (0..self.slots.len())
            .filter_map(|k| self.running(k).map(|(inc, _)| (k, inc)))
            .collect();
        for &(slot, inc) in &running {
            self.send(slot, inc, "stop").await;
        }
        self.wait_drained(&running).await;
        for &(slot, inc) in &running {
            self.send(slot, inc, "exit").await;
        }
        self.reap().await;
        let checks: Vec<_> = lock(&self.checks).drain(..).collect();
        for c in checks {
            let _ = c.await;
        }
        self.final_scan().await;
    }

    /// Waits (90 s at most) until every worker told to stop has finished its operations.
    async fn wait_drained(&self, running: &[(usize, u32)]) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let pending: Vec<(usize, u32)> = {
                let h = lock(&self.hist);
                running
                    .iter()
                    .copied()
                    .filter(|&(s, i)| {
                        h.life(s, i)
                            .is_some_and(|l| l.drained.is_none() && l.exited.is_none())
                    })
                    .collect()
            };
            if pending.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                lock(&self.hist).problems.push((
                    "liveness",
                    format!(
                        "workers {pending:?} did not finish their operations within 90 s of stop"
                    ),
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits for every worker process to exit (15 s each, then kills it).
    async fn reap(&self) {
        for (k, slot) in self.slots.iter().enumerate() {
            let taken = slot.proc.lock().await.take();
            if let Some(mut p) = taken {
                drop(p.stdin.take());
                match tokio::time::timeout(Duration::from_secs(15), p.child.wait()).await {
                    Ok(_) => {}
                    Err(_) => {
                        lock(&self.hist).problems.push((
                            "liveness",
                            format!(
                                "worker {k}.{} (pid {}) did not exit within 15 s of exit; killed",
                                p.inc, p.pid
                            ),
                        ));
                        let _ = p.child.start_kill();
                        let _ = p.child.wait().await;
                    }
                }
            }
        }
    }

    /// Scans the lock servers until nothing is left behind (or a lease and 8 s have passed)
    /// and records what is.
    async fn final_scan(&self) {
        // Locks of workers killed late, queued fair waiters (dropped at their deadline, 5 s)
        // and released fencing counters (they keep a TTL) are allowed to linger briefly.
        let settle = self.cfg.lease + Duration::from_secs(8);
        let deadline = Instant::now() + settle;
        let last = loop {
            let topo = self.topo.clone();
            let scan = blocking(move || {
                let addrs = topo.primaries();
                topology::scan(&addrs, Duration::from_secs(3)).map_err(|e| e.to_string())
            })
            .await
            .and_then(|r| r);
            let clean = matches!(&scan, Ok(s) if s.live.is_empty() && s.channels.is_empty() && s.no_ttl.is_empty());
            if clean || Instant::now() > deadline {
                break scan;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let stock_left = if self.cfg.topology == TopologyKind::Standalone {
            let addrs = self.topo.primaries();
            blocking(move || read_stock(&addrs))
                .await
                .unwrap_or_else(|e| {
                    STOCK_NAMES
                        .iter()
                        .map(|n| (n.to_string(), Err(e.clone())))
                        .collect()
                })
        } else {
            Vec::new()
        };
        let mut h = lock(&self.hist);
        h.stock_left = stock_left;
        let scan = match last {
            Err(e) => {
                h.problems.push((
                    "clean",
                    format!("the final scan of the lock servers failed: {e}"),
                ));
                return;
            }
            Ok(scan) => scan,
        };
        for l in &scan.live {
            h.problems.push((
                "clean",
                format!(
                    "{} s after the run: {} {} (owner {})",
                    settle.as_secs(),
                    l.key,
                    l.what,
                    l.owner
                ),
            ));
        }
        for c in &scan.channels {
            h.problems.push((
                "clean",
                format!("after the run: channel {c} still subscribed"),
            ));
        }
        for k in &scan.no_ttl {
            h.problems.push((
                "clean",
                format!("after the run: key {k} has no time to live"),
            ));
        }
    }
}

/// Sets every lock's counter to [`STOCK_INITIAL`] on the standalone server, before the
/// workers start.
fn set_stock(addrs: &[SocketAddr]) -> Result<(), String> {
    let addr = addrs.first().ok_or("no lock server")?;
    for name in STOCK_NAMES {
        let key = stock_key(name).ok_or_else(|| format!("no counter key for {name}"))?;
        let initial = STOCK_INITIAL.to_string();
        let reply = topology::query(*addr, &["SET", &key, &initial], Duration::from_secs(3))
            .map_err(|e| format!("setting {key}: {e}"))?;
        if reply.is_error() {
            return Err(format!("setting {key}: {reply}"));
        }
    }
    Ok(())
}

/// What every lock's counter holds after the run.
fn read_stock(addrs: &[SocketAddr]) -> Vec<(String, Result<i64, String>)> {
    STOCK_NAMES
        .iter()
        .map(|&name| {
            let left = (|| {
                let addr = addrs.first().ok_or("no lock server")?;
                let key = stock_key(name).ok_or("no counter key")?;
                let reply = topology::query(*addr, &["GET", &key], Duration::from_secs(3))
                    .map_err(|e| e.to_string())?;
                reply
                    .to_string()
                    .parse::<i64>()
                    .map_err(|_| format!("{key} holds {reply}"))
            })();
            (name.to_owned(), left)
        })
        .collect()
}

/// A fault on a worker's proxy: a delay, a black hole, cut connections or a lost reply.
async fn proxy_fault(proxy: &FaultProxy, p: &Planned) -> (bool, String) {
    match p.kind {
        FaultKind::ProxyDelay => {
            proxy.delay(Duration::from_millis(p.arg));
            tokio::time::sleep(p.duration).await;
            proxy.pass();
            (
                true,
                format!("{} ms per chunk for {} ms", p.arg, p.duration.as_millis()),
            )
        }
        FaultKind::ProxyBlackhole => {
            // The harness's blackhole drops the bytes it reads, leaving a hole in the middle
            // of a TCP stream that stays open: something TCP never does (it retransmits, or
            // the connection fails), and after which a client pairs replies with the wrong
            // commands. So the partition ends the way a long one does: with every connection
            // that lived through it cut. First stop dropping (new connections are clean from
            // here), then cut, then pass.
            proxy.blackhole();
            tokio::time::sleep(p.duration).await;
            proxy.delay(Duration::from_millis(1));
            let cut = proxy.connections();
            proxy.reset_all();
            proxy.pass();
            (
                true,
                format!(
                    "for {} ms, then {cut} connections cut",
                    p.duration.as_millis()
                ),
            )
        }
        FaultKind::ProxyReset => {
            let open = proxy.connections();
            proxy.reset_all();
            (true, format!("{open} connections cut"))
        }
        _ => {
            let before = proxy.dropped_replies();
            proxy.drop_next_reply();
            tokio::time::sleep(p.duration).await;
            if proxy.mode() == Mode::DropNextReply {
                proxy.pass();
            }
            let lost = proxy.dropped_replies() - before;
            (true, format!("{lost} reply lost"))
        }
    }
}
