//! `lockctl`: look at and operate lock-core's distributed locks on Redis.
//!
//! ```text
//! lockctl [--url URL]... [--prefix lock:] [--json] <COMMAND>
//!
//!   status NAME [--kind K]              every kind of lock under NAME, held or free
//!   status --idempotency-key KEY [--scope S] [--idempotency-prefix idem:]
//!                                       the same for an idempotency layer's key
//!   list [PATTERN] [--limit N] [--kind K]
//!                                       held locks, sorted by remaining lease
//!   jobs [PATTERN]                      scheduled jobs: last run (period, instance, outcome,
//!                                       duration) and next period, from their records
//!   force-unlock NAME [--yes] [--kind K] [--fence-ttl 1h]
//!                                       free NAME whoever holds it
//!   watch [PATTERN] [--count N] [--for DURATION] [--source auto|keyspace|channels]
//!                                       acquisitions and releases as they happen
//!   fenced KEY...                       fenced values, each with its fence (token)
//! ```
//!
//! Kinds (`--kind`): `mutex`, `fair`, `rw`, `semaphore`. PATTERN is a Redis glob over lock
//! names (`order:*`), default `*`.
//!
//! # What it shows
//!
//! `status --idempotency-key KEY` looks at the name lock-tower's `IdempotencyLayer` keeps
//! KEY under (`lock_tower::idempotency::record_key`): `idem::KEY` for an unscoped layer,
//! `idem:SCOPE:KEY` with `--scope`, another prefix with `--idempotency-prefix`, hashed when
//! the key has whitespace or braces; the lock is held while the key's first request runs, and
//! the record is its stored response (or its "completed, not replayable" marker). It says the
//! request's state (`in_progress` while the lock is held and nothing is stored, `completed`
//! with the stored status code, `completed_not_replayable`, or `unknown`), the record's time
//! to live and its age (the layer's `ttl`, `--idempotency-ttl`, default 24h, less the time
//! to live left): JSON `idempotency: {state, status, ttl_ms, age_ms}`.
//!
//! For each lock: its kind, name, whether it is held (for a read-write lock: `write`, `read`
//! or `write+read`), the owner ids as lock-core stores them (`<client id>:<holder id>`: the
//! client id is the random id of the holder's `LockClient`), the holds (re-entries; read
//! shares; permits held of the recorded size), the remaining lease, the fencing token (mutex,
//! fair lock, writer), the waiters (whether a mutex waiter asked to be told of the release, a
//! fair lock's queue, a waiting writer; lock-core does not record a semaphore's waiters: `?`)
//! and, last, the first owner's description (`DESCRIPTION`; `-` when its client set none with
//! `LockClientBuilder::owner_description` or is gone). Every state is read through
//! lock-core's `info()`; which kinds exist under a name is read from its keys (`EXISTS`), as
//! lock-core names them (`lock_core::layout`); each description with one `GET` per distinct
//! client among the rows shown (`LockClient::owner_description`).
//!
//! `status` also shows the name's rate limit (lock-core's `rate_limit`, key `P{NAME}:rate`)
//! when it has a state: its burst, its rate (one permit every interval), the permits free now
//! and when a full burst is free again, read with `RateLimit::inspect` (the quota the state
//! was written with; no arithmetic of lockctl's own). A limit nobody used lately has no key (a
//! full burst is free): `status` shows none. `list` and `watch` show locks only: a rate
//! limit is not held by anyone, and its key is rewritten on every permit taken.
//!
//! `status` also shows the last guarded update applied under the name (lock-core's
//! `update`, key `P{NAME}:updated`, read with `LockClient::last_update`) while its record is
//! kept (its holder's lease and a minute): its sequence number, the fencing token of the hold
//! that applied it (the fence its writes carried) and each operation's value.
//!
//! `fenced KEY...` shows values written with lock-core's fenced writes (`fenced::set`, a
//! `claim` and `write_claimed`, the fenced counters `add` and `take`), each with its fence:
//! the token of the holder that wrote or claimed it last (read with `fenced::get`). JSON
//! `{keys: [{key, value, fence}]}`, `value` and `fence` `null` for a key without one.
//!
//! `list` finds locks with `SCAN` (never `KEYS`) on every primary, stops once it has found
//! more than `--limit` held locks (default 1000), shows the first `--limit` found sorted by
//! remaining lease, and says when it left some out (`"truncated": true` in JSON).
//!
//! `force-unlock` frees every kind held under NAME (or `--kind`) through lock-core's
//! `force_unlock()` of that kind, after asking on standard error (`--yes` skips the question;
//! any answer but `y`/`yes`, or the end of the input, exits 5 with nothing changed). It says
//! what it freed: the kind, the owners and fencing token just before. A lock string (mutex,
//! fair lock, writer) keeps its fencing counter, so the next holder's token is greater; read
//! shares and permits are deleted; the waiters are woken on the release channel. The holders
//! are not told until their next renewal, release or extension finds the lock gone.
//!
//! `watch` prints an event per change (`acquired`, `re-entered`, `released-hold`,
//! `released`, `expired`, `waiting`) until `--count` events or `--for` a duration. It uses
//! keyspace notifications when `notify-keyspace-events` has `K` and `$` on every primary,
//! and says which of the other classes it uses are missing (`h` read shares, `z` permits and
//! fair queues, `x` leases that run out, `g` force-unlocked shares and permits): enable them
//! all with `CONFIG SET notify-keyspace-events K$hzxg`. Otherwise, or when `CONFIG GET` is
//! refused (managed services), it listens to the release channels, which carry only the
//! releases lock-core publishes (a mutex release that someone waited for, fair-lock
//! hand-overs, read-write and semaphore releases, force-unlocks), and says so; `--source
//! keyspace` skips the check. On a Cluster the release channels are sharded and cannot be
//! subscribed by pattern: there watch needs keyspace notifications (exit 4 otherwise).
//!
//! # Deployments
//!
//! - One server: `--url redis://host:6379` (`rediss://` for TLS; `user:password@`; `/db`).
//! - Cluster: detected from `INFO cluster` (or `--cluster`, or several `--url`s, which are
//!   always seed nodes). The primaries are read from `CLUSTER SLOTS`; each is scanned and
//!   watched on its own.
//! - Sentinel: `--sentinel-master NAME --url redis://sentinel-1:26379 --url …`; the primary
//!   is the one the sentinels name, reached with `--sentinel-primary-url`'s scheme, user,
//!   password and database (default `redis://primary/`, its host and port replaced). Giving
//!   the primary's own URL instead works as well, as long as it stays the primary. `watch`
//!   does not follow a failover.
//!
//! lock-core finds the primaries for lockctl's own commands as for its lock client
//! (`LockClientBuilder::connect_primaries`), with the same options.
//!
//! TLS: `--tls-ca`, `--tls-cert`/`--tls-key`, `--tls-insecure` (development only), as
//! lock-core's builder options, which lock-core applies to every connection.
//!
//! Where the URL comes from, first found first: `--url`, then the `LOCKCTL_URL` environment
//! variable, then `REDIS_URL` (what the applications themselves often read; both comma
//! separated), then `redis://127.0.0.1:6379`. The prefix may come from `LOCKCTL_PREFIX`.
//! `status` says which server answered (its address, where the URL came from, its name and
//! version and the mutex protocol spoken there: scripted or native) on standard error, and
//! as `server` in JSON; every connection error names the address and where it came from
//! (`cannot connect to redis://10.0.0.5:6379 (from REDIS_URL): connection refused …`).
//!
//! # Output
//!
//! A table by default; `--json` prints one JSON document (`status`: `{name, prefix, found,
//! held, locks, server: {address, version, mutex_protocol, native_compare, scripting},
//! record, rate_limit, last_update}`, `rate_limit` being `null` or `{burst, interval_us,
//! remaining, retry_after_ms, full_after_ms}`, `last_update` `null` or `{token, seq, values}`; `list`: `{prefix, pattern, limit, truncated, locks}`; `force-unlock`:
//! `{name, prefix, aborted, locks: [{kind, owners, fencing_token, hold_count, freed}]}`;
//! `watch`: one object per line, `{at_ms, event, kind, name, owner, hold_count,
//! fencing_token, remaining_ms, …, source}`). A lock in `locks` is `{name, kind, held, mode,
//! owners, owner_description, hold_count, remaining_ms, fencing_token, fencing_token_at_most,
//! waiting, queued,
//! readers, size}` (`owner_description`: the first owner's, or `null`).
//! Notices and questions go to standard error.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done: `status` found NAME held; `list` or `watch` ran; `force-unlock` freed something |
//! | 1 | nothing held: `status` found NAME free or absent; `force-unlock` found nothing to free |
//! | 2 | usage: a bad option, URL, file, name, prefix or pattern |
//! | 3 | connection: refused, unreachable or not answering, a password required and not given, a user or password refused, TLS failed, no primary known to the sentinels (the message names which) |
//! | 4 | failed: Redis refused or failed a command (an ACL permission, a value lock-core did not write), `watch` cannot watch this deployment, or the output could not be written |
//! | 5 | `force-unlock` was not confirmed: nothing was changed |
//!
//! # What it sends
//!
//! lock-core's own commands (it is a lock-core client: it loads the function library), plus
//! `INFO cluster`, `CLUSTER SLOTS`, `SENTINEL GET-MASTER-ADDR-BY-NAME`, `EXISTS`, `SCAN`,
//! `CONFIG GET notify-keyspace-events` and `PSUBSCRIBE`. It never sends `KEYS`, `CONFIG SET`
//! or `DEBUG`.

