//! This binary re-run as child processes (W3x's `__w3x-child`, X1's `__x1-child`): the
//! protocol both share.
//!
//! The parent [`spawn`]s the children, each of which connects, warms up its contender,
//! subscribes to the run's signal channel ([`listen`]) and reports ready by incrementing
//! `ready` in a coordination hash ([`ready_and_wait`]). The parent waits for every one
//! ([`wait_ready`]), then [`start`]s them all: it writes the start time (`CLOCK_MONOTONIC`,
//! the same in every process) to `go` in the hash and publishes `0` on the channel; a child
//! that missed the message finds `go` by polling the hash. Each child prints one JSON line
//! last, with an `error` field if it failed, which the parent [`collect`]s.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use tokio::io::AsyncReadExt;
use tokio::sync::{Notify, watch};

use crate::contender::{Kind, Opts, parse_protocol};
use crate::sys::mono_ns;

/// Bound on the children getting ready, and on a child waiting for the start.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The arguments every child takes first, after its subcommand `sub`: the contender it runs
/// (`kind` with `opts`) and the run's coordination key.
pub(crate) fn head_args(sub: &str, kind: Kind, opts: &Opts, coord_key: &str) -> Vec<String> {
    vec![
        sub.into(),
        opts.url.clone(),
        kind.name().into(),
        opts.pool.to_string(),
        opts.mutex_protocol.to_string(),
        opts.rslock_retry.as_micros().to_string(),
        coord_key.into(),
    ]
}

/// Reads what [`head_args`] wrote (without the subcommand): the contender, its options, the
/// coordination key, and the arguments after them.
pub(crate) fn parse_head(args: &[String]) -> Option<(Kind, Opts, String, &[String])> {
    let [url, kind, pool, protocol, retry_us, coord_key, rest @ ..] = args else {
        return None;
    };
    let opts = Opts {
        url: url.clone(),
        pool: pool.parse().ok()?,
        rslock_retry: Duration::from_micros(retry_us.parse().ok()?),
        mutex_protocol: parse_protocol(protocol)?,
    };
    Some((Kind::parse(kind)?, opts, coord_key.clone(), rest))
}

/// The channel the start (`0`) is published on; W3x also announces each section taken on it.
pub(crate) fn signal_channel(coord_key: &str) -> String {
    format!("{coord_key}:taken")
}

/// Starts `procs` copies of this binary with `args` (the hidden subcommand first); with
/// `cpus` (a `taskset -c` CPU list), each runs on those CPUs only.
pub(crate) fn spawn(
    args: &[String],
    procs: usize,
    cpus: Option<&str>,
) -> Result<Vec<tokio::process::Child>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut children = Vec::new();
    for _ in 0..procs {
        let mut cmd = match cpus {
            Some(cpus) => {
                // taskset sets the affinity and execs the child, which keeps its pid.
                let mut c = tokio::process::Command::new("taskset");
                c.arg("-c").arg(cpus).arg(&exe);
                c
            }
            None => tokio::process::Command::new(&exe),
        };
        let child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spawn child: {e}"))?;
        children.push(child);
    }
    Ok(children)
}

/// Waits until `procs` children reported ready in `coord_key`.
pub(crate) async fn wait_ready(
    admin: &mut MultiplexedConnection,
    coord_key: &str,
    procs: usize,
    what: &str,
) -> Result<(), String> {
    tokio::time::timeout(READY_TIMEOUT, async {
        loop {
            let n: Option<usize> = admin.hget(coord_key, "ready").await.unwrap_or(None);
            if n == Some(procs) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .map_err(|_| format!("{what} children did not get ready"))
}

/// Starts every child: writes the start time to `go` and publishes `0`; returns the start
/// time (`CLOCK_MONOTONIC`, ns).
pub(crate) async fn start(
    admin: &mut MultiplexedConnection,
    coord_key: &str,
) -> Result<u64, String> {
    let start = mono_ns();
    let _: i64 = admin
        .hset(coord_key, "go", start)
        .await
        .map_err(|e| e.to_string())?;
    let _: i64 = admin
        .publish(signal_channel(coord_key), 0u64)
        .await
        .map_err(|e| e.to_string())?;
    Ok(start)
}

/// Reads every child's last output line as JSON, waiting at most `timeout` for each; fails
/// with the last child error (`what` names the scenario).
pub(crate) async fn collect(
    children: Vec<tokio::process::Child>,
    timeout: Duration,
    what: &str,
) -> Result<Vec<serde_json::Value>, String> {
    let mut out = Vec::new();
    let mut error = None;
    for mut child in children {
        let mut stdout = child.stdout.take().ok_or("no child stdout")?;
        let mut text = String::new();
        let read = tokio::time::timeout(timeout, stdout.read_to_string(&mut text)).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
        if read.is_err() {
            error = Some(format!("{what} child timed out"));
            continue;
        }
        let line = text.lines().last().unwrap_or("");
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("child output {line:?}: {e}"))?;
        if let Some(e) = v.get("error") {
            error = Some(format!("{what} child: {e}"));
            continue;
        }
        out.push(v);
    }
    match error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// What a child hears on the signal channel: the highest number published (W3x's sections
/// taken), the start, and the task that listens.
pub(crate) struct Signals {
    pub(crate) taken: Arc<watch::Sender<u64>>,
    pub(crate) go: Arc<Notify>,
    pub(crate) listener: tokio::task::JoinHandle<()>,
}

/// Subscribes to `chan` (the start signal, `0`, and W3x's section announcements).
pub(crate) async fn listen(client: &redis::Client, chan: &str) -> Result<Signals, String> {
    let taken = Arc::new(watch::channel(0u64).0);
    let go = Arc::new(Notify::new());
    let mut pubsub = client.get_async_pubsub().await.map_err(|e| e.to_string())?;
    pubsub.subscribe(chan).await.map_err(|e| e.to_string())?;
    let (taken2, go2) = (taken.clone(), go.clone());
    let listener = tokio::spawn(async move {
        let mut stream = pubsub.into_on_message();
        while let Some(msg) = stream.next().await {
            if let Ok(k) = msg.get_payload::<u64>() {
                if k == 0 {
                    go2.notify_one();
                }
                taken2.send_modify(|v| *v = (*v).max(k));
            }
        }
    });
    Ok(Signals {
        taken,
        go,
        listener,
    })
}

/// Reports this process ready in the coordination hash and waits for the start: it is
/// published, and polling the hash as well covers a lost message. Returns the start time the
/// parent wrote (`CLOCK_MONOTONIC`, ns).
pub(crate) async fn ready_and_wait(
    con: &mut MultiplexedConnection,
    coord_key: &str,
    go: &Notify,
) -> Result<u64, String> {
    let notified = go.notified();
    let _: i64 = con
        .hincr(coord_key, "ready", 1)
        .await
        .map_err(|e| e.to_string())?;
    tokio::time::timeout(READY_TIMEOUT, async {
        tokio::pin!(notified);
        loop {
            let go: Option<u64> = con.hget(coord_key, "go").await.unwrap_or(None);
            if let Some(start) = go {
                return Ok(start);
            }
            if tokio::time::timeout(Duration::from_millis(50), notified.as_mut())
                .await
                .is_ok()
            {
                // `go` is written before the start is published.
                return con
                    .hget::<_, _, Option<u64>>(coord_key, "go")
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "start published without its time".to_owned());
            }
        }
    })
    .await
    .map_err(|_| "no start signal".to_owned())?
}
