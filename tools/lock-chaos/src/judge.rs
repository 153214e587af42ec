//! The outside judge: the run's history as per-key histories of operations (invoked,
//! answered, with fencing tokens and times), checked for linearizability by stateright's
//! tester (`lock_tests::linearizability`), next to the checkers of `check.rs`, and where the
//! two disagree.
//!
//! Two models, one history per key:
//!
//! - **lease mutex**, per mutex, fair lock and read-write lock's write side (`m:0`, `f:0`,
//!   `r:0` ...): every grant with its token (direct, multi-lock and through the layer), every
//!   release. A grant's hold lasts at least until its holder last believed it held
//!   (`remaining()` > 0); a release answering "held" proves it lasted until then; any other
//!   may have ended it when it was sent: an error, the layer's release (unseen), a killed
//!   worker's after its section ended, and "not held" too — a release whose reply was lost is
//!   sent again, and the repeat answers "not held" when another holder took the lock its
//!   first sending freed (the judge's first run found one). Busy answers are
//!   not judged: a killed worker's acquisition in flight leaves no trace, so a busy answer may
//!   have met a holder the history does not have.
//! - **fenced register**, per key of the fenced store (`fence:mutex:m:0` ...): every write
//!   with its token and answer (refused ones with the token that refused them); the store
//!   accepts an equal token only from the section that stored it. A write the check server
//!   did not answer may or may not have happened, and so may one in flight when its section
//!   was cut off (a handler the layer cancelled) and any write of a section whose worker was
//!   killed before the section ended (its writes are reported with its end).
//!
//! A key the judge finds not linearizable is a violation (kind `linearizability`), unless
//! the checks of `check.rs` found an anomaly within a failover window on the same name
//! (documented: a failover can lose a lock). Either way the report says where the two
//! verdicts differ.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use lock_tests::linearizability::{
    Acquired, DEFAULT_BUDGET, EqualToken, KeyVerdict, MutexHistory, RegisterAnswer,
    RegisterHistory, Released, Verdict,
};

use super::check::{self, Ctx, Findings, Violation};
use super::history::{History, Sec};
use super::store::{ClientStore, Fence};

/// What the judge found.
#[derive(Debug, Default)]
pub(crate) struct Judged {
    /// One verdict per key and model.
    pub(crate) verdicts: Vec<KeyVerdict>,
    /// How long the searches took, in seconds.
    pub(crate) seconds: f64,
    /// Where the judge and the checks of `check.rs` disagree, one line each.
    pub(crate) disagreements: Vec<String>,
    /// Keys the judge found not linearizable within a failover window (documented).
    pub(crate) documented: Vec<String>,
}

impl Judged {
    /// Keys whose verdict is not "linearizable" (and not documented).
    pub(crate) fn failures(&self) -> Vec<&KeyVerdict> {
        self.verdicts
            .iter()
            .filter(|v| !v.ok() && !self.documented.contains(&v.key))
            .collect()
    }

    /// Operations judged, by model.
    pub(crate) fn ops(&self, model: &str) -> usize {
        self.verdicts
            .iter()
            .filter(|v| v.model == model)
            .map(|v| v.ops)
            .sum()
    }
}

/// The lock name a judged key is about (`fence:mutex:m:0` → `m:0`).
/// The lock name in a store's key (`<store>:<family>:<name>`), or the key itself (a lock).
fn lock_name(key: &str) -> &str {
    std::iter::once("fence:")
        .chain(ClientStore::ALL.map(ClientStore::prefix))
        .find_map(|store| key.strip_prefix(store))
        .and_then(|rest| rest.split_once(':'))
        .map_or(key, |(_, name)| name)
}

