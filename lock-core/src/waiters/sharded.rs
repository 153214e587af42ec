//! The pub/sub task on a Cluster: sharded channels (`SSUBSCRIBE`) through one RESP3 cluster
//! connection.
//!
//! The connection routes each subscription to the node owning the channel's slot and
//! subscribes again after reconnects and slot moves; this task also subscribes again itself,
//! and wakes the channel's waiters, whenever a node connection drops or a node unsubscribes a
//! channel (its slot moved), since messages may have been missed meanwhile. A channel whose
//! subscription fails stays pending and is tried again every 250 ms.

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc;
use tokio::time::{Interval, MissedTickBehavior};

use super::registry::{Command, Sub};
use super::task::{Next, Task};
use crate::metrics;

/// How often channels whose subscription failed are tried again.
const RETRY: Duration = Duration::from_millis(250);

/// Builds the cluster client from `builder` (the seeds'), connects, and serves the connection
/// until the client is gone. A client that cannot be configured leaves the waiters to lease
/// expiry.
pub(super) async fn run(task: Task, builder: RedisResult<ClusterClientBuilder>) {
    let (push_tx, pushes) = mpsc::unbounded_channel::<PushInfo>();
    let client = match builder.and_then(|builder| {
        builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(push_tx)
            .connection_timeout(task.connect_timeout)
            .response_timeout(task.connect_timeout)
            .build()
    }) {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(error = %e, "lock pub/sub cannot be configured; waiters fall back to lease expiry");
            return;
        }
    };
    if let Some(worker) = Worker::connect(&client, task, pushes).await {
        worker.run().await;
    }
}

/// The task: its cluster connection and what it serves.
struct Worker {
    task: Task,
    connection: ClusterConnection,
    /// What the nodes push: messages, unsubscriptions, dropped node connections.
    pushes: mpsc::UnboundedReceiver<PushInfo>,
    /// Channels to (re)subscribe, tried again until Redis confirms.
    pending: Vec<String>,
    retry: Interval,
}

impl Worker {
    /// Connects, backing off between attempts; then every channel wanted meanwhile is pending
    /// (their commands were drained while backing off). None once the client is gone.
    async fn connect(
        client: &ClusterClient,
        mut task: Task,
        pushes: mpsc::UnboundedReceiver<PushInfo>,
    ) -> Option<Self> {
        let connection = loop {
            let reason = match task.bounded(client.get_async_connection()).await {
                Ok(Ok(connection)) => break connection,
                Ok(Err(e)) => e.to_string(),
                Err(_) => "connect timed out".to_owned(),
            };
            tracing::warn!(%reason, "lock pub/sub connection failed; waiters fall back to lease expiry");
            if !task.back_off().await {
                return None;
            }
        };
        let pending = task.shared()?.all().into_iter().map(|(c, _)| c).collect();
        let mut retry = tokio::time::interval(RETRY);
        retry.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Some(Self {
            task,
            connection,
            pushes,
            pending,
            retry,
        })
    }

    /// Serves commands and pushes, subscribing what is pending after each, until the client
    /// is gone.
    async fn run(mut self) {
        loop {
            let next = tokio::select! {
                cmd = self.task.commands.recv() => match cmd {
                    Some(cmd) => self.on_command(cmd).await,
                    None => Next::Stop,
                },
                push = self.pushes.recv() => match push {
                    Some(push) => self.on_message(&push),
                    None => Next::Stop,
                },
                _ = self.retry.tick(), if !self.pending.is_empty() => Next::Go,
            };
            if next == Next::Stop {
                return;
            }
            if !self.pending.is_empty() && self.resubscribe_all().await == Next::Stop {
                return;
            }
        }
    }

    /// A subscription waits in `pending`; an unsubscription is sent if nobody waits on the
    /// channel when its turn comes (the connection stops following it either way).
    async fn on_command(&mut self, cmd: Command) -> Next {
        match cmd {
            Command::Subscribe(channel) => self.pending.push(channel),
            Command::Unsubscribe(channel) => {
                let Some(shared) = self.task.shared() else {
                    return Next::Stop;
                };
                if shared.wanted(&channel).is_none() {
                    drop(shared);
                    let request = self.connection.sunsubscribe(&channel);
                    let _ = self.task.bounded(request).await;
                }
            }
        }
        Next::Go
    }

    /// A message wakes its channel's waiters. A node that gave a channel up (its slot moved
    /// away) or whose connection dropped leaves those channels pending, to be subscribed again
    /// (at the slot's new owner) if someone still waits.
    fn on_message(&mut self, push: &PushInfo) -> Next {
        let Some(shared) = self.task.shared() else {
            return Next::Stop;
        };
        let wanted = || {
            let channel = push.data.first().and_then(channel_name)?;
            Some((shared.wanted(&channel)?, channel))
        };
        match push.kind {
            PushKind::SMessage => {
                if let Some((state, _)) = wanted() {
                    state.wake();
                }
            }
            PushKind::SUnsubscribe => {
                if let Some((state, channel)) = wanted() {
                    state.lost();
                    self.pending.push(channel);
                }
            }
            PushKind::Disconnection => {
                metrics::pubsub_reconnect();
                tracing::warn!("a lock pub/sub node connection dropped; subscribing again");
                for (channel, state) in shared.all() {
                    state.lost();
                    self.pending.push(channel);
                }
            }
            _ => {}
        }
        Next::Go
    }

    /// Subscribes the pending channels someone still waits on; those whose connection failed
    /// stay pending. A channel newly confirmed wakes its waiters: a release may have come
    /// while it was not subscribed.
    async fn resubscribe_all(&mut self) -> Next {
        let Some(shared) = self.task.shared() else {
            return Next::Stop;
        };
        self.pending.sort();
        self.pending.dedup();
        let mut failed = Vec::new();
        for channel in std::mem::take(&mut self.pending) {
            let Some(state) = shared.wanted(&channel) else {
                continue;
            };
            let before = *state.subscribed.borrow();
            let result = self
                .task
                .bounded(self.connection.ssubscribe(&channel))
                .await;
            if !self.task.record(result, &channel, &state) {
                failed.push(channel);
            } else if before != Sub::Confirmed && *state.subscribed.borrow() == Sub::Confirmed {
                state.wake();
            }
        }
        self.pending = failed;
        Next::Go
    }
}

fn channel_name(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}
