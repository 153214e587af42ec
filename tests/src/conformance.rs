//! One conformance suite: lock-core's behavioural claims written once ([`claims`]), each an
//! async function of a [`Backend`] (a way to make clients, and what can be done to the
//! backend from outside), run by `tests/tests/conformance.rs` against every backend of the
//! run ([`Kind::ALL`]).
//!
//! A claim returns [`Outcome::Held`] with what it showed, or [`Outcome::Skipped`] with why
//! the backend cannot honour it, or panics with what broke. A backend can also decline a
//! claim up front ([`Backend::skipping`]). Every skip is printed on standard error, where the
//! test harness does not capture it: nothing is skipped silently.
//!
//! The backends:
//!
//! | kind | what | on Redis 7.0 | on Valkey 9 |
//! |---|---|---|---|
//! | [`Kind::TestServer`] | the test server (`RedisServer`), the default protocol | scripted | native |
//! | [`Kind::TestServerScripted`] | the same, `MutexProtocol::Scripted` forced | skipped: the same as the default | scripted |
//! | [`Kind::InMemory`] | lock-core without Redis (`lock_core::testing::MemoryServer`) | native | native |
//!
//! Adding a backend is one more [`Kind`]: its [`Kind::start`] makes a [`Backend`] from a
//! function that builds a client ([`Backend::new`]) and names the claims it cannot honour.

pub mod claims;

use std::fmt;
use std::future::Future;
use std::io::Write as _;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockClient, MutexProtocol};

use crate::server::RedisServer;

/// A boxed future, as a backend's client factory returns it.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a claim asks of the clients it makes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// The watchdog lease (the client's default when None).
    pub watchdog_lease: Option<Duration>,
}

impl Options {
    /// A client whose watchdog lease is `lease`.
    pub fn lease(lease: Duration) -> Self {
        Options {
            watchdog_lease: Some(lease),
        }
    }
}

type Factory = dyn Fn(Options) -> BoxFuture<LockClient> + Send + Sync;

struct Inner {
    name: String,
    make: Box<Factory>,
    skips: Vec<(Claim, String)>,
    server: Option<RedisServer>,
}

/// One backend of a run: clients on it, the claims it declines, and (for the test server)
/// the server itself, to look at and to keep a fenced resource on. Cheap to clone.
#[derive(Clone)]
pub struct Backend {
    inner: Arc<Inner>,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// A backend named `name` whose clients `make` builds (and panics if it cannot).
    pub fn new(
        name: impl Into<String>,
        make: impl Fn(Options) -> BoxFuture<LockClient> + Send + Sync + 'static,
    ) -> Self {
        Backend {
            inner: Arc::new(Inner {
                name: name.into(),
                make: Box::new(make),
                skips: Vec::new(),
                server: None,
            }),
        }
    }

    /// Declines `claim`, saying why.
    pub fn skipping(mut self, claim: Claim, reason: impl Into<String>) -> Self {
        self.inner_mut().skips.push((claim, reason.into()));
        self
    }

    /// Keeps the Redis server the backend runs on: looked at after every claim (nothing left
    /// behind), and the place a claim may keep a fenced resource.
    pub fn on_server(mut self, server: RedisServer) -> Self {
        self.inner_mut().server = Some(server);
        self
    }

    fn inner_mut(&mut self) -> &mut Inner {
        Arc::get_mut(&mut self.inner).expect("a backend is configured before it is shared")
    }

    /// Its name, as the suite prints it.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// A new client with the default options.
    pub async fn client(&self) -> LockClient {
        self.client_with(Options::default()).await
    }

    /// A new client with `options`.
    pub async fn client_with(&self, options: Options) -> LockClient {
        (self.inner.make)(options).await
    }

    /// The Redis server it runs on, if it runs on one.
    pub fn server(&self) -> Option<&RedisServer> {
        self.inner.server.as_ref()
    }

    /// Why it declines `claim`, if it does.
    pub fn skip_reason(&self, claim: Claim) -> Option<&str> {
        self.inner
            .skips
            .iter()
            .find(|(c, _)| *c == claim)
            .map(|(_, reason)| reason.as_str())
    }

