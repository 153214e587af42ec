//! Distributed locks on Redis for async Rust.
//!
//! `lock-core` gives services that run as several instances mutual exclusion across
//! processes: a reentrant, owner-checked lock whose lease a watchdog renews while you hold
//! it, waiting through pub/sub instead of polling, a fencing token with every acquisition,
//! and a guard that tells you when the lock is lost.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{LockClient, LockError};
//!
//! # async fn run() -> Result<(), LockError> {
//! let client = LockClient::builder("redis://127.0.0.1:6379")
//!     .key_prefix("shop:lock:")
//!     .watchdog_lease(Duration::from_secs(30))
//!     .build()
//!     .await?;
//!
//! // Wait up to 2 s; the watchdog keeps the lock for as long as the guard lives.
//! let guard = client.lock("order:42").wait(Duration::from_secs(2)).await?;
//! let token = guard.fencing_token(); // write it with your update; refuse older tokens
//! # let _ = token;
//! guard.unlock().await?;
//!
//! // A single attempt with a fixed 10 s lease that is never renewed.
//! if let Some(guard) = client.try_lock("job:nightly").lease(Duration::from_secs(10)).await? {
//!     // ...
//!     drop(guard); // released in the background
//! }
//! # Ok(()) }
//! ```
//!
//! # Guarantees and their limits
//!
//! * **Mutual exclusion** holds on one Redis server while every holder's lease is honoured.
//!   A holder that stalls longer than its lease (a long GC-like pause, a frozen VM) can
//!   overlap with the next holder: no lease-based lock can prevent that. Its guard reports
//!   the loss ([`Guard::lost`], [`Guard::is_held`]), and a resource that checks
//!   [`LockGuard::fencing_token`] refuses its late writes.
//! * **Fencing tokens** strictly increase per lock name. A free lock's counter expires after
//!   [`LockClientBuilder::fence_ttl`] so per-request names do not pile up; a new counter is
//!   seeded from the server clock in microseconds, which stays ahead of every earlier token
//!   as long as the server clock does not step back by more than the time the counter was
//!   gone.
//! * **Retries are safe**: every command carries the hold count the client expects, so a
//!   command repeated after a lost reply is recognised and not applied twice; a release
//!   retried after its reply was lost does not release twice.
//! * **Cancellation**: dropping an acquisition future at any point leaves no lock behind (an
//!   acquisition whose reply never arrived is undone in the background). Dropping a guard
//!   releases it in the background; it never blocks and never panics, and if the runtime is
//!   gone the lease expires the lock.
//! * **Replication**: a failover to a replica that had not received the lock can grant it
//!   twice. [`LockClientBuilder::min_replicas`] makes every acquisition wait (`WAIT`) for
//!   replicas to confirm it, and gives back the ones they do not; it closes that window for
//!   the crash of a primary, not every failover (see there). [`RedLock`] over independent
//!   masters survives the loss of a minority of them (with the caveats written there).
//!
//! # Deployments
//!
//! | deployment | client | notes |
//! |---|---|---|
//! | one server | [`LockClient::builder`] | a bb8 pool (or yours) of multiplexed connections |
//! | Redis Sentinel | [`LockClient::builder_sentinel`] | asks the sentinels for the primary, follows failovers (commands, renewals, pub/sub); [`LockError::NoPrimary`] while none is known |
//! | Redis Cluster (7.0+) | [`LockClient::builder_cluster`] | one slot per lock (hash tag `{name}`), MOVED/ASK followed, sharded pub/sub, renewals grouped by slot; a multi-lock across slots is taken in a stable order with rollback |
//!
//! | this process (tests) | `LockClient::in_memory`, `testing::MemoryServer` (the `testing` feature) | no Redis: locks kept in the process on tokio's clock, with fault hooks (see [Testing your service](#testing-your-service-without-redis)) |
//!
//! The lock logic is the same on all of them: only how a call reaches its node differs.
//!
//! # Production Redis: TLS, ACL users, managed services
//!
//! **TLS.** A `rediss://` URL connects with TLS, through rustls (no OpenSSL), behind the
//! `tls` feature (on by default; without it, `rediss://` and the TLS options are
//! [`LockError::InvalidOption`]). Server certificates are verified against the platform's
//! trust store unless [`tls_root_certificate`](LockClientBuilder::tls_root_certificate) gives
//! the CA; [`tls_client_identity`](LockClientBuilder::tls_client_identity) presents a client
//! certificate (mutual TLS); [`danger_accept_invalid_certificates`](LockClientBuilder::danger_accept_invalid_certificates)
//! (or a `rediss://…/#insecure` URL) turns verification off, for development only. The
//! options apply to every `rediss://` connection of the client: the command pool, the pub/sub
//! connection, every Cluster node. With Sentinel, each URL's scheme decides: `rediss://`
//! sentinel URLs for TLS to the sentinels, a `rediss://` [`sentinel_primary_url`](LockClientBuilder::sentinel_primary_url)
//! for TLS to the primary they name, with the same certificates. A handshake that fails (an
//! untrusted or misnamed server certificate, a client certificate missing or refused) is
//! [`LockError::Tls`], at once, not after the connect timeout. The crate installs rustls's
//! ring crypto provider as the process default when none is installed (an application that
//! wants another installs it before building a client).
//!
//! ```no_run
//! use lock_core::LockClient;
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let client = LockClient::builder("rediss://locks:CHANGE-ME@redis.internal:6380")
//!     .tls_root_certificate(std::fs::read("/etc/redis/tls/ca.crt")?)
//!     .build()
//!     .await?;
//! # drop(client);
//! # Ok(()) }
//! ```
//!
//! **ACL users.** `redis://user:password@host` (or `rediss://`) logs in as an ACL user
//! (`redis://:password@host` with the `default` user's password). A server that requires a
//! password the URL does not give, or refuses the one it gives, is
//! [`LockError::AuthRequired`] from [`build`](LockClientBuilder::build), which names the URL
//! the password goes in (behind Sentinel, the primary's:
//! [`sentinel_primary_url`](LockClientBuilder::sentinel_primary_url)). The least a lock client
//! needs on a data node (a standalone server, a Sentinel primary and its replicas, every
//! Cluster node), with the default key prefix `lock:` (use yours in `~…*` and `&…*`):
//!
//! ```text
//! ACL SETUSER locks reset on >CHANGE-ME ~lock:* &lock:* +ping +info +command|info +fcall +function|load +subscribe +unsubscribe +publish +get +set +del +exists +pexpire +pttl +time +hget +hset +hdel +hgetall +zadd +zcard +zrange +zrangebyscore +zrem +zremrangebyscore +zscore
//! ```
//!
//! The lock code is one Redis function library (`FUNCTION LOAD` at connect, `FCALL` per
//! call); it runs as the user, so the commands it calls are listed too (`get` … `zscore`,
//! `publish`). A user without `+fcall +function|load` but with `+evalsha +script|load` gets
//! the same code as scripts (`SCRIPT LOAD`, `EVALSHA`), a little slower per call. `+info
//! +command|info` let the client find out at connect what the server can do
//! ([`LockClient::server_capabilities`]); on Valkey 9.0 or later, where the mutex then speaks
//! the native protocol ([`MutexProtocol`]), add `+multi +exec +incr +delifeq +mget +msetnx`; on
//! Redis 7.0 or later and Valkey 7.2 to 8.x, where it speaks the hybrid one, add
//! `+multi +exec +incr +eval +mget +msetnx` (without `+command|info`, or without `+exec`,
//! which the client tries at connect, harmlessly, it keeps to the scripts and says so once). Add `+wait` with [`min_replicas`](LockClientBuilder::min_replicas);
//! `+role` on the data nodes of a Sentinel deployment (the client checks the primary the
//! sentinels name); `+spublish +ssubscribe +sunsubscribe +cluster|slots +info` on a Cluster
//! (sharded pub/sub, the slot map, the server's version). Optionally `+config|get`:
//! `build()` reads `maxmemory-policy` once to warn when the server can evict lock keys
//! ([`LockClient::eviction_risk`]); without it the risk is reported as unknown, nothing
//! fails, and the server's `ACL LOG` shows that one refusal per client built.
//!
//! What the permissions used at connect buy (`+info`, `+command|info` and `+config|get` are
//! not needed to connect and lock): `+info` the server's name and version in the capability
//! report (without it: `unknown (INFO refused)`); `+command|info` finding the native protocol
//! on Valkey 9 and the hybrid one on Redis 7 (without it the mutex keeps to the scripts; `WAIT` and sharded pub/sub are
//! then judged by the version `INFO` gives, or assumed present); `+config|get` the eviction
//! check. `+time` is needed: the scripts read the server's clock for a new lock's fencing
//! token, and the native protocol reads it at connect. A refused `INFO`, `COMMAND INFO` or
//! `TIME` at connect is said once, at `info` (what was refused and what it costs); a
//! connection error or a timeout still fails [`build`](LockClientBuilder::build). So the
//! usual application user works too:
//!
//! ```text
//! ACL SETUSER app on >CHANGE-ME ~lock:* &* +@all -@dangerous
//! ```
//!
//! (`INFO`, `CONFIG` and `ROLE` are `@dangerous`: the server is reported as unknown, the
//! eviction risk too, and behind Sentinel the user needs `+role` as well.)
//!
//! On the sentinels, when they require a login (the sentinel URLs carry it):
//!
//! ```text
//! ACL SETUSER locks reset on >CHANGE-ME &+switch-master +sentinel|get-master-addr-by-name +subscribe
//! ```
//!
//! [`fenced`] writes to your resource's keys, not to lock keys: a user that calls it needs
//! `~<resource keys>` with `+evalsha +script|load` (it is a script, loaded on first use), the
//! commands the script calls (`+hget +hset`, already in the line above), and `+hmget` for
//! [`fenced::get`]; its claims and counters also `+hmget +hincrby`.
//!
//! A guarded update ([`update`]) runs in the lock's function library (or script) as the lock
//! client's user, on your keys: that user needs `~<your keys>` (for example `~stock:*`)
//! and the commands the update calls: `+mget` (its one read) and `+incrby +decrby +hincrby`
//! for counters (`get`, `set`, `del`, `hget`, `hset` and `pexpire` are in the line above).
//!
//! A refused command, key or channel is [`LockError::NoPermission`], which names what is
//! missing (Redis 7.0 does not name a command refused inside a script; its `ACL LOG` does).
//! It is not an outage ([`LockError::is_unavailable`] is false): nothing retries it. One
//! exception: a refused `SUBSCRIBE` (or `SSUBSCRIBE`) is logged as an error and the waiters
//! look for the lock every 200 ms instead of being woken.
//!
//! **Managed services and other Redis-compatible servers.** The library sends only the
//! commands above: functions (`FUNCTION LOAD`, `FCALL`) or scripts (`SCRIPT LOAD`,
//! `EVALSHA`), `PING`,
//! (sharded) pub/sub, `WAIT`, `ROLE` and `SENTINEL GET-MASTER-ADDR-BY-NAME`, `CLUSTER SLOTS`,
//! and at connect `INFO server`, `COMMAND INFO`, `TIME` and one `CONFIG GET
//! maxmemory-policy`, whose refusal (a managed service that forbids or renames `CONFIG` or
//! `INFO`) is not an error. It never sends `DEBUG`,
//! `CONFIG SET`, `KEYS`, `FLUSHALL` or `MONITOR`, which managed services often forbid; only
//! the test harness (`tests/`, its own throwaway `redis-server`s) uses `DEBUG` and
//! `CONFIG SET`. A Cluster must run Redis 7.0 or later (sharded
//! pub/sub), checked at connect.
//!
//! # The primitives
//!
//! Every primitive is a handle made by the client, with the same verbs: a take that waits
//! (a [`LockRequest`]: `.wait(d)`, `.lease(d)`, `.await`), a single try (a [`TryLockRequest`]
//! that resolves to `Ok(None)` when the lock is busy), and `info()`. Every guard implements
//! [`Guard`] (`name`, `fencing_token`, `is_held`, `remaining`, `lost`, `lease_state`,
//! `at_risk`, `watch_lease`, `held_lock`, `unlock`). A renewal that fails while the lease still
//! runs makes the lock [at risk](LeaseState::AtRisk) before it is lost, until a later renewal
//! succeeds.
//!
//! | primitive | handle | take | try once | guard | fencing token |
//! |---|---|---|---|---|---|
//! | reentrant mutex | [`LockClient::mutex`] | `lock()` | `try_lock()` | [`LockGuard`] | `u64` |
//! | fair lock (arrival order) | [`LockClient::fair_lock`] | `lock()` | `try_lock()` | [`LockGuard`] | `u64` |
//! | read-write lock | [`LockClient::read_write_lock`] | `read()` / `write()` | `try_read()` / `try_write()` | [`ReadGuard`] / [`WriteGuard`] | writers: `u64` |
//! | semaphore (leased permits) | [`LockClient::semaphore`] | `acquire(n)` | `try_acquire(n)` | [`SemaphoreGuard`] | none |
//! | several mutexes, all or none | [`LockClient::multi_lock`] | `lock()` | `try_lock()` | [`MultiLockGuard`] | one per name: `fencing_tokens()` |
//! | RedLock over independent masters | [`RedLock::new`] | `lock(name)` | `try_lock(name)` | [`RedLockGuard`] | none; each node's: `node_tokens()` |
//!
//! The column is the guard's own `fencing_token()`; through [`Guard::fencing_token`] and
//! [`HeldLock::fencing_token`] every kind answers an `Option<u64>`, `Some` (the same number)
//! exactly where the column says `u64`.
//!
//! [`LockClient::lock`] and [`LockClient::try_lock`] are shortcuts for the mutex.
//!
//! # Patterns
//!
//! ## A locked block in one call
//!
//! [`LockRequest::run`] takes the lock, runs a body with the [`HeldLock`] (its fencing token,
//! `is_held()`, `lost()`), drops the body at its next `.await` if the lock is lost (returning
//! [`LockError::Lost`]) and releases the lock when the body returns; [`TryLockRequest::run`]
//! makes one attempt and returns `Ok(None)` when the lock is busy.
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
//! let report = client
//!     .lock("report:daily")
//!     .run(|held| async move { format!("written with token {:?}", held.fencing_token()) })
//!     .await?;
//! # drop(report);
//! # Ok(()) }
//! ```
//!
//! ## Once per period: the noon lottery
//!
//! Every instance's timer fires at noon and exactly one must draw the winners. Name the lock
//! after the period ([`Period`]), make one attempt, and keep the lock taken for most of the
//! period with [`hold_at_least`](TryLockRequest::hold_at_least): without it, an instance whose
//! timer fires a moment after another one *finished* finds the lock free and draws again.
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::Period;
//!
//! let period = Period::every(Duration::from_secs(24 * 3600))?;
//! let drawn = client
//!     .try_lock(period.name("lottery")) // "lottery:2026-11-24T00:00:00Z"
//!     .lease(Duration::from_secs(3600))
//!     .hold_at_least(Duration::from_secs(3600))
//!     .run(|held| async move {
//!         // ... draw 10 winners, store them with held.fencing_token() ...
//!     })
//!     .await?;
//! if drawn.is_none() {
//!     // another instance drew this period's winners (or is drawing them)
//! }
//! # Ok(()) }
//! ```
//!
//! The macro says the same with `on_busy = "skip", hold_at_least = "1h"`. Instances must
//! agree on the period: see [`Period`] on clocks.
//!
//! ## Leader election
//!
//! [`LockClient::leader`] campaigns for a name: [`Leader::campaign`] waits until this instance
//! leads and returns its [`Term`] (the fencing token is the term number; the watchdog keeps
//! it; `is_leader()` before each unit of work; `deposed()` resolves when it is lost);
//! [`Leader::events`] is the same as a stream of [`LeaderEvent`]s that campaigns again after
//! each loss.
//!
//! ## Fencing at the resource
//!
//! A fencing token protects what checks it. The resource keeps the highest token it accepted
//! and refuses writes that carry a lower one. In Redis, [`fenced::set`] does it in one script
//! for a value written whole. A read-modify-write (a stock, a counter) needs more, since the
//! stale holder's write may land before the newer holder's: in the lock's own Redis a guarded
//! update ([`update`]: `guard.update().take(stock, 1, 0).send()`, applied only while the lock
//! is still this hold's), elsewhere [`fenced::claim`] then [`fenced::write_claimed`], or the
//! fenced counters [`fenced::add`] and [`fenced::take`]. In SQL, keep a `fence BIGINT NOT NULL DEFAULT 0` column (tokens are about 1.8·10^15:
//! they fit a signed 64-bit integer, and Lua numbers hold them exactly):
//!
//! ```sql
//! -- One write per hold: accepted unless a newer holder wrote (an equal token is the same
//! -- holder writing again). 0 rows updated = refused: this holder lost the lock.
//! UPDATE reports SET body = $1, fence = $2 WHERE id = $3 AND fence <= $2;
//!
//! -- Read-modify-write (read the stock, write stock - 1): claim first, then write only while
//! -- the claim stands, so a stale holder that read before a newer one cannot write after it.
//! UPDATE sales SET fence = $1 WHERE id = $2 AND fence < $1;      -- claim: 0 rows = stale
//! SELECT stock FROM sales WHERE id = $2;
//! UPDATE sales SET stock = $3 WHERE id = $2 AND fence = $1;      -- 0 rows = a newer claim
//! ```
//!
//! Both work the same on PostgreSQL and SQLite (`$1` placeholders, or `?1` in SQLite). The
//! claim uses `<`, not `<=`, so that two holders can never both claim with one token; the
//! single write uses `<=` so a holder may write twice. The flash-sale example
//! (`examples/flash-sale`) uses the claim-then-write form for its stock.
//!
//! ## A lock is not idempotency
//!
//! A lock stops two callers from running *at the same time*. It does not stop a retried
//! request that arrives after the first one finished (a payment callback replayed by the
//! provider, a double click after a slow response): that one takes the free lock and runs
//! again. Under the lock, check a durable record of what was already done, and write the
//! result and the record together, fenced:
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient, payment_id: &str) -> Result<(), lock_core::LockError> {
//! # async fn already_applied(_: &str) -> bool { false }
//! # async fn apply_and_record(_: &str, _: u64) {}
//! let guard = client.lock(format!("payment:{payment_id}")).await?;
//! if !already_applied(payment_id).await {
//!     // one transaction: the effect, the "applied" record, and the fence check
//!     apply_and_record(payment_id, guard.fencing_token()).await;
//! }
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! [`record`] keeps such a record in Redis next to the lock, fenced by its token; lock-tower's
//! `IdempotencyLayer` does all of this for HTTP requests with an `Idempotency-Key`.
//!
//! # Testing your service without Redis
//!
//! With the `testing` feature (off by default; turn it on in your `[dev-dependencies]`:
//! `lock-core = { version = "0.1", features = ["testing"] }`), `LockClient::in_memory`
//! gives a client whose locks live in the process, with the same API for every primitive, so
//! code under `#[distributed_lock]` or lock-tower's layer runs unchanged in a unit test. Its
//! time is tokio's: under a paused clock (`#[tokio::test(start_paused = true)]`, tokio's
//! `test-util` feature) leases run out and the watchdog renews without the test sleeping. A
//! `testing::MemoryServer` shares one server between clients (two instances contending) and
//! has the fault hooks: cut a client off, take the server away, delay replies, evict a lock.
//! It runs the same Lua scripts as Redis, in an embedded Lua 5.1. The `testing` module's
//! docs say what it does not honour.
//!
//! ```
//! # #[cfg(feature = "testing")]
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::testing::MemoryServer;
//!
//! let server = MemoryServer::new();
//! let client = server.client().await?;
//! let guard = client.lock("report:daily").await?;
//! server.set_reachable(false); // renewals fail from now on
//! tokio::time::sleep(Duration::from_secs(31)).await; // past the 30 s lease, at once
//! assert!(!guard.is_held());
//! guard.lost().await;
//! # Ok(()) }
//! # #[cfg(not(feature = "testing"))]
//! # fn main() {}
//! ```
//!
//! # Defaults and limits
//!
//! | setting | default | limits |
//! |---|---|---|
//! | [`key_prefix`](LockClientBuilder::key_prefix) | `"lock:"` | at most 128 bytes, no braces, whitespace or control characters |
//! | lock names | | 1 to 512 bytes, no braces, whitespace or control characters ([`validate_name`]) |
//! | [`watchdog_lease`](LockClientBuilder::watchdog_lease) | 30 s, renewed every 10 s | 30 ms to 30 days |
//! | a request's fixed [`lease`](LockRequest::lease) | none: the watchdog's | 10 ms to 30 days |
//! | a request's [`wait`](LockRequest::wait) | as long as it takes | zero makes one attempt |
//! | [`fence_ttl`](LockClientBuilder::fence_ttl) | 1 h | 1 s to 30 days |
//! | [`pool_size`](LockClientBuilder::pool_size) | 16 | 1 to 1024 |
//! | [`connect_timeout`](LockClientBuilder::connect_timeout) | 2 s | 1 ms to 1 h |
//! | [`response_timeout`](LockClientBuilder::response_timeout) | 1 s | 1 ms to 1 h |
//! | [`min_replicas`](LockClientBuilder::min_replicas) | none | 1 to 16 replicas, 1 ms to 1 h |
//! | [`tls_root_certificate`](LockClientBuilder::tls_root_certificate) | the platform's trust store | PEM; `rediss://` URLs only |
//! | [`tls_client_identity`](LockClientBuilder::tls_client_identity) | none | PEM certificate and key |
//! | [`danger_accept_invalid_certificates`](LockClientBuilder::danger_accept_invalid_certificates) | off | development only |
//! | [`FairLock::waiter_timeout`] | 5 s | 100 ms to 1 h |
//! | semaphore size | | 1 to [`Semaphore::MAX_SIZE`] (100,000); 1 to [`Semaphore::MAX_ACQUIRE`] (1,000) permits per acquisition |
//! | multi-lock names | | 1 to [`MultiLock::MAX_NAMES`] (64), distinct |
//!
//! **One rule for bad input:** nothing panics. Constructors and builders never fail (one
//! exception: [`RedLock::new`], which is `RedLock::builder(clients).build()` and checks at
//! once, as every `build()` does); a bad
//! name, option or size is reported as a typed error ([`LockError::InvalidName`],
//! [`LockError::InvalidOption`]) by the first call that could send something (`build()`, a
//! request's `.await`, `info()`), before anything is sent. The tower layer and the macro
//! follow the same rule (the macro checks literals at compile time).
//!
//! # Operating it: metrics, tracing, eviction
//!
//! **Metrics.** With the `metrics` cargo feature (off by default; off, the calls compile to
//! nothing), lock-core records acquisitions by kind and outcome, their durations, waits, hold
//! times, the holds currently held and those at risk, losses by reason, renewals and batch
//! sizes through the [`metrics`](https://docs.rs/metrics) 0.24 facade, into whatever recorder
//! the application installs (a Prometheus exporter, say). The names, types, labels and meanings are in the
//! [`metrics`] module; [`LockClientBuilder::metric_label`] adds a bounded `family` label.
//! For a recorder that needs bucket bounds (Prometheus renders histograms without them as
//! summaries), [`metrics::HISTOGRAMS`] gives each histogram's.
//!
//! **Tracing.** Every acquisition runs in a `debug` span `lock` (`kind`, `name`). Events:
//! `warn` once per held lock that is lost (`lock`, `kind`, `fencing_token`, `reason`
//! (`deleted`, `expired`, `unreachable`: see [`metrics`]), `held_for`, `why`), once per held
//! lock whose renewal failed while its lease still runs (`lock renewal failed; the lock is at
//! risk…`: `lock`, `kind`, `remaining`, `error`; an `info` when a later renewal succeeds), and
//! for renewal calls that fail, a pub/sub connection that drops, a release that cannot be sent; `warn` once at
//! build when the server can evict lock keys; `debug` for every acquisition (`lock acquired`:
//! `lock`, `kind`, `token`, `count`) and full release (`lock released`: `held_for`). Nothing
//! above `debug` on the uncontended path. A setup that shows the warnings of every crate and
//! lock-core's acquisitions and releases:
//!
//! ```no_run
//! // tracing-subscriber with its `env-filter` feature; RUST_LOG overrides the default.
//! tracing_subscriber::fmt()
//!     .with_env_filter(
//!         tracing_subscriber::EnvFilter::try_from_default_env()
//!             .unwrap_or_else(|_| "info,lock_core=debug".into()),
//!     )
//!     .init();
//! ```
//!
//! **Eviction.** `build()` reads `maxmemory-policy` once ([`LockClient::eviction_risk`],
//! [`EvictionRisk`]): any policy but `noeviction` can evict lock keys, silently losing locks
//! under memory pressure; it is logged as a `warn`, never an error.
//!
//! # Types from other crates
//!
//! [`LockError`] carries [`redis::RedisError`]s and [`LockClientBuilder::pool`] takes a
//! [`bb8::Pool`] of [`bb8_redis::RedisConnectionManager`]: those crates are re-exported
//! ([`redis`], [`bb8`], [`bb8_redis`]) so you can name their types without guessing matching
//! versions.
//!
//! # Redis data model
//!
//! Every key of a lock named `N` starts with `P{N}` (`P` the client's key prefix), so a Redis
//! Cluster keeps them in one slot; each primitive's docs list its keys. The scripts live in
//! `src/wire/scripts/*.lua`, behind one prelude that defines the lock-string format.
//!
//! For operators and tools such as `lockctl`: [`layout`] names every key and channel of a
//! lock and reads keys and channels back, and [`LockClientBuilder::connect_primaries`] gives
//! plain connections to each primary of a deployment, TLS included, without building a client.

#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` (Cargo.toml): items of a feature say which.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
// A lock guard kept alive by a `match` that then locks the same mutex deadlocks: it happened.
#![warn(clippy::significant_drop_in_scrutinee)]

mod backend;
mod builder;
mod capabilities;
mod client;
mod connect_retry;
mod connection;
mod description;
mod driver;
mod engine;
mod error;
mod eviction;
mod fair;
mod fence;
pub mod fenced;
mod fenced_update;
mod global;
mod guard;
mod held_lock;
mod hold;
mod info;
mod kind;
mod last_update;
pub mod layout;
mod leader;
mod lease;
mod local_rate;
mod lock_string;
pub mod metrics;
mod multi;
mod mutex;
mod name;
mod named;
mod period;
mod primaries;
pub mod rate_limit;
pub mod record;
mod redlock;
mod request;
mod run;
mod rwlock;
pub mod scheduled;
mod scope;
mod semaphore;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod throttle;
pub mod update;
mod url;
mod util;
mod waiters;
mod watchdog;
mod wire;

pub use builder::LockClientBuilder;
pub use capabilities::{MutexProtocol, ServerCapabilities};
pub use client::LockClient;
pub use connection::Connection;
pub use error::{ConnectError, LockError};
pub use eviction::EvictionRisk;
pub use fair::FairLock;
pub use global::{global_client, install_global};
pub use guard::Guard;
pub use held_lock::{AtRisk, HeldLock, LeaseWatch, Lost};
pub use info::{FairLockInfo, LockInfo, ReadWriteLockInfo, SemaphoreInfo};
pub use last_update::LastUpdate;
pub use leader::{Leader, LeaderEvent, Term};
pub use lease::LeaseState;
pub use local_rate::LocalRateLimits;
pub use multi::{MultiLock, MultiLockGuard};
pub use mutex::{LockGuard, Mutex};
pub use name::{validate_name, validate_prefix};
pub use period::Period;
pub use primaries::{KeyedConnection, Primaries, Primary};
pub use rate_limit::{Quota, RateDecision, RateLimit};
pub use redlock::{RedLock, RedLockBuilder, RedLockGuard};
pub use request::{LockRequest, TryLockRequest};
pub use rwlock::{ReadGuard, ReadWriteLock, WriteGuard};
pub use scheduled::{JobHandle, Missed, RunContext, Schedule};
pub use scope::{ReentrantScope, current_lock, reentrant};
pub use semaphore::{Semaphore, SemaphoreGuard};
pub use update::{Update, Updated};
pub use url::validate_url;

pub use bb8;
pub use bb8_redis;
pub use redis;

#[cfg(feature = "macros")]
pub use lock_macros::distributed_lock;

/// Not public API: what `#[distributed_lock]` expands to. May change in any release.
#[doc(hidden)]
#[path = "__private.rs"]
pub mod __private;

/// The crate README's example, compiled as a doc test. (The workspace README's are compiled
/// by the workspace's test crate: a published crate holds only its own files.)
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
