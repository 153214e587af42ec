//! A TCP fault-injection proxy for putting between a client and Redis.
//!
//! [`FaultProxy`] listens on a loopback port and forwards every accepted
//! connection to an upstream address. Tests switch its [`Mode`] at run time
//! to delay traffic, black-hole it, lose exactly one reply, or cut all
//! connections.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// Size of the buffer each pump direction reads into.
const CHUNK: usize = 16 * 1024;

/// What the proxy currently does with the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything unchanged (the default).
    Pass,
    /// Delay every chunk, in either direction, by this much before
    /// forwarding it.
    Delay(Duration),
    /// Read from both sides but forward nothing; bytes read meanwhile are
    /// dropped. New connections are accepted but not connected upstream
    /// until the mode changes. Leaving this mode closes every connection:
    /// a stream that lost bytes in its middle cannot go on (real TCP never
    /// drops them; a client reading on would pair replies with the wrong
    /// commands).
    Blackhole,
    /// Swallow the next server→client chunk on any connection, close that
    /// connection, then switch back to [`Mode::Pass`].
    DropNextReply,
}

/// Which way a pump forwards bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

/// State shared between the handle and the proxy tasks.
#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    /// Bumped by [`FaultProxy::reset_all`]; every connection closes on change.
    reset_epoch: watch::Sender<u64>,
    connections: AtomicUsize,
    accepted: AtomicU64,
    dropped_replies: AtomicU64,
}

