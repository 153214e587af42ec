//! The engine: everything a client's handles, guards and background tasks share, and the
//! protocol every primitive speaks with Redis.
//!
//! - this file: the [`Engine`] (backend, scripts, configuration, the client's id, its holds
//!   and waiters), owner ids and the registry of holds;
//! - [`send`]: sending an acquisition that is undone if its caller goes away, for one hold or
//!   many, with replica acknowledgement;
//! - [`release`]: giving holds back (and retrying when the answer is lost), undoing
//!   interrupted acquisitions, extending leases;
//! - [`batch`]: acquisitions and releases that queue behind calls in flight go out as one
//!   call;
//! - [`jobs`]: the background runner for work started where nothing can await it (`Drop`);
//! - [`life`] and [`shutdown`]: the client's life, and its shutdown.

mod attempt;
mod batch;
mod batcher;
mod jobs;
mod life;
mod outcome;
mod release;
mod send;
mod shutdown;
mod speech;
mod update;

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Backend, Invocation};
use crate::capabilities::ServerCapabilities;
use crate::error::LockError;
use crate::eviction::EvictionRisk;
use crate::hold::{Hold, Lease, Snapshot, Status};
use crate::kind::HoldKind;
use crate::metrics::{Labeler, Labels};
use crate::name::Keys;
use crate::scope;
use crate::throttle::{Throttle, WARN_PERIOD};
use crate::util::{FxHasher, lock};
use crate::waiters::Waiters;
use crate::wire::answer::{GaveBack, Inspected};
use crate::wire::record::{self, Sending, Stored};
use crate::wire::{Command, Mode, Owner, Protocol, ScriptCall, Scripts, Target, Wire};

pub(crate) use outcome::Attempt;
pub(crate) use speech::Speech;

/// A client's configuration, as the engine uses it.
pub(crate) struct Config {
    pub(crate) prefix: String,
    pub(crate) watchdog_lease: Duration,
    /// How long an answer may take before a command counts as unanswered.
    pub(crate) response_timeout: Duration,
    pub(crate) fence_ttl: Duration,
    /// Replicas that must confirm an acquisition, and how long to wait for them.
    pub(crate) min_replicas: Option<(u32, Duration)>,
    /// Maps a lock's name to its metrics' `family` label.
    pub(crate) metric_label: Option<Labeler>,
    /// Whether the server may evict lock keys, as read at build.
    pub(crate) eviction: EvictionRisk,
    /// Who this client is, for operators (checked at build); recorded under the client's key.
    pub(crate) owner_description: Option<String>,
}

/// The state shared by a client's handles, guards and background tasks.
pub(crate) struct Engine {
    backend: Backend,
    /// The Lua code, in the deployment's flavour, and how calls reach it.
    scripts: &'static Scripts,
    mode: Mode,
    capabilities: ServerCapabilities,
    /// How calls are built for this deployment (dialect, publishing, fencing counters).
    protocol: Protocol,
    config: Config,
    waiters: Waiters,
    client_id: Arc<str>,
    registry: Mutex<Registry>,
    jobs: jobs::Sender,
    /// Batches mutex acquisitions and releases (and rate-limit decisions), where one server
    /// holds every key and no replica must acknowledge an acquisition.
    batcher: Option<batcher::Batcher>,
    /// Open, shutting down or shut down, and the background tasks a shutdown stops.
    life: life::Life,
    /// The warning of an undo that failed, at most once per period.
    undo_warnings: Throttle,
}

/// Every hold of the client, by what it holds and who holds it: found again by re-entries
/// (inside a `reentrant` scope), walked by the watchdog.
struct Registry {
    holds: HashMap<HoldId, Weak<Hold>, BuildHasherDefault<FxHasher>>,
    /// The size at which dead entries are swept out next.
    sweep_at: usize,
}

#[derive(PartialEq, Eq, Hash)]
struct HoldId {
    keys: Keys,
    kind: HoldKind,
    holder: u64,
}

