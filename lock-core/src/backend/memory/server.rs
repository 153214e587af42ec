//! The in-memory server: one keyspace, one clock and one pub/sub bus shared by every client
//! connected to it, with the faults a test sets; and a [`Link`], one client's connection to
//! it, which can be cut on its own.
//!
//! Every call runs under the server's one lock, so a call (a script, a pipeline) is atomic,
//! as a script or a `MULTI`/`EXEC` is on Redis. The server's Lua interpreter, with its script
//! cache, is kept under the same lock.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio::time::{Duration, Instant};

use super::keyspace::Keyspace;
use super::lua::Interpreter;
use crate::util::lock;

/// Where the server's clock starts: 2026-01-01T00:00:00Z, in µs since the Unix epoch. Tokens
/// seeded from it look like a Redis server's (about 1.77·10^15) and are the same in every run.
const EPOCH_US: u64 = 1_767_225_600_000_000;

/// The faults every client of the server sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Faults {
    /// Every call fails as if the server were down.
    pub(crate) down: bool,
    /// How long each reply takes (after the call is applied).
    pub(crate) delay: Duration,
}

/// One server, shared by the clients connected to it.
#[derive(Debug)]
pub(crate) struct Server {
    state: Mutex<State>,
    faults: watch::Sender<Faults>,
}

#[derive(Debug)]
struct State {
    keyspace: Keyspace,
    clock: Clock,
    bus: Bus,
    lua: Interpreter,
}

/// What one call sees: the keyspace at the call's instant, the server clock as the call reads
/// it, and the bus to publish on.
pub(super) struct Ctx<'a> {
    pub(super) ks: &'a mut Keyspace,
    bus: &'a mut Bus,
    time_us: u64,
}

impl Ctx<'_> {
    /// The server clock (`TIME`) in µs.
    pub(super) fn time_us(&self) -> u64 {
        self.time_us
    }

    /// `PUBLISH`: how many subscribers got the message.
    pub(super) fn publish(&mut self, channel: &[u8]) -> usize {
        self.bus.publish(channel)
    }
}

impl Server {
    pub(crate) fn new() -> Arc<Server> {
        let now = Instant::now();
        Arc::new(Server {
            state: Mutex::new(State {
                keyspace: Keyspace::new(now),
                clock: Clock { start: now },
                bus: Bus::default(),
                lua: Interpreter::new(),
            }),
            faults: watch::Sender::new(Faults::default()),
        })
    }

    /// Runs one call, atomically, at the current instant of tokio's clock, with the server's
    /// Lua interpreter at hand.
    pub(super) fn call<R>(&self, run: impl FnOnce(&mut Ctx<'_>, &mut Interpreter) -> R) -> R {
        let mut state = lock(&self.state);
        let now = Instant::now();
        let State {
            keyspace,
            clock,
            bus,
            lua,
        } = &mut *state;
        keyspace.at(now);
        let time_us = clock.read(now);
        let mut ctx = Ctx {
            ks: keyspace,
            bus,
            time_us,
        };
        run(&mut ctx, lua)
    }

    pub(crate) fn faults(&self) -> Faults {
        *self.faults.borrow()
    }

    pub(crate) fn set_faults(&self, change: impl FnOnce(&mut Faults)) {
        self.faults.send_modify(change);
    }

    /// Deletes `key` (an eviction): whether there was one.
    pub(crate) fn evict(&self, key: &str) -> bool {
        self.call(|ctx, _| ctx.ks.del(key))
    }

    /// Every live key, sorted.
    pub(crate) fn keys(&self) -> Vec<String> {
        self.call(|ctx, _| ctx.ks.keys())
    }

    /// Every live key, sorted, with its type, value and `PTTL` (see `Keyspace::dump`).
    pub(crate) fn dump(&self) -> Vec<(String, &'static str, Vec<Vec<u8>>, i64)> {
        self.call(|ctx, _| ctx.ks.dump())
    }

    /// The channels published on since the last call (the first call starts recording).
    pub(crate) fn published(&self) -> Vec<Vec<u8>> {
        let mut state = lock(&self.state);
        state.bus.tap.replace(Vec::new()).unwrap_or_default()
    }
}

/// The server clock: exactly a fixed epoch plus the time tokio's clock has moved since the
/// server started. On a paused tokio clock it stands still between calls, so a test that
/// sleeps exactly a `Retry-After` finds the permit back. (Fencing tokens stay increasing:
/// a counter goes on from its last token, and is seeded from the clock only when it is gone.)
#[derive(Debug)]
struct Clock {
    start: Instant,
}

impl Clock {
    fn read(&mut self, now: Instant) -> u64 {
        let elapsed = u64::try_from(now.saturating_duration_since(self.start).as_micros())
            .unwrap_or(u64::MAX);
        EPOCH_US.saturating_add(elapsed)
    }
}

/// The pub/sub side: each client's subscriber and its channels.
#[derive(Debug, Default)]
struct Bus {
    subscribers: Vec<Subscriber>,
    next_id: u64,
    /// The channel of every message since the last [`Server::published`], while a test taps
    /// the bus.
    tap: Option<Vec<Vec<u8>>>,
}

#[derive(Debug)]
struct Subscriber {
    id: u64,
    channels: HashSet<Vec<u8>>,
    /// The channel of each message.
    tx: mpsc::UnboundedSender<Vec<u8>>,
    /// Whether its client is cut off (then it hears nothing).
    cut: watch::Receiver<bool>,
}

impl Bus {
    fn publish(&mut self, channel: &[u8]) -> usize {
        if let Some(tap) = &mut self.tap {
            tap.push(channel.to_vec());
        }
        self.subscribers.retain(|s| !s.tx.is_closed());
        self.subscribers
            .iter()
            .filter(|s| s.channels.contains(channel) && !*s.cut.borrow())
            .filter(|s| s.tx.send(channel.to_vec()).is_ok())
            .count()
    }