    /// Panics if the backend kept anything after a claim: on a Redis server, a held lock, a
    /// subscribed channel, or a lock key without a time to live.
    pub async fn assert_clean(&self) {
        if let Some(server) = self.server() {
            crate::fixtures::assert_clean(server).await;
        }
    }
}

/// The backends a run knows, in the order the suite runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The test server (`REDIS_SERVER_BIN`, Redis 7.0 by default), the protocol it offers.
    TestServer,
    /// The test server with `MutexProtocol::Scripted` forced.
    TestServerScripted,
    /// lock-core without Redis.
    InMemory,
}

impl Kind {
    /// Every backend, each run by every claim.
    pub const ALL: [Kind; 3] = [Kind::TestServer, Kind::TestServerScripted, Kind::InMemory];

    /// How the suite names it before it runs.
    pub fn label(self) -> &'static str {
        match self {
            Kind::TestServer => "test server",
            Kind::TestServerScripted => "test server, scripted protocol forced",
            Kind::InMemory => "in-memory",
        }
    }

    /// Starts the backend, or says why it cannot run here.
    pub async fn start(self) -> Result<Backend, String> {
        match self {
            Kind::TestServer => Ok(test_server(None).await.0),
            Kind::TestServerScripted => {
                let (backend, server) = test_server(Some(MutexProtocol::Scripted)).await;
                match server {
                    Some(server) => Err(format!(
                        "{server} offers the scripted protocol only: the default test-server \
                         backend already speaks it"
                    )),
                    None => Ok(backend),
                }
            }
            Kind::InMemory => Ok(in_memory()),
        }
    }
}

/// lock-core's in-memory backend (`lock_core::testing`): every client of the backend on one
/// `MemoryServer`, in this process, on tokio's clock.
fn in_memory() -> Backend {
    let server = lock_core::testing::MemoryServer::new();
    // Replies a little late on tokio's clock, so an acquisition can be cut in flight
    // (`Cancellation`); everything else is as prompt as a local server.
    server.delay_replies(Duration::from_millis(1));
    Backend::new(
        "in-memory (lock_core::testing, native protocol)",
        move |options: Options| {
            let server = server.clone();
            Box::pin(async move {
                let mut builder = server.builder();
                if let Some(lease) = options.watchdog_lease {
                    builder = builder.watchdog_lease(lease);
                }
                builder
                    .build()
                    .await
                    .expect("a client of the in-memory server")
            }) as BoxFuture<LockClient>
        },
    )
}

/// A test server and a backend on it speaking `protocol` (the server's own when None), and
/// the server's name if a default client speaks the scripted protocol there.
async fn test_server(protocol: Option<MutexProtocol>) -> (Backend, Option<String>) {
    let server = RedisServer::start();
    let url = server.url();
    let probe = LockClient::connect(&url)
        .await
        .expect("a client on the test server");
    let caps = probe.server_capabilities().clone();
    drop(probe);
    let speaks = protocol.unwrap_or(caps.mutex_protocol);
    let forced = if protocol.is_some() { ", forced" } else { "" };
    let name = format!("test server ({}, {speaks} protocol{forced})", caps.server);
    let backend = Backend::new(name, move |options: Options| {
        let url = url.clone();
        Box::pin(async move {
            let mut builder = LockClient::builder(&url)
                .connect_timeout(Duration::from_secs(2))
                .response_timeout(Duration::from_secs(2));
            if let Some(lease) = options.watchdog_lease {
                builder = builder.watchdog_lease(lease);
            }
            if let Some(protocol) = protocol {
                builder = builder.mutex_protocol(protocol);
            }
            builder.build().await.expect("a client on the test server")
        }) as BoxFuture<LockClient>
    })
    .on_server(server);
    let scripted_only = caps.mutex_protocol == MutexProtocol::Scripted;
    (backend, scripted_only.then_some(caps.server))
}

