//! W3h / W3x (strict hand-off between many tasks on one name) and W4 (one waiter).
//!
//! Every critical section records three `CLOCK_MONOTONIC` timestamps: when its acquire
//! returned, when its holder started the release, and when the release returned. Sections
//! are numbered by a shared counter taken right after acquiring, so the hand-off into
//! section k is `acquired[k] - release_started[k - 1]`, even when the two holders live in
//! different processes (W3x): the clock is the same machine-wide.
//!
//! Strict hand-off: a task that released section k queues again only once section k + 1
//! has been taken, by another task necessarily, so every section is a real wake-up of a
//! waiter and no holder re-acquires its own lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use tokio::sync::watch;

use crate::children;
use crate::contender::{Kind, Locker, Opts};
use crate::measure::{Cost, Frame};
use crate::monitor::{Counts, Watch, mono_to_unix_us};
use crate::stats::Sample;
use crate::sys::{cpu_us, mono_ns};

/// Bound on one acquisition, and on waiting for the next section to be taken.
const STEP_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound on a whole hand-off run.
const RUN_TIMEOUT: Duration = Duration::from_secs(150);

#[derive(Clone, Copy, Debug)]
pub(crate) struct Section {
    k: u64,
    acquired: u64,
    release_started: u64,
    released: u64,
}

/// How the tasks number sections and learn that the next one was taken.
#[derive(Clone)]
enum Coord {
    /// All tasks in this process.
    Local {
        next: Arc<AtomicU64>,
        taken: Arc<watch::Sender<u64>>,
    },
    /// Tasks in several processes: a counter in a Redis hash and a channel announcing each
    /// section number (the bench's own traffic: hash commands and `PUBLISH`, which are not
    /// counted as lock requests).
    Redis {
        con: MultiplexedConnection,
        key: String,
        chan: String,
        taken: Arc<watch::Sender<u64>>,
    },
}

impl Coord {
    /// Numbers the section just acquired and tells every task it was taken.
    async fn claim(&self) -> Result<u64, String> {
        match self {
            Coord::Local { next, taken } => {
                let k = next.fetch_add(1, Ordering::SeqCst) + 1;
                taken.send_modify(|v| *v = (*v).max(k));
                Ok(k)
            }
            Coord::Redis {
                con,
                key,
                chan,
                taken,
            } => {
                let mut con = con.clone();
                let k: u64 = con
                    .hincr(key, "n", 1)
                    .await
                    .map_err(|e| format!("coord HINCRBY: {e}"))?;
                taken.send_modify(|v| *v = (*v).max(k));
                let _: i64 = con
                    .publish(chan, k)
                    .await
                    .map_err(|e| format!("coord PUBLISH: {e}"))?;
                Ok(k)
            }
        }
    }

    fn taken(&self) -> watch::Receiver<u64> {
        match self {
            Coord::Local { taken, .. } | Coord::Redis { taken, .. } => taken.subscribe(),
        }
    }
}

/// Holds the lock for `hold`: a blocking sleep until a deadline on a blocking-pool thread,
/// which is precise to tens of µs where a tokio timer rounds up to the next millisecond. (The
/// hand-back to the async task adds ~0.1 ms on a busy 2-core machine; the tables show the mean
/// hold. `block_in_place` instead shortened the hold but lengthened every hand-off as much.)
/// W7 holds its sections with it too.
pub(crate) async fn hold_for(hold: Duration) {
    let deadline = std::time::Instant::now() + hold;
    let _ = tokio::task::spawn_blocking(move || {
        std::thread::sleep(deadline.saturating_duration_since(std::time::Instant::now()));
    })
    .await;
}