/// Decrements the open-connection counter when a connection task ends (or
/// is aborted).
struct ConnectionGuard(Arc<Shared>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A TCP proxy on `127.0.0.1:<free port>` that forwards to an upstream
/// address and can inject faults.
///
/// The proxy runs as tasks on the Tokio runtime it was started on, so a test
/// that makes *blocking* calls through it needs a multi-threaded runtime
/// (`#[tokio::test(flavor = "multi_thread")]`).
///
/// Dropping it stops the listener and closes every proxied connection.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The accept loop; it owns the connection tasks, so aborting it aborts
    /// them too.
    accept_task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy in [`Mode::Pass`] forwarding to `upstream`.
    ///
    /// Must be called within a Tokio runtime.
    ///
    /// # Panics
    ///
    /// Panics if no loopback port can be bound.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .unwrap_or_else(|e| panic!("FaultProxy: cannot bind a loopback port: {e}"));
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream,
            mode: watch::Sender::new(Mode::Pass),
            reset_epoch: watch::Sender::new(0),
            connections: AtomicUsize::new(0),
            accepted: AtomicU64::new(0),
            dropped_replies: AtomicU64::new(0),
        });
        let accept_task = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        tracing::debug!(%addr, %upstream, "fault proxy started");
        FaultProxy {
            addr,
            shared,
            accept_task,
        }
    }

    /// `redis://127.0.0.1:PORT` URL of the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Address the proxy listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Address the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        *self.shared.mode.borrow()
    }

    /// Switches to `mode` (see the convenience methods below).
    pub fn set_mode(&self, mode: Mode) {
        tracing::debug!(addr = %self.addr, ?mode, "fault proxy mode");
        let before = self.shared.mode.send_replace(mode);
        if before == Mode::Blackhole && mode != Mode::Blackhole {
            // Connections that lost bytes in their middle end here.
            self.reset_all();
        }
    }

    /// Forwards everything unchanged.
    pub fn pass(&self) {
        self.set_mode(Mode::Pass);
    }

    /// Delays every chunk, in either direction, by `d`.
    pub fn delay(&self, d: Duration) {
        self.set_mode(Mode::Delay(d));
    }

    /// Forwards nothing in either direction, on existing and new
    /// connections, until switched back; bytes read meanwhile are dropped,
    /// and switching back closes every connection (see [`Mode::Blackhole`]).
    pub fn blackhole(&self) {
        self.set_mode(Mode::Blackhole);
    }

    /// Swallows the next server→client chunk on any connection and closes
    /// that connection (the server executed the command, the reply was lost);
    /// then the mode returns to [`Mode::Pass`] by itself.
    pub fn drop_next_reply(&self) {
        self.set_mode(Mode::DropNextReply);
    }

    /// Closes every currently open proxied connection; new connections are
    /// accepted normally.
    pub fn reset_all(&self) {
        tracing::debug!(addr = %self.addr, "fault proxy reset_all");
        self.shared.reset_epoch.send_modify(|epoch| *epoch += 1);
    }

    /// How many replies were swallowed by [`FaultProxy::drop_next_reply`].
    pub fn dropped_replies(&self) -> u64 {
        self.shared.dropped_replies.load(Ordering::SeqCst)
    }

    /// Number of currently open client connections.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Total number of client connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Dropping the accept task drops its listener and its JoinSet, which
        // aborts every connection task. Also close connections right away in
        // case the runtime gets to the aborted task late.
        self.shared.reset_epoch.send_modify(|epoch| *epoch += 1);
        self.accept_task.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, peer)) => {
                    shared.accepted.fetch_add(1, Ordering::SeqCst);
                    shared.connections.fetch_add(1, Ordering::SeqCst);
                    let guard = ConnectionGuard(Arc::clone(&shared));
                    tracing::trace!(%peer, "fault proxy accepted a connection");
                    tasks.spawn(handle_connection(client, Arc::clone(&shared), guard));
                }
                Err(e) => {
                    // E.g. EMFILE: back off instead of spinning.
                    tracing::warn!(error = %e, "fault proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

async fn handle_connection(client: TcpStream, shared: Arc<Shared>, _guard: ConnectionGuard) {
    let mut reset_rx = shared.reset_epoch.subscribe();
    tokio::select! {
        () = proxy_connection(client, &shared) => {}
        _ = reset_rx.changed() => {
            tracing::trace!("fault proxy reset a connection");
        }
    }
}

async fn proxy_connection(mut client: TcpStream, shared: &Shared) {
    let _ = client.set_nodelay(true);
    // While black-holed, do not even connect upstream: just drain the client.
    let mut mode_rx = shared.mode.subscribe();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let current = *mode_rx.borrow_and_update();
        if current != Mode::Blackhole {
            break;
        }
        tokio::select! {
            read = client.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            changed = mode_rx.changed() => if changed.is_err() { return },
        }
    }
    drop(buf);
    let server = match TcpStream::connect(shared.upstream).await {
        Ok(server) => server,
        Err(e) => {
            tracing::debug!(upstream = %shared.upstream, error = %e, "fault proxy cannot reach upstream");
            return;
        }
    };
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // When either direction ends, both sockets are dropped (closed).
    tokio::select! {
        () = pump(client_read, server_write, Direction::ToServer, shared) => {}
        () = pump(server_read, client_write, Direction::ToClient, shared) => {}
    }
}

/// Forwards chunks from `from` to `to` according to the current mode until
/// EOF, an error, or a swallowed reply.
async fn pump<R, W>(mut from: R, mut to: W, direction: Direction, shared: &Shared)
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mode = *shared.mode.borrow();
        if let Mode::Delay(d) = mode {
            tokio::time::sleep(d).await;
        }
        // Re-read the mode: it may have changed while the chunk was delayed.
        // (Copy it out first: the borrow must not be held across
        // `send_if_modified` below.)
        let current = *shared.mode.borrow();
        match current {
            Mode::Blackhole => continue,
            Mode::DropNextReply if direction == Direction::ToClient => {
                let claimed = shared.mode.send_if_modified(|m| {
                    if *m == Mode::DropNextReply {
                        *m = Mode::Pass;
                        true
                    } else {
                        false
                    }
                });
                if claimed {
                    shared.dropped_replies.fetch_add(1, Ordering::SeqCst);
                    tracing::debug!(
                        bytes = n,
                        "fault proxy swallowed a reply and closes the connection"
                    );
                    return;
                }
            }
            _ => {}
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