/// The claims, one test each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Claim {
    /// A lock is granted once; busy for everyone else (the same client too, outside a
    /// reentrant scope); names are exact; free again at once after a release.
    Basics,
    /// A wait that runs out is a typed timeout, a try is `None`, for every primitive.
    Timeouts,
    /// Bad names, sizes and durations are typed errors, and nothing is taken.
    BadInput,
    /// Clients × tasks on two names: one holder at a time (read-sleep-write counter, hold
    /// intervals), and the history linearizable (lease mutex, fenced register).
    Exclusion,
    /// Fencing tokens strictly increase across release, expiry and force-unlock.
    Tokens,
    /// Re-entry inside `lock_core::reentrant` and by `reenter()` counts holds; the lock is
    /// free when the count returns to zero.
    Reentry,
    /// The watchdog keeps a lock past several leases.
    Renewal,
    /// A lock deleted by another client (force-unlock) fires `lost()`, and the old guard's
    /// release leaves the new holder alone.
    LostOnDeletion,
    /// A fixed lease runs out: `lost()` fires, another client gets the lock, and the stale
    /// release leaves it alone.
    LostOnExpiry,
    /// A holder whose process went away (its runtime gone, never released) loses the lock
    /// at its lease.
    Abandonment,
    /// A cancelled acquisition, waiting or in flight, leaves nothing held.
    Cancellation,
    /// A fair lock is granted in arrival order.
    FairOrder,
    /// Readers share, a writer excludes, a waiting writer holds new readers back.
    ReadWrite,
    /// A semaphore's permits are counted, never exceeded, and every user agrees on its size.
    Semaphore,
    /// A multi-lock takes all its names or none.
    MultiLock,
    /// `hold_at_least` keeps a released lock taken until its minimum hold.
    HoldAtLeast,
    /// One leader at a time; a later term's number is greater; a deposed leader is told.
    Leader,
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What a claim found on one backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It holds; what was shown.
    Held(String),
    /// The backend cannot honour it; why.
    Skipped(String),
}

/// How long one claim may take on one backend.
const CLAIM_LIMIT: Duration = Duration::from_secs(120);

/// Writes `line` on standard error, past the test harness's capture.
fn loud(line: &str) {
    // Written to the stream itself: the test harness does not capture it.
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Runs `claim` (the function `run`) against every backend of [`Kind::ALL`]: prints what it
/// showed on each, says loudly which backends skipped it and why, checks that each backend
/// kept nothing afterwards, and panics — naming the claim and the backend — if it failed on
/// one, or if it ran on none.
pub async fn run_everywhere<F, Fut>(claim: Claim, run: F)
where
    F: Fn(Backend) -> Fut,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let _hang = crate::fixtures::abort_if_hung("a conformance claim", CLAIM_LIMIT * 4);
    let mut held_on = Vec::new();
    for kind in Kind::ALL {
        let backend = match kind.start().await {
            Ok(backend) => backend,
            Err(reason) => {
                loud(&format!(
                    "SKIPPED {claim} on the {} backend: {reason}",
                    kind.label()
                ));
                continue;
            }
        };
        if let Some(reason) = backend.skip_reason(claim) {
            loud(&format!("SKIPPED {claim} on {}: {reason}", backend.name()));
            continue;
        }
        let task = tokio::spawn(run(backend.clone()));
        let outcome = match tokio::time::timeout(CLAIM_LIMIT, task).await {
            Err(_) => panic!(
                "{claim} on {}: did not finish within {CLAIM_LIMIT:?}",
                backend.name()
            ),
            Ok(Err(e)) if e.is_panic() => panic!(
                "{claim} FAILED on {}: {}",
                backend.name(),
                panic_message(&*e.into_panic())
            ),
            Ok(Err(e)) => panic!("{claim} on {}: {e}", backend.name()),
            Ok(Ok(outcome)) => outcome,
        };
        match outcome {
            Outcome::Held(shown) => {
                backend.assert_clean().await;
                let line = format!("HOLDS {claim} on {}: {shown}", backend.name());
                // Captured by the harness: shown with --nocapture or on a failure.
                #[allow(clippy::print_stdout)]
                {
                    println!("{line}");
                }
                held_on.push(backend.name().to_owned());
            }
            Outcome::Skipped(reason) => {
                loud(&format!("SKIPPED {claim} on {}: {reason}", backend.name()));
            }
        }
    }
    assert!(
        !held_on.is_empty(),
        "{claim} ran on no backend: every one skipped it"
    );
}