/// The operations of the run, as one history per key.
pub(crate) fn histories(h: &History, ctx: &Ctx) -> (Vec<MutexHistory>, Vec<RegisterHistory>) {
    let ops: HashMap<&str, (i64, i64)> = h
        .ops
        .iter()
        .map(|op| (op.req.as_str(), (op.t0, op.t1)))
        .collect();
    let requests: HashMap<&str, i64> = h.http.iter().map(|r| (r.req.as_str(), r.t0)).collect();
    let mut mutexes: BTreeMap<String, MutexHistory> = BTreeMap::new();
    let mut registers: BTreeMap<String, RegisterHistory> = BTreeMap::new();
    for (k, sec) in h.secs.iter().enumerate() {
        let owner = k as u64;
        for part in &sec.parts {
            let Some(token) = part.token else { continue };
            if part.family == "sem" || sec.kind == "read" {
                continue;
            }
            let (invoked, returned) = window(sec, &ops, &requests, ctx);
            let believed_until = sec.acq_valid.max(sec.valid.unwrap_or(i64::MIN));
            let history = mutexes
                .entry(part.name.clone())
                .or_insert_with(|| MutexHistory::new(part.name.clone(), false));
            history.acquire(
                owner,
                invoked,
                returned,
                Acquired::Granted {
                    token,
                    believed_until,
                },
            );
            if let Some((sent, answered, answer)) = release(sec) {
                history.release(owner, sent, answered, answer);
            }
        }
        let mut register = |key: String, token: u64, invoked: i64, answer| {
            // The check server's store also checks the writer; the lock server's stores
            // (`fenced::set`, records) take an equal token from anyone.
            let equal = match ClientStore::is_key(&key) {
                true => EqualToken::Accepted,
                false => EqualToken::SameWriter,
            };
            registers
                .entry(key.clone())
                .or_insert_with(|| RegisterHistory::new(key, equal))
                .write(owner, token, invoked, answer);
        };
        for w in &sec.writes {
            let key = sec
                .parts
                .iter()
                .find(|p| p.name == w.name)
                .map_or_else(|| w.name.clone(), |p| Fence::key(&p.family, &p.name));
            let answer = match w.accepted {
                Some(true) => Some((w.t1, RegisterAnswer::Written)),
                Some(false) => Some((w.t1, RegisterAnswer::Refused { stored: w.max })),
                None => None,
            };
            register(key, w.token, w.t0, answer);
        }
        // A section that never ended (its worker was killed) reported none of its writes,
        // which go with its end: each part with a token may have been written from the
        // section's start on (one write of unknown outcome says all it can have done: its
        // second write stores nothing the first did not).
        if sec.end.is_none() {
            for part in &sec.parts {
                if let Some(token) = part.token {
                    register(Fence::key(&part.family, &part.name), token, sec.start, None);
                    for store in ClientStore::ALL.into_iter().filter(|_| ctx.client_stores) {
                        register(store.key(&part.family, &part.name), token, sec.start, None);
                    }
                }
            }
        }
    }
    (
        mutexes.into_values().collect(),
        registers.into_values().collect(),
    )
}

/// When a section's acquisition was invoked and answered: its operation's times, or for the
/// layer the request's send time (the run's start if unknown) and the section's start.
fn window(
    sec: &Sec,
    ops: &HashMap<&str, (i64, i64)>,
    requests: &HashMap<&str, i64>,
    ctx: &Ctx,
) -> (i64, i64) {
    if sec.via == "http" {
        let sent = requests.get(sec.req.as_str()).copied().unwrap_or(ctx.t0);
        (sent.min(sec.start), sec.start)
    } else {
        ops.get(sec.req.as_str())
            .copied()
            .unwrap_or((ctx.t0, sec.start))
    }
}

/// A section's release, for the judge: sent, answered, and what it said.
fn release(sec: &Sec) -> Option<(i64, Option<i64>, Released)> {
    match &sec.rel {
        Some((t0, t1, res)) => {
            // `false` is no evidence here: a release whose reply was lost is sent again, and
            // if another holder took the lock its first sending freed, the repeat answers
            // "not held" (the judge found this: DESIGN.md, "Scripts"). A multi-lock's says
            // only that not every name was still held.
            let answer = match res.as_str() {
                "held" => Released::Held,
                _ => Released::Unknown,
            };
            let answered = (answer != Released::Unknown).then_some(*t1);
            Some((*t0, answered, answer))
        }
        // The layer's release, or a release a killed worker may have sent after the section
        // ended: either may have freed the lock from the section's end on.
        None => sec.end.map(|end| (end, None, Released::Unknown)),
    }
}

