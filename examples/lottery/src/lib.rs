//! The lottery: "at noon every instance wakes up; exactly one draws the 10 winners", and a
//! leader that does units of work only while it leads. Each instance is a process of the
//! `lottery` binary; every step is one machine-readable line on stdout, so a test (or the
//! demo) can freeze, resume and kill instances and judge what they did.
//!
//! * [`job`]: the draw as a scheduled job ([`lock_core::scheduled`]): every instance starts
//!   it; the runner runs each period once on the server's clock, fenced by its token, and
//!   catches up on missed periods. This is how to write it; `draw` is the same by hand.
//! * [`draw`]: by hand: once per period, after a random skew, one attempt at the period's lock
//!   ([`lock_core::Period`] names it), kept with `hold_at_least` for the period; the winner
//!   draws and stores the winners with [`lock_core::fenced::set`].
//! * [`lead`]: leader election with [`lock_core::LockClient::leader`]; units of work, each
//!   checked with [`lock_core::Term::is_leader`] and written fenced by the term.
//! * [`demo`]: a private redis-server and 3 `draw` processes; how many ran each period.
//! * [`line`](mod@line) and [`procs`]: the lines, and child processes whose lines arrive as events
//!   (shared by the demo and the tests).

pub mod demo;
pub mod draw;
pub mod job;
pub mod lead;
pub mod line;
pub mod procs;

/// Any error of the commands, reported by `main`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