/// One task of a hand-off run: takes `name` until `sections` sections have been taken.
async fn worker(
    locker: Locker,
    coord: Coord,
    name: String,
    sections: u64,
    hold: Duration,
) -> Result<Vec<Section>, String> {
    let mut out = Vec::new();
    let mut taken = coord.taken();
    let mut last: Option<u64> = None;
    loop {
        if let Some(k) = last {
            // Strict hand-off: queue again only after someone else took the next section.
            tokio::time::timeout(STEP_TIMEOUT, taken.wait_for(|&n| n > k))
                .await
                .map_err(|_| format!("section {} was never taken", k + 1))?
                .map_err(|_| "coordination closed".to_owned())?;
        }
        let held = locker.lock(&name, STEP_TIMEOUT).await?;
        let acquired = mono_ns();
        let (k, ()) = tokio::join!(coord.claim(), hold_for(hold));
        let k = k?;
        let release_started = mono_ns();
        locker.unlock(held).await?;
        let released = mono_ns();
        if k > sections {
            // Draining after the last section: not counted.
            return Ok(out);
        }
        out.push(Section {
            k,
            acquired,
            release_started,
            released,
        });
        if k == sections {
            return Ok(out);
        }
        last = Some(k);
    }
}

/// Joins the sections of all tasks: hand-off latencies and the wall time from `start` to the
/// release of the last section, and the mean time a section held the lock in µs. Fails on a
/// gap or an overlap (mutual exclusion broken).
pub(crate) fn handoffs(
    mut all: Vec<Section>,
    start: u64,
    sections: u64,
) -> Result<(Sample, u64, f64), String> {
    all.sort_by_key(|s| s.k);
    if all.len() as u64 != sections || all.iter().enumerate().any(|(i, s)| s.k != i as u64 + 1) {
        return Err(format!(
            "expected sections 1..={sections}, got {} sections",
            all.len()
        ));
    }
    let mut lat = Vec::with_capacity(all.len());
    for pair in all.windows(2) {
        let (prev, next) = (&pair[0], &pair[1]);
        if next.acquired < prev.release_started {
            return Err(format!(
                "section {} was acquired before section {} started its release: not mutually exclusive",
                next.k, prev.k
            ));
        }
        lat.push(next.acquired - prev.release_started);
    }
    let end = all.last().map(|s| s.released).unwrap_or(start);
    let hold_ns: u64 = all.iter().map(|s| s.release_started - s.acquired).sum();
    let sample = Sample::from_ns(
        lat,
        all.len(),
        Duration::from_nanos(end.saturating_sub(start)),
    );
    Ok((sample, end, hold_ns as f64 / all.len().max(1) as f64 / 1e3))
}

/// The shape of a hand-off run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    /// Processes (W3x; 1 for W3h).
    pub(crate) procs: usize,
    /// Tasks per process.
    pub(crate) tasks: usize,
    pub(crate) sections: u64,
    /// How long each section holds the lock.
    pub(crate) hold: Duration,
}

/// The result of a hand-off run.
pub(crate) struct HandoffRun {
    pub(crate) sample: Sample,
    /// Mean time from an acquire returning to its release starting, µs.
    pub(crate) mean_hold_us: f64,
    /// `INFO commandstats` over the run (including the tasks draining after the last
    /// section), and the client's CPU time over it.
    pub(crate) cost: Cost,
    /// What `MONITOR` saw from the start to the release of the last section, if watched.
    pub(crate) counts: Option<Counts>,
}

/// Starts `MONITOR` if asked to.
async fn watch(url: Option<&str>) -> Result<Option<Watch>, String> {
    match url {
        Some(url) => Ok(Some(Watch::start(url).await?)),
        None => Ok(None),
    }
}

async fn finish(
    watching: Option<Watch>,
    admin: &mut MultiplexedConnection,
    start: u64,
    end: u64,
    exclude: &[String],
) -> Result<Option<Counts>, String> {
    match watching {
        Some(w) => Ok(Some(
            w.stop(
                admin,
                Some(mono_to_unix_us(start)),
                Some(mono_to_unix_us(end)),
                exclude,
            )
            .await?,
        )),
        None => Ok(None),
    }
}

