//! `lockctl status NAME` (or `--idempotency-key KEY`, the name an idempotency layer gives
//! it): every kind of lock that exists under NAME, held or free, the record kept next to it
//! (lock-core's `record`), if any, its rate limit's state (lock-core's `rate_limit`), if
//! any, and the last guarded update applied under it (lock-core's `update`), while its record
//! is kept.

use futures_util::future::try_join_all;
use lock_core::LockError;
use lock_core::layout::LockKeys;
use serde::Serialize;

use crate::cli::StatusArgs;
use crate::connect::Target;
use crate::exit::{Code, Failure};
use crate::idempotency::{self, KeyState};
use crate::kind::Kind;
use crate::output::Output;
use crate::rate::{self, RateState};
use crate::state::{LockState, describe};

/// The JSON document of `status`.
#[derive(Debug, Serialize)]
struct Status<'a> {
    name: &'a str,
    prefix: &'a str,
    /// Whether any key of the name exists (a free mutex keeps its key for its fencing
    /// counter's time to live).
    found: bool,
    held: bool,
    locks: &'a [LockState],
    /// What the server can do and the mutex protocol the client speaks there (as lock-core's
    /// `ServerCapabilities` says it).
    server: Server<'a>,
    /// The record kept next to the name (lock-core's `record`: an idempotency layer's stored
    /// response, say), if there is one.
    record: Option<Record>,
    /// The state of the name's rate limit (lock-core's `rate_limit`, `P{name}:rate`), read
    /// with the quota that wrote it; null when it has none (a full burst is free).
    rate_limit: Option<RateState>,
    /// With `--idempotency-key`: the request's state, its stored status code, the record's
    /// time to live and age.
    #[serde(skip_serializing_if = "Option::is_none")]
    idempotency: Option<KeyState>,
    /// The last guarded update applied under the name (lock-core's `update`, recorded in
    /// `P{name}:updated` for its holder's lease and a minute), if its record is kept.
    last_update: Option<LastUpdate>,
}

/// The last guarded update under a name, as `status` reports it.
#[derive(Debug, Serialize)]
struct LastUpdate {
    /// The fencing token of the hold that applied it: its fence.
    token: u64,
    /// Its sequence number.
    seq: u64,
    /// Each operation's value (a counter's new value, 1 for a set, …).
    values: Vec<i64>,
}

impl LastUpdate {
    fn describe(&self) -> String {
        format!(
            "update {} with fencing token {}, values {:?}",
            self.seq, self.token, self.values
        )
    }
}

/// The last guarded update under `name`, if its record is kept (a value lock-core did not
/// write counts as none).
async fn last_update(target: &Target, name: &str) -> Result<Option<LastUpdate>, Failure> {
    match target.client.last_update(name).await {
        Ok(update) => Ok(update.map(|u| LastUpdate {
            token: u.token(),
            seq: u.seq(),
            values: u.values().to_vec(),
        })),
        Err(LockError::UnexpectedReply(_)) => Ok(None),
        Err(e) => Err(Failure::from_lock(e, &target.label)),
    }
}

/// A record next to the name, as `status` reports it.
#[derive(Debug, Serialize)]
struct Record {
    /// The fencing token of the put that wrote it.
    token: u64,
    /// The size of its value.
    bytes: usize,
}

impl Record {
    fn describe(&self) -> String {
        format!(
            "{} bytes, written with fencing token {}",
            self.bytes, self.token
        )
    }
}

/// The record under `name`, if there is one (a value no put wrote counts as none), and its
/// value.
async fn record(target: &Target, name: &str) -> Result<Option<(Record, Vec<u8>)>, Failure> {
    match target.client.records().get(name).await {
        Ok(record) => Ok(record.map(|r| {
            let described = Record {
                token: r.token(),
                bytes: r.value().len(),
            };
            (described, r.into_value())
        })),
        Err(LockError::UnexpectedReply(_)) => Ok(None),
        Err(e) => Err(Failure::from_lock(e, &target.label)),
    }
}

/// The deployment, as `status` reports it.
#[derive(Debug, Serialize)]
struct Server<'a> {
    /// The URLs used, without passwords, and where they came from (`--url`, `LOCKCTL_URL`,
    /// `REDIS_URL` or the default): `redis://10.0.0.5:6379 (from REDIS_URL)`.
    address: &'a str,
    version: &'a str,
    mutex_protocol: String,
    native_compare: bool,
    scripting: bool,
}