mod cli;
mod connect;
mod exit;
mod fenced;
mod force;
mod glob;
mod idempotency;
mod jobs;
mod kind;
mod list;
mod notify;
mod output;
mod rate;
mod scan;
mod state;
mod status;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::connect::Target;
use crate::exit::{Code, Failure, is_broken_pipe};
use crate::output::{Output, notice};

/// Checks what can be checked before connecting: names and patterns.
fn check(command: &Command) -> Result<(), Failure> {
    match command {
        Command::Status(status) => {
            let name = status.lock_name().map_err(Failure::Usage)?;
            lock_core::validate_name(&name).map_err(|e| Failure::Usage(e.to_string()))
        }
        Command::ForceUnlock(cli::ForceUnlockArgs { name, .. }) => {
            lock_core::validate_name(name).map_err(|e| Failure::Usage(e.to_string()))
        }
        Command::Fenced(_) => Ok(()),
        Command::List(cli::ListArgs { pattern, .. })
        | Command::Jobs(cli::JobsArgs { pattern })
        | Command::Watch(cli::WatchArgs { pattern, .. }) => {
            glob::check_pattern(pattern).map_err(Failure::Usage)
        }
    }
}

/// Connects and runs the subcommand.
async fn run(cli: Cli) -> Result<Code, Failure> {
    check(&cli.command)?;
    let fence_ttl = match &cli.command {
        Command::ForceUnlock(args) => Some(args.fence_ttl),
        _ => None,
    };
    let target = Target::connect(&cli.connection, &cli.prefix, fence_ttl).await?;
    let mut out = Output::stdout(cli.json);
    match &cli.command {
        Command::Status(args) => status::run(&target, args, &mut out).await,
        Command::List(args) => list::run(&target, args, &mut out).await,
        Command::Jobs(args) => jobs::run(&target, args, &mut out).await,
        Command::ForceUnlock(args) => force::run(&target, args, &mut out).await,
        Command::Watch(args) => watch::run(&target, args, &mut out).await,
        Command::Fenced(args) => fenced::run(&target, args, &mut out).await,
    }
}

fn main() -> ExitCode {
    // Usage errors exit 2 here (clap's code), `--help` and `--version` 0.
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            notice(&format!("cannot start the async runtime: {e}"));
            return ExitCode::from(Code::Refused as u8);
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(Failure::Output(e)) if is_broken_pipe(&e) => Code::Done,
        Err(failure) => {
            notice(&failure.to_string());
            failure.code()
        }
    };
    ExitCode::from(code as u8)
}
