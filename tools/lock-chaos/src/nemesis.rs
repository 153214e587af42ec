//! The nemesis: which faults exist, and the schedule of a run, computed from the seed alone
//! before the run starts (so `--seed N` replays the same schedule; what the locks do in
//! between depends on timing and is not replayed).

use std::time::Duration;

use super::cli::RunConfig;
use super::fault::TopologyKind;
use super::rng::Rng;

pub(crate) use super::fault::FaultKind;

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
