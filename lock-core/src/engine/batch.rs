//! Natural batching of mutex acquisitions, re-entries and releases, and of rate-limit
//! decisions.
//!
//! At most [`IN_FLIGHT`] calls of these operations are in flight per client. A request that
//! finds a free place goes out at once as its own call, so a lone request waits for nothing
//! (the uncontended path is unchanged). A request that finds them all taken queues; when an
//! in-flight call finishes, everything queued (up to [`MAX_BATCH`]) goes out together: the
//! scripted requests as one `batch` call that does each in order and answers each on its
//! own, the native ones as one pipeline (their acquisitions in one `MULTI`/`EXEC`, see
//! `Command::batch` in the wire room), each read by its own reader. The per-call cost (a round
//! trip's share of the socket work, the server's command dispatch and function setup, the
//! server clock) is then paid once per batch instead of once per lock.
//!
//! Batching is on where one server holds every key (standalone, Sentinel) and acquisitions
//! need no replica acknowledgement (`WAIT` follows one call, not many). What batches: the
//! mutex's acquisitions and releases in either protocol (and a native mutex's re-entries and
//! releases kept until their minimum hold), and rate-limit decisions.
//!
//! A queued request whose caller goes away still runs: the batch does not know it was
//! abandoned, and the caller's own cancellation handling (`send`'s `InFlight`) undoes an
//! acquisition after its answer, as it does for a request sent alone.

use std::sync::Arc;

use redis::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Engine;
use super::batcher::{IN_FLIGHT, MAX_BATCH, Queued, Reply, Route};
use crate::error::LockError;
use crate::metrics;
use crate::util::lock;
use crate::wire::Command;

/// A place among the calls in flight; giving it back sends what queued meanwhile.
struct Place(Arc<Engine>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.place_freed();
    }
}

/// A call's reply, with the call handed back to read it.
pub(crate) struct Replied {
    pub(crate) command: Command,
    pub(crate) reply: Value,
    /// Whether it was sent more than once (by the backend, after a connection failure).
    pub(crate) resent: bool,
}

impl Engine {
    /// Runs `command`: batched with other batchable calls when there is a batcher and calls
    /// are already in flight (see the module docs).
    pub(crate) async fn invoke_batched(
        self: &Arc<Self>,
        command: Command,
    ) -> Result<Replied, LockError> {
        self.not_closed()?;
        let (command, reply) = self.route(command).await?;
        let (reply, resent) = reply?;
        Ok(Replied {
            command,
            reply,
            resent,
        })
    }

    async fn route(self: &Arc<Self>, command: Command) -> Result<(Command, Reply), LockError> {
        let batcher = match &self.batcher {
            Some(batcher) if command.batches() => batcher,
            _ => {
                let reply = self.invoke_wire(command.wire()).await;
                return Ok((command, reply));
            }
        };
        let route = {
            let mut state = lock(&batcher.state);
            if state.in_flight < IN_FLIGHT {
                state.in_flight += 1;
                Route::Now(command)
            } else {
                let (reply, answer) = oneshot::channel();
                let asked = Instant::now();
                state.queue.push_back(Queued {
                    command,
                    asked,
                    reply,
                });
                Route::Queued(answer)
            }
        };
        match route {
            Route::Now(command) => {
                let _place = Place(self.clone());
                let reply = self.invoke_wire(command.wire()).await;
                Ok((command, reply))
            }
            Route::Queued(answer) => answer.await.map_err(|_| {
                LockError::UnexpectedReply(
                    "a batch ended without answering (the runtime is shutting down)".to_owned(),
                )
            }),
        }
    }

    /// A call in flight finished: the queue, if any, goes out as one batch in its place, and
    /// the task that sends it goes on sending what queued meanwhile until the queue is empty
    /// (one task per run of batches, not one per batch).
    fn place_freed(self: &Arc<Self>) {
        let Some(batch) = self.next_batch(true) else {
            return;
        };
        let engine = self.clone();
        self.background(async move {
            // Given back when the run ends, or if the runtime drops it midway.
            let _place = Place(engine.clone());
            let mut batch = batch;
            loop {
                engine.send_batch(batch).await;
                match engine.next_batch(false) {
                    Some(next) => batch = next,
                    None => return,
                }
            }
        });
    }

    /// Takes the next batch off the queue; with `free_place`, an empty queue gives the place
    /// back.
    fn next_batch(&self, free_place: bool) -> Option<Vec<Queued>> {
        let batcher = self.batcher.as_ref()?;
        let mut state = lock(&batcher.state);
        if state.queue.is_empty() {
            if free_place {
                state.in_flight -= 1;
            }
            return None;
        }
        let n = state.queue.len().min(MAX_BATCH);
        Some(state.queue.drain(..n).collect())
    }

    /// Sends `batch`: its scripted requests as one call, its native ones as one pipeline
    /// (a single request as itself), at the same time, and answers each request.
    async fn send_batch(&self, batch: Vec<Queued>) {
        metrics::batch(batch.len());
        let (scripted, native): (Vec<Queued>, Vec<Queued>) = batch
            .into_iter()
            .partition(|q| matches!(q.command, Command::Script(_)));
        tokio::join!(self.send_together(scripted), self.send_together(native));
    }

    /// Sends `batch` (requests of one dialect) as one call and answers each request.
    async fn send_together(&self, batch: Vec<Queued>) {
        // A single request goes as itself; so would each of a batch with a call that does
        // not batch (only batchable calls are queued).
        let Some(call) = (batch.len() > 1)
            .then(|| Command::batch(batch.iter().map(|q| &q.command)))
            .flatten()
        else {
            for Queued {
                command,
                asked,
                reply,
            } in batch
            {
                let answer = self.invoke_asked(command.wire(), asked).await;
                let _ = reply.send((command, answer));
            }
            return;
        };
        // The batch's deadline counts from when its first request was asked.
        let asked = batch
            .iter()
            .map(|q| q.asked)
            .min()
            .unwrap_or_else(Instant::now);
        let replies: Result<Vec<Reply>, LockError> =
            match self.invoke_asked(call.wire(), asked).await {
                Ok((value, resent)) => call
                    .split(value, batch.len())
                    .map(|each| each.into_iter().map(|r| r.map(|v| (v, resent))).collect()),
                Err(e) => Err(e),
            };
        match replies {
            Ok(replies) => {
                for (queued, answer) in batch.into_iter().zip(replies) {
                    let _ = queued.reply.send((queued.command, answer));
                }
            }
            Err(e) => {
                for queued in batch {
                    let _ = queued.reply.send((queued.command, Err(e.clone())));
                }
            }
        }
    }
}
