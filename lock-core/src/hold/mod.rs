//! [`Hold`]: one owner's hold on one lock, shared by all of the owner's guards for it.
//!
//! State and transitions only: what the owner holds (its hold count, fencing token, lease and
//! validity), whether it is held, releasing or lost, and a generation bumped by every fresh
//! acquisition so that late news about an earlier hold never touches a newer one. No Redis
//! I/O and no reference to the client: the engine above sends the commands and reports their
//! answers here.
//!
//! What a hold holds ([`HoldKind`](crate::kind::HoldKind)) is in the table of every kind's facts.
//! From the bottom: [`state`] (its mutable part, and the copy of it the engine reads),
//! [`base`] (the [`Hold`] itself: its state's lock, its change
//! signal, its guards), then its transitions, one file each: [`grant`] (an acquisition),
//! [`loss`] (lost, and why), [`view`] (what it says now), [`renewal`] (renewed, at risk,
//! expired, ended), [`release`] (given back, or tried again) and [`turn`] (the owner's turn
//! to send a command).

mod base;
mod grant;
mod loss;
mod release;
mod renewal;
mod state;
#[cfg(test)]
mod tests;
mod turn;
mod view;

pub(crate) use base::Hold;
pub(crate) use release::{Released, Retry};
pub(crate) use state::{Lease, Snapshot, Status};
pub(crate) use turn::CommandTurn;
