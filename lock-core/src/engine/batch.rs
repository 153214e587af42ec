//! Natural batching of mutex acquisitions and releases, and of rate-limit decisions.
//!
//! At most [`IN_FLIGHT`] calls of these two operations are in flight per client. A request
//! that finds a free place goes out at once as its own call, so a lone request waits for
//! nothing (the uncontended path is unchanged). A request that finds them all taken queues;
//! when an in-flight call finishes, everything queued (up to [`MAX_BATCH`]) goes out as one
//! `batch` call that does each request in order and answers each on its own. The per-call
//! cost (a round trip's share of the socket work, the server's command dispatch and function
//! setup, the server clock) is then paid once per batch instead of once per lock.
//!
//! Batching is on where one server holds every key (standalone, Sentinel), the server runs
//! scripts, and acquisitions need no replica acknowledgement (`WAIT` follows one call, not
//! many). What batches: the scripted mutex's acquisitions and releases, and rate-limit
//! decisions (where the mutex speaks the native protocol, only the decisions).
//!
//! A queued request whose caller goes away still runs: the batch does not know it was
//! abandoned, and the caller's own cancellation handling (`send`'s `InFlight`) undoes an
//! acquisition after its answer, as it does for a request sent alone.

use std::sync::Arc;

use redis::Value;
use tokio::sync::oneshot;

use super::Engine;
use super::batcher::{IN_FLIGHT, MAX_BATCH, Queued, Route};
use crate::error::LockError;
use crate::metrics;
use crate::util::lock;
use crate::wire::Command;
use crate::wire::script::Call;

/// A place among the calls in flight; giving it back sends what queued meanwhile.
struct Place(Arc<Engine>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.place_freed();
    }
}

impl Engine {
    /// Runs `call` and returns its raw reply: batched with other acquisitions and releases
    /// when there is a batcher and calls are already in flight (see the module docs).
    pub(crate) async fn invoke_batched(
        self: &Arc<Self>,
        command: Command,
    ) -> Result<Value, LockError> {
        let (batcher, call) = match (&self.batcher, command) {
            (Some(b), Command::Script(call)) if call.batches() => (b, call),
            (_, command) => return self.invoke_raw(&command).await,
        };
        let answer = {
            let mut state = lock(&batcher.state);
            if state.in_flight < IN_FLIGHT {
                state.in_flight += 1;
                Route::Now(call)
            } else {
                let (reply, answer) = oneshot::channel();
                state.queue.push_back(Queued { call, reply });
                Route::Queued(answer)
            }
        };
        let answer = match answer {
            Route::Queued(answer) => answer,
            Route::Now(call) => {
                let _place = Place(self.clone());
                return self.invoke_script(&call).await;
            }
        };
        answer.await.unwrap_or_else(|_| {
            Err(LockError::UnexpectedReply(
                "a batch ended without answering (the runtime is shutting down)".to_owned(),
            ))
        })
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

    /// Sends `batch` as one call (a single request as itself) and answers each request.
    async fn send_batch(&self, batch: Vec<Queued>) {
        metrics::batch(batch.len());
        if let [_] = batch.as_slice() {
            let Some(Queued { call, reply }) = batch.into_iter().next() else {
                return;
            };
            let _ = reply.send(self.invoke_script(&call).await);
            return;
        }
        let calls: Vec<&Call> = batch.iter().map(|q| &q.call).collect();
        let Some(call) = Call::batch(&calls) else {
            // Only batchable calls are queued; should one not be, each goes alone.
            for Queued { call, reply } in batch {
                let _ = reply.send(self.invoke_script(&call).await);
            }
            return;
        };
        match self
            .invoke_script(&call)
            .await
            .and_then(|v| answers(v, batch.len()))
        {
            Ok(answers) => {
                for (queued, answer) in batch.into_iter().zip(answers) {
                    let _ = queued.reply.send(answer);
                }
            }
            Err(e) => {
                for queued in batch {
                    let _ = queued.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Splits a batch's reply into one answer per request: nil is the error a single call gets
/// for a key holding a value the library did not write.
fn answers(value: Value, expected: usize) -> Result<Vec<Result<Value, LockError>>, LockError> {
    let Value::Array(values) = value else {
        return Err(LockError::UnexpectedReply(format!(
            "a batch answered {value:?}, not an array"
        )));
    };
    if values.len() != expected {
        return Err(LockError::UnexpectedReply(format!(
            "a batch of {expected} answered {} times",
            values.len()
        )));
    }
    Ok(values
        .into_iter()
        .map(|v| match v {
            Value::Nil => Err(LockError::Redis(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "WRONGTYPE",
                "the lock key holds a value lock-core did not write".to_owned(),
            )))),
            v => Ok(v),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_reply_is_split_per_request_and_malformed_ones_are_errors() {
        let reply = Value::Array(vec![Value::Int(5), Value::Nil, Value::Int(1)]);
        let split = answers(reply, 3).unwrap();
        assert!(matches!(split[0], Ok(Value::Int(5))));
        assert!(matches!(split[1], Err(LockError::Redis(_))));
        assert!(matches!(split[2], Ok(Value::Int(1))));
        assert!(matches!(
            answers(Value::Array(vec![Value::Int(1)]), 2),
            Err(LockError::UnexpectedReply(_))
        ));
        assert!(matches!(
            answers(Value::Int(1), 1),
            Err(LockError::UnexpectedReply(_))
        ));
    }
}