/// Every key's verdict (and the time it took), and where each mutex history found not
/// linearizable first breaks (the section granted, when).
fn verdicts(h: &History, ctx: &Ctx) -> (Judged, HashMap<String, (u64, i64)>) {
    let started = Instant::now();
    let (mutexes, registers) = histories(h, ctx);
    let mut judged = Judged::default();
    let mut located: HashMap<String, (u64, i64)> = HashMap::new();
    for m in &mutexes {
        let verdict = m.check(DEFAULT_BUDGET);
        if verdict.verdict == Verdict::NotLinearizable
            && let Some(at) = m.first_failure(DEFAULT_BUDGET)
        {
            located.insert(verdict.key.clone(), at);
        }
        judged.verdicts.push(verdict);
    }
    for r in &registers {
        judged.verdicts.push(r.check(DEFAULT_BUDGET));
    }
    judged.seconds = started.elapsed().as_secs_f64();
    (judged, located)
}

/// A failed verdict's summary and history excerpt (around the grant where it breaks, where
/// that was found).
fn describe(
    h: &History,
    ctx: &Ctx,
    v: &KeyVerdict,
    located: Option<(u64, i64)>,
) -> (String, Vec<String>) {
    match located {
        Some((owner, at)) => {
            let sec = &h.secs[owner as usize];
            (
                format!(
                    "{v}: the history up to the grant of {} (worker {}.{}, {}, answered at {}) is not",
                    sec.id,
                    sec.worker,
                    sec.inc,
                    sec.via,
                    ctx.rel(at)
                ),
                check::excerpt(h, ctx, &[owner as usize], at - 3_000_000, at + 500_000),
            )
        }
        None => (
            format!(
                "{v} (history from {} to {})",
                ctx.rel(v.span.0),
                ctx.rel(v.span.1)
            ),
            Vec::new(),
        ),
    }
}

/// Judges every key, compares with what `check.rs` found, and adds a violation per key found
/// not linearizable outside a failover window.
pub(crate) fn judge(h: &History, ctx: &Ctx, f: &mut Findings) -> Judged {
    let (mut judged, located) = verdicts(h, ctx);
    let judged_names: BTreeSet<&str> = judged.verdicts.iter().map(|v| lock_name(&v.key)).collect();
    let ours = |list: &[Violation]| -> BTreeSet<String> {
        list.iter()
            .filter(|v| matches!(v.kind, "exclusion" | "fencing"))
            .filter_map(|v| v.name.clone())
            .filter(|n| judged_names.contains(n.as_str()))
            .collect()
    };
    let ours_found = ours(&f.violations);
    let in_failover = ours(&f.failover_anomalies);
    let judge_found: BTreeSet<String> = judged
        .verdicts
        .iter()
        .filter(|v| !v.ok())
        .map(|v| lock_name(&v.key).to_owned())
        .collect();
    for name in ours_found.difference(&judge_found) {
        judged.disagreements.push(format!(
            "{name}: the checks above found a violation, the judge found the history linearizable"
        ));
    }
    for v in judged.verdicts.iter().filter(|v| !v.ok()) {
        let name = lock_name(&v.key);
        if in_failover.contains(name) {
            judged.documented.push(v.key.clone());
            continue;
        }
        if !ours_found.contains(name) {
            judged.disagreements.push(format!(
                "{}: the judge found it {}, the checks above found no violation",
                v.key, v.verdict
            ));
        }
        let (summary, excerpt) = describe(h, ctx, v, located.get(&v.key).copied());
        f.violations.push(Violation {
            kind: "linearizability",
            name: Some(name.to_owned()),
            summary,
            excerpt,
        });
    }
    judged
}

#[cfg(test)]
mod tests {
    //! The same broken histories before both judges: `check.rs`'s checkers and the
    //! linearizability tester each catch them.

    use super::super::check::check;
    use super::super::check::tests::{MS, ctx};
    use super::super::history::Part;
    use super::super::store::Write;
    use super::*;

    /// A direct section on mutex `name` acquired over `acq` ms, held `(start, end)` ms,
    /// believed held until `valid` ms, with `token`, whose release answered `rel` at `end`.
    fn sec(h: &mut History, acq: (i64, i64), span: (i64, i64, i64), token: u64, rel: &str) {
        let (start, end, valid) = span;
        let k = h.secs.len();
        let id = format!("s0.0.{k}");
        let req = format!("r0.0.{k}");
        h.ops.push(super::super::history::Op {
            worker: 0,
            inc: 0,
            req: req.clone(),
            prim: "mutex".to_owned(),
            via: "direct".to_owned(),
            name: "m:0".to_owned(),
            wait_ms: Some(1000),
            fixed: false,
            t0: acq.0 * MS,
            t1: acq.1 * MS,
            out: "acquired".to_owned(),
            err: None,
            bound_ms: 5000,
        });
        h.index.insert(id.clone(), k);
        h.secs.push(Sec {
            id,
            worker: 0,
            inc: 0,
            via: "direct".to_owned(),
            kind: "excl".to_owned(),
            n: 1,
            parts: vec![Part {
                family: "mutex".to_owned(),
                name: "m:0".to_owned(),
                token: Some(token),
            }],
            start: start * MS,
            acq_valid: valid.min(start + 1_000) * MS,
            req,
            end: Some(end * MS),
            valid: Some(valid * MS),
            lost: None,
            writes: Vec::new(),
            rel: Some((end * MS, end * MS + MS, rel.to_owned())),
        });
    }

