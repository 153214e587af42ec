//! Throwaway `redis-server` processes for integration tests.
//!
//! Every [`RedisServer`] runs its own `redis-server` child process on a free
//! loopback port with a private temporary working directory, persistence
//! disabled and `DEBUG` enabled for local connections. The process is killed
//! (and reaped) when the handle is dropped.
//!
//! The binary is taken from the `REDIS_SERVER_BIN` environment variable and
//! defaults to `redis-server` on the `PATH`.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long [`RedisServer::start`] / [`RedisServer::restart`] wait for the
/// server to answer `PING`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How many ports [`RedisServer::start_with`] tries before giving up.
const START_ATTEMPTS: usize = 5;
/// Read/write timeout used by [`RedisServer::cmd`].
const CMD_TIMEOUT: Duration = Duration::from_secs(60);
/// Name of the server log file inside the temporary directory.
const LOG_FILE: &str = "redis-server.log";
/// Name of the configuration file written by [`RedisServer::start_with_config`].
const CONFIG_FILE: &str = "redis.conf";

/// A `redis-server` child process owned by a test.
///
/// Dropping the handle resumes the process if it was paused, kills it with
/// `SIGKILL` and waits for it, so no process or zombie is left behind.
#[derive(Debug)]
pub struct RedisServer {
    /// The running child, `None` after [`RedisServer::kill`].
    child: Option<Child>,
    /// Pid of the current (or most recent) process.
    pid: u32,
    /// Loopback port the server listens on (kept across restarts).
    port: u16,
    /// Loopback port of its TLS listener, if it has one (see [`RedisServer::start_tls`]).
    tls_port: Option<u16>,
    /// Extra configuration arguments given to [`RedisServer::start_with`].
    extra_args: Vec<String>,
    /// Configuration file passed as the first argument, if any.
    config_file: Option<PathBuf>,
    /// Whether the process is currently stopped with `SIGSTOP`.
    paused: bool,
    /// Working directory of the server; deleted on drop.
    dir: TempDir,
}

impl RedisServer {
    /// Starts a fresh server with the default configuration.
    ///
    /// # Panics
    ///
    /// Panics if the server cannot be started or does not answer `PING`
    /// within 10 seconds (after several attempts on different ports).
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a fresh server, appending `args` (e.g. `["--maxmemory", "1mb"]`)
    /// to the default configuration arguments.
    ///
    /// # Panics
    ///
    /// Panics if the server cannot be started or does not answer `PING`
    /// within 10 seconds (after several attempts on different ports).
    pub fn start_with(args: &[&str]) -> RedisServer {
        RedisServer::start_retrying(None, args)
    }

    /// Starts a fresh server whose configuration file (written to
    /// `redis.conf` in the server's temporary directory, writable, and passed
    /// as the first argument) holds `config`; `args` are appended to the
    /// default configuration arguments, which take precedence over the file.
    /// Used for Sentinel, which needs (and rewrites) a configuration file.
    ///
    /// # Panics
    ///
    /// Panics if the server cannot be started or does not answer `PING`
    /// within 10 seconds (after several attempts on different ports).
    pub fn start_with_config(config: &str, args: &[&str]) -> RedisServer {
        RedisServer::start_retrying(Some(config), args)
    }

