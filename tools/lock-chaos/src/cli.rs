//! Command-line arguments of `lock-chaos run` (the coordinator) and `lock-chaos worker` (a
//! worker process, started by the coordinator), parsed by hand: the runner only uses crates
//! the test harness also has.

use std::path::PathBuf;
use std::time::Duration;

use super::fault::FaultKind;
pub(crate) use super::fault::TopologyKind;

/// `lock-chaos run`.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub(crate) duration: Duration,
    pub(crate) seed: u64,
    pub(crate) workers: usize,
    pub(crate) tasks: usize,
    /// The workers' watchdog lease (fixed leases are never longer).
    pub(crate) lease: Duration,
    /// The mean time between two faults.
    pub(crate) interval: Duration,
    pub(crate) topology: TopologyKind,
    pub(crate) min_replicas: u32,
    /// The kinds of fault the nemesis may inject.
    pub(crate) faults: Vec<FaultKind>,
    /// Whether workers also take locks through the tower layer over HTTP.
    pub(crate) http: bool,
    /// Where to write the whole history (JSON lines), if anywhere.
    pub(crate) history: Option<PathBuf>,
    /// Keep the workers' logs (their directory is printed) even when nothing went wrong.
    pub(crate) keep_logs: bool,
    /// Print progress every this often (zero: never).
    pub(crate) progress: Duration,
}

impl RunConfig {
    /// The defaults: one minute, standalone, 3 workers x 4 tasks, a 1.5 s lease, a fault
    /// every 300 ms on average, every fault kind of the topology, HTTP on.
    pub(crate) fn new(seed: u64) -> RunConfig {
        RunConfig {
            duration: Duration::from_secs(60),
            seed,
            workers: 3,
            tasks: 4,
            lease: Duration::from_millis(1500),
            interval: Duration::from_millis(300),
            topology: TopologyKind::Standalone,
            min_replicas: 0,
            faults: FaultKind::defaults(TopologyKind::Standalone),
            http: true,
            history: None,
            keep_logs: false,
            progress: Duration::from_secs(10),
        }
    }
}

/// Where a worker's lock client connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Deploy {
    Standalone(String),
    Sentinel { service: String, urls: Vec<String> },
    Cluster(Vec<String>),
}

impl Deploy {
    fn encode(&self) -> String {
        match self {
            Deploy::Standalone(url) => format!("standalone={url}"),
            Deploy::Sentinel { service, urls } => format!("sentinel={service}={}", urls.join(",")),
            Deploy::Cluster(urls) => format!("cluster={}", urls.join(",")),
        }
    }

    fn decode(s: &str) -> Result<Deploy, String> {
        let (kind, rest) = s.split_once('=').ok_or("--deploy KIND=...")?;
        let list = |r: &str| r.split(',').map(str::to_owned).collect::<Vec<_>>();
        match kind {
            "standalone" => Ok(Deploy::Standalone(rest.to_owned())),
            "sentinel" => {
                let (service, urls) = rest.split_once('=').ok_or("sentinel=SERVICE=URLS")?;
                Ok(Deploy::Sentinel {
                    service: service.to_owned(),
                    urls: list(urls),
                })
            }
            "cluster" => Ok(Deploy::Cluster(list(rest))),
            other => Err(format!("unknown deployment {other:?}")),
        }
    }
}

/// `lock-chaos worker`: everything a worker process needs, given by the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerArgs {
    pub(crate) id: usize,
    pub(crate) incarnation: u32,
    pub(crate) deploy: Deploy,
    /// The check server (the fenced store).
    pub(crate) check_url: String,
    pub(crate) seed: u64,
    pub(crate) lease: Duration,
    pub(crate) tasks: usize,
    pub(crate) http: bool,
    pub(crate) min_replicas: u32,
    /// The worker exits by itself after this long, whatever happens.
    pub(crate) max_life: Duration,
}

