//! The state of natural batching (see `batch`): the queue of batchable requests and how
//! many calls are in flight.

use std::collections::VecDeque;
use std::sync::Mutex;

use redis::Value;
use tokio::sync::oneshot;

use crate::error::LockError;
use crate::wire::script::Call;

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

pub(super) struct Queued {
    pub(super) call: Call,
    pub(super) reply: oneshot::Sender<Result<Value, LockError>>,
}

/// Where a request goes: out now, alone, or into the queue for the next batch.
pub(super) enum Route {
    Now(Call),
    Queued(oneshot::Receiver<Result<Value, LockError>>),
}
