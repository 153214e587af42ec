//! Waiting for a release: one pub/sub connection per client, shared by every waiter.
//!
//! Each channel with at least one waiter is subscribed once (reference counted) and
//! unsubscribed when its last waiter leaves. A message bumps the channel's version, which wakes
//! the channel's waiters; a reconnect bumps every version, since messages may have been missed
//! while the connection was down. Waiters for one name in one process also queue locally
//! ([`Subscription::queue`]), so only one of them at a time contends in Redis.
//!
//! All SUBSCRIBE and UNSUBSCRIBE commands go through one task, in order, and each is checked
//! against the current waiter count when it runs, so a channel that is left and re-entered
//! quickly ends up subscribed, and one that is left ends up unsubscribed.
//!
//! The rooms:
//! - `hub`: one client's waiters ([`Waiters`]): the task started, subscriptions handed out;
//! - `registry`: the channels and their waiters, which the waiters and the tasks share;
//! - `subscription`: one waiter's interest in a channel ([`Subscription`]);
//! - `task`: what every pub/sub task has (`Task`);
//! - `pubsub`: the task for one node (`SUBSCRIBE`): a standalone server, or the primary the
//!   sentinels name, followed when it moves;
//! - `sharded`: the task for a Cluster (`SSUBSCRIBE` through a RESP3 cluster connection);
//! - `memory`: the task for an in-memory server (its bus, in this process);
//! - `waiter`: [`Waiter`], one waiting request's deadline and subscription.
//!
//! The backend says where the connection goes ([`PubSubSource`]).

mod hub;
#[cfg(feature = "testing")]
mod memory;
mod pubsub;
mod registry;
mod sharded;
mod subscription;
mod task;
mod waiter;

pub(crate) use hub::Waiters;
pub(crate) use waiter::Waiter;