impl WorkerArgs {
    /// The arguments after `worker`.
    pub(crate) fn to_args(&self) -> Vec<String> {
        let pairs = [
            ("--id", self.id.to_string()),
            ("--incarnation", self.incarnation.to_string()),
            ("--deploy", self.deploy.encode()),
            ("--check", self.check_url.clone()),
            ("--seed", self.seed.to_string()),
            ("--lease-ms", self.lease.as_millis().to_string()),
            ("--tasks", self.tasks.to_string()),
            ("--http", u8::from(self.http).to_string()),
            ("--min-replicas", self.min_replicas.to_string()),
            ("--max-life-s", self.max_life.as_secs().to_string()),
        ];
        pairs
            .into_iter()
            .flat_map(|(k, v)| [k.to_owned(), v])
            .collect()
    }

    fn parse(args: &[String]) -> Result<WorkerArgs, String> {
        let mut w = WorkerArgs {
            id: 0,
            incarnation: 0,
            deploy: Deploy::Standalone(String::new()),
            check_url: String::new(),
            seed: 0,
            lease: Duration::from_millis(1500),
            tasks: 1,
            http: false,
            min_replicas: 0,
            max_life: Duration::from_secs(600),
        };
        for (key, value) in pairs(args)? {
            let num = || {
                value
                    .parse::<u64>()
                    .map_err(|e| format!("{key} {value}: {e}"))
            };
            match key {
                "--id" => w.id = num()? as usize,
                "--incarnation" => w.incarnation = num()? as u32,
                "--deploy" => w.deploy = Deploy::decode(value)?,
                "--check" => w.check_url = value.to_owned(),
                "--seed" => w.seed = num()?,
                "--lease-ms" => w.lease = Duration::from_millis(num()?),
                "--tasks" => w.tasks = num()? as usize,
                "--http" => w.http = num()? != 0,
                "--min-replicas" => w.min_replicas = num()? as u32,
                "--max-life-s" => w.max_life = Duration::from_secs(num()?),
                other => return Err(format!("unknown worker option {other}")),
            }
        }
        Ok(w)
    }
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// `lock-chaos [run]`: a soak.
    Run(RunConfig),
    /// `lock-chaos worker ...`: a worker process of a soak.
    Worker(WorkerArgs),
    /// `--help`.
    Help,
}

/// The command line's help text.
pub const USAGE: &str = "\
lock-chaos: a randomized fault soak of lock-core (Jepsen-style)

usage: lock-chaos [run] [options]
       lock-chaos worker ...        (started by run itself)