    /// Makes a single attempt at starting a fresh server on `port` (in a new
    /// temporary directory), with an optional configuration file content (see
    /// [`RedisServer::start_with_config`]) and extra arguments. Returns why it
    /// failed instead of panicking, so callers that need particular ports
    /// (e.g. a cluster node, whose bus port is `port + 10000`) can retry
    /// elsewhere.
    pub fn try_start_on(
        port: u16,
        config: Option<&str>,
        args: &[&str],
    ) -> Result<RedisServer, String> {
        let dir = tempfile::Builder::new()
            .prefix("lock-tests-redis-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory for redis-server: {e}"))?;
        let config_file = match config {
            Some(text) => {
                let path = dir.path().join(CONFIG_FILE);
                std::fs::write(&path, text)
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                Some(path)
            }
            None => None,
        };
        let extra_args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let child = spawn_and_wait(dir.path(), config_file.as_deref(), port, &extra_args)?;
        tracing::debug!(port, pid = child.id(), "redis-server started");
        Ok(RedisServer {
            pid: child.id(),
            child: Some(child),
            port,
            tls_port: None,
            extra_args,
            config_file,
            paused: false,
            dir,
        })
    }

    /// Starts a fresh server that also serves TLS with `tls`'s certificates on a second free
    /// port ([`RedisServer::tls_port`], [`RedisServer::tls_url`]); `auth` says whether it asks
    /// clients for certificates. The plain port stays open on the loopback interface for the
    /// harness's own commands ([`RedisServer::cmd`] and friends). `config` and `args` are as for
    /// [`RedisServer::start_with_config`] / [`RedisServer::start_with`].
    ///
    /// # Panics
    ///
    /// As [`RedisServer::start`].
    pub fn start_tls(
        tls: &crate::tls::TlsFiles,
        auth: crate::tls::ClientAuth,
        config: Option<&str>,
        args: &[&str],
    ) -> RedisServer {
        let mut last_error = String::new();
        for attempt in 1..=START_ATTEMPTS {
            let (port, tls_port) = (free_port(), free_port());
            match RedisServer::try_start_tls_on(port, tls_port, tls, auth, config, args) {
                Ok(server) => return server,
                Err(e) => {
                    tracing::warn!(attempt, port, tls_port, error = %e, "redis-server did not start, retrying");
                    last_error = e;
                }
            }
        }
        panic!(
            "could not start {} with TLS after {START_ATTEMPTS} attempts: {last_error}",
            server_binary()
        );
    }

    /// One attempt at [`RedisServer::start_tls`] on given ports (a Cluster node needs its own).
    pub fn try_start_tls_on(
        port: u16,
        tls_port: u16,
        tls: &crate::tls::TlsFiles,
        auth: crate::tls::ClientAuth,
        config: Option<&str>,
        args: &[&str],
    ) -> Result<RedisServer, String> {
        let tls_args = tls.server_args(tls_port, auth);
        let all: Vec<&str> = tls_args
            .iter()
            .map(String::as_str)
            .chain(args.iter().copied())
            .collect();
        let mut server = RedisServer::try_start_on(port, config, &all)?;
        server.tls_port = Some(tls_port);
        Ok(server)
    }

    /// Tries [`RedisServer::try_start_on`] on several free ports.
    fn start_retrying(config: Option<&str>, args: &[&str]) -> RedisServer {
        let mut last_error = String::new();
        for attempt in 1..=START_ATTEMPTS {
            let port = free_port();
            match RedisServer::try_start_on(port, config, args) {
                Ok(server) => return server,
                Err(e) => {
                    tracing::warn!(attempt, port, error = %e, "redis-server did not start, retrying");
                    last_error = e;
                }
            }
        }
        panic!(
            "could not start {} after {START_ATTEMPTS} attempts: {last_error}",
            server_binary()
        );
    }

    /// `redis://127.0.0.1:PORT` URL of the server.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Port the server listens on (stable across [`RedisServer::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS port of a server started by [`RedisServer::start_tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// `rediss://127.0.0.1:TLS_PORT/` of a server started by [`RedisServer::start_tls`].
    ///
    /// # Panics
    ///
    /// Panics if the server has no TLS port.
    pub fn tls_url(&self) -> String {
        let port = self
            .tls_port
            .unwrap_or_else(|| panic!("redis-server on port {} serves no TLS", self.port));
        format!("rediss://127.0.0.1:{port}/")
    }

    /// Socket address (`127.0.0.1:PORT`) of the server.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// Pid of the current server process (or of the last one, after
    /// [`RedisServer::kill`]).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Temporary working directory of the server (also holds its log file).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Path of the server's log file (stdout and stderr of every process
    /// started by this handle).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    /// The configuration file given as the first argument (only for servers
    /// started by [`RedisServer::start_with_config`] or with a configuration
    /// by [`RedisServer::try_start_on`]). Sentinel rewrites it.
    pub fn config_path(&self) -> Option<&Path> {
        self.config_file.as_deref()
    }

    /// Whether the process was killed with [`RedisServer::kill`] and not
    /// restarted since. Unlike [`RedisServer::is_running`] this needs no
    /// `&mut` and does not notice a process that died by itself.
    pub fn is_killed(&self) -> bool {
        self.child.is_none()
    }

    /// Whether a server process is currently running (possibly paused).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the server with `SIGKILL` and waits for it to exit. The data set
    /// is lost (persistence is disabled). Does nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL also terminates a stopped process.
            let _ = child.kill();
            let _ = child.wait();
            self.paused = false;
            tracing::debug!(port = self.port, pid = self.pid, "redis-server killed");
        }
    }

    /// Starts the server again on the same port and in the same directory
    /// (killing the current process first if it is still running), and waits
    /// until it answers `PING`.
    ///
    /// # Panics
    ///
    /// Panics if the server does not come back within 10 seconds.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            match spawn_and_wait(
                self.dir.path(),
                self.config_file.as_deref(),
                self.port,
                &self.extra_args,
            ) {
                Ok(child) => {
                    self.pid = child.id();
                    self.child = Some(child);
                    tracing::debug!(port = self.port, pid = self.pid, "redis-server restarted");
                    return;
                }
                // The port may still be briefly unavailable; retry until the deadline.
                Err(e) if Instant::now() < deadline => {
                    tracing::warn!(port = self.port, error = %e, "redis-server restart failed, retrying");
                    thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("could not restart redis-server on port {}: {e}", self.port),
            }
        }
    }

    /// Starts the server again on the same port and in the same directory, as
    /// [`RedisServer::restart`] does, with `args` in place of the extra arguments it was
    /// started with (a server that has lost a command, say).
    ///
    /// # Panics
    ///
    /// Panics if the server does not come back within 10 seconds.
    pub fn restart_with(&mut self, args: &[&str]) {
        self.extra_args = args.iter().map(|s| (*s).to_owned()).collect();
        self.restart();
    }

    /// Stops the server process with `SIGSTOP`: connections stay open but
    /// nothing is answered until [`RedisServer::resume`].
    ///
    /// # Panics
    ///
    /// Panics if the server is not running or the signal cannot be sent.
    pub fn pause(&mut self) {
        assert!(self.child.is_some(), "pause(): redis-server is not running");
        send_signal(self.pid, "-STOP").unwrap_or_else(|e| panic!("pause(): {e}"));
        self.paused = true;
    }

    /// Continues a server stopped by [`RedisServer::pause`] (`SIGCONT`).
    ///
    /// # Panics
    ///
    /// Panics if the server is not running or the signal cannot be sent.
    pub fn resume(&mut self) {
        assert!(
            self.child.is_some(),
            "resume(): redis-server is not running"
        );
        send_signal(self.pid, "-CONT").unwrap_or_else(|e| panic!("resume(): {e}"));
        self.paused = false;
    }

    /// Whether the server is currently paused.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Sends a command over a fresh connection and returns the parsed reply.
    ///
    /// # Panics
    ///
    /// Panics on any I/O or protocol error (a Redis error reply is *not* a
    /// failure: it is returned as [`Reply::Error`]).
    pub fn query(&self, args: &[&str]) -> Reply {
        self.try_query(args, CMD_TIMEOUT)
            .unwrap_or_else(|e| panic!("redis command {args:?} on port {} failed: {e}", self.port))
    }

    /// Like [`RedisServer::query`] but returns I/O errors (including
    /// timeouts, which apply to connecting, writing and reading separately).
    pub fn try_query(&self, args: &[&str], timeout: Duration) -> io::Result<Reply> {
        query_at(self.addr(), args, timeout)
    }

    /// Sends several commands over one fresh connection (pipelined, in order)
    /// and returns their replies, e.g. `ASKING` followed by the command it
    /// applies to.
    ///
    /// # Panics
    ///
    /// Panics on any I/O or protocol error (error replies are returned).
    pub fn query_many(&self, commands: &[&[&str]]) -> Vec<Reply> {
        self.try_query_many(commands, CMD_TIMEOUT)
            .unwrap_or_else(|e| {
                panic!(
                    "redis commands {commands:?} on port {} failed: {e}",
                    self.port
                )
            })
    }

    /// Like [`RedisServer::query_many`] but returns I/O errors.
    pub fn try_query_many(
        &self,
        commands: &[&[&str]],
        timeout: Duration,
    ) -> io::Result<Vec<Reply>> {
        query_many_at(self.addr(), commands, timeout)
    }

    /// Sends a command over a fresh connection and renders the reply as text
    /// (see [`Reply`]'s `Display`): `+OK` → `OK`, `:1` → `1`, bulk strings as
    /// their content, nil as `(nil)`, errors as `ERR ...`, arrays as their
    /// elements joined by newlines.
    ///
    /// # Panics
    ///
    /// Panics on any I/O or protocol error.
    pub fn cmd(&self, args: &[&str]) -> String {
        self.query(args).to_string()
    }

    /// Like [`RedisServer::cmd`] but with a custom timeout and returning I/O
    /// errors instead of panicking.
    pub fn try_cmd(&self, args: &[&str], timeout: Duration) -> io::Result<String> {
        self.try_query(args, timeout).map(|r| r.to_string())
    }

    /// Keys matching `pattern` (`KEYS pattern`), sorted.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys = self.query(&["KEYS", pattern]).into_strings();
        keys.sort();
        keys
    }

    /// Active pub/sub channels (`PUBSUB CHANNELS`), sorted.
    pub fn pubsub_channels(&self) -> Vec<String> {
        let mut channels = self.query(&["PUBSUB", "CHANNELS"]).into_strings();
        channels.sort();
        channels
    }

    /// Number of keys in the current database (`DBSIZE`).
    ///
    /// # Panics
    ///
    /// Panics if the reply is not a non-negative integer.
    pub fn dbsize(&self) -> u64 {
        match self.query(&["DBSIZE"]) {
            Reply::Integer(n) if n >= 0 => n as u64,
            other => panic!("unexpected DBSIZE reply: {other:?}"),
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.paused && self.child.is_some() {
            let _ = send_signal(self.pid, "-CONT");
        }
        self.kill();
    }
}