/// W3h: `tasks` tasks in this process on one name; with `monitor` (the server URL), counts
/// the requests with `MONITOR`.
pub(crate) async fn run_local(
    locker: &Locker,
    admin: &mut MultiplexedConnection,
    monitor: Option<&str>,
    name: &str,
    shape: Shape,
) -> Result<HandoffRun, String> {
    let Shape {
        tasks,
        sections,
        hold,
        ..
    } = shape;
    let coord = Coord::Local {
        next: Arc::new(AtomicU64::new(0)),
        taken: Arc::new(watch::channel(0).0),
    };
    let watching = watch(monitor).await?;
    let frame = Frame::start(admin).await;
    let start = mono_ns();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            tokio::spawn(worker(
                locker.clone(),
                coord.clone(),
                name.to_owned(),
                sections,
                hold,
            ))
        })
        .collect();
    let mut all = Vec::new();
    let joined = tokio::time::timeout(RUN_TIMEOUT, async {
        let mut err = None;
        for h in handles {
            match h.await {
                Ok(Ok(s)) => all.extend(s),
                Ok(Err(e)) => err = Some(e),
                Err(e) => err = Some(format!("task failed: {e}")),
            }
        }
        err
    })
    .await
    .map_err(|_| "W3h did not finish in time".to_owned())?;
    if let Some(e) = joined {
        return Err(e);
    }
    let cost = frame.stop(admin).await;
    let (sample, end, mean_hold_us) = handoffs(all, start, sections)?;
    let counts = finish(watching, admin, start, end, &[]).await?;
    Ok(HandoffRun {
        sample,
        mean_hold_us,
        cost,
        counts,
    })
}

/// Arguments of the hidden `__w3x-child` subcommand.
pub(crate) struct ChildArgs {
    pub(crate) kind: Kind,
    pub(crate) opts: Opts,
    pub(crate) coord_key: String,
    pub(crate) name: String,
    pub(crate) tasks: usize,
    pub(crate) sections: u64,
    pub(crate) hold: Duration,
}

impl ChildArgs {
    fn to_args(&self) -> Vec<String> {
        let mut args = children::head_args("__w3x-child", self.kind, &self.opts, &self.coord_key);
        args.extend([
            self.name.clone(),
            self.tasks.to_string(),
            self.sections.to_string(),
            self.hold.as_micros().to_string(),
        ]);
        args
    }

    pub(crate) fn parse(args: &[String]) -> Option<ChildArgs> {
        let (kind, opts, coord_key, rest) = children::parse_head(args)?;
        let [name, tasks, sections, hold_us] = rest else {
            return None;
        };
        Some(ChildArgs {
            kind,
            opts,
            coord_key,
            name: name.clone(),
            tasks: tasks.parse().ok()?,
            sections: sections.parse().ok()?,
            hold: Duration::from_micros(hold_us.parse().ok()?),
        })
    }
}

/// The W3x child process: connects, reports ready, waits for the start, runs its tasks and
/// prints its sections and its CPU time over them as one JSON line.
pub(crate) async fn child_main(args: ChildArgs) {
    let result = child_run(&args).await;
    let line = match result {
        Ok((sections, cpu_us)) => serde_json::json!({
            "sections": sections
                .iter()
                .map(|s| [s.k, s.acquired, s.release_started, s.released])
                .collect::<Vec<_>>(),
            "cpu_us": cpu_us,
        }),
        Err(e) => serde_json::json!({ "error": e }),
    };
    println!("{line}");
}

/// Runs `tasks` hand-off workers on `coord` and returns their sections.
async fn run_workers(
    locker: &Locker,
    coord: &Coord,
    name: &str,
    tasks: usize,
    sections: u64,
    hold: Duration,
) -> Result<Vec<Section>, String> {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            tokio::spawn(worker(
                locker.clone(),
                coord.clone(),
                name.to_owned(),
                sections,
                hold,
            ))
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        match tokio::time::timeout(RUN_TIMEOUT, h).await {
            Ok(Ok(Ok(s))) => all.extend(s),
            Ok(Ok(Err(e))) => return Err(e),
            Ok(Err(e)) => return Err(format!("task failed: {e}")),
            Err(_) => return Err("timed out".into()),
        }
    }
    Ok(all)
}

