//! The lottery's draw as a scheduled job, as processes: three `lottery job` instances on one
//! private redis-server, an every-second job for 60 periods, one instance killed (`SIGKILL`)
//! in a run and one frozen (`SIGSTOP`) past its lease between its draw and its write. Judged
//! from the lines they print and from what Redis holds; the period table is printed.

// The period table is printed (`--nocapture`) for the record.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use lock_tests::RedisServer;
use lottery::job::job_result_key;
use lottery::line::{Line, now_ms};
use lottery::procs::{Event, Instances};

/// Generous bound for a line that should come soon.
const SOON: Duration = Duration::from_secs(15);
const PERIODS: u64 = 60;

fn num(line: &Line, key: &str) -> u64 {
    line.num(key)
        .unwrap_or_else(|| panic!("{line:?} has no number {key}"))
}

fn is(event: &Event, kind: &str, instance: usize) -> bool {
    event.instance == instance && event.line.kind == kind
}

#[test]
fn sixty_periods_each_done_once_through_a_kill_and_a_freeze() {
    let server = RedisServer::start();
    // The first period every instance is up for, and the end: 60 periods later, plus half a
    // second for the last one's run.
    let first = now_ms() / 1000 + 2;
    let last = first + PERIODS - 1;
    let until_ms = (last + 1) * 1000 + 500;
    let (kill_from, stall_from) = (first + 15, first + 35);
    let mut instances = Instances::new();
    for name in ["a", "b", "c"] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lottery"));
        command.env("RUST_LOG", "error").args([
            "job",
            "--url",
            &server.url(),
            "--period",
            "1s",
            "--until-ms",
            &until_ms.to_string(),
            "--lease-ms",
            "1000",
            "--work-ms",
            "200",
            "--instance",
            name,
        ]);
        if name == "c" {
            command.args(["--stall-from", &stall_from.to_string(), "--stall-ms", "500"]);
        }
        instances.spawn(name, command).unwrap();
    }
    let (a, b, c) = (0, 1, 2);

    // b is killed in a run (after its RUNNING line, before its write).
    let killed = instances
        .wait_for(Duration::from_secs(kill_from - first + 30), |e| {
            is(e, "RUNNING", b) && num(&e.line, "period") >= kill_from
        })
        .expect("b ran no period to kill it in");
    instances.kill(b);
    let killed_period = num(&killed.line, "period");

    // c is frozen between its draw and its write, until another instance has written that
    // period: its lease (1 s) ran out meanwhile.
    let stalling = instances
        .wait_for(Duration::from_secs(stall_from - first + 30), |e| {
            is(e, "STALLING", c)
        })
        .expect("c never stalled");
    instances.signal(c, "-STOP").unwrap();
    let frozen_period = num(&stalling.line, "period");
    let frozen_token = num(&stalling.line, "token");
    let taken_over = instances
        .wait_for(SOON, |e| {
            is(e, "RAN", a) && num(&e.line, "period") == frozen_period
        })
        .expect("nobody ran the frozen instance's period");
    assert_eq!(
        taken_over.line.flag("written"),
        Some(true),
        "{taken_over:?}"
    );
    let newer = num(&taken_over.line, "token");
    assert!(newer > frozen_token);
    instances.signal(c, "-CONT").unwrap();
    // The frozen run's write was already on its way: it lands late, and the fence refuses it.
    let late = instances
        .wait_for(SOON, |e| {
            is(e, "RAN", c) && num(&e.line, "period") == frozen_period
        })
        .expect("the frozen run's write never came");
    assert_eq!(late.line.flag("written"), Some(false), "{late:?}");
    assert_eq!(num(&late.line, "stored"), newer);

    assert!(
        instances.wait_all_closed(Duration::from_secs(PERIODS + 30)),
        "the instances did not finish"
    );
    for i in [a, c] {
        let status = instances.wait_exit(i, SOON).expect("exited");
        assert!(status.success(), "instance {i}: {status}");
    }

    // Each period: exactly one write accepted, and it is what Redis holds.
    let mut done: BTreeMap<u64, Vec<&Line>> = BTreeMap::new();
    let mut tried: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for event in instances.history() {
        let line = &event.line;
        let who = instances.name(event.instance).to_owned();
        match line.kind.as_str() {
            "RUNNING" => tried.entry(num(line, "period")).or_default().push(who),
            "RAN" if line.flag("written") == Some(true) => {
                done.entry(num(line, "period")).or_default().push(line);
            }
            _ => {}
        }
    }
    println!("period      done by  token             at (ms after start)  runs started by");
    for period in first..=last {
        let runs = done.get(&period).map_or(&[][..], Vec::as_slice);
        assert_eq!(
            runs.len(),
            1,
            "period {period} done {} times: {runs:?}",
            runs.len()
        );
        let won = runs[0];
        let key = won.get("key").unwrap();
        assert_eq!(
            server.cmd(&["HGET", key, "fence"]),
            won.get("token").unwrap()
        );
        let name = lock_core::Period::every(Duration::from_secs(1))
            .unwrap()
            .name_at("x", std::time::UNIX_EPOCH + Duration::from_secs(period));
        assert_eq!(key, job_result_key(&name[2..]));
        println!(
            "{period}  {:<7}  {:<16}  {:>19}  {}",
            won.get("instance").unwrap(),
            won.get("token").unwrap(),
            num(won, "at_ms").saturating_sub(first * 1000),
            tried.get(&period).map(|t| t.join(",")).unwrap_or_default()
        );
    }
    // The killed and the frozen runs were not the ones done.
    assert_ne!(done[&killed_period][0].get("instance"), Some("b"));
    assert_ne!(done[&frozen_period][0].get("instance"), Some("c"));
    println!(
        "killed b in period {killed_period}; froze c in period {frozen_period} (its late write refused)"
    );
}
