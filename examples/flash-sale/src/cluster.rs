//! `serve` child processes of this binary, for the demo and the tests.
//!
//! An [`Instance`] runs `flash-sale serve --port 0 --supervised`: the child binds a free
//! loopback port and prints `LISTENING http://127.0.0.1:PORT`, which [`Instance::start`] waits
//! for. `--supervised` makes the child exit when its stdin closes, so children go away with
//! their parent even if the parent is killed. Dropping an [`Instance`] kills the child and
//! reaps it. Signals are sent with the `kill` command.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::stock::StockStore;

/// How to start one instance.
#[derive(Debug, Clone)]
pub struct InstanceOptions {
    /// The `flash-sale` binary.
    pub bin: PathBuf,
    /// The shared Redis.
    pub redis_url: String,
    /// The shared database.
    pub database_url: String,
    /// Take the locks.
    pub locking: bool,
    /// Limit rates (`false` passes `--no-limit`).
    pub limiting: bool,
    /// The lock client's watchdog lease.
    pub lease: Duration,
    /// The reservation step inside the critical section.
    pub work: Duration,
    /// Arm the test-only stall point (see [`crate::shop::StallHook`]).
    pub stall_once: bool,
    /// Arm the test-only stop after a recorded commit (see [`crate::shop::CrashHook`]); its
    /// `COMMITTED` line comes out of [`Instance::next_stall`].
    pub crash_after_commit: bool,
    /// Where the child's output goes.
    pub log: PathBuf,
    /// The instance's name (`serve --name`), if not the default.
    pub name: Option<String>,
    /// Let the instance create the demo sale on an empty database (`serve` does by default;
    /// `false` passes `--no-demo-sale`).
    pub demo_sale: bool,
    /// Where the sales' stock is kept (`serve --stock-in`).
    pub stock_in: StockStore,
}

/// A running `flash-sale serve` child process.
#[derive(Debug)]
pub struct Instance {
    child: Child,
    stdin: Option<ChildStdin>,
    url: String,
    log: PathBuf,
    stalls: mpsc::UnboundedReceiver<String>,
    paused: bool,
}

/// How long an instance may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(60);

impl Instance {
    /// Starts an instance and waits until it listens.
    pub async fn start(options: &InstanceOptions) -> io::Result<Instance> {
        let log = File::create(&options.log)?;
        let mut cmd = Command::new(&options.bin);
        cmd.args([
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--supervised",
        ])
        .arg("--redis-url")
        .arg(&options.redis_url)
        .arg("--database-url")
        .arg(&options.database_url)
        .arg("--lease-ms")
        .arg(options.lease.as_millis().to_string())
        .arg("--work-ms")
        .arg(options.work.as_millis().to_string())
        .arg("--stock-in")
        .arg(options.stock_in.as_str())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log.try_clone()?));
        if !options.locking {
            cmd.arg("--no-lock");
        }
        if !options.limiting {
            cmd.arg("--no-limit");
        }
        if options.stall_once {
            cmd.arg("--stall-once");
        }
        if options.crash_after_commit {
            cmd.arg("--crash-after-commit");
        }
        if let Some(name) = &options.name {
            cmd.arg("--name").arg(name);
        }
        if !options.demo_sale {
            cmd.arg("--no-demo-sale");
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "warn");
        }
        let mut child = cmd.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run {}: {e}", options.bin.display()),
            )
        })?;
        let stdout = child.stdout.take();
        let stdin = child.stdin.take();
        let (listening_tx, listening_rx) = oneshot::channel();
        let (stalls_tx, stalls) = mpsc::unbounded_channel();
        let mut instance = Instance {
            child,
            stdin,
            url: String::new(),
            log: options.log.clone(),
            stalls,
            paused: false,
        };
        if let Some(stdout) = stdout {
            std::thread::spawn(move || forward_stdout(stdout, log, listening_tx, stalls_tx));
        }
        match tokio::time::timeout(START_TIMEOUT, listening_rx).await {
            Ok(Ok(url)) => {
                instance.url = url;
                Ok(instance)
            }
            _ => {
                let _ = instance.child.kill();
                let _ = instance.child.wait();
                Err(io::Error::other(format!(
                    "the serve process did not start; its log ({}):\n{}",
                    instance.log.display(),
                    log_tail(&instance.log, 2000)
                )))
            }
        }
    }

    /// The instance's base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child's log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Freezes the process (`kill -STOP`).
    pub fn pause(&mut self) -> io::Result<()> {
        signal(self.pid(), "-STOP")?;
        self.paused = true;
        Ok(())
    }

    /// Continues a frozen process (`kill -CONT`).
    pub fn resume(&mut self) -> io::Result<()> {
        signal(self.pid(), "-CONT")?;
        self.paused = false;
        Ok(())
    }

    /// Waits up to `timeout` for the child to report its stall point (or its stop after a
    /// recorded commit); the line it printed.
    pub async fn next_stall(&mut self, timeout: Duration) -> Option<String> {
        tokio::time::timeout(timeout, self.stalls.recv())
            .await
            .ok()
            .flatten()
    }

    /// Lets a purchase stopped at the stall point go on.
    pub fn release_stall(&mut self) -> io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| io::Error::other("stdin closed"))?;
        stdin.write_all(b"resume\n")?;
        stdin.flush()
    }

    /// Whether the child has exited.
    pub fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the child (`SIGKILL`) and reaps it. Idempotent.
    pub fn kill(&mut self) {
        if self.paused {
            let _ = signal(self.pid(), "-CONT");
            self.paused = false;
        }
        self.stdin = None;
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// Asks the child to stop (closes its stdin: it shuts down gracefully), waits up to
    /// `grace` for it, then kills it.
    pub async fn shutdown(mut self, grace: Duration) {
        if self.paused {
            let _ = self.resume();
        }
        self.stdin = None;
        let deadline = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < deadline {
            if self.has_exited() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.kill();
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends `sig` (`-STOP`, `-CONT`, ...) to `pid` with the `kill` command.
pub fn signal(pid: u32, sig: &str) -> io::Result<()> {
    let status = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "kill {sig} {pid} failed: {status}"
        )))
    }
}

/// Reads the child's stdout: the `LISTENING` line, `STALL-POINT` lines, the rest to the log.
fn forward_stdout(
    stdout: impl Read,
    mut log: File,
    listening: oneshot::Sender<String>,
    stalls: mpsc::UnboundedSender<String>,
) {
    let mut listening = Some(listening);
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Some(url) = line.strip_prefix("LISTENING ") {
            if let Some(tx) = listening.take() {
                let _ = tx.send(url.trim().to_owned());
            }
        } else if line.starts_with("STALL-POINT") || line.starts_with("COMMITTED") {
            let _ = stalls.send(line.clone());
        }
        let _ = writeln!(log, "{line}");
    }
}

/// The last `max` bytes of a log file.
pub fn log_tail(path: &Path, max: u64) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::from("(no log)");
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut bytes = Vec::new();
    let _ = f.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}
