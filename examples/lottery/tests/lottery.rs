//! The lottery as processes: `lottery draw` and `lottery lead` instances of the binary under
//! test on one private redis-server (the harness's), frozen with `SIGSTOP`, resumed and
//! killed, judged from the lines they print and from what Redis holds.

// The measured delays are printed (`--nocapture`) for the record.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use lock_tests::RedisServer;
use lottery::draw::result_key;
use lottery::lead::WORK_KEY;
use lottery::line::{Line, now_ms};
use lottery::procs::{Event, Instances};

/// Generous bound for a line that should come soon.
const SOON: Duration = Duration::from_secs(10);

fn lottery(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lottery"));
    command.args(args).env("RUST_LOG", "error");
    command
}

/// Waits until the next whole second + 50 ms, so instances spawned now all start waiting for
/// the same period boundary (about 950 ms away).
fn just_after_a_second_boundary() {
    let ms = now_ms() % 1000;
    std::thread::sleep(Duration::from_millis(1000 - ms + 50));
}

fn is(event: &Event, kind: &str, instance: usize) -> bool {
    event.instance == instance && event.line.kind == kind
}

fn num(line: &Line, key: &str) -> u64 {
    line.num(key)
        .unwrap_or_else(|| panic!("{line:?} has no number {key}"))
}

// ---------------------------------------------------------------------------------------------
// draw

/// Per period: how many instances reported it (RAN or SKIPPED), and the RAN lines.
type Periods = BTreeMap<u64, (usize, Vec<Line>)>;

/// Runs 3 `draw` instances (period 1 s, skew up to 300 ms) for `periods` periods, with
/// `extra` arguments, until they exit; returns what they reported per period.
fn draw_three(server: &RedisServer, periods: u32, extra: &[&str]) -> Periods {
    let mut instances = spawn_draw_three(server, periods, extra);
    let (reported, errors) = finish(&mut instances, periods);
    assert!(errors.is_empty(), "{errors:?}");
    reported
}

/// Starts 3 `draw` instances (period 1 s, skew up to 300 ms) for `periods` periods, with
/// `extra` arguments, just after a second boundary.
fn spawn_draw_three(server: &RedisServer, periods: u32, extra: &[&str]) -> Instances {
    just_after_a_second_boundary();
    let mut instances = Instances::new();
    for name in ["a", "b", "c"] {
        let mut command = lottery(&[
            "draw",
            "--url",
            &server.url(),
            "--period",
            "1s",
            "--skew-ms",
            "300",
            "--periods",
            &periods.to_string(),
            "--instance",
            name,
        ]);
        command.args(extra);
        instances.spawn(name, command).unwrap();
    }
    instances
}

/// Waits until the draw instances exit; returns what they reported per period, and their
/// ERROR and LOST lines.
fn finish(instances: &mut Instances, periods: u32) -> (Periods, Vec<Line>) {
    assert!(
        instances.wait_all_closed(Duration::from_secs(u64::from(periods) + 20)),
        "the instances did not finish: {:?}",
        instances.history()
    );
    for i in 0..3 {
        let status = instances.wait_exit(i, SOON).expect("exited");
        assert!(status.success(), "instance {i}: {status}");
    }
    let mut reported = Periods::new();
    let mut errors = Vec::new();
    for event in instances.history() {
        let line = &event.line;
        match line.kind.as_str() {
            "RAN" | "SKIPPED" => {
                let entry = reported.entry(num(line, "period")).or_default();
                entry.0 += 1;
                if line.kind == "RAN" {
                    entry.1.push(line.clone());
                }
            }
            "ERROR" | "LOST" => errors.push(line.clone()),
            _ => {}
        }
    }
    (reported, errors)
}