/// The child's sections, and its CPU time (µs) from the start to its last task's end.
async fn child_run(args: &ChildArgs) -> Result<(Vec<Section>, f64), String> {
    let client = redis::Client::open(args.opts.url.as_str()).map_err(|e| e.to_string())?;
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let chan = children::signal_channel(&args.coord_key);
    let signals = children::listen(&client, &chan).await?;
    let locker = Locker::connect(args.kind, &args.opts).await;
    // Warm up the contender's connections on a name of its own.
    let warm = format!("{}:warm:{}", args.name, std::process::id());
    let held = locker.lock(&warm, STEP_TIMEOUT).await?;
    locker.unlock(held).await?;

    children::ready_and_wait(&mut con, &args.coord_key, &signals.go).await?;
    let cpu0 = cpu_us();
    let coord = Coord::Redis {
        con: con.clone(),
        key: args.coord_key.clone(),
        chan,
        taken: signals.taken,
    };
    let (tasks, sections, hold) = (args.tasks, args.sections, args.hold);
    let all = run_workers(&locker, &coord, &args.name, tasks, sections, hold).await?;
    let cpu = cpu_us() - cpu0;
    signals.listener.abort();
    Ok((all, cpu))
}

/// Reads every W3x child's line: all their sections, and their CPU time summed (µs).
async fn collect_children(
    children: Vec<tokio::process::Child>,
) -> Result<(Vec<Section>, f64), String> {
    let mut all = Vec::new();
    let mut cpu_us = 0.0;
    for v in children::collect(children, RUN_TIMEOUT, "W3x").await? {
        cpu_us += v["cpu_us"].as_f64().unwrap_or(0.0);
        for s in v["sections"].as_array().into_iter().flatten() {
            let f = |i: usize| s[i].as_u64().unwrap_or(0);
            all.push(Section {
                k: f(0),
                acquired: f(1),
                release_started: f(2),
                released: f(3),
            });
        }
    }
    Ok((all, cpu_us))
}

/// W3x: `procs` child processes of `tasks` tasks each, all on one name; with `monitor`,
/// counts the requests with `MONITOR`. The client CPU is the children's (over their timed
/// sections) plus this process's over the run.
pub(crate) async fn run_processes(
    kind: Kind,
    opts: &Opts,
    admin: &mut MultiplexedConnection,
    monitor: Option<&str>,
    name: &str,
    shape: Shape,
) -> Result<HandoffRun, String> {
    let coord_key = format!("{name}:coord");
    let args = ChildArgs {
        kind,
        opts: opts.clone(),
        coord_key: coord_key.clone(),
        name: name.to_owned(),
        tasks: shape.tasks,
        sections: shape.sections,
        hold: shape.hold,
    };
    let children = children::spawn(&args.to_args(), shape.procs, None)?;
    children::wait_ready(admin, &coord_key, shape.procs, "W3x").await?;
    let watching = watch(monitor).await?;
    let frame = Frame::start(admin).await;
    let start = children::start(admin, &coord_key).await?;
    let (all, children_cpu_us) = collect_children(children).await?;
    let mut cost = frame.stop(admin).await;
    cost.cpu_us += children_cpu_us;
    let (sample, end, mean_hold_us) = handoffs(all, start, shape.sections)?;
    let counts = finish(watching, admin, start, end, &[coord_key]).await?;
    Ok(HandoffRun {
        sample,
        mean_hold_us,
        cost,
        counts,
    })
}

/// W4: a holder (one client) releases after `hold`; one waiter (another client) is waiting.
/// Latency from the holder starting its release to the waiter's acquire returning.
pub(crate) async fn run_single_waiter(
    holder: &Locker,
    waiter: &Locker,
    prefix: &str,
    trials: usize,
    hold: Duration,
) -> Result<Sample, String> {
    let mut lat = Vec::with_capacity(trials);
    let start = mono_ns();
    for t in 0..trials {
        let name = format!("{prefix}:{t}");
        let held = holder.lock(&name, STEP_TIMEOUT).await?;
        let (w, n) = (waiter.clone(), name.clone());
        let waiting = tokio::spawn(async move {
            let held = w.lock(&n, STEP_TIMEOUT).await?;
            let acquired = mono_ns();
            w.unlock(held).await?;
            Ok::<u64, String>(acquired)
        });
        tokio::time::sleep(hold).await;
        let release_started = mono_ns();
        holder.unlock(held).await?;
        let acquired = waiting.await.map_err(|e| e.to_string())??;
        lat.push(acquired.saturating_sub(release_started));
    }
    Ok(Sample::from_ns(
        lat,
        trials,
        Duration::from_nanos(mono_ns() - start),
    ))
}
