//! One lock's state as lock-core's `info()` reads it, in one shape for every kind: what
//! `status`, `list`, `force-unlock` and `watch` show.

use std::time::Duration;

use lock_core::{LockClient, LockError, LockInfo, Semaphore};
use serde::Serialize;

use crate::kind::Kind;

/// What Redis knows about one lock of one kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LockState {
    /// The lock's name.
    pub(crate) name: String,
    /// Its kind.
    pub(crate) kind: Kind,
    /// Whether anyone holds it (for a read-write lock, the writer or a reader; for a
    /// semaphore, any permit).
    pub(crate) held: bool,
    /// A read-write lock's side: `write`, `read` or `write+read` (a writer that also reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mode: Option<&'static str>,
    /// The owner ids as stored (`<client id>:<holder id>`). Sorted, except that a read-write
    /// lock's writer comes first.
    pub(crate) owners: Vec<String>,
    /// What the client of the first owner says it is, if it set an owner description
    /// (`LockClientBuilder::owner_description`) and is still alive; filled in by [`describe`]
    /// for the rows shown, `null` otherwise.
    pub(crate) owner_description: Option<String>,
    /// Holds: the holder's hold count (re-entries), a reader side's read shares, or a
    /// semaphore's permits held.
    pub(crate) hold_count: u32,
    /// The remaining lease in milliseconds: the holder's; for readers the longest; for a
    /// semaphore the first permit's to run out.
    pub(crate) remaining_ms: Option<u64>,
    /// The holder's fencing token (mutex, fair lock, writer), where Redis keeps it.
    pub(crate) fencing_token: Option<u64>,
    /// An upper bound of the holder's token: the token itself where known, else (a mutex
    /// of the native protocol, which keeps only its owner in its key) the name's fencing
    /// counter, which the holder's token is at most and every earlier holder's below.
    pub(crate) fencing_token_at_most: Option<u64>,
    /// Whether someone waits: a mutex waiter asked to be told of the release, a fair lock's
    /// queue is not empty, a writer waits. None for a semaphore (lock-core does not record
    /// its waiters).
    pub(crate) waiting: Option<bool>,
    /// A fair lock's live waiters in its queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) queued: Option<u32>,
    /// A read-write lock's readers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) readers: Option<u32>,
    /// A semaphore's size as recorded at first use (while any permit is held).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) size: Option<u32>,
}

fn millis(d: Option<Duration>) -> Option<u64> {
    d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl LockState {
    fn empty(name: &str, kind: Kind) -> LockState {
        LockState {
            name: name.to_owned(),
            kind,
            held: false,
            mode: None,
            owners: Vec::new(),
            owner_description: None,
            hold_count: 0,
            remaining_ms: None,
            fencing_token: None,
            fencing_token_at_most: None,
            waiting: None,
            queued: None,
            readers: None,
            size: None,
        }
    }

    /// A lock string's state (mutex, fair lock).
    fn lock_string(name: &str, kind: Kind, info: LockInfo) -> LockState {
        LockState {
            held: info.held,
            owners: info.owner.into_iter().collect(),
            hold_count: info.hold_count,
            remaining_ms: millis(info.ttl),
            fencing_token: info.fencing_token,
            fencing_token_at_most: info.fencing_token_at_most,
            waiting: Some(info.contended),
            ..LockState::empty(name, kind)
        }
    }

    /// The state of the lock `name` of `kind`, through lock-core's `info()`.
    pub(crate) async fn read(
        client: &LockClient,
        name: &str,
        kind: Kind,
    ) -> Result<LockState, LockError> {
        Ok(match kind {
            Kind::Mutex => Self::lock_string(name, kind, client.mutex(name).info().await?),
            Kind::Fair => {
                let info = client.fair_lock(name).info().await?;
                LockState {
                    queued: Some(info.queued),
                    waiting: Some(info.queued > 0),
                    ..Self::lock_string(name, kind, info.lock)
                }
            }
            Kind::Rw => {
                let info = client.read_write_lock(name).info().await?;
                let (writer, reading) = (info.writer, info.readers > 0);
                let mut owners: Vec<String> = writer.owner.into_iter().collect();
                for reader in info.reader_owners {
                    if !owners.contains(&reader) {
                        owners.push(reader);
                    }
                }
                LockState {
                    held: writer.held || reading,
                    mode: match (writer.held, reading) {
                        (true, true) => Some("write+read"),
                        (true, false) => Some("write"),
                        (false, true) => Some("read"),
                        (false, false) => None,
                    },
                    owners,
                    hold_count: if writer.held {
                        writer.hold_count
                    } else {
                        info.read_shares
                    },
                    remaining_ms: millis(writer.ttl.or(info.readers_ttl)),
                    fencing_token: writer.fencing_token,
                    fencing_token_at_most: writer.fencing_token_at_most,
                    waiting: Some(info.writer_waiting || writer.contended),
                    readers: Some(info.readers),
                    ..LockState::empty(name, kind)
                }
            }
            Kind::Semaphore => {
                // The size only fills in `free`, which lockctl does not show: any valid one.
                let info = client.semaphore(name, Semaphore::MAX_SIZE).info().await?;
                LockState {
                    held: info.held > 0,
                    owners: info.holder_owners,
                    hold_count: info.held,
                    remaining_ms: millis(info.next_expiry),
                    size: info.size,
                    ..LockState::empty(name, kind)
                }
            }
        })
    }
}

/// How many `info()` calls are in flight at once when reading many locks.
const CONCURRENT_READS: usize = 16;

/// The states of `locks`, read a few at a time, in no particular order.
pub(crate) async fn read_many(
    client: &LockClient,
    locks: Vec<(String, Kind)>,
) -> Result<Vec<LockState>, LockError> {
    use futures_util::{StreamExt, TryStreamExt};
    futures_util::stream::iter(locks)
        .map(|(name, kind)| async move { LockState::read(client, &name, kind).await })
        .buffer_unordered(CONCURRENT_READS)
        .try_collect()
        .await
}

/// Fills in the owner descriptions of `states`: one lookup per distinct client among their
/// first owners (so at most one per row), a few at a time.
pub(crate) async fn describe(
    client: &LockClient,
    states: &mut [LockState],
) -> Result<(), LockError> {
    use std::collections::HashMap;

    use futures_util::{StreamExt, TryStreamExt};
    // The client id: what comes before the first `:` of an owner id.
    let client_of = |owner: &str| owner.split(':').next().unwrap_or_default().to_owned();
    let mut clients: Vec<String> = states
        .iter()
        .filter_map(|s| s.owners.first().map(|o| client_of(o)))
        .collect();
    clients.sort_unstable();
    clients.dedup();
    let found: HashMap<String, Option<String>> = futures_util::stream::iter(clients)
        .map(|id| async move {
            let description = client.owner_description(&id).await?;
            Ok::<_, LockError>((id, description))
        })
        .buffer_unordered(CONCURRENT_READS)
        .try_collect()
        .await?;
    for state in states {
        state.owner_description = state
            .owners
            .first()
            .and_then(|owner| found.get(&client_of(owner)).cloned().flatten());
    }
    Ok(())
}