impl Engine {
    /// An engine over `backend`, with its background jobs spawned on the current
    /// runtime.
    pub(crate) fn start(
        backend: Backend,
        speech: Speech,
        config: Config,
        waiters: Waiters,
    ) -> Arc<Engine> {
        let batching = !backend.is_sharded() && config.min_replicas.is_none();
        let protocol = Protocol::new(
            &speech.capabilities,
            backend.is_sharded(),
            &config.prefix,
            config.fence_ttl,
            speech.clock,
        );
        Arc::new(Engine {
            batcher: batching.then(batcher::Batcher::default),
            backend,
            scripts: speech.scripts,
            mode: speech.mode,
            protocol,
            capabilities: speech.capabilities,
            config,
            waiters,
            client_id: uuid::Uuid::new_v4().simple().to_string().into(),
            registry: Mutex::new(Registry {
                holds: HashMap::default(),
                sweep_at: 64,
            }),
            jobs: jobs::start(),
            life: life::Life::default(),
            undo_warnings: Throttle::new(WARN_PERIOD),
        })
    }

    /// The client's configuration.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// What the deployment can do, and the mutex protocol spoken with it.
    pub(crate) fn capabilities(&self) -> &ServerCapabilities {
        &self.capabilities
    }

    /// How this client's calls are built.
    pub(crate) fn protocol(&self) -> &Protocol {
        &self.protocol
    }

    /// A hold as a call names it (its owner id written with this client's id).
    pub(crate) fn target<'a>(&'a self, hold: &'a Hold) -> Target<'a> {
        Target {
            kind: hold.kind,
            keys: &hold.keys,
            owner: self.owner_arg(hold.holder),
        }
    }

    /// The client's pub/sub connection and its waiters.
    pub(crate) fn waiters(&self) -> &Waiters {
        &self.waiters
    }

    /// The deployment's backend.
    pub(crate) fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The slot of a key on a Cluster; None where all keys live together.
    pub(crate) fn slot(&self, key: &str) -> Option<redis::cluster_routing::Slot> {
        self.backend.slot(key)
    }

