//! The nemesis: which faults exist, and the schedule of a run, computed from the seed alone
//! before the run starts (so `--seed N` replays the same schedule; what the locks do in
//! between depends on timing and is not replayed).

use std::time::Duration;

use super::cli::{RunConfig, TopologyKind};
use super::rng::Rng;

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

    fn weight(self) -> u32 {
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

/// One fault of the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Planned {
    /// When, from the start of the run.
    pub(crate) at: Duration,
    pub(crate) kind: FaultKind,
    /// The worker (or proxy) it hits, for the kinds that hit one.
    pub(crate) target: usize,
    /// How long it lasts (a kill: how long until the new worker is started).
    pub(crate) duration: Duration,
    /// A kind-specific choice: the proxy delay in ms, `CLIENT PAUSE` WRITE (1) or ALL (0),
    /// which node or name a topology change picks.
    pub(crate) arg: u64,
}

/// How long a topology change keeps the nemesis from starting another one (or a server
/// fault): they take seconds, and the schedule must not depend on how many.
const TOPOLOGY_GAP: Duration = Duration::from_secs(15);
/// A killed worker's slot is left alone this long after its new process is started.
const RESTART_GRACE: Duration = Duration::from_secs(3);

/// The schedule of a run: a pure function of the configuration (seed, duration, workers,
/// lease, interval, fault kinds). Faults start from 1 s into the run until 2 s before its
/// end, one every `interval` on average (uniform between half and one and a half of it).
/// At most one fault at a time hits a given worker, a given proxy, or the server.
pub(crate) fn plan(cfg: &RunConfig) -> Vec<Planned> {
    let mut rng = Rng::new(cfg.seed ^ 0x006E_656D_6573_6973);
    let mut out = Vec::new();
    if cfg.faults.is_empty() || cfg.duration < Duration::from_secs(4) {
        return out;
    }
    let topo = cfg.topology != TopologyKind::Standalone;
    let weights: Vec<u32> = cfg.faults.iter().map(|k| k.weight()).collect();
    let mean = cfg.interval.as_millis() as u64;
    let end = cfg.duration - Duration::from_secs(2);
    let mut busy = Busy {
        worker: vec![Duration::ZERO; cfg.workers],
        proxy: vec![Duration::ZERO; cfg.workers],
        server: Duration::ZERO,
    };
    let mut at = Duration::from_secs(1);
    loop {
        at += rng.ms(mean / 2, mean * 3 / 2);
        if at >= end {
            break;
        }
        let kind = cfg.faults[rng.weighted(&weights)];
        let first = rng.index(cfg.workers);
        let arg = rng.next_u64();
        let mut planned = Planned {
            at,
            kind,
            target: first,
            duration: Duration::ZERO,
            arg,
        };
        if schedule(&mut planned, &mut rng, &mut busy, cfg, topo) {
            out.push(planned);
        }
    }
    out
}

/// Until when each worker, each proxy and the server are taken by a fault already planned.
struct Busy {
    worker: Vec<Duration>,
    proxy: Vec<Duration>,
    server: Duration,
}

/// Draws the fault's duration (and argument), picks a free target starting at `p.target`,
/// and marks what it takes as busy; false when there is nothing free to inject it on (the
/// fault is dropped).
fn schedule(p: &mut Planned, rng: &mut Rng, busy: &mut Busy, cfg: &RunConfig, topo: bool) -> bool {
    let (at, kind, first) = (p.at, p.kind, p.target);
    let lease = cfg.lease.as_millis() as u64;
    use FaultKind::*;
    match kind {
        ClientStop | ClientStopPastLease | ClientKill => {
            p.duration = match kind {
                ClientStop => rng.ms(50, lease * 6 / 10),
                ClientStopPastLease => rng.ms(lease * 13 / 10, lease * 25 / 10),
                _ => rng.ms(100, 800),
            };
            let free = (0..cfg.workers)
                .map(|k| (first + k) % cfg.workers)
                .find(|&w| busy.worker[w] <= at);
            let Some(w) = free else {
                return false;
            };
            p.target = w;
            let grace = if kind == ClientKill {
                RESTART_GRACE
            } else {
                Duration::from_millis(200)
            };
            busy.worker[w] = at + p.duration + grace;
        }
        ProxyDelay | ProxyBlackhole | ProxyLoseReply => {
            p.duration = match kind {
                ProxyDelay => rng.ms(300, 3000),
                ProxyBlackhole => rng.ms(200, lease * 2),
                _ => Duration::from_millis(500),
            };
            if kind == ProxyDelay {
                p.arg = rng.range(10, 300);
            }
            let free = (0..cfg.workers)
                .map(|k| (first + k) % cfg.workers)
                .find(|&w| busy.proxy[w] <= at);
            let Some(w) = free else {
                return false;
            };
            p.target = w;
            busy.proxy[w] = at + p.duration + Duration::from_millis(100);
        }
        ProxyReset | ScriptFlush | PubsubKill | PrimaryChanged => {}
        ServerRestart => {
            if busy.server > at {
                return false;
            }
            // A restart takes a moment, its reconnections a few more.
            busy.server = at + Duration::from_secs(1);
        }
        DebugSleep | ClientPause | ServerStop => {
            if busy.server > at {
                return false;
            }
            let longest = if topo { 400 } else { 1500 };
            p.duration = rng.ms(100, longest);
            if kind == ClientPause {
                p.arg = rng.range(0, 1);
            }
            busy.server = at + p.duration + Duration::from_millis(100);
        }
        SentinelFailover
        | SentinelCrash
        | ClusterFailover
        | ClusterManualFailover
        | SlotMigration => {
            if busy.server > at {
                return false;
            }
            busy.server = at + TOPOLOGY_GAP;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_a_function_of_the_seed() {
        let cfg = RunConfig::new(99);
        let a = plan(&cfg);
        assert_eq!(a, plan(&cfg));
        assert!(a.len() > 50, "{} faults in a minute", a.len());
        assert_ne!(a, plan(&RunConfig::new(100)));
        assert!(a.iter().all(|p| p.at < cfg.duration));
    }

    #[test]
    fn one_fault_at_a_time_per_worker() {
        let cfg = RunConfig::new(5);
        let mut busy = vec![Duration::ZERO; cfg.workers];
        for p in plan(&cfg) {
            if matches!(
                p.kind,
                FaultKind::ClientStop | FaultKind::ClientStopPastLease | FaultKind::ClientKill
            ) {
                assert!(busy[p.target] <= p.at, "{p:?}");
                busy[p.target] = p.at + p.duration;
            }
        }
    }
}