    fn write(h: &mut History, sec: usize, token: u64, at: i64, accepted: bool, max: u64) {
        let by = h.secs[sec].id.clone();
        h.secs[sec].writes.push(Write {
            name: "m:0".to_owned(),
            token,
            t0: at * MS,
            t1: at * MS + MS / 2,
            accepted: Some(accepted),
            max,
            by,
        });
    }

    fn both(h: &History) -> (Vec<&'static str>, Vec<String>) {
        let mut f = check(h, &ctx());
        let ours: Vec<&'static str> = f.violations.iter().map(|v| v.kind).collect();
        let judged = judge(h, &ctx(), &mut f);
        let failed = judged
            .failures()
            .iter()
            .map(|v| format!("{} {}", v.model, v.verdict))
            .collect();
        (ours, failed)
    }

    /// A write to a store on the lock server whose first send was applied, whose reply was
    /// lost, and whose repeat a newer holder's write then refused: a stale holder's refusal
    /// meanwhile names its token. Read alone, the refusal makes the register's history not
    /// linearizable; with the write of unknown outcome the worker records beside every
    /// refusal there, it is (CI found this history, seed 622088557).
    #[test]
    fn a_refused_repeat_of_an_applied_write_is_judged_with_its_first_send() {
        let key = ClientStore::Record.key("mutex", "m:0");
        let put = |h: &mut History, sec: usize, (t0, t1): (i64, i64), accepted, max| {
            let token = h.secs[sec].parts[0].token.unwrap_or_default();
            h.secs[sec].writes.push(Write {
                name: key.clone(),
                token,
                t0: t0 * MS,
                t1: t1 * MS,
                accepted: Some(accepted),
                max,
                by: String::new(),
            });
        };
        let mut h = History::default();
        sec(&mut h, (0, 5), (6, 200, 20), 9, "not-held");
        sec(&mut h, (21, 25), (26, 70, 900), 10, "held");
        sec(&mut h, (71, 75), (76, 90, 900), 11, "held");
        put(&mut h, 1, (30, 80), false, 11);
        put(&mut h, 0, (40, 41), false, 10);
        put(&mut h, 2, (77, 78), true, 11);
        let (_, judge) = both(&h);
        assert_eq!(judge, ["fenced register NOT LINEARIZABLE"]);
        let twin = Write::unanswered(&key, 10, 30 * MS, 80 * MS, "repeat".to_owned());
        h.secs[1].writes.insert(0, twin);
        let (_, judge) = both(&h);
        assert!(judge.is_empty(), "{judge:?}");
    }

    #[test]
    fn a_clean_history_passes_both() {
        let mut h = History::default();
        sec(&mut h, (0, 10), (11, 20, 900), 5, "held");
        write(&mut h, 0, 5, 12, true, 5);
        sec(&mut h, (5, 30), (31, 40, 900), 6, "held");
        write(&mut h, 1, 6, 32, true, 6);
        let (ours, judge) = both(&h);
        assert!(ours.is_empty() && judge.is_empty(), "{ours:?} {judge:?}");
    }

    #[test]
    fn a_release_without_the_owner_check_is_caught_by_both() {
        // A lock whose release deletes whatever is there: the first holder's release (it
        // believed itself done) freed the second holder's lock, and a third took it while the
        // second still held and believed it held.
        let mut h = History::default();
        sec(&mut h, (0, 10), (11, 20, 900), 5, "held");
        sec(&mut h, (5, 21), (22, 60, 900), 6, "held");
        sec(&mut h, (15, 30), (31, 50, 900), 7, "held");
        let (ours, judge) = both(&h);
        assert_eq!(ours, ["exclusion"]);
        assert_eq!(judge, ["lease mutex NOT LINEARIZABLE"]);
    }

