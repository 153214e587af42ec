//! The state of natural batching (see `batch`): the queue of batchable requests and how
//! many calls are in flight.

use std::collections::VecDeque;
use std::sync::Mutex;

use redis::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::LockError;
use crate::wire::Command;

/// Calls of the batchable operations in flight at once, per client: while one is on the
/// wire (or in the server), the next batch fills up behind it.
pub(super) const IN_FLIGHT: usize = 2;

/// The most requests one batch call carries (the server runs a batch without a break).
pub(super) const MAX_BATCH: usize = 128;

/// The queue of batchable requests and how many calls are in flight.
#[derive(Default)]
pub(super) struct Batcher {
    pub(super) state: Mutex<State>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) in_flight: usize,
    pub(super) queue: VecDeque<Queued>,
}

/// A call's reply, and whether it was sent more than once (by the backend, after a
/// connection failure).
pub(super) type Reply = Result<(Value, bool), LockError>;

/// A queued request: its command, handed back with its reply.
pub(super) struct Queued {
    pub(super) command: Command,
    /// When its caller asked: a batch's deadline counts from its earliest request's.
    pub(super) asked: Instant,
    pub(super) reply: oneshot::Sender<(Command, Reply)>,
}

/// Where a request goes: out now, alone, or into the queue for the next batch.
pub(super) enum Route {
    Now(Command),
    Queued(oneshot::Receiver<(Command, Reply)>),
}
