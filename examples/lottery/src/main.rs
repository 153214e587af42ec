//! `lottery`: once-per-period jobs and leader election across processes.
//!
//! ```text
//! lottery job --url redis://127.0.0.1:6379 --period 1s --until-ms 1795521660000 --instance a
//! lottery demo                                                  # 3 instances, 10 periods, a RESULT line
//! lottery draw --url redis://127.0.0.1:6379 --period 1s --skew-ms 300 --periods 20 --instance a
//! lottery lead --url redis://127.0.0.1:6379 --instance a --units 100
//! ```
#![forbid(unsafe_code)]
#![allow(clippy::print_stderr)]

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use lottery::BoxError;
use lottery::demo::{self, DemoOptions};
use lottery::draw::{self, DrawOptions, Stall};
use lottery::job::{self, JobOptions};
use lottery::lead::{self, LeadOptions};

#[derive(Debug, Parser)]
#[command(
    name = "lottery",
    version,
    about = "At noon every instance wakes up; exactly one draws the 10 winners"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Runs the draw as a scheduled job (lock_core::scheduled): every instance starts it, the
    /// runner runs each period once on the server's clock, fenced, catching up on up to 10
    /// missed periods. One line per run.
    Job(JobArgs),
    /// Takes part in the draw of every period: one attempt at the period's lock after a
    /// random skew; the winner draws 10 winners and stores them, fenced. One line per period.
    Draw(DrawArgs),
    /// Campaigns for leadership; while leading, does units of work, each checked and fenced.
    Lead(LeadArgs),
    /// Starts a private redis-server and 3 `draw` processes for 10 periods of 1 s, and says
    /// how many instances ran each period.
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
struct DrawArgs {
    /// The Redis URL.
    #[arg(long, env = "REDIS_URL")]
    url: String,
    /// The period: whole seconds, at least 1s (periods start at whole multiples since the
    /// Unix epoch).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    period: Duration,
    /// Each attempt comes up to this many milliseconds after the period's start (random).
    #[arg(long, default_value_t = 300)]
    skew_ms: u64,
    /// How many periods to take part in.
    #[arg(long, default_value_t = 10)]
    periods: u32,
    /// This instance's name (default: pid<pid>).
    #[arg(long)]
    instance: Option<String>,
    /// Tests: a fixed delay before the skew, in milliseconds.
    #[arg(long, default_value_t = 0, hide = true)]
    delay_ms: u64,
    /// Tests: in this period of the run (1 = first) wait `--stall-ms` before the write, with
    /// a lease of `--stall-lease-ms`.
    #[arg(long, hide = true)]
    stall_period: Option<u32>,
    /// Tests: see `--stall-period`.
    #[arg(long, default_value_t = 1500, hide = true)]
    stall_ms: u64,
    /// Tests: see `--stall-period`.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(10..), hide = true)]
    stall_lease_ms: u64,
    /// Tests: take the lock without the minimum hold (the control run).
    #[arg(long, hide = true)]
    no_min_hold: bool,
}

#[derive(Debug, Args)]
struct JobArgs {
    /// The Redis URL.
    #[arg(long, env = "REDIS_URL")]
    url: String,
    /// The period: whole seconds, at least 1s.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    period: Duration,
    /// Until when to take part, in Unix milliseconds (then the job is stopped and the process
    /// exits).
    #[arg(long)]
    until_ms: u64,
    /// The job lock's watchdog lease, in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(30..))]
    lease_ms: u64,
    /// How long each run works before its write, in milliseconds.
    #[arg(long, default_value_t = 100)]
    work_ms: u64,
    /// This instance's name (default: pid<pid>).
    #[arg(long)]
    instance: Option<String>,
    /// Tests: in the first run of a period starting at or after this Unix second, block the
    /// runtime's thread for `--stall-ms` before the write.
    #[arg(long, hide = true)]
    stall_from: Option<u64>,
    /// Tests: see `--stall-from`.
    #[arg(long, default_value_t = 400, hide = true)]
    stall_ms: u64,
}

#[derive(Debug, Args)]
struct LeadArgs {
    /// The Redis URL.
    #[arg(long, env = "REDIS_URL")]
    url: String,
    /// This instance's name (default: pid<pid>).
    #[arg(long)]
    instance: Option<String>,
    /// Units of work to do in all, then step down and exit.
    #[arg(long, default_value_t = 50)]
    units: u64,
    /// The pause between units, in milliseconds.
    #[arg(long, default_value_t = 100)]
    unit_ms: u64,
    /// The leader's lease in milliseconds (renewed every third of it while it leads).
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(30..))]
    lease_ms: u64,
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// How many `draw` processes.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=8))]
    instances: u16,
    /// How many periods.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    periods: u32,
    /// The period (whole seconds).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    period: Duration,
    /// The largest random skew of an attempt, in milliseconds.
    #[arg(long, default_value_t = 300)]
    skew_ms: u64,
}

fn instance(name: Option<String>) -> String {
    name.unwrap_or_else(|| format!("pid{}", std::process::id()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let result: Result<bool, BoxError> = match cli.command {
        Cmd::Demo(args) => std::env::current_exe()
            .map_err(BoxError::from)
            .and_then(|bin| {
                demo::run(&DemoOptions {
                    bin,
                    instances: usize::from(args.instances),
                    periods: args.periods,
                    period: args.period,
                    skew: Duration::from_millis(args.skew_ms),
                })
            }),
        Cmd::Job(args) => {
            let options = JobOptions {
                url: args.url,
                period: args.period,
                until_ms: args.until_ms,
                lease: Duration::from_millis(args.lease_ms),
                catch_up: 10,
                work: Duration::from_millis(args.work_ms),
                instance: instance(args.instance),
                stall_from: args.stall_from,
                stall: Duration::from_millis(args.stall_ms),
            };
            runtime().and_then(|rt| rt.block_on(job::run(options)).map(|()| true))
        }
        Cmd::Draw(args) => {
            let options = DrawOptions {
                url: args.url,
                period: args.period,
                skew: Duration::from_millis(args.skew_ms),
                delay: Duration::from_millis(args.delay_ms),
                periods: args.periods,
                instance: instance(args.instance),
                stall: args.stall_period.map(|period| Stall {
                    period,
                    wait: Duration::from_millis(args.stall_ms),
                    lease: Duration::from_millis(args.stall_lease_ms),
                }),
                no_min_hold: args.no_min_hold,
            };
            runtime().and_then(|rt| rt.block_on(draw::run(options)).map(|_| true))
        }
        Cmd::Lead(args) => {
            let options = LeadOptions {
                url: args.url,
                instance: instance(args.instance),
                units: args.units,
                unit: Duration::from_millis(args.unit_ms),
                lease: Duration::from_millis(args.lease_ms),
            };
            runtime().and_then(|rt| rt.block_on(lead::run(options)).map(|()| true))
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("lottery: {e}");
            ExitCode::from(2)
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, BoxError> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}
