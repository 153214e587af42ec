//! The pub/sub task for an in-memory server: this client's subscriber on the server's bus.
//!
//! It behaves as the task for one node does (`pubsub`): it follows the wanted channel set
//! command by command, confirms each subscription, and routes each message to its channel's
//! waiters. While the server is unreachable to this client (a test's fault) there is no
//! connection: every subscription is pending and every waiter looks again on its own; when it
//! is reachable again, every wanted channel is subscribed again and every waiter is woken,
//! since messages may have been missed.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::registry::{Command, Sub};
use super::task::{Next, Task};
use crate::backend::memory::{Changes, Link, Subscription};
use crate::metrics;

/// Serves `link`'s subscriber until the client is gone.
pub(super) async fn run(mut task: Task, link: Arc<Link>) {
    let (sub, mut messages) = link.subscriber();
    let mut changes = link.changes();
    loop {
        while !link.reachable() {
            // No connection: commands are drained (the wanted set is replayed on reconnect).
            tokio::select! {
                () = changes.changed() => {}
                cmd = task.commands.recv() => if cmd.is_none() { return },
            }
        }
        let Some(shared) = task.shared() else {
            return;
        };
        for (channel, state) in shared.all() {
            sub.set(&channel, true);
            state.subscribed.send_replace(Sub::Confirmed);
        }
        for (_, state) in shared.all() {
            state.wake();
        }
        drop(shared);
        let mut worker = Worker {
            task: &mut task,
            link: &link,
            sub: &sub,
        };
        if worker.serve(&mut messages, &mut changes).await == Next::Stop {
            return;
        }
        worker.on_lost();
    }
}

/// The task while the server is reachable.
struct Worker<'a> {
    task: &'a mut Task,
    link: &'a Link,
    sub: &'a Subscription,
}

impl Worker<'_> {
    /// Serves the subscriber until the server becomes unreachable or the client is gone.
    async fn serve(
        &mut self,
        messages: &mut mpsc::UnboundedReceiver<Vec<u8>>,
        changes: &mut Changes,
    ) -> Next {
        loop {
            let next = tokio::select! {
                cmd = self.task.commands.recv() => match cmd {
                    Some(cmd) => self.on_command(cmd),
                    None => Next::Stop,
                },
                channel = messages.recv() => match channel {
                    Some(channel) => self.on_message(&channel),
                    None => Next::Stop,
                },
                () = changes.changed() => {
                    if self.link.reachable() { Next::Go } else { Next::Reconnect }
                }
            };
            if next != Next::Go {
                return next;
            }
        }
    }

    /// A channel is subscribed while someone waits on it, and unsubscribed once nobody does.
    fn on_command(&mut self, cmd: Command) -> Next {
        let Some(shared) = self.task.shared() else {
            return Next::Stop;
        };
        match cmd {
            Command::Subscribe(channel) => {
                if let Some(state) = shared.wanted(&channel) {
                    self.sub.set(&channel, true);
                    state.subscribed.send_replace(Sub::Confirmed);
                }
            }
            Command::Unsubscribe(channel) => {
                if shared.wanted(&channel).is_none() {
                    self.sub.set(&channel, false);
                }
            }
        }
        Next::Go
    }

    /// Wakes the waiters of the message's channel.
    fn on_message(&self, channel: &[u8]) -> Next {
        let Some(shared) = self.task.shared() else {
            return Next::Stop;
        };
        if let Some(state) = shared.wanted(&String::from_utf8_lossy(channel)) {
            state.wake();
        }
        Next::Go
    }

    /// The server became unreachable: the subscriptions are gone, and every waiter looks again
    /// until they are back.
    fn on_lost(&self) {
        self.sub.clear();
        metrics::pubsub_reconnect();
        tracing::warn!("lock pub/sub connection lost (the in-memory server is unreachable)");
        if let Some(shared) = self.task.shared() {
            for (_, state) in shared.all() {
                state.lost();
            }
        }
    }
}