/// Three instances, 20 periods of 1 s, attempts skewed by up to 300 ms: every period is run
/// by exactly one instance (the others report SKIPPED), and each period's stored draw is its
/// winner's, with its token.
#[test]
fn three_instances_each_period_is_drawn_exactly_once() {
    const PERIODS: u32 = 20;
    let server = RedisServer::start();
    let periods = draw_three(&server, PERIODS, &[]);
    for (period, (reports, ran)) in &periods {
        assert_eq!(
            ran.len(),
            1,
            "period {period} was run {} times: {ran:?}",
            ran.len()
        );
        let won = &ran[0];
        assert_eq!(won.flag("written"), Some(true), "{won:?}");
        // What Redis holds for the period: the winner's draw and token.
        let key = result_key(won.get("name").unwrap());
        assert_eq!(
            server.cmd(&["HGET", &key, "fence"]),
            won.get("token").unwrap()
        );
        let value = server.cmd(&["HGET", &key, "value"]);
        assert_eq!(
            value,
            format!(
                "instance={} winners={}",
                won.get("instance").unwrap(),
                won.get("winners").unwrap()
            ),
            "period {period} ({reports} reports)"
        );
    }
    // All three took part in (nearly) every period: they started waiting for the same
    // boundary; one slow start may shift an instance by a period.
    let all_three = periods
        .values()
        .filter(|(reports, _)| *reports == 3)
        .count();
    assert!(
        all_three >= PERIODS as usize - 1,
        "only {all_three} periods had all 3 instances: {periods:?}"
    );
}

/// The control run: the same without the minimum hold. The winner's job takes milliseconds
/// and releases the lock, so instances that fire later in the period find it free and draw
/// again — what `hold_at_least` prevents, and what the test above would catch.
#[test]
fn without_the_minimum_hold_periods_are_drawn_again() {
    let server = RedisServer::start();
    let periods = draw_three(&server, 4, &["--no-min-hold"]);
    let again = periods.values().filter(|(_, ran)| ran.len() > 1).count();
    assert!(again >= 1, "no period was drawn twice: {periods:?}");
}

/// Redis restarts (killed, started again on the same port, nothing kept) after two periods
/// were drawn: the instances' locks and their fenced writes, on the lock client's own
/// connection, work again by themselves, so every period that starts a second after the
/// restart is drawn and written exactly once; only attempts that met the server down may
/// fail.
#[test]
fn a_redis_restart_stops_no_later_period() {
    const PERIODS: u32 = 7;
    let mut server = RedisServer::start();
    let mut instances = spawn_draw_three(&server, PERIODS, &[]);
    let mut ran = 0;
    instances
        .wait_for(Duration::from_secs(15), |event| {
            ran += usize::from(event.line.kind == "RAN");
            ran == 2
        })
        .expect("two periods drawn before the restart");
    server.restart();
    let back_ms = now_ms();
    let (periods, errors) = finish(&mut instances, PERIODS);
    let settled = back_ms / 1000 + 1;
    for error in &errors {
        assert!(
            num(error, "period") < settled,
            "after the restart: {error:?}"
        );
    }
    let later: Vec<_> = periods.range(settled..).collect();
    assert!(later.len() >= 3, "periods after the restart: {periods:?}");
    for (period, (_, ran)) in later {
        assert_eq!(ran.len(), 1, "period {period}: {ran:?}");
        assert_eq!(ran[0].flag("written"), Some(true), "{:?}", ran[0]);
        let key = result_key(ran[0].get("name").unwrap());
        assert_eq!(
            server.cmd(&["HGET", &key, "fence"]),
            ran[0].get("token").unwrap()
        );
    }
}

