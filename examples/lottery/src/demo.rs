//! `lottery demo`: a private redis-server and 3 `lottery draw` processes for 10 periods of
//! one second; prints, per period, how many instances ran it, and a `RESULT` line.

// The demo's whole job is to print its report.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use lock_tests::RedisServer;

use crate::BoxError;
use crate::line::Line;
use crate::procs::Instances;

/// How to run the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// This binary, to start the instances with.
    pub bin: PathBuf,
    /// How many `draw` processes.
    pub instances: usize,
    /// How many periods.
    pub periods: u32,
    /// The period (whole seconds).
    pub period: Duration,
    /// The largest random skew of an instance's attempt.
    pub skew: Duration,
}

/// What happened in one period, as the instances told it.
#[derive(Debug, Default)]
struct PeriodReport {
    name: String,
    reports: usize,
    ran: Vec<Line>,
}

/// Runs the demo; `Ok(true)` when every period was run by exactly one instance.
pub fn run(options: &DemoOptions) -> Result<bool, BoxError> {
    let binary = lock_tests::server_binary();
    if !lock_tests::server_binary_runs(&binary) {
        return Err(format!(
            "{binary} does not run: install redis-server (scripts/ensure-redis.sh does), or \
             point REDIS_SERVER_BIN at a Redis-compatible server"
        )
        .into());
    }
    let server = RedisServer::start();
    println!(
        "lottery demo: {} instances draw 10 winners each period ({:?}, attempts skewed by up \
         to {:?}), for {} periods",
        options.instances, options.period, options.skew, options.periods
    );
    println!(
        "  redis     {} (private redis-server, pid {})",
        server.url(),
        server.pid()
    );

    let mut instances = Instances::new();
    for i in 0..options.instances {
        let name = instance_name(i);
        let mut command = Command::new(&options.bin);
        command.args([
            "draw",
            "--url",
            &server.url(),
            "--period",
            &humantime::format_duration(options.period).to_string(),
            "--skew-ms",
            &options.skew.as_millis().to_string(),
            "--periods",
            &options.periods.to_string(),
            "--instance",
            &name,
        ]);
        instances.spawn(&name, command)?;
        println!("  instance  {name} (pid {})", instances.pid(i).unwrap_or(0));
    }

    let budget = options.period * (options.periods + 5) + Duration::from_secs(10);
    let all_done = instances.wait_all_closed(budget);

    let mut periods: BTreeMap<u64, PeriodReport> = BTreeMap::new();
    for event in instances.history() {
        let line = &event.line;
        let Some(index) = line.num("period") else {
            continue;
        };
        let report = periods.entry(index).or_default();
        match line.kind.as_str() {
            "RAN" => {
                report.reports += 1;
                report.ran.push(line.clone());
            }
            "SKIPPED" | "ERROR" | "LOST" => report.reports += 1,
            _ => continue,
        }
        if let Some(name) = line.get("name") {
            name.clone_into(&mut report.name);
        }
    }
    let (mut once, mut twice, mut none) = (0, 0, 0);
    for report in periods.values() {
        let by: Vec<String> = report
            .ran
            .iter()
            .map(|l| {
                format!(
                    "{} (token {}, winners {})",
                    l.get("instance").unwrap_or("?"),
                    l.get("token").unwrap_or("?"),
                    l.get("winners").unwrap_or("?")
                )
            })
            .collect();
        match report.ran.len() {
            0 => none += 1,
            1 => once += 1,
            _ => twice += 1,
        }
        println!(
            "  {}  ran by {} of {} instances: {}",
            report.name,
            report.ran.len(),
            report.reports,
            if by.is_empty() {
                "nobody".to_owned()
            } else {
                by.join("; ")
            }
        );
    }
    if !all_done {
        println!("  (some instances did not finish in {budget:?}: stopped)");
    }
    drop(instances);
    let ok = all_done && twice == 0 && none == 0 && once > 0;
    println!(
        "RESULT instances={} periods={} ran_once={once} ran_twice_or_more={twice} not_run={none}",
        options.instances,
        periods.len()
    );
    Ok(ok)
}

fn instance_name(i: usize) -> String {
    ["a", "b", "c", "d", "e", "f", "g", "h"]
        .get(i)
        .map_or_else(|| format!("i{i}"), |s| (*s).to_owned())
}
