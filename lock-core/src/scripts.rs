//! The Lua scripts, each hashed once and sent with EVALSHA (EVAL on NOSCRIPT).

use std::sync::LazyLock;

use redis::Script;

pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire.lua")));
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release.lua")));
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/renew.lua")));
pub(crate) static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/force_unlock.lua")));
pub(crate) static MULTI_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/multi_acquire.lua")));
pub(crate) static SEM_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/sem_acquire.lua")));
pub(crate) static SEM_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/sem_renew.lua")));
pub(crate) static SEM_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/sem_release.lua")));
pub(crate) static RW_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/rw_write.lua")));
pub(crate) static RW_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/rw_read.lua")));
pub(crate) static RW_READ_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/rw_read_release.lua")));
pub(crate) static RW_READ_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/rw_read_renew.lua")));
pub(crate) static RW_UNMARK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/rw_unmark.lua")));
pub(crate) static FAIR_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fair_acquire.lua")));
pub(crate) static FAIR_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fair_release.lua")));
pub(crate) static FAIR_LEAVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fair_leave.lua")));
pub(crate) static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/inspect.lua")));

/// Every script, for loading them all up front.
pub(crate) fn all() -> [&'static Script; 17] {
    [
        &ACQUIRE,
        &RELEASE,
        &RENEW,
        &FORCE_UNLOCK,
        &MULTI_ACQUIRE,
        &SEM_ACQUIRE,
        &SEM_RENEW,
        &SEM_RELEASE,
        &RW_WRITE,
        &RW_READ,
        &RW_READ_RELEASE,
        &RW_READ_RENEW,
        &RW_UNMARK,
        &FAIR_ACQUIRE,
        &FAIR_RELEASE,
        &FAIR_LEAVE,
        &INSPECT,
    ]
}