options:
  --duration D       how long to run: 90s, 10m, 1h (default 60s)
  --seed N           the seed of the nemesis schedule and of the workers (default: from the clock)
  --workers N        worker processes, 1-8 (default 3)
  --tasks N          lock-taking tasks per worker, 1-16 (default 4)
  --lease D          the workers' watchdog lease, 300ms-10s (default 1500ms)
  --interval D       mean time between two faults (default 300ms)
  --topology T       standalone (default), sentinel or cluster
  --min-replicas N   sentinel/cluster: acquisitions wait for N replicas (default 0 = off)
  --faults LIST      comma-separated fault kinds (default: all of the topology's; --help lists them)
  --no-http          no requests through the tower layer
  --history FILE     write the whole history as JSON lines
  --keep-logs        keep the worker logs even when the run is clean
  --progress D       print a progress line this often (default 10s, 0 = never)
";

/// Parses `args` (without the program name).
pub fn parse(args: &[String]) -> Result<Command, String> {
    let (first, rest) = match args.split_first() {
        Some((first, rest)) => (first.as_str(), rest),
        None => ("run", args),
    };
    match first {
        "worker" => Ok(Command::Worker(WorkerArgs::parse(rest)?)),
        "run" => parse_run(rest),
        "help" | "--help" | "-h" => Ok(Command::Help),
        _ => parse_run(args),
    }
}

fn parse_run(args: &[String]) -> Result<Command, String> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        return Ok(Command::Help);
    }
    let mut cfg = RunConfig::new(default_seed());
    let mut faults: Option<Vec<FaultKind>> = None;
    let mut flags = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let key = args[i].as_str();
        match key {
            "--no-http" => cfg.http = false,
            "--keep-logs" => cfg.keep_logs = true,
            _ => {
                let value = args
                    .get(i + 1)
                    .ok_or_else(|| format!("{key} needs a value"))?;
                flags.push((key, value.as_str()));
                i += 1;
            }
        }
        i += 1;
    }
    for (key, value) in flags {
        let num = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{key} {value}: {e}"))
        };
        match key {
            "--duration" => cfg.duration = parse_duration(value)?,
            "--seed" => cfg.seed = num()?,
            "--workers" => cfg.workers = bounded(num()?, 1, 8, key)? as usize,
            "--tasks" => cfg.tasks = bounded(num()?, 1, 16, key)? as usize,
            "--lease" => {
                cfg.lease = parse_duration(value)?;
                let ms = cfg.lease.as_millis() as u64;
                bounded(ms, 300, 10_000, key)?;
            }
            "--interval" => cfg.interval = parse_duration(value)?.max(Duration::from_millis(20)),
            "--topology" => {
                cfg.topology = match value {
                    "standalone" => TopologyKind::Standalone,
                    "sentinel" => TopologyKind::Sentinel,
                    "cluster" => TopologyKind::Cluster,
                    other => return Err(format!("unknown topology {other:?}")),
                }
            }
            "--min-replicas" => cfg.min_replicas = bounded(num()?, 0, 1, key)? as u32,
            "--faults" => {
                let mut list = Vec::new();
                for name in value.split(',').filter(|n| !n.is_empty()) {
                    list.push(
                        FaultKind::from_name(name)
                            .ok_or_else(|| format!("unknown fault kind {name:?}"))?,
                    );
                }
                faults = Some(list);
            }
            "--history" => cfg.history = Some(PathBuf::from(value)),
            "--progress" => cfg.progress = parse_duration(value)?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    cfg.faults = match faults {
        Some(list) => {
            if let Some(bad) = list.iter().find(|k| !k.applies_to(cfg.topology)) {
                return Err(format!(
                    "fault {} does not apply to a {} run",
                    bad.name(),
                    cfg.topology.name()
                ));
            }
            list
        }
        None => FaultKind::defaults(cfg.topology),
    };
    Ok(Command::Run(cfg))
}

fn bounded(n: u64, lo: u64, hi: u64, what: &str) -> Result<u64, String> {
    if (lo..=hi).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{what} {n} is outside {lo}..={hi}"))
    }
}

fn pairs(args: &[String]) -> Result<Vec<(&str, &str)>, String> {
    if !args.len().is_multiple_of(2) {
        return Err("options come in pairs".to_owned());
    }
    Ok(args
        .chunks(2)
        .map(|c| (c[0].as_str(), c[1].as_str()))
        .collect())
}

/// A seed from the clock, for a run that was given none.
pub fn default_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    // Short enough to type back.
    (nanos ^ u64::from(std::process::id()).rotate_left(32)) % 1_000_000_000
}

/// `90s`, `10m`, `1h`, `500ms`, or a number of seconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (try 90s, 10m, 500ms)"))?;
    Ok(match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" | "min" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("unknown unit in {s:?} (ms, s, m, h)")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn worker_args_round_trip() {
        let w = WorkerArgs {
            id: 2,
            incarnation: 3,
            deploy: Deploy::Sentinel {
                service: "locks".into(),
                urls: vec!["redis://a:1".into(), "redis://b:2".into()],
            },
            check_url: "redis://127.0.0.1:9".into(),
            seed: 42,
            lease: Duration::from_millis(1500),
            tasks: 4,
            http: true,
            min_replicas: 1,
            max_life: Duration::from_secs(700),
        };
        let args = w.to_args();
        match parse(&[vec!["worker".to_owned()], args].concat()).unwrap() {
            Command::Worker(parsed) => assert_eq!(parsed, w),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn run_options_parse() {
        let args: Vec<String> = ["--duration", "10m", "--seed", "7", "--no-http"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        match parse(&args).unwrap() {
            Command::Run(cfg) => {
                assert_eq!(cfg.duration, Duration::from_secs(600));
                assert_eq!(cfg.seed, 7);
                assert!(!cfg.http);
            }
            other => panic!("{other:?}"),
        }
    }
}
