//! The wire protocol: what each kind of lock sends to Redis and how its replies read, in
//! every dialect the crate speaks.
//!
//! One room per kind builds that kind's calls: [`mutex`] (lock strings, in both dialects:
//! the mutex, and what a fair lock and a writer share with it), [`fair`], [`rwlock`],
//! [`semaphore`], [`rate`] (a rate limit's one call); [`kind`] is the one `match` over kinds (give one hold back, renew).
//! [`Protocol::dialect`] is the one place that chooses a call's dialect.
//!
//! Below them, the dialects: [`script`] (the Lua code, `scripts/*.lua`, and one call of it)
//! and [`native`] (the server's own compare-and-set commands). Every reply of either is read
//! into a typed answer ([`answer`]) by [`Command`]'s readers (`command.rs`) or by [`native`];
//! no other module reads a reply of a lock call. Where one call's reply asks for another,
//! the room says what to send next and the engine only sends it: an acquisition's [`Next`]
//! (`next.rs`), a record's [`record::Put`]. Requests that queued are made one call of their
//! dialect here too ([`Command::batch`], `batch.rs`). Outside this room only `backend/`,
//! which sends the calls, names [`script`] or [`native`]; the rest use the re-exports below
//! (`tests/tests/structure.rs` holds the rule).
//!
//! Inside, the rooms of the kinds that only have scripts read their inspections' replies
//! themselves ([`fair::queued`], [`rwlock::readers`], [`semaphore::permits`]), into the typed
//! answers of [`answer`], where a lock string's inspection names its holder
//! ([`answer::Inspected::holder`]); `info.rs` above only turns those into the public `*Info`
//! types.

pub(crate) mod answer;
mod batch;
mod command;
mod convert;
mod counter;
pub(crate) mod fair;
pub(crate) mod kind;
pub(crate) mod mutex;
pub(crate) mod native;
mod next;
mod owner;
mod protocol;
pub(crate) mod rate;
pub(crate) mod record;
pub(crate) mod rwlock;
pub(crate) mod script;
pub(crate) mod semaphore;
pub(crate) mod update;

pub(crate) use command::{Command, Wire};
pub(crate) use convert::convert;
pub(crate) use next::Next;
pub(crate) use owner::Owner;
pub(crate) use protocol::{Protocol, Target};
pub(crate) use script::{Call as ScriptCall, Mode, Scripts};