/// The kinds of lock (of `only`, or every kind) whose keys exist under `name`.
pub(crate) async fn kinds_present(
    target: &Target,
    name: &str,
    only: Option<Kind>,
) -> Result<Vec<Kind>, Failure> {
    let layout = LockKeys::new(&target.prefix, name).map_err(|e| Failure::Usage(e.to_string()))?;
    let kinds: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| only.is_none_or(|o| o == *k))
        .collect();
    let keys: Vec<(Kind, String)> = kinds
        .iter()
        .flat_map(|k| layout.keys_of(k.lock_kind()).map(move |(_, key)| (*k, key)))
        .collect();
    let names: Vec<String> = keys.iter().map(|(_, key)| key.clone()).collect();
    let exists = target.exists(&names).await?;
    Ok(kinds
        .into_iter()
        .filter(|kind| {
            keys.iter()
                .zip(&exists)
                .any(|((k, _), exists)| k == kind && *exists)
        })
        .collect())
}

/// The states of the kinds of lock present under `name`.
pub(crate) async fn read(
    target: &Target,
    name: &str,
    only: Option<Kind>,
) -> Result<Vec<LockState>, Failure> {
    let kinds = kinds_present(target, name, only).await?;
    try_join_all(
        kinds
            .into_iter()
            .map(|kind| LockState::read(&target.client, name, kind)),
    )
    .await
    .map_err(|e| Failure::from_lock(e, &target.label))
}

/// What is kept next to the name besides its locks, for the table: `("record", "6 bytes,
/// ...")`.
fn extras(
    record: Option<&Record>,
    rate_limit: Option<&RateState>,
    last_update: Option<&LastUpdate>,
) -> Vec<(&'static str, String)> {
    let record = record.map(|r| ("record", r.describe()));
    let rate = rate_limit.map(|r| ("rate limit", r.describe()));
    let update = last_update.map(|u| ("last guarded update", u.describe()));
    record.into_iter().chain(rate).chain(update).collect()
}

/// Writes `status` for people: the locks as a table (what is kept next to them on standard
/// error), or the line saying there is none (and what is kept next to the name).
fn write_table(
    out: &mut Output,
    name: &str,
    target: &Target,
    args: &StatusArgs,
    states: &[LockState],
    extras: &[(&str, String)],
) -> std::io::Result<()> {
    if !states.is_empty() {
        for (what, text) in extras {
            crate::output::notice(&format!("{what}: {text}"));
        }
        return out.table(states);
    }
    let kind = args
        .kind
        .map(|k| format!(" (kind {k})"))
        .unwrap_or_default();
    let kept: String = extras
        .iter()
        .map(|(what, text)| format!("; its {what}: {text}"))
        .collect();
    out.line(&format!(
        "no lock named {:?} under prefix {:?}{kind}{kept}",
        name, target.prefix
    ))
}

/// Runs `status`: 0 when something under NAME is held, 1 when not.
pub(crate) async fn run(
    target: &Target,
    args: &StatusArgs,
    out: &mut Output,
) -> Result<Code, Failure> {
    let name = args.lock_name().map_err(Failure::Usage)?;
    let mut states = read(target, &name, args.kind).await?;
    describe(&target.client, &mut states)
        .await
        .map_err(|e| Failure::from_lock(e, &target.label))?;
    let held = states.iter().any(|s| s.held);
    let stored = record(target, &name).await?;
    let idempotency = match &args.idempotency_key {
        Some(_) => {
            let value = stored.as_ref().map(|(_, value)| value.as_slice());
            Some(idempotency::read(target, &name, held, value, args.idempotency_ttl).await?)
        }
        None => None,
    };
    let record = stored.map(|(record, _)| record);
    let rate_limit = rate::read(target, &name).await?;
    let last_update = last_update(target, &name).await?;
    let caps = target.client.server_capabilities();
    let written = if out.is_json() {
        out.json_line(&Status {
            name: &name,
            prefix: &target.prefix,
            found: !states.is_empty(),
            held,
            locks: &states,
            server: Server {
                address: &target.label,
                version: &caps.server,
                mutex_protocol: caps.mutex_protocol.to_string(),
                native_compare: caps.native_compare,
                scripting: caps.scripting,
            },
            record,
            rate_limit,
            idempotency,
            last_update,
        })
    } else {
        // Which server answered, whatever it says: a wrong URL is seen at once.
        crate::output::notice(&format!("server {}: {caps}", target.label));
        let mut extras = extras(record.as_ref(), rate_limit.as_ref(), last_update.as_ref());
        extras.extend(idempotency.map(|k| ("request", k.describe())));
        write_table(out, &name, target, args, &states, &extras)
    };
    written.map_err(Failure::Output)?;
    Ok(if held { Code::Done } else { Code::NotHeld })
}