    /// How long the backend tries to get a connection.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.backend.connect_timeout()
    }

    /// Runs one plain single-key command (no script) where its key lives; sent once more after a connection failure.
    pub(crate) async fn command(&self, cmd: &redis::Cmd) -> Result<redis::Value, LockError> {
        self.not_closed()?;
        self.backend.command(cmd).await
    }

    /// This client's id, the first part of every owner id.
    pub(crate) fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The owner id of `holder` in Redis.
    pub(crate) fn owner(&self, holder: u64) -> String {
        self.owner_arg(holder).to_string()
    }

    /// The owner id of `holder`, written straight into a command.
    pub(crate) fn owner_arg(&self, holder: u64) -> Owner<'_> {
        Owner {
            client: &self.client_id,
            holder,
        }
    }

    /// The holder of an acquisition made by the current task: the enclosing reentrant
    /// scope's, or a new one.
    pub(crate) fn holder_for_current_task(&self) -> u64 {
        scope::current_holder().unwrap_or_else(scope::next_holder)
    }

    /// The lease of an acquisition: fixed, or the watchdog's.
    pub(crate) fn lease(&self, fixed: Option<Duration>) -> (Lease, Duration) {
        match fixed {
            Some(d) => (Lease::Fixed, d),
            None => (Lease::Watchdog, self.config.watchdog_lease),
        }
    }

    /// The keys of `name` under this client's prefix.
    pub(crate) fn keys(&self, name: &str) -> Result<Keys, crate::error::LockError> {
        Keys::new(&self.config.prefix, name)
    }

    /// The metric labels of a lock of `kind` (a metric kind: `mutex`, `multi`, ...) named
    /// `name`.
    pub(crate) fn labels(&self, kind: &'static str, name: &str) -> Labels {
        Labels::new(kind, self.config.metric_label.as_ref(), name)
    }

    /// The hold of `holder` on `keys` (of `kind`), created if there is none.
    pub(crate) fn hold(&self, kind: HoldKind, keys: &Keys, holder: u64) -> Arc<Hold> {
        let id = HoldId {
            keys: keys.clone(),
            kind,
            holder,
        };
        let mut registry = lock(&self.registry);
        if let Some(hold) = registry.holds.get(&id).and_then(Weak::upgrade) {
            return hold;
        }
        if registry.holds.len() >= registry.sweep_at {
            registry.holds.retain(|_, hold| hold.strong_count() > 0);
            registry.sweep_at = (registry.holds.len() * 2).max(64);
        }
        let labels = self.labels(kind.metric(), keys.name());
        let hold = Arc::new(Hold::new(kind, keys.clone(), holder, labels));
        registry.holds.insert(id, Arc::downgrade(&hold));
        hold
    }

    /// The hold of `kind` on `keys` that the owner id `owner` names, if it is one of this
    /// client's and still held here.
    pub(crate) fn own_hold(&self, kind: HoldKind, keys: &Keys, owner: &str) -> Option<Snapshot> {
        let holder = owner
            .strip_prefix(&*self.client_id)?
            .strip_prefix(':')?
            .parse()
            .ok()?;
        let id = HoldId {
            keys: keys.clone(),
            kind,
            holder,
        };
        let hold = lock(&self.registry).holds.get(&id)?.upgrade()?;
        let now = hold.snapshot();
        (now.status == Status::Held).then_some(now)
    }

    /// Drops `hold` from the registry if nothing else uses it (its last release is done).
    pub(crate) fn forget(&self, hold: Arc<Hold>) {
        let mut registry = lock(&self.registry);
        if Arc::strong_count(&hold) == 1 {
            let id = HoldId {
                keys: hold.keys.clone(),
                kind: hold.kind,
                holder: hold.holder,
            };
            if registry
                .holds
                .get(&id)
                .is_some_and(|w| w.as_ptr() == Arc::as_ptr(&hold))
            {
                registry.holds.remove(&id);
            }
        }
        // The last reference goes outside the registry's lock.
        drop(registry);
        drop(hold);
    }

    /// Every hold of the client that something still uses.
    pub(crate) fn every_hold(&self) -> Vec<Arc<Hold>> {
        let registry = lock(&self.registry);
        registry.holds.values().filter_map(Weak::upgrade).collect()
    }

    /// The holds the watchdog must renew, with their generations.
    pub(crate) fn watched(&self) -> Vec<(Arc<Hold>, u64)> {
        let candidates = self.every_hold();
        // Filtered (and the rest dropped) outside the registry lock.
        candidates
            .into_iter()
            .filter_map(|hold| {
                let now = hold.snapshot();
                let watched = now.lease == Lease::Watchdog && now.status == Status::Held;
                watched.then_some((hold, now.generation))
            })
            .collect()
    }

    /// Runs `work` on the client's runtime: from a `Drop`, or wherever nothing can await it.
    pub(crate) fn background(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.jobs.send(work);
    }

    /// The command as it goes to the backend, for a caller that asked at `asked`.
    fn invocation<'a>(&self, command: Wire<'a>, asked: Instant) -> Invocation<'a> {
        Invocation {
            command,
            scripts: self.scripts,
            mode: self.mode,
            sends: Default::default(),
            asked,
            patience: Duration::ZERO,
        }
    }

    /// A script call on a server without scripting fails before it is sent.
    fn check_scripting(&self, command: Wire<'_>) -> Result<(), LockError> {
        match command {
            Wire::Script(call) if !self.capabilities.scripting => Err(LockError::Unsupported {
                feature: call.op().feature(),
                missing: "scripting (EVAL/FCALL)",
                detail: None,
            }),
            _ => Ok(()),
        }
    }

    /// Runs `command` and returns its reply as sent (a native call's: one reply per
    /// command).
    pub(crate) async fn invoke_raw(&self, command: &Command) -> Result<redis::Value, LockError> {
        Ok(self.invoke_wire(command.wire()).await?.0)
    }

    /// Runs a script call and returns its reply.
    pub(crate) async fn invoke_script(&self, call: &ScriptCall) -> Result<redis::Value, LockError> {
        Ok(self.invoke_wire(Wire::Script(call)).await?.0)
    }

    /// The reply, and whether the command was sent more than once.
    async fn invoke_wire(&self, command: Wire<'_>) -> Result<(redis::Value, bool), LockError> {
        self.invoke_asked(command, Instant::now()).await
    }

    /// [`Engine::invoke_wire`] for a command whose caller asked at `asked` (a batch's, when
    /// the earliest of its requests did): its deadline counts from then.
    async fn invoke_asked(
        &self,
        command: Wire<'_>,
        asked: Instant,
    ) -> Result<(redis::Value, bool), LockError> {
        self.not_closed()?;
        self.check_scripting(command)?;
        let invocation = self.invocation(command, asked);
        let reply = self.backend.invoke_value(&invocation).await?;
        Ok((reply, invocation.resent()))
    }

    /// Runs a call that gives one hold back and reads its reply. `ours`: the hold was still
    /// the owner's when it was sent; sent more than once (`again`, or by the backend after a
    /// connection failure), a native release that finds the lock gone then answers as a
    /// repeat of an applied one.
    pub(crate) async fn give_back(
        &self,
        command: &Command,
        ours: bool,
        again: bool,
    ) -> Result<GaveBack, LockError> {
        let (reply, resent) = self.invoke_wire(command.wire()).await?;
        command.gave_back(reply, ours && (again || resent))
    }

    /// [`Engine::give_back`] for an undo: it waits for its answer up to the watchdog lease
    /// rather than the response timeout (it runs in the background, on no caller's clock),
    /// so its hold's next command is not sent while the undo may still be applied later by
    /// a server that was paused or frozen (which would give back that next command's grant).
    pub(crate) async fn give_back_patiently(
        &self,
        command: &Command,
    ) -> Result<GaveBack, LockError> {
        let wire = command.wire();
        self.check_scripting(wire)?;
        self.not_closed()?;
        let mut invocation = self.invocation(wire, Instant::now());
        invocation.patience = self.config.watchdog_lease;
        let reply = self.backend.invoke_value(&invocation).await?;
        command.gave_back(reply, false)
    }

    /// Runs a renewal and reads, per hold, whether it was still its owner's.
    pub(crate) async fn renew(&self, command: &Command) -> Result<Vec<bool>, LockError> {
        command.renewed(self.invoke_raw(command).await?)
    }

    /// Runs a force-unlock and reads whether there was a holder to free.
    pub(crate) async fn free(&self, command: &Command) -> Result<bool, LockError> {
        command.freed(self.invoke_raw(command).await?)
    }

    /// Runs a lock string's inspection: its remaining lease in ms, its value and a native
    /// mutex's fencing counter.
    pub(crate) async fn inspect(&self, command: &Command) -> Result<Inspected, LockError> {
        command.inspected(self.invoke_raw(command).await?)
    }

    /// Runs a record's put to its end: each command the wire room names, each reply read
    /// by it.
    pub(crate) async fn put_record(&self, mut put: record::Put) -> Result<Stored, LockError> {
        loop {
            let reply = match put.sending() {
                Sending::Call(call) => self.invoke_raw(call).await?,
                Sending::Plain(cmd) => self.command(cmd).await?,
            };
            if let Some(stored) = put.read(reply)? {
                return Ok(stored);
            }
        }
    }

    /// Runs `command` (whose first key is `key`), then `WAIT`; returns the reply as sent and
    /// how many replicas confirmed.
    pub(crate) async fn invoke_acked_raw(
        &self,
        command: &Command,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(redis::Value, u32), LockError> {
        self.not_closed()?;
        self.check_scripting(command.wire())?;
        self.backend
            .invoke_acked(
                &self.invocation(command.wire(), Instant::now()),
                key,
                replicas,
                timeout,
            )
            .await
    }

    /// Runs a best-effort cleanup call in the background, logging a failure.
    pub(crate) fn call_in_background(
        self: &Arc<Self>,
        command: impl Into<Command>,
        what: &'static str,
    ) {
        let (engine, command) = (self.clone(), command.into());
        self.background(async move {
            let reply = engine.invoke_raw(&command).await;
            // A native call's replies, one per command, may hold an error each.
            if let Err(e) = reply.and_then(|r| r.extract_error().map_err(LockError::Redis)) {
                tracing::warn!(error = %e, "background {what} failed");
            }
        });
    }
}