    #[test]
    fn a_token_that_repeats_is_caught_by_both() {
        let mut h = History::default();
        sec(&mut h, (0, 10), (11, 20, 900), 5, "held");
        write(&mut h, 0, 5, 12, true, 5);
        sec(&mut h, (25, 30), (31, 40, 900), 5, "held");
        // The fenced store, told the same token by another section, refuses it.
        write(&mut h, 1, 5, 32, false, 5);
        let (ours, judge) = both(&h);
        assert_eq!(ours, ["fencing", "fencing"]);
        assert_eq!(judge, ["lease mutex NOT LINEARIZABLE"]);
    }

    #[test]
    fn a_write_of_a_section_cut_off_before_its_end_may_have_been_stored() {
        // A stalled holder (token 5) writes late and is refused by token 6, whose section
        // never reported its write: its worker was killed before the section ended (writes go
        // with the end), or the layer cancelled its handler with the write in flight.
        let verdicts = |h: &History| -> Vec<bool> {
            let (_, registers) = histories(h, &ctx());
            registers
                .iter()
                .map(|r| r.check(DEFAULT_BUDGET).ok())
                .collect()
        };
        let mut h = History::default();
        sec(&mut h, (0, 10), (11, 200, 20), 5, "not-held");
        sec(&mut h, (25, 30), (31, 40, 900), 6, "held");
        write(&mut h, 0, 5, 12, true, 5);
        write(&mut h, 0, 5, 150, false, 6);
        // Killed: no end, no release, no writes reported.
        h.secs[1].end = None;
        h.secs[1].rel = None;
        assert_eq!(verdicts(&h), [true]);
        // Cut off by the layer: ended, its write reported as in flight (no answer).
        h.secs[1].end = Some(40 * MS);
        h.secs[1].writes.push(Write::unanswered(
            "m:0",
            6,
            32 * MS,
            32 * MS,
            "no answer".to_owned(),
        ));
        assert_eq!(verdicts(&h), [true]);
        // Without either, the refusal names a token nobody wrote: not linearizable.
        h.secs[1].writes.clear();
        assert_eq!(verdicts(&h), [false]);
    }

    #[test]
    fn a_store_that_lets_a_stale_write_through_is_caught_by_the_register_model() {
        // Fenced overlap: the first holder stalled past its lease and wrote late; a broken
        // store accepted its lower token after the next holder's write.
        let mut h = History::default();
        sec(&mut h, (0, 10), (11, 200, 20), 5, "not-held");
        sec(&mut h, (25, 30), (31, 40, 900), 6, "held");
        write(&mut h, 1, 6, 32, true, 6);
        write(&mut h, 0, 5, 150, true, 5);
        let (ours, judge) = both(&h);
        assert!(ours.is_empty(), "{ours:?}");
        assert_eq!(judge, ["fenced register NOT LINEARIZABLE"]);
        // The store as it is refuses it: both pass.
        h.secs[0].writes[0].accepted = Some(false);
        h.secs[0].writes[0].max = 6;
        let (ours, judge) = both(&h);
        assert!(ours.is_empty() && judge.is_empty(), "{ours:?} {judge:?}");
    }

    #[test]
    fn a_double_grant_between_a_section_and_its_release_is_the_judges_alone() {
        // The second holder was granted after the first ended its section but before the
        // first's release, which then found the lock still its own: Redis granted it twice,
        // though the two critical sections did not overlap. The interval checks see no
        // overlap; the judge sees a grant while the lock was held.
        let mut h = History::default();
        sec(&mut h, (0, 10), (11, 20, 900), 5, "held");
        h.secs[0].rel = Some((40 * MS, 41 * MS, "held".to_owned()));
        sec(&mut h, (21, 25), (26, 30, 900), 6, "held");
        let mut f = check(&h, &ctx());
        assert!(f.violations.is_empty());
        let judged = judge(&h, &ctx(), &mut f);
        assert_eq!(judged.failures().len(), 1);
        assert_eq!(judged.disagreements.len(), 1, "{:?}", judged.disagreements);
        assert!(
            judged.disagreements[0].contains("the checks above found no violation"),
            "{:?}",
            judged.disagreements
        );
        assert_eq!(f.violations.len(), 1);
        assert_eq!(f.violations[0].kind, "linearizability");
    }
}