/// A RESP reply, as parsed by [`RedisServer::query`].
///
/// Its `Display` rendering is the one returned by [`RedisServer::cmd`].
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+...` simple string (also RESP3 doubles, big numbers and verbatim strings).
    Status(String),
    /// `-...` error reply, without the leading `-`.
    Error(String),
    /// `:n` integer.
    Integer(i64),
    /// `$n` bulk string (lossily decoded as UTF-8).
    Bulk(String),
    /// Nil bulk string / nil array / RESP3 null.
    Nil,
    /// RESP3 boolean.
    Bool(bool),
    /// Array (also RESP3 sets, maps flattened as key, value, ...; and pushes).
    Array(Vec<Reply>),
}

impl Reply {
    /// Reads one reply from `reader`.
    pub fn read_from<R: BufRead>(reader: &mut R) -> io::Result<Reply> {
        let line = read_line(reader)?;
        let (kind, rest) = line.split_at(1);
        let count = |rest: &str| -> io::Result<i64> {
            rest.parse::<i64>()
                .map_err(|_| protocol_error(format!("bad length in {line:?}")))
        };
        Ok(match kind {
            "+" | "," | "(" => Reply::Status(rest.to_owned()),
            "-" => Reply::Error(rest.to_owned()),
            ":" => Reply::Integer(count(rest)?),
            "_" => Reply::Nil,
            "#" => Reply::Bool(rest == "t"),
            "$" | "=" | "!" => {
                let len = count(rest)?;
                if len < 0 {
                    return Ok(Reply::Nil);
                }
                let mut data = vec![0u8; len as usize + 2];
                reader.read_exact(&mut data)?;
                if !data.ends_with(b"\r\n") {
                    return Err(protocol_error("bulk string not terminated by CRLF"));
                }
                data.truncate(len as usize);
                let text = String::from_utf8_lossy(&data).into_owned();
                match kind {
                    "!" => Reply::Error(text),
                    // Verbatim strings start with a 3-letter format and a colon.
                    "=" => Reply::Bulk(text.get(4..).unwrap_or_default().to_owned()),
                    _ => Reply::Bulk(text),
                }
            }
            "*" | "~" | ">" | "%" => {
                let len = count(rest)?;
                if len < 0 {
                    return Ok(Reply::Nil);
                }
                let len = if kind == "%" { len * 2 } else { len };
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(Reply::read_from(reader)?);
                }
                Reply::Array(items)
            }
            _ => return Err(protocol_error(format!("unknown reply type {line:?}"))),
        })
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// The reply as a list of strings: array elements rendered one by one
    /// (nested arrays flattened), nil as an empty list, anything else as a
    /// one-element list.
    pub fn into_strings(self) -> Vec<String> {
        match self {
            Reply::Nil => Vec::new(),
            Reply::Array(items) => items.into_iter().flat_map(Reply::into_strings).collect(),
            other => vec![other.to_string()],
        }
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Status(s) | Reply::Error(s) | Reply::Bulk(s) => f.write_str(s),
            Reply::Integer(n) => write!(f, "{n}"),
            Reply::Nil => f.write_str("(nil)"),
            Reply::Bool(b) => write!(f, "{}", i32::from(*b)),
            Reply::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "{item}")?;
                }
                Ok(())
            }
        }
    }
}

/// Sends one command to `addr` on a fresh connection and reads its reply (a Redis error reply
/// is [`Reply::Error`]; `timeout` applies to connecting, writing and reading separately).
pub fn query_at(addr: SocketAddr, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    query_many_at(addr, &[args], timeout)?
        .pop()
        .ok_or_else(|| io::Error::other("no reply"))
}

/// Sends several commands to `addr` over one fresh connection (pipelined, in order) and
/// returns their replies.
pub fn query_many_at(
    addr: SocketAddr,
    commands: &[&[&str]],
    timeout: Duration,
) -> io::Result<Vec<Reply>> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    let mut out = Vec::new();
    for args in commands {
        out.extend_from_slice(&encode_command(args));
    }
    stream.write_all(&out)?;
    stream.flush()?;
    let mut reader = BufReader::new(stream);
    commands
        .iter()
        .map(|_| Reply::read_from(&mut reader))
        .collect()
}

/// Encodes `args` as a RESP array of bulk strings.
fn encode_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one CRLF-terminated line (without the CRLF); EOF is an error.
fn read_line<R: BufRead>(reader: &mut R) -> io::Result<String> {
    let mut buf = Vec::new();
    reader.read_until(b'\n', &mut buf)?;
    if buf.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before a reply was received",
        ));
    }
    if !buf.ends_with(b"\r\n") || buf.len() < 3 {
        return Err(protocol_error(format!(
            "malformed reply line {:?}",
            String::from_utf8_lossy(&buf)
        )));
    }
    buf.truncate(buf.len() - 2);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn protocol_error(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// The `redis-server` binary the harness runs: `REDIS_SERVER_BIN`, or `redis-server` on the
/// `PATH`.
pub fn server_binary() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_owned())
}

/// Whether `binary --version` runs and succeeds: the check the demos make before starting a
/// server of their own.
pub fn server_binary_runs(binary: &str) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A loopback port that was free a moment ago: for a server started on it later, or for a
/// client that must find nothing listening there.
///
/// # Panics
///
/// Panics if no ephemeral port can be bound.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap_or_else(|e| panic!("cannot bind an ephemeral port: {e}"));
    listener.local_addr().unwrap().port()
}

/// Sends a signal (e.g. `-STOP`, `-CONT`, `-KILL`) to `pid` with the `kill` command.
pub fn send_signal(pid: u32, signal: &str) -> io::Result<()> {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "kill {signal} {pid} failed: {status}"
        )))
    }
}

/// Spawns `redis-server` on `port` in `dir` and waits until that very process
/// answers `PING`. On failure the child is killed and reaped.
fn spawn_and_wait(
    dir: &Path,
    config_file: Option<&Path>,
    port: u16,
    extra_args: &[String],
) -> Result<Child, String> {
    let log_path = dir.join(LOG_FILE);
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
    let log_err = log
        .try_clone()
        .map_err(|e| format!("cannot clone log file handle: {e}"))?;
    let port_arg = port.to_string();
    let dir_arg = dir.to_string_lossy().into_owned();
    let binary = server_binary();
    let mut child = Command::new(&binary)
        // The configuration file, if any, must be the first argument.
        .args(config_file)
        .args(["--port", &port_arg])
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--enable-debug-command", "local"])
        .args(["--dir", &dir_arg])
        .args(["--daemonize", "no"])
        .args(["--logfile", ""])
        .args(extra_args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log_err))
        .spawn()
        .map_err(|e| format!("cannot spawn {binary:?} (set REDIS_SERVER_BIN?): {e}"))?;

    let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return Err(format!(
                    "redis-server on port {port} exited with {status}; log tail:\n{}",
                    log_tail(&log_path)
                ));
            }
            Ok(None) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("cannot poll redis-server: {e}"));
            }
        }
        if answers_as(addr, child.id()) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "redis-server on port {port} did not answer PING within {STARTUP_TIMEOUT:?}; log tail:\n{}",
                log_tail(&log_path)
            ));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the server at `addr` answers `PING` and is process `pid` (guards
/// against another test's server having grabbed the same port).
fn answers_as(addr: SocketAddr, pid: u32) -> bool {
    let probe = || -> io::Result<bool> {
        let timeout = Duration::from_millis(500);
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.write_all(&encode_command(&["PING"]))?;
        stream.write_all(&encode_command(&["INFO", "server"]))?;
        let mut reader = BufReader::new(stream);
        if Reply::read_from(&mut reader)? != Reply::Status("PONG".to_owned()) {
            return Ok(false);
        }
        let info = Reply::read_from(&mut reader)?.to_string();
        Ok(info
            .lines()
            .any(|l| l.trim() == format!("process_id:{pid}")))
    };
    probe().unwrap_or(false)
}

/// Polls `check` every 50 ms until it returns `Ok(())`, for at most
/// `timeout`; panics with `what` and the last reason given by `check` if it
/// never does. The poll is event-driven in the sense that it returns as soon
/// as the state is observed, not after a fixed sleep.
pub(crate) fn wait_until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<(), String>,
) {
    let start = Instant::now();
    let mut last_reason = String::new();
    loop {
        match check() {
            Ok(()) => {
                tracing::debug!(what, elapsed = ?start.elapsed(), "condition reached");
                return;
            }
            Err(reason) if start.elapsed() >= timeout => {
                panic!("timed out after {timeout:?} waiting for {what}: {reason}")
            }
            Err(reason) => {
                if reason != last_reason {
                    tracing::trace!(what, elapsed = ?start.elapsed(), %reason, "still waiting");
                    last_reason = reason;
                }
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// The value of `field` in an `INFO` reply (`field:value` lines).
pub(crate) fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|line| {
        line.trim_end()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::to_owned)
    })
}

/// The last lines of the log file, for panic messages.
fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Reply {
        Reply::read_from(&mut &bytes[..]).unwrap()
    }

    #[test]
    fn parses_and_renders_replies() {
        assert_eq!(parse(b"+OK\r\n").to_string(), "OK");
        assert_eq!(parse(b":42\r\n").to_string(), "42");
        assert_eq!(parse(b"-ERR boom\r\n").to_string(), "ERR boom");
        assert_eq!(parse(b"$-1\r\n").to_string(), "(nil)");
        assert_eq!(parse(b"*-1\r\n").to_string(), "(nil)");
        assert_eq!(parse(b"$5\r\nhe\r\no\r\n").to_string(), "he\r\no");
        assert_eq!(parse(b"*0\r\n").to_string(), "");
        let nested = parse(b"*3\r\n$1\r\na\r\n*2\r\n:1\r\n$-1\r\n+c\r\n");
        assert_eq!(
            nested,
            Reply::Array(vec![
                Reply::Bulk("a".into()),
                Reply::Array(vec![Reply::Integer(1), Reply::Nil]),
                Reply::Status("c".into()),
            ])
        );
        assert_eq!(nested.to_string(), "a\n1\n(nil)\nc");
        assert!(Reply::read_from(&mut &b""[..]).is_err());
        assert!(Reply::read_from(&mut &b"$5\r\nab"[..]).is_err());
    }

    #[test]
    fn encodes_commands() {
        assert_eq!(
            encode_command(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".to_vec()
        );
    }
}
