//! `lock-bench`: lock-core against the floor (the minimal correct lock: `SET key token NX PX`
//! and a compare-and-delete script on one multiplexed connection), measured in one run on one
//! private redis-server. Every figure is also reported as a ratio, ours / floor.
//!
//! ```text
//! cargo run --release -p lock-bench -- [--quick] [--redis URL] [--json FILE]
//! ```
//!
//! Scenarios so far: W1 (1 task, distinct names) and W2 (64 tasks, distinct names).
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod floor;
mod stats;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::LockClient;
use lock_tests::RedisServer;
use stats::{Sample, commandstats_usec};

struct Args {
    quick: bool,
    redis: Option<String>,
    json: Option<String>,
}

fn parse_args() -> Args {
    let mut args = Args {
        quick: false,
        redis: None,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => args.quick = true,
            "--redis" => args.redis = it.next(),
            "--json" => args.json = it.next(),
            "-h" | "--help" => {
                println!("usage: lock-bench [--quick] [--redis URL] [--json FILE]");
                std::process::exit(0);
            }
            other => {
                eprintln!("unknown argument {other:?}; see --help");
                std::process::exit(2);
            }
        }
    }
    args
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    let server = match &args.redis {
        Some(_) => None,
        None => Some(RedisServer::start()),
    };
    let url = args
        .redis
        .clone()
        .unwrap_or_else(|| server.as_ref().map(RedisServer::url).unwrap_or_default());
    let ours = LockClient::builder(&url)
        .pool_size(
            std::env::var("POOL")
                .ok()
                .and_then(|p| p.parse().ok())
                .unwrap_or(16),
        )
        .build()
        .await
        .expect("connect lock-core");
    let floor = floor::Floor::connect(&url).await;
    let mut admin = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();

    let scale = if args.quick { 4 } else { 1 };
    let mut results = Vec::new();
    println!("| scenario | contender | cycles/s | p50 µs | p99 µs | server µs/cycle |");
    println!("|---|---|---:|---:|---:|---:|");

    for (scenario, tasks, cycles) in [("W1", 1usize, 20_000 / scale), ("W2", 64, 100_000 / scale)] {
        let mut row = Vec::new();
        for contender in ["floor", "ours"] {
            let before = commandstats_usec(&mut admin).await;
            let sample = match contender {
                "floor" => {
                    run(tasks, cycles, floor.clone(), |f, name| async move {
                        f.cycle(&name).await
                    })
                    .await
                }
                _ => {
                    run(tasks, cycles, ours.clone(), |c, name| async move {
                        let g = c.lock(name).await.expect("lock");
                        g.unlock().await.expect("unlock");
                    })
                    .await
                }
            };
            let server_us = (commandstats_usec(&mut admin).await - before) / cycles as f64;
            println!(
                "| {scenario} | {contender} | {:.0} | {:.0} | {:.0} | {server_us:.2} |",
                sample.rate(),
                sample.percentile(50.0),
                sample.percentile(99.0)
            );
            row.push((contender, sample, server_us));
        }
        let (_, floor_s, _) = &row[0];
        let (_, ours_s, _) = &row[1];
        println!(
            "BENCH {scenario} ours={:.0} floor={:.0} ratio_floor={:.3}",
            ours_s.rate(),
            floor_s.rate(),
            ours_s.rate() / floor_s.rate()
        );
        results.push(serde_json::json!({
            "scenario": scenario,
            "tasks": tasks,
            "cycles": cycles,
            "contenders": row.iter().map(|(c, s, us)| serde_json::json!({
                "name": c, "cycles_per_s": s.rate(), "p50_us": s.percentile(50.0),
                "p99_us": s.percentile(99.0), "server_us_per_cycle": us,
            })).collect::<Vec<_>>(),
        }));
    }
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_string_pretty(&results).unwrap()).unwrap();
    }
}

/// Runs `cycles` acquire+release cycles on distinct names spread over `tasks` tasks.
async fn run<C, F, Fut>(tasks: usize, cycles: usize, contender: C, cycle: F) -> Sample
where
    C: Clone + Send + Sync + 'static,
    F: Fn(C, String) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let run_id = Arc::new(uuid::Uuid::new_v4().simple().to_string());
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (contender, run_id) = (contender.clone(), run_id.clone());
        let n = cycles / tasks + usize::from(t < cycles % tasks);
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(n);
            for i in 0..n {
                let name = format!("bench:{run_id}:{t}:{i}");
                let t0 = Instant::now();
                cycle(contender.clone(), name).await;
                lat.push(t0.elapsed());
            }
            lat
        }));
    }
    let mut all: Vec<Duration> = Vec::with_capacity(cycles);
    for h in handles {
        all.extend(h.await.unwrap());
    }
    Sample::new(all, start.elapsed())
}