/// A period's winner is frozen (SIGSTOP) between its last check of the lock and its write,
/// past its lease: a later instance wins the same period (it runs twice) and writes; when the
/// frozen one resumes, its late write is refused by the fence and the stored draw stays the
/// newer winner's.
#[test]
fn a_winner_frozen_past_its_lease_is_refused_by_the_fence() {
    let server = RedisServer::start();
    just_after_a_second_boundary();
    let mut instances = Instances::new();
    // a fires at each period's start and, in its 2nd period, holds a 200 ms lease and waits
    // 1.5 s before writing; b fires 600 ms into each period.
    let a = instances
        .spawn(
            "a",
            lottery(&[
                "draw",
                "--url",
                &server.url(),
                "--skew-ms",
                "0",
                "--periods",
                "2",
                "--instance",
                "a",
                "--stall-period",
                "2",
                "--stall-ms",
                "1500",
                "--stall-lease-ms",
                "200",
            ]),
        )
        .unwrap();
    let b = instances
        .spawn(
            "b",
            lottery(&[
                "draw",
                "--url",
                &server.url(),
                "--skew-ms",
                "0",
                "--delay-ms",
                "600",
                "--periods",
                "3",
                "--instance",
                "b",
            ]),
        )
        .unwrap();

    let drawing = instances
        .wait_for(SOON, |e| is(e, "STALLING", a))
        .expect("a wins its stall period");
    instances.signal(a, "-STOP").unwrap();
    let period = num(&drawing.line, "period");
    let stale_token = num(&drawing.line, "token");

    // b wins the same period once a's lease ran out, and its write is accepted.
    let fresh = instances
        .wait_for(SOON, |e| {
            is(e, "RAN", b) && e.line.num("period") == Some(period)
        })
        .expect("b runs the frozen winner's period");
    let fresh_token = num(&fresh.line, "token");
    assert_eq!(fresh.line.flag("written"), Some(true), "{fresh:?}");
    assert!(fresh_token > stale_token);

    // a resumes and writes: refused, the store names b's token.
    instances.signal(a, "-CONT").unwrap();
    let stale = instances
        .wait_for(SOON, |e| {
            is(e, "RAN", a) && e.line.num("period") == Some(period)
        })
        .expect("a finishes its job");
    assert_eq!(stale.line.flag("written"), Some(false), "{stale:?}");
    assert_eq!(num(&stale.line, "stored"), fresh_token);
    assert!(instances.wait_all_closed(SOON));

    let key = result_key(fresh.line.get("name").unwrap());
    assert_eq!(
        server.cmd(&["HGET", &key, "fence"]),
        fresh_token.to_string()
    );
    assert!(
        server
            .cmd(&["HGET", &key, "value"])
            .starts_with("instance=b "),
        "the stored draw is b's"
    );
    // The period before it was run once, by a; b was refused by the minimum hold.
    let before: Vec<&Event> = instances
        .history()
        .iter()
        .filter(|e| e.line.num("period") == Some(period - 1))
        .filter(|e| e.line.kind == "RAN" || e.line.kind == "SKIPPED")
        .collect();
    assert!(
        before.iter().filter(|e| e.line.kind == "RAN").count() == 1
            && before.iter().any(|e| is(e, "RAN", a))
            && before.iter().any(|e| is(e, "SKIPPED", b)),
        "{before:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// lead

const LEASE_MS: u64 = 1500;

/// Starts a `lead` instance per name (a unit every 100 ms, a lease of [`LEASE_MS`]).
fn spawn_leaders(server: &RedisServer, names: &[&str]) -> Instances {
    let mut instances = Instances::new();
    for name in names {
        let command = lottery(&[
            "lead",
            "--url",
            &server.url(),
            "--instance",
            name,
            "--units",
            "100000",
            "--unit-ms",
            "100",
            "--lease-ms",
            &LEASE_MS.to_string(),
        ]);
        instances.spawn(name, command).unwrap();
    }
    instances
}

/// Waits for `units` more accepted units of work of `term`.
fn units(instances: &mut Instances, term: u64, units: usize) {
    for n in 0..units {
        instances
            .wait_for(SOON, |e| {
                e.line.kind == "UNIT"
                    && e.line.num("term") == Some(term)
                    && e.line.flag("written") == Some(true)
            })
            .unwrap_or_else(|| panic!("unit {n} of term {term}: {:?}", instances.history()));
    }
}

fn elected(instances: &mut Instances, not: usize, after_term: u64) -> (usize, u64, u64) {
    let event = instances
        .wait_for(SOON, |e| {
            e.line.kind == "ELECTED"
                && e.instance != not
                && e.line.num("term").is_some_and(|t| t > after_term)
        })
        .unwrap_or_else(|| panic!("no new leader: {:?}", instances.history()));
    (
        event.instance,
        num(&event.line, "term"),
        num(&event.line, "at_ms"),
    )
}

/// Three `lead` instances. The leader frozen past its lease is replaced within the lease and
/// one renewal period, and after it resumes it reports the loss before any further unit; the
/// next leader killed is replaced within one lease. Over the whole run, terms strictly
/// increase, and no unit of a term was checked after the next term began.
#[test]
fn leaders_frozen_or_killed_are_replaced_and_never_overlap() {
    let server = RedisServer::start();
    let mut instances = spawn_leaders(&server, &["a", "b", "c"]);

    // The first leader works, then freezes.
    let (first, first_term, _) = elected(&mut instances, usize::MAX, 0);
    units(&mut instances, first_term, 3);
    let stopped_ms = now_ms();
    instances.signal(first, "-STOP").unwrap();

    // Another is elected within the lease and one renewal period of the freeze.
    let (second, second_term, second_at) = elected(&mut instances, first, first_term);
    let waited = second_at.saturating_sub(stopped_ms);
    println!("a new leader {waited} ms after the freeze");
    assert!(
        waited <= LEASE_MS + LEASE_MS / 3,
        "a new leader only {waited} ms after the freeze"
    );
    units(&mut instances, second_term, 3);

    // The frozen one resumes: it reports the loss, and no unit of its term was checked after
    // the freeze (a unit checked before it may land late: the fence refuses it).
    instances.signal(first, "-CONT").unwrap();
    let lost = instances
        .wait_for(SOON, |e| {
            is(e, "LOST", first) && e.line.num("term") == Some(first_term)
        })
        .expect("the resumed leader reports the loss");
    assert!(lost.line.get("reason").is_some(), "{lost:?}");
    println!("the resumed leader: {:?}", lost.line);
    for event in instances.history() {
        let line = &event.line;
        if line.kind == "UNIT" && line.num("term") == Some(first_term) {
            assert!(num(line, "checked_ms") <= stopped_ms, "{line:?}");
            if num(line, "at_ms") > second_at {
                assert_eq!(line.flag("written"), Some(false), "{line:?}");
            }
        }
    }

    // The second leader is killed: the next is elected once its lease runs out, within one
    // lease (plus the waiter's wake-up on a loaded machine).
    units(&mut instances, second_term, 2);
    let killed_ms = now_ms();
    instances.kill(second);
    let (_, third_term, third_at) = elected(&mut instances, second, second_term);
    let waited = third_at.saturating_sub(killed_ms);
    println!("a new leader {waited} ms after the kill");
    assert!(
        (LEASE_MS * 2 / 3 - 100..=LEASE_MS + 500).contains(&waited),
        "a new leader {waited} ms after the kill (the lease is {LEASE_MS} ms, renewed every third)"
    );
    units(&mut instances, third_term, 3);
    stop_all(&mut instances);

    // The interval checker: terms by election time strictly increase, and every unit of a
    // term was checked (is_leader() true) before the next term was elected.
    let history = instances.history();
    let mut terms: Vec<(u64, u64)> = history
        .iter()
        .filter(|e| e.line.kind == "ELECTED")
        .map(|e| (num(&e.line, "at_ms"), num(&e.line, "term")))
        .collect();
    terms.sort();
    assert!(terms.len() >= 3, "{terms:?}");
    assert!(
        terms.windows(2).all(|w| w[0].1 < w[1].1),
        "terms not increasing with time: {terms:?}"
    );
    for pair in terms.windows(2) {
        let ((_, term), (next_elected, next)) = (pair[0], pair[1]);
        let last_checked = history
            .iter()
            .filter(|e| e.line.kind == "UNIT" && e.line.num("term") == Some(term))
            .map(|e| num(&e.line, "checked_ms"))
            .max();
        if let Some(last_checked) = last_checked {
            assert!(
                last_checked < next_elected,
                "term {term} checked at {last_checked} ms, term {next} elected at {next_elected} ms"
            );
        }
    }
    // The resource holds the last term's write.
    assert_eq!(
        server.cmd(&["HGET", WORK_KEY, "fence"]),
        terms.last().unwrap().1.to_string()
    );
}

/// Kills every instance (so no line comes after the checks start) and keeps their history.
fn stop_all(instances: &mut Instances) {
    for i in 0..instances.len() {
        instances.kill(i);
    }
    assert!(instances.wait_all_closed(SOON));
}

/// Redis restarts (killed, started again on the same port, nothing kept) under two `lead`
/// instances: the leader's lock is gone, so its term ends, a leader of a later term is elected
/// (fencing tokens keep growing: they are seeded from the server's clock), and its units are
/// written on the lock client's own connection, which healed by itself: the job goes on.
#[test]
fn after_a_redis_restart_a_new_term_leads_and_its_work_is_written() {
    let mut server = RedisServer::start();
    let mut instances = spawn_leaders(&server, &["a", "b"]);
    let (_, term, _) = elected(&mut instances, usize::MAX, 0);
    units(&mut instances, term, 3);
    server.restart();
    let (_, next_term, _) = elected(&mut instances, usize::MAX, term);
    units(&mut instances, next_term, 3);
    assert_eq!(
        server.cmd(&["HGET", WORK_KEY, "fence"]),
        next_term.to_string()
    );
    stop_all(&mut instances);
}
