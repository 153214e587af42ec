//! The Lua scripts, each hashed once and sent with EVALSHA (EVAL on NOSCRIPT).

use std::sync::LazyLock;

use redis::Script;

pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire.lua")));
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/renew.lua")));
pub(crate) static MULTI_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/multi_acquire.lua")));
pub(crate) static SEM_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/sem_acquire.lua")));
pub(crate) static SEM_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/sem_renew.lua")));
pub(crate) static RW_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/rw_write.lua")));
pub(crate) static RW_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/rw_read.lua")));
pub(crate) static RW_READ_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/rw_read_renew.lua")));
pub(crate) static FAIR_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fair_acquire.lua")));
pub(crate) static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/inspect.lua")));

const PUBLISHING_SOURCES: [&str; 7] = [
    include_str!("scripts/release.lua"),
    include_str!("scripts/sem_release.lua"),
    include_str!("scripts/rw_read_release.lua"),
    include_str!("scripts/rw_unmark.lua"),
    include_str!("scripts/fair_release.lua"),
    include_str!("scripts/fair_leave.lua"),
    include_str!("scripts/force_unlock.lua"),
];

fn variant(source: &str, sharded: bool) -> String {
    if sharded {
        source.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'")
    } else {
        source.to_owned()
    }
}

/// The scripts that wake waiters. They publish with `PUBLISH` on a standalone server (any
/// Redis version) and with `SPUBLISH` on a Cluster, where a message then travels only within
/// the lock's shard instead of to every node.
pub(crate) struct Publishing {
    pub(crate) release: Script,
    pub(crate) sem_release: Script,
    pub(crate) rw_read_release: Script,
    pub(crate) rw_unmark: Script,
    pub(crate) fair_release: Script,
    pub(crate) fair_leave: Script,
    pub(crate) force_unlock: Script,
}

impl Publishing {
    fn new(sharded: bool) -> Self {
        let [
            release,
            sem_release,
            rw_read_release,
            rw_unmark,
            fair_release,
            fair_leave,
            force_unlock,
        ] = PUBLISHING_SOURCES.map(|source| Script::new(&variant(source, sharded)));
        Self {
            release,
            sem_release,
            rw_read_release,
            rw_unmark,
            fair_release,
            fair_leave,
            force_unlock,
        }
    }

    /// The variant for a topology: sharded (`SPUBLISH`) for a Cluster.
    pub(crate) fn get(sharded: bool) -> &'static Publishing {
        static PLAIN: LazyLock<Publishing> = LazyLock::new(|| Publishing::new(false));
        static SHARDED: LazyLock<Publishing> = LazyLock::new(|| Publishing::new(true));
        if sharded { &SHARDED } else { &PLAIN }
    }
}

/// Every script of a topology, for loading them all up front.
pub(crate) fn all(sharded: bool) -> [&'static Script; 17] {
    let p = Publishing::get(sharded);
    [
        &ACQUIRE,
        &p.release,
        &RENEW,
        &p.force_unlock,
        &MULTI_ACQUIRE,
        &SEM_ACQUIRE,
        &SEM_RENEW,
        &p.sem_release,
        &RW_WRITE,
        &RW_READ,
        &p.rw_read_release,
        &RW_READ_RENEW,
        &p.rw_unmark,
        &FAIR_ACQUIRE,
        &p.fair_release,
        &p.fair_leave,
        &INSPECT,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sharded_variants_publish_with_spublish_only() {
        for source in PUBLISHING_SOURCES {
            let plain = variant(source, false);
            let sharded = variant(source, true);
            assert!(plain.contains("redis.call('PUBLISH'"), "{plain}");
            assert!(!plain.contains("SPUBLISH"), "{plain}");
            assert!(sharded.contains("redis.call('SPUBLISH'"), "{sharded}");
            assert!(!sharded.contains("'PUBLISH'"), "{sharded}");
        }
        let (plain, sharded) = (Publishing::get(false), Publishing::get(true));
        assert_ne!(plain.release.get_hash(), sharded.release.get_hash());
    }
}
