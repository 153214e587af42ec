//! What a run's faults are about: the deployment the locks live on ([`TopologyKind`]) and the
//! kinds of fault ([`FaultKind`]), which deployment each applies to and which run by default.

/// Which Redis deployment the locks live on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TopologyKind {
    /// One redis-server; every worker reaches it through a fault proxy of its own.
    Standalone,
    /// A primary, a replica and three sentinels.
    Sentinel,
    /// Three primaries with a replica each.
    Cluster,
}

impl TopologyKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            TopologyKind::Standalone => "standalone",
            TopologyKind::Sentinel => "sentinel",
            TopologyKind::Cluster => "cluster",
        }
    }
}

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum FaultKind {
    /// `SIGSTOP` a worker process, `SIGCONT` it within its lease.
    ClientStop,
    /// `SIGSTOP` a worker process past its lease: its locks expire and others take them (the
    /// overlap DESIGN.md says no lease can prevent; fencing must refuse its late writes).
    ClientStopPastLease,
    /// `SIGKILL` a worker process; a new one takes its place. What it held must expire within
    /// its lease.
    ClientKill,
    /// `DEBUG SLEEP`: the server stops answering for a while.
    DebugSleep,
    /// `CLIENT PAUSE ... ALL` or `WRITE`.
    ClientPause,
    /// `SIGSTOP` the redis-server process, then `SIGCONT`.
    ServerStop,
    /// `SIGKILL` the redis-server process and start it again on the same port, from its
    /// append-only file: every connection breaks, nothing written is lost.
    ServerRestart,
    /// The worker's proxy delays every chunk.
    ProxyDelay,
    /// The worker's proxy forwards nothing.
    ProxyBlackhole,
    /// The worker's proxy cuts every connection.
    ProxyReset,
    /// The worker's proxy swallows the next reply and cuts that connection.
    ProxyLoseReply,
    /// `SCRIPT FLUSH`.
    ScriptFlush,
    /// `CLIENT KILL TYPE pubsub`: every waiter's subscription connection.
    PubsubKill,
    /// `SENTINEL FAILOVER` (graceful).
    SentinelFailover,
    /// The Sentinel primary is killed; the replica is promoted; the old primary comes back
    /// empty as a replica.
    SentinelCrash,
    /// A Cluster primary is killed; its replica takes over; it comes back as a replica.
    ClusterFailover,
    /// `CLUSTER FAILOVER` on a replica.
    ClusterManualFailover,
    /// The slot of one of the lock names moves to another primary (MOVED/ASK).
    SlotMigration,
    /// Not injected: the coordinator saw the deployment's primary (or set of primaries)
    /// change, by the nemesis or by Sentinel or the Cluster on their own.
    PrimaryChanged,
}

impl FaultKind {
    pub(crate) const ALL: [FaultKind; 18] = [
        FaultKind::ClientStop,
        FaultKind::ClientStopPastLease,
        FaultKind::ClientKill,
        FaultKind::DebugSleep,
        FaultKind::ClientPause,
        FaultKind::ServerStop,
        FaultKind::ServerRestart,
        FaultKind::ProxyDelay,
        FaultKind::ProxyBlackhole,
        FaultKind::ProxyReset,
        FaultKind::ProxyLoseReply,
        FaultKind::ScriptFlush,
        FaultKind::PubsubKill,
        FaultKind::SentinelFailover,
        FaultKind::SentinelCrash,
        FaultKind::ClusterFailover,
        FaultKind::ClusterManualFailover,
        FaultKind::SlotMigration,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            FaultKind::ClientStop => "client-stop",
            FaultKind::ClientStopPastLease => "client-stop-past-lease",
            FaultKind::ClientKill => "client-kill",
            FaultKind::DebugSleep => "debug-sleep",
            FaultKind::ClientPause => "client-pause",
            FaultKind::ServerStop => "server-stop",
            FaultKind::ServerRestart => "server-restart",
            FaultKind::ProxyDelay => "proxy-delay",
            FaultKind::ProxyBlackhole => "proxy-blackhole",
            FaultKind::ProxyReset => "proxy-reset",
            FaultKind::ProxyLoseReply => "proxy-lose-reply",
            FaultKind::ScriptFlush => "script-flush",
            FaultKind::PubsubKill => "pubsub-kill",
            FaultKind::SentinelFailover => "sentinel-failover",
            FaultKind::SentinelCrash => "sentinel-crash",
            FaultKind::ClusterFailover => "cluster-failover",
            FaultKind::ClusterManualFailover => "cluster-manual-failover",
            FaultKind::SlotMigration => "slot-migration",
            FaultKind::PrimaryChanged => "primary-changed (observed)",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether this fault can be injected on `topology`.
    pub(crate) fn applies_to(self, topology: TopologyKind) -> bool {
        use FaultKind::*;
        match self {
            ClientStop | ClientStopPastLease | ClientKill | DebugSleep | ClientPause
            | ScriptFlush | PubsubKill => true,
            ServerStop | ServerRestart | ProxyDelay | ProxyBlackhole | ProxyReset
            | ProxyLoseReply => topology == TopologyKind::Standalone,
            SentinelFailover | SentinelCrash => topology == TopologyKind::Sentinel,
            PrimaryChanged => false,
            ClusterFailover | ClusterManualFailover | SlotMigration => {
                topology == TopologyKind::Cluster
            }
        }
    }

    /// Every kind that applies to `topology`.
    pub(crate) fn defaults(topology: TopologyKind) -> Vec<FaultKind> {
        FaultKind::ALL
            .into_iter()
            .filter(|k| k.applies_to(topology))
            .collect()
    }

    /// A failover or a slot move: the topology changes under the clients.
    pub(crate) fn is_topology_change(self) -> bool {
        matches!(
            self,
            FaultKind::SentinelFailover
                | FaultKind::SentinelCrash
                | FaultKind::ClusterFailover
                | FaultKind::ClusterManualFailover
                | FaultKind::SlotMigration
        )
    }

    /// A failover: DESIGN.md documents that a lock can be granted twice across one (without
    /// `min_replicas`, or when renewals had not reached the replica).
    pub(crate) fn is_failover(self) -> bool {
        (self.is_topology_change() && self != FaultKind::SlotMigration)
            || self == FaultKind::PrimaryChanged
    }

    pub(crate) fn weight(self) -> u32 {
        match self {
            FaultKind::ClientStop => 10,
            FaultKind::ClientStopPastLease => 5,
            FaultKind::ClientKill => 4,
            FaultKind::DebugSleep => 4,
            FaultKind::ClientPause => 5,
            FaultKind::ServerStop => 3,
            FaultKind::ServerRestart => 2,
            FaultKind::ProxyDelay => 8,
            FaultKind::ProxyBlackhole => 6,
            FaultKind::ProxyReset => 6,
            FaultKind::ProxyLoseReply => 6,
            FaultKind::ScriptFlush => 5,
            FaultKind::PubsubKill => 6,
            FaultKind::SentinelFailover => 2,
            FaultKind::SentinelCrash => 1,
            FaultKind::ClusterFailover => 1,
            FaultKind::ClusterManualFailover => 2,
            FaultKind::SlotMigration => 3,
            FaultKind::PrimaryChanged => 0,
        }
    }
}
