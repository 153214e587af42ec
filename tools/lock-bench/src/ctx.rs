//! [`Ctx`]: what every scenario runs with.

use crate::contender::{Kind, Locker, Opts};
use crate::plan::Plan;

/// What every scenario runs with.
pub(crate) struct Ctx<'a> {
    /// The three contenders' clients: ours, the floor, rslock.
    pub(crate) lockers: &'a [Locker],
    /// The floor's client sending lock-core's server calls, where lock-core's functions are
    /// loaded.
    pub(crate) core_calls: Option<&'a Locker>,
    /// The native floor, on a server with `DELIFEQ`.
    pub(crate) native: Option<&'a Locker>,
    pub(crate) opts: &'a Opts,
    /// The server's URL.
    pub(crate) url: &'a str,
    /// This run's id, in every lock name.
    pub(crate) run: &'a str,
    pub(crate) plan: &'a Plan,
    /// Whether the bench started the server (no `--redis`): X1 pins only such a server.
    pub(crate) local_server: bool,
}

impl<'a> Ctx<'a> {
    /// The three contenders, then the native floor where it runs.
    pub(crate) fn rows(&self) -> impl Iterator<Item = (Kind, &'a Locker)> + use<'a> {
        Kind::ALL
            .into_iter()
            .zip(self.lockers)
            .chain(self.native.map(|l| (Kind::NativeFloor, l)))
    }
}
