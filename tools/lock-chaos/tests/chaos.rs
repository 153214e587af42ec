//! The CI form of the randomized fault soak (`tools/lock-chaos`): 30 s of three worker
//! processes taking every kind of lock (and the tower layer over HTTP) on a few shared names,
//! each critical section writing fenced at the check server and, through the lock client, at
//! the lock server (`fenced::set` on the client's connection, the lock's record), while the
//! nemesis stops, kills and restarts them, pauses and restarts the server, delays, cuts and
//! black-holes their connections, flushes the script cache and kills pub/sub connections.
//! Then every checker must pass: exclusion, fencing, semaphore size, locks of killed
//! workers expiring, liveness, nothing left behind; and the outside judge (stateright's
//! linearizability tester, `lock_tests::linearizability`) must find every mutex, fair and
//! write lock's history a lease mutex and every fenced-store key's a fenced register; after
//! every server restart the stores on the lock server answer again within 5 s.
//!
//! It runs the tool's runner (this crate's library) in-process; the worker processes are this
//! test binary again, started with `--exact chaos_worker_process` and their arguments in
//! `LOCK_CHAOS_WORKER_ARGS`.
//!
//! `LOCK_CHAOS_SEED=N` replays a seed's fault schedule (the report of a failure names it);
//! `LOCK_CHAOS_DURATION=2m` runs longer. The full tool: `cargo run --release -p lock-chaos`.

use lock_chaos as chaos;

const WORKER_ENV: &str = "LOCK_CHAOS_WORKER_ARGS";

/// Not a test: a worker process of the soak below, when this binary is started with
/// `LOCK_CHAOS_WORKER_ARGS` set. Otherwise it does nothing.
#[test]
fn chaos_worker_process() {
    let Ok(args) = std::env::var(WORKER_ENV) else {
        return;
    };
    let mut argv = vec!["worker".to_owned()];
    argv.extend(args.split('\u{1f}').map(str::to_owned));
    let chaos::Command::Worker(worker) = chaos::parse(&argv).expect("worker arguments") else {
        panic!("not worker arguments: {argv:?}");
    };
    let code = chaos::worker_main(worker);
    // Leave without the test harness's summary on the event stream.
    std::process::exit(code);
}

#[test]
#[allow(clippy::print_stdout)]
fn a_randomized_fault_soak_finds_no_violation() {
    let seed = std::env::var("LOCK_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(chaos::default_seed);
    let duration = std::env::var("LOCK_CHAOS_DURATION").unwrap_or_else(|_| "30s".to_owned());
    let args: Vec<String> = [
        "run",
        "--duration",
        &duration,
        "--seed",
        &seed.to_string(),
        "--progress",
        "0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let chaos::Command::Run(cfg) = chaos::parse(&args).expect("run arguments") else {
        panic!("not a run");
    };
    let launcher = chaos::Launcher {
        program: std::env::current_exe().expect("the test binary"),
        args: [
            "chaos_worker_process",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect(),
        env: Some(WORKER_ENV.to_owned()),
    };
    let report = chaos::run_blocking(cfg, launcher).expect("the soak ran");
    let text = report.render();
    println!("{text}");
    assert_eq!(
        report.violations(),
        0,
        "violations (replay with LOCK_CHAOS_SEED={seed}):\n{text}"
    );
    // The outside judge (stateright's linearizability tester) agrees, on a history of
    // some size: every mutex, fair and write lock name and every fenced-store key judged.
    assert!(
        report.judge_agrees(),
        "the outside judge (replay with LOCK_CHAOS_SEED={seed}):\n{text}"
    );
    for model in ["lease mutex", "fenced register"] {
        let (keys, ops) = report.judged(model);
        assert!(
            keys >= 5 && ops >= 100,
            "{model}: {keys} keys, {ops} ops judged:\n{text}"
        );
    }
    // The counters under the locks were taken from (their check is among the violations).
    let (applied, _) = report.takes();
    assert!(applied >= 20, "{applied} guarded takes applied:\n{text}");
    // The run did something: faults of most kinds, and locks of every kind taken.
    assert!(report.faults_injected() >= 40, "too few faults:\n{text}");
    assert!(report.fault_kinds() >= 8, "too few kinds of fault:\n{text}");
    for kind in [
        "mutex",
        "fair",
        "read",
        "write",
        "semaphore",
        "multi",
        "http",
    ] {
        let acquired = report.acquisitions(kind);
        assert!(acquired >= 5, "{kind}: {acquired} acquisitions:\n{text}");
    }
}
