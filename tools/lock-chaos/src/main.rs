//! `lock-chaos`: a randomized fault soak of lock-core (Jepsen-style). Worker processes take
//! every kind of lock on a few shared names while a nemesis injects faults (stopped and killed
//! clients, paused servers, a slow or silent network, flushed scripts, killed pub/sub
//! connections, and on request failovers and slot moves); checkers read the whole history.
//!
//! ```text
//! cargo run --release -p lock-chaos -- --duration 10m
//! cargo run --release -p lock-chaos -- --seed 1234 --duration 60s   # replay a schedule
//! ```
//!
//! See `tools/lock-chaos/README.md` for what it checks and how to read the report. The runner
//! is the library (`src/lib.rs`); this is its command line.

use std::io::Write;
use std::process::ExitCode;

use lock_chaos as chaos;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match chaos::parse(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "lock-chaos: {e}\n\n{}", chaos::USAGE);
            return ExitCode::from(2);
        }
    };
    match command {
        chaos::Command::Help => {
            let kinds = chaos::fault_kind_names();
            let _ = writeln!(
                std::io::stdout(),
                "{}\nfault kinds: {}",
                chaos::USAGE,
                kinds.join(", ")
            );
            ExitCode::SUCCESS
        }
        chaos::Command::Worker(args) => ExitCode::from(chaos::worker_main(args) as u8),
        chaos::Command::Run(cfg) => {
            let launcher = match chaos::Launcher::this_binary() {
                Ok(l) => l,
                Err(e) => {
                    let _ = writeln!(std::io::stderr(), "lock-chaos: {e}");
                    return ExitCode::from(2);
                }
            };
            match chaos::run_blocking(cfg, launcher) {
                Ok(report) => {
                    let _ = write!(std::io::stdout(), "{}", report.render());
                    if report.violations() == 0 {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(e) => {
                    let _ = writeln!(std::io::stderr(), "lock-chaos: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
