//! A private, throwaway `redis-server` for the quickstart: a free loopback port, no
//! persistence, stopped when dropped. (The test suite's harness, `lock-tests`, does much more
//! and would make the quickstart build the whole test suite's dependencies.)

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started server has to answer `PING`.
const READY_WITHIN: Duration = Duration::from_secs(10);
/// Ports tried (another process may take a free port before the server binds it).
const ATTEMPTS: usize = 5;

/// A running `redis-server`, killed on drop.
#[derive(Debug)]
pub(crate) struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Starts `redis-server` (or `$REDIS_SERVER_BIN`) on 127.0.0.1 and a free port, and waits
    /// until it answers `PING`.
    pub(crate) fn start() -> Result<Server, String> {
        let binary = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        let mut last_error = String::new();
        for _ in 0..ATTEMPTS {
            let port = free_port().map_err(|e| format!("no free loopback port: {e}"))?;
            let child = Command::new(&binary)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(std::env::temp_dir())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| {
                    format!("cannot run {binary}: {e} (scripts/ensure-redis.sh installs it)")
                })?;
            let mut server = Server { child, port };
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e, // dropped: killed
            }
        }
        Err(format!(
            "{binary} did not start in {ATTEMPTS} attempts: {last_error}"
        ))
    }

    /// The server's URL.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("it exited ({status}) on port {}", self.port));
            }
            if ping(self.port) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no PONG on port {} within {READY_WITHIN:?}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port that was free a moment ago.
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether the server on `port` answers `PING` with `+PONG`.
fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}