    fn get(&mut self, id: u64) -> Option<&mut Subscriber> {
        self.subscribers.iter_mut().find(|s| s.id == id)
    }
}

/// One client's connection to a server, which a test can cut (and restore) on its own.
#[derive(Debug)]
pub(crate) struct Link {
    server: Arc<Server>,
    cut: watch::Sender<bool>,
}

impl Link {
    pub(crate) fn new(server: Arc<Server>) -> Arc<Link> {
        Arc::new(Link {
            server,
            cut: watch::Sender::new(false),
        })
    }

    pub(crate) fn server(&self) -> &Arc<Server> {
        &self.server
    }

    /// Whether calls get through: the server is up and this link is not cut.
    pub(crate) fn reachable(&self) -> bool {
        !self.server.faults().down && !*self.cut.borrow()
    }

    pub(crate) fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }

    /// What tells a subscriber that reachability may have changed.
    pub(crate) fn changes(&self) -> Changes {
        Changes {
            server: self.server.faults.subscribe(),
            cut: self.cut.subscribe(),
        }
    }

    /// This link's subscriber on the server's bus, and the channels of its messages.
    pub(crate) fn subscriber(&self) -> (Subscription, mpsc::UnboundedReceiver<Vec<u8>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut state = lock(&self.server.state);
        let id = state.bus.next_id;
        state.bus.next_id += 1;
        state.bus.subscribers.push(Subscriber {
            id,
            channels: HashSet::new(),
            tx,
            cut: self.cut.subscribe(),
        });
        drop(state);
        let server = self.server.clone();
        (Subscription { server, id }, rx)
    }
}

/// Changes of what decides whether a link is reachable.
#[derive(Debug)]
pub(crate) struct Changes {
    server: watch::Receiver<Faults>,
    cut: watch::Receiver<bool>,
}

impl Changes {
    /// Waits for the next change (never, once the server and the link are gone).
    pub(crate) async fn changed(&mut self) {
        let changed = tokio::select! {
            r = self.server.changed() => r,
            r = self.cut.changed() => r,
        };
        if changed.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// A subscriber on a server's bus; dropping it leaves the bus.
#[derive(Debug)]
pub(crate) struct Subscription {
    server: Arc<Server>,
    id: u64,
}

impl Subscription {
    /// Subscribes (`true`) or unsubscribes `channel`.
    pub(crate) fn set(&self, channel: &str, subscribed: bool) {
        let mut state = lock(&self.server.state);
        if let Some(s) = state.bus.get(self.id) {
            let channel = channel.as_bytes();
            if subscribed {
                s.channels.insert(channel.to_vec());
            } else {
                s.channels.remove(channel);
            }
        }
    }

    /// Drops every channel (the connection is gone).
    pub(crate) fn clear(&self) {
        let mut state = lock(&self.server.state);
        if let Some(s) = state.bus.get(self.id) {
            s.channels.clear();
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        lock(&self.server.state)
            .bus
            .subscribers
            .retain(|s| s.id != self.id);
    }
}
