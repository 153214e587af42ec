//! The pub/sub task for one node: a standalone server, or the primary the sentinels name.
//!
//! It keeps one connection (`SUBSCRIBE`), follows the wanted channel set command by command,
//! and routes each message to its channel's waiters. Each new connection subscribes every
//! wanted channel again and wakes every waiter, since messages may have been missed while there
//! was none. Under Sentinel the connection moves when the sentinels name another primary, and
//! a failed connection makes them be asked again.

use futures_util::StreamExt;
use redis::Msg;
use redis::aio::{PubSub, PubSubSink, PubSubStream};
use tokio::sync::watch;

use super::registry::Command;
use super::task::{Next, Task};
use crate::backend::PubSubNode;
use crate::metrics;

/// The task: its node and what it serves.
pub(super) struct Worker {
    task: Task,
    node: PubSubNode,
    /// Changes of the Sentinel primary; None for a server, which never moves.
    changes: Option<watch::Receiver<u64>>,
}

impl Worker {
    pub(super) fn new(task: Task, node: PubSubNode) -> Self {
        let changes = node.changes();
        Self {
            task,
            node,
            changes,
        }
    }

    /// Connects, subscribes every wanted channel and serves the connection; again, after a
    /// backoff, when connecting or subscribing fails, and at once when a connection is lost.
    /// Returns once the client is gone.
    pub(super) async fn run(mut self) {
        loop {
            // A client dropped before its connection opened opens none.
            if self.task.shared().is_none() {
                return;
            }
            // A move from now on is one this connection has not followed.
            if let Some(changes) = self.changes.as_mut() {
                changes.borrow_and_update();
            }
            let Some(pubsub) = self.connect().await else {
                if !self.task.back_off().await {
                    return;
                }
                continue;
            };
            let (mut sink, mut stream) = pubsub.split();
            match self.resubscribe_all(&mut sink).await {
                Next::Go => self.task.connected(),
                Next::Reconnect => {
                    if !self.task.back_off().await {
                        return;
                    }
                    continue;
                }
                Next::Stop => return,
            }
            if self.serve(&mut sink, &mut stream).await == Next::Stop {
                return;
            }
            self.on_lost();
        }
    }

    /// Opens a connection to the node (under Sentinel, the current primary). A failure is
    /// reported, and told to the node, so that a Sentinel asks the sentinels again.
    async fn connect(&mut self) -> Option<PubSub> {
        let (generation, connected) = match self.node.client().await {
            Ok((generation, client)) => {
                let connected = match self.task.bounded(client.get_async_pubsub()).await {
                    Ok(result) => result.map_err(|e| e.to_string()),
                    Err(_) => Err("connect timed out".to_owned()),
                };
                (generation, connected)
            }
            Err(e) => (0, Err(e.to_string())),
        };
        match connected {
            Ok(pubsub) => Some(pubsub),
            Err(reason) => {
                tracing::warn!(%reason, "lock pub/sub connection failed; waiters fall back to lease expiry");
                self.node.failed(generation).await;
                None
            }
        }
    }

    /// Subscribes every wanted channel on a new connection, then wakes every waiter: messages
    /// may have been missed while there was no connection.
    async fn resubscribe_all(&mut self, sink: &mut PubSubSink) -> Next {
        let Some(shared) = self.task.shared() else {
            return Next::Stop;
        };
        let mut next = Next::Go;
        for (channel, state) in shared.all() {
            let result = self.task.bounded(sink.subscribe(&channel)).await;
            if !self.task.record(result, &channel, &state) {
                next = Next::Reconnect;
                break;
            }
        }
        for (_, state) in shared.all() {
            state.wake();
        }
        next
    }

    /// Serves the connection until it is lost, the primary moves, or the client is gone.
    async fn serve(&mut self, sink: &mut PubSubSink, stream: &mut PubSubStream) -> Next {
        loop {
            let next = tokio::select! {
                cmd = self.task.commands.recv() => match cmd {
                    Some(cmd) => self.on_command(sink, cmd).await,
                    None => Next::Stop,
                },
                msg = stream.next() => match msg {
                    Some(msg) => self.on_message(&msg),
                    None => Next::Reconnect,
                },
                () = primary_changed(&mut self.changes) => {
                    tracing::info!("the primary changed; moving the lock pub/sub connection");
                    Next::Reconnect
                }
            };
            if next != Next::Go {
                return next;
            }
        }
    }

    /// Sends a command if it still stands when its turn comes: a channel is subscribed only
    /// while someone waits on it, and unsubscribed only once nobody does.
    async fn on_command(&mut self, sink: &mut PubSubSink, cmd: Command) -> Next {
        let Some(shared) = self.task.shared() else {
            return Next::Stop;
        };
        let sent = match cmd {
            Command::Subscribe(channel) => {
                let Some(state) = shared.wanted(&channel) else {
                    return Next::Go;
                };
                drop(shared);
                let result = self.task.bounded(sink.subscribe(&channel)).await;
                self.task.record(result, &channel, &state)
            }
            Command::Unsubscribe(channel) => {
                if shared.wanted(&channel).is_some() {
                    return Next::Go;
                }
                drop(shared);
                let result = self.task.bounded(sink.unsubscribe(&channel)).await;
                matches!(result, Ok(Ok(())))
            }
        };
        if sent { Next::Go } else { Next::Reconnect }
    }

    /// Wakes the waiters of the message's channel.
    fn on_message(&self, msg: &Msg) -> Next {
        let Some(shared) = self.task.shared() else {
            return Next::Stop;
        };
        if let Some(state) = shared.wanted(msg.get_channel_name()) {
            state.wake();
        }
        Next::Go
    }

    /// The connection is gone: every subscription is pending again, and every waiter looks
    /// again until the next connection is subscribed.
    fn on_lost(&self) {
        metrics::pubsub_reconnect();
        tracing::warn!("lock pub/sub connection lost; reconnecting");
        if let Some(shared) = self.task.shared() {
            for (_, state) in shared.all() {
                state.lost();
            }
        }
    }
}

/// Resolves when the Sentinel primary changes; never without Sentinel.
async fn primary_changed(changes: &mut Option<watch::Receiver<u64>>) {
    match changes {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}
