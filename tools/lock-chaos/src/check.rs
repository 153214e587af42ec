//! The checkers: they read the whole history after the run and say what went wrong.
//!
//! Each critical section holds one or more locks (its *parts*) over three intervals, all on
//! the machine's one clock:
//!
//! - *raw*: from when the acquisition returned to when the section ended (before its release
//!   was sent; for a killed worker, the kill);
//! - *believed*: the raw interval cut at the last moment the holder was seen believing the lock
//!   its own (`remaining()` > 0, or `is_held()` for the layer's view);
//! - *effective*: the raw interval if the owner-checked release answered "it was still mine"
//!   (Redis kept it for us all along, whatever we believed), otherwise the believed one.
//!
//! Two holders whose effective intervals overlap on one name (a writer with anyone on a
//! read-write lock; more permits than the size on a semaphore) is a **violation**. Two whose
//! raw intervals overlap but effective ones do not is the overlap DESIGN.md documents (a
//! holder stalled past its lease): on a lock with fencing tokens it is a **fenced overlap**,
//! and the fence must have refused the stale holder's late writes; on read shares and permits
//! (no token) it is counted apart. Fencing tokens must grow in the order holders started,
//! and no write of a holder within its effective interval may be refused. Liveness: every
//! acquisition, release and HTTP request ends within its bound (less the time its worker was
//! stopped). After a `SIGKILL`, nothing the dead client held may be live once its lease ran
//! out; after the run, nothing may be held, subscribed, or without a time to live.
//!
//! On a Sentinel or Cluster run, what happens during a failover (and a lease after it) is
//! counted as documented, not as a violation: a failover can lose a lock or a renewal
//! (DESIGN.md, "Replica acknowledgement").

use std::collections::{BTreeMap, HashMap};

use super::history::{History, Sec};
use super::names::STOCK_INITIAL;
use super::nemesis::FaultKind;
use super::store::{ClientStore, Write};
use super::worker::UNLOCK_BOUND;

/// Something that should not have happened, with the part of the history that shows it.
#[derive(Debug, Clone)]
pub(crate) struct Violation {
    pub(crate) kind: &'static str,
    /// The lock name it is about, when it is about one (the outside judge compares by name).
    pub(crate) name: Option<String>,
    pub(crate) summary: String,
    pub(crate) excerpt: Vec<String>,
}

/// What the checkers found.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub(crate) violations: Vec<Violation>,
    /// Raw overlaps on locks with fencing tokens (a holder past its lease), and in how many
    /// of them the stale holder wrote late and was refused.
    pub(crate) fenced_overlaps: usize,
    pub(crate) fenced_refusals: usize,
    /// Raw overlaps involving a read share or permits past their lease (no token to fence).
    pub(crate) unfenced_stale_overlaps: usize,
    /// Anomalies inside a failover window (documented).
    pub(crate) failover_anomalies: Vec<Violation>,
    /// Sections checked, and how many names.
    pub(crate) sections: usize,
    pub(crate) intervals: usize,
    /// Writes at the fenced store: accepted, refused (of them, by a holder still believing it
    /// held: must be zero).
    pub(crate) writes_accepted: usize,
    pub(crate) writes_refused: usize,
    /// Guarded takes from the locks' counters: applied, refused because the hold was not the
    /// lock's any more, refused at the floor, and of unknown outcome.
    pub(crate) takes_applied: usize,
    pub(crate) takes_not_held: usize,
    pub(crate) takes_not_enough: usize,
    pub(crate) takes_unknown: usize,
    /// The slowest acquisition relative to its bound (0.5 = half of it).
    pub(crate) worst_liveness: f64,
    pub(crate) worst_liveness_what: String,
    /// Post-kill checks done (and not done: no client id, or the scan failed).
    pub(crate) kill_checks: usize,
    pub(crate) kill_checks_skipped: usize,
}

/// What the checkers need besides the history.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    pub(crate) t0: i64,
    pub(crate) run_end: i64,
    pub(crate) sem_size: u32,
    /// Failover windows (µs), widened by a lease on both sides.
    pub(crate) failovers: Vec<(i64, i64)>,
    /// Whether acquisitions waited for replicas (then a token cannot go back across a
    /// failover).
    pub(crate) min_replicas: u32,
    /// Whether sections also wrote to the stores on the lock server (`store::ClientStore`):
    /// on the standalone server.
    pub(crate) client_stores: bool,
}

impl Ctx {
    pub(crate) fn rel(&self, t: i64) -> String {
        format!("{:+.1}ms", (t - self.t0) as f64 / 1000.0)
    }

    fn in_failover(&self, a: i64, b: i64) -> bool {
        self.failovers.iter().any(|&(s, e)| a < e && s < b)
    }

    /// Whether a failover lies between `a` and `b` and acquisitions were not acknowledged
    /// by replicas: then the promoted replica may have an older lock string, and its tokens
    /// may go back (DESIGN.md: without `min_replicas`, a failover can lose a lock).
    fn token_may_go_back(&self, a: i64, b: i64) -> bool {
        self.min_replicas == 0 && self.in_failover(a, b)
    }

    /// The span a token anomaly between `a` and `b` is judged over: all of the run when
    /// tokens may have gone back in a failover between them (it is then documented).
    fn token_span(&self, a: i64, b: i64) -> (i64, i64) {
        if self.token_may_go_back(a, b) {
            (self.t0, self.run_end)
        } else {
            (a, b)
        }
    }
}

/// One part of one section, with its three intervals.
#[derive(Debug, Clone)]
struct Iv {
    sec: usize,
    start: i64,
    raw_end: i64,
    eff_end: i64,
    token: Option<u64>,
    kind: String,
    n: u32,
    /// Believed held when its acquisition returned.
    valid_at_start: bool,
}

/// When a section really ended, and when its belief did.
fn closing(h: &History, ctx: &Ctx, sec: &Sec) -> (i64, i64, bool) {
    let killed = h.life(sec.worker, sec.inc).and_then(|l| l.killed);
    let (raw_end, closed) = match (sec.end, killed) {
        (Some(end), _) => (end, true),
        (None, Some(k)) => (k.max(sec.start), true),
        (None, None) => (ctx.run_end, false),
    };
    let believed = sec.valid.unwrap_or(sec.acq_valid).min(raw_end);
    let confirmed = sec.via != "http" && matches!(&sec.rel, Some((_, _, r)) if r == "held");
    let eff_end = if confirmed {
        raw_end
    } else {
        believed.max(sec.start)
    };
    (raw_end, eff_end, closed)
}

pub(crate) fn check(h: &History, ctx: &Ctx) -> Findings {
    let mut f = Findings {
        sections: h.secs.len(),
        ..Findings::default()
    };
    // Group every part by (family, name).
    let mut by_name: BTreeMap<(String, String), Vec<Iv>> = BTreeMap::new();
    for (k, sec) in h.secs.iter().enumerate() {
        let (raw_end, eff_end, closed) = closing(h, ctx, sec);
        if !closed {
            f.violations.push(Violation {
                kind: "liveness",
                name: None,
                summary: format!(
                    "section {} (worker {}.{}) never ended and its worker was not killed",
                    sec.id, sec.worker, sec.inc
                ),
                excerpt: excerpt(h, ctx, &[k], sec.start - 1_000_000, ctx.run_end),
            });
        }
        for part in &sec.parts {
            f.intervals += 1;
            by_name
                .entry((part.family.clone(), part.name.clone()))
                .or_default()
                .push(Iv {
                    sec: k,
                    start: sec.start,
                    raw_end,
                    eff_end,
                    token: part.token,
                    kind: sec.kind.clone(),
                    n: sec.n,
                    valid_at_start: sec.acq_valid >= sec.start,
                });
        }
        for w in &sec.writes {
            match w.accepted {
                Some(true) => f.writes_accepted += 1,
                Some(false) => f.writes_refused += 1,
                None => {}
            }
        }
    }
    for ((family, name), mut ivs) in by_name {
        ivs.sort_by_key(|iv| (iv.start, iv.sec));
        if family == "sem" {
            check_permits(h, ctx, &name, &ivs, &mut f);
        } else {
            check_exclusion(h, ctx, &family, &name, &ivs, &mut f);
            check_tokens(h, ctx, &name, &ivs, &mut f);
        }
        check_writes(h, ctx, &name, &ivs, &mut f);
    }
    check_counters(h, ctx, &mut f);
    check_liveness(h, ctx, &mut f);
    check_kills(h, ctx, &mut f);
    check_restarts(h, ctx, &mut f);
    check_crashes(h, &mut f);
    f
}

/// A worker's panic or fatal error is a crash; the coordinator's problems are violations of
/// their own kind.
fn check_crashes(h: &History, f: &mut Findings) {
    for life in &h.lives {
        for note in &life.notes {
            if note.starts_with("panic") || note.starts_with("fatal") {
                f.violations.push(Violation {
                    kind: "crash",
                    name: None,
                    summary: format!(
                        "worker {}.{} (pid {}): {note}",
                        life.worker, life.inc, life.pid
                    ),
                    excerpt: Vec::new(),
                });
            }
        }
    }
    for (kind, problem) in &h.problems {
        f.violations.push(Violation {
            kind,
            name: None,
            summary: problem.clone(),
            excerpt: Vec::new(),
        });
    }
}

/// Whether two parts exclude each other on one name.
fn exclusive(a: &Iv, b: &Iv) -> bool {
    !(a.kind == "read" && b.kind == "read")
}

fn push(f: &mut Findings, ctx: &Ctx, v: Violation, from: i64, to: i64) {
    if ctx.in_failover(from, to) {
        f.failover_anomalies.push(v);
    } else {
        f.violations.push(v);
    }
}

fn describe(h: &History, ctx: &Ctx, iv: &Iv) -> String {
    let sec = &h.secs[iv.sec];
    format!(
        "{} {} {} (worker {}.{}, token {}) held [{}, {}], believed until {}, release: {}",
        sec.id,
        sec.via,
        sec.kind,
        sec.worker,
        sec.inc,
        iv.token.map_or("-".to_owned(), |t| t.to_string()),
        ctx.rel(iv.start),
        ctx.rel(iv.raw_end),
        ctx.rel(iv.eff_end),
        sec.rel.as_ref().map_or("none", |r| r.2.as_str()),
    )
}

fn check_exclusion(h: &History, ctx: &Ctx, family: &str, name: &str, ivs: &[Iv], f: &mut Findings) {
    let mut active: Vec<&Iv> = Vec::new();
    for b in ivs {
        active.retain(|a| a.raw_end > b.start);
        for a in &active {
            if a.sec == b.sec || !exclusive(a, b) {
                continue;
            }
            let effective = b.start < a.eff_end && a.start < b.eff_end;
            if effective {
                push(
                    f,
                    ctx,
                    Violation {
                        kind: "exclusion",
                        name: Some(name.to_owned()),
                        summary: format!(
                            "two holders of {family} lock {name} at once, both still believing they held it:\n      {}\n      {}",
                            describe(h, ctx, a),
                            describe(h, ctx, b)
                        ),
                        excerpt: excerpt(
                            h,
                            ctx,
                            &[a.sec, b.sec],
                            a.start.min(b.start) - 2_000_000,
                            a.raw_end.max(b.raw_end) + 500_000,
                        ),
                    },
                    a.start.min(b.start),
                    a.raw_end.max(b.raw_end),
                );
            } else if a.token.is_some() && b.token.is_some() {
                f.fenced_overlaps += 1;
                // The stale one is the one whose effective interval ended first.
                let stale = if a.eff_end <= b.start { a } else { b };
                let refused = h.secs[stale.sec]
                    .writes
                    .iter()
                    .any(|w| w.accepted == Some(false) && w.name == name);
                if refused {
                    f.fenced_refusals += 1;
                }
            } else {
                f.unfenced_stale_overlaps += 1;
            }
        }
        active.push(b);
    }
}

fn check_tokens(h: &History, ctx: &Ctx, name: &str, ivs: &[Iv], f: &mut Findings) {
    let mut best: Option<&Iv> = None;
    for iv in ivs
        .iter()
        .filter(|iv| iv.token.is_some() && iv.valid_at_start)
    {
        if let Some(prev) = best
            && iv.token <= prev.token
        {
            push(
                f,
                ctx,
                Violation {
                    kind: "fencing",
                    name: Some(name.to_owned()),
                    summary: format!(
                        "fencing token of {name} did not grow: a holder that started later got a token no larger than an earlier one's:\n      {}\n      {}",
                        describe(h, ctx, prev),
                        describe(h, ctx, iv)
                    ),
                    excerpt: excerpt(
                        h,
                        ctx,
                        &[prev.sec, iv.sec],
                        prev.start - 1_000_000,
                        iv.raw_end + 500_000,
                    ),
                },
                ctx.token_span(prev.start, iv.start).0,
                ctx.token_span(prev.start, iv.start).1.max(iv.raw_end),
            );
        }
        if best.is_none_or(|b| iv.token > b.token) {
            best = Some(iv);
        }
    }
}

/// How soon after a server restart each store on the lock server must answer a write again.
const HEALED_WITHIN: i64 = 5_000_000;

/// After each server restart, each store on the lock server ([`ClientStore`]) answers one of
/// the writes sent within [`HEALED_WITHIN`] of it: the paths around the lock heal by
/// themselves. A store that was sent writes there and answered none did not (a connection
/// that never reconnects, say).
fn check_restarts(h: &History, ctx: &Ctx, f: &mut Findings) {
    if !ctx.client_stores {
        return;
    }
    let restarts = h
        .faults
        .iter()
        .filter(|x| x.kind == FaultKind::ServerRestart && x.done);
    for restart in restarts {
        let until = restart.t1 + HEALED_WITHIN;
        for store in ClientStore::ALL {
            let sent: Vec<&Write> = h
                .secs
                .iter()
                .flat_map(|s| &s.writes)
                .filter(|w| w.name.starts_with(store.prefix()))
                .filter(|w| (restart.t1..until).contains(&w.t0))
                .collect();
            if sent.is_empty() || sent.iter().any(|w| w.accepted.is_some()) {
                continue;
            }
            f.violations.push(Violation {
                kind: "liveness",
                name: None,
                summary: format!(
                    "{} writes to {}* sent within {} s of the server restart at {}: none answered",
                    sent.len(),
                    store.prefix(),
                    HEALED_WITHIN / 1_000_000,
                    ctx.rel(restart.t1)
                ),
                excerpt: sent.iter().take(5).map(|w| write_line(w)).collect(),
            });
        }
    }
}

fn check_writes(h: &History, ctx: &Ctx, name: &str, ivs: &[Iv], f: &mut Findings) {
    for iv in ivs {
        let sec = &h.secs[iv.sec];
        for w in sec.writes.iter().filter(|w| w.name == name) {
            if w.accepted == Some(false) && w.t1 <= iv.eff_end {
                let by = h
                    .sec(&w.by)
                    .map(|s| s.id.clone())
                    .unwrap_or_else(|| w.by.clone());
                let mut secs = vec![iv.sec];
                if let Some(&k) = h.index.get(&w.by) {
                    secs.push(k);
                }
                // Refused by a token from before a failover that sent tokens back:
                // documented.
                let by_start = h.sec(&w.by).map_or(iv.start, |s| s.start);
                let (from, to) = ctx.token_span(by_start, iv.start);
                push(
                    f,
                    ctx,
                    Violation {
                        kind: "fencing",
                        name: Some(name.to_owned()),
                        summary: format!(
                            "a write to {name} by a holder within its lease was refused (token {} not above {} of {by}):\n      {}",
                            w.token,
                            w.max,
                            describe(h, ctx, iv)
                        ),
                        excerpt: excerpt(h, ctx, &secs, iv.start - 2_000_000, w.t1 + 500_000),
                    },
                    from,
                    to.max(w.t1),
                );
            }
        }
    }
}

/// The counters under the locks (a standalone run): each lock's counter ends at its initial
/// units less its applied takes (less up to its takes of unknown outcome), never below zero,
/// and every applied take was sent before any holder with a greater token had the lock (a
/// take applied after a newer holder's acquisition returned would be a stale holder's).
fn check_counters(h: &History, ctx: &Ctx, f: &mut Findings) {
    for take in &h.takes {
        match take.out.as_deref() {
            Some("applied") => f.takes_applied += 1,
            Some("not_held") => f.takes_not_held += 1,
            Some("not_enough") => f.takes_not_enough += 1,
            _ => f.takes_unknown += 1,
        }
    }
    check_counts(h, ctx, f);
    check_takers(h, ctx, f);
}

/// A "counter" violation about lock `name`, with the history between `from` and `to`.
fn counter(
    h: &History,
    ctx: &Ctx,
    summary: String,
    name: &str,
    secs: Vec<usize>,
    (from, to): (i64, i64),
) -> Violation {
    Violation {
        kind: "counter",
        name: Some(name.to_owned()),
        summary,
        excerpt: excerpt(h, ctx, &secs, from, to),
    }
}

/// Each counter ends at its initial units less its applied takes (less at most its takes of
/// unknown outcome), never below zero.
fn check_counts(h: &History, ctx: &Ctx, f: &mut Findings) {
    for (name, left) in &h.stock_left {
        let takes: Vec<_> = h.takes.iter().filter(|t| &t.name == name).collect();
        let applied = takes
            .iter()
            .filter(|t| t.out.as_deref() == Some("applied"))
            .count() as i64;
        let unknown = takes.iter().filter(|t| t.unknown()).count() as i64;
        let most = STOCK_INITIAL - applied;
        let least = most - unknown;
        let summary = match left {
            Err(e) => Some(format!(
                "the counter of {name} could not be read after the run: {e}"
            )),
            Ok(left) if *left < 0 || *left > most || *left < least => Some(format!(
                "the counter of {name} ends at {left}: {STOCK_INITIAL} less {applied} applied \
                 takes and up to {unknown} of unknown outcome allows {}..={most}",
                least.max(0)
            )),
            Ok(_) => None,
        };
        if let Some(summary) = summary {
            let v = counter(h, ctx, summary, name, Vec::new(), (ctx.t0, ctx.run_end));
            f.violations.push(v);
        }
    }
}

/// Every applied take left a count of at least zero and was sent before any holder with a
/// greater token had acquired the lock.
fn check_takers(h: &History, ctx: &Ctx, f: &mut Findings) {
    for take in h
        .takes
        .iter()
        .filter(|t| t.out.as_deref() == Some("applied"))
    {
        if take.left.is_some_and(|left| left < 0) {
            let summary = format!("take {} of {} left {:?}", take.id, take.name, take.left);
            let v = counter(h, ctx, summary, &take.name, Vec::new(), (take.t0, take.t0));
            f.violations.push(v);
        }
        let Some(token) = take.token else { continue };
        let newer = h.secs.iter().enumerate().find(|(_, sec)| {
            sec.start < take.t0
                && sec
                    .parts
                    .iter()
                    .any(|p| p.name == take.name && p.token.is_some_and(|t| t > token))
        });
        if let Some((k, sec)) = newer {
            let mut secs = vec![k];
            if let Some(&own) = h.index.get(&take.sec) {
                secs.push(own);
            }
            let summary = format!(
                "take {} of {} by {} (token {token}) was applied, but was sent at {} after {} \
                 with a greater token had the lock (at {})",
                take.id,
                take.name,
                take.sec,
                ctx.rel(take.t0),
                sec.id,
                ctx.rel(sec.start)
            );
            let span = (sec.start - 2_000_000, take.t0 + 500_000);
            let v = counter(h, ctx, summary, &take.name, secs, span);
            push(f, ctx, v, sec.start, take.t0);
        }
    }
}

fn check_permits(h: &History, ctx: &Ctx, name: &str, ivs: &[Iv], f: &mut Findings) {
    // Sweep the effective intervals, then the raw ones (ends before starts at one instant):
    // an excess only the raw sweep sees involves a holder past its lease.
    let mut episodes = [0usize; 2];
    for (pass, raw) in [false, true].into_iter().enumerate() {
        let mut events: Vec<(i64, i32, usize)> = Vec::new();
        for (k, iv) in ivs.iter().enumerate() {
            let end = if raw { iv.raw_end } else { iv.eff_end };
            if end > iv.start {
                events.push((iv.start, iv.n as i32, k));
                events.push((end, -(iv.n as i32), k));
            }
        }
        events.sort_by_key(|&(t, d, _)| (t, d));
        let mut held = 0i32;
        let mut active: Vec<usize> = Vec::new();
        let mut in_excess = false;
        for (t, d, k) in events {
            held += d;
            if d > 0 {
                active.push(k);
            } else {
                active.retain(|&x| x != k);
            }
            let excess = held > ctx.sem_size as i32;
            if excess && !in_excess {
                episodes[pass] += 1;
                if !raw {
                    let holders: Vec<String> =
                        active.iter().map(|&x| describe(h, ctx, &ivs[x])).collect();
                    let secs: Vec<usize> = active.iter().map(|&x| ivs[x].sec).collect();
                    push(
                        f,
                        ctx,
                        Violation {
                            kind: "semaphore",
                            name: Some(name.to_owned()),
                            summary: format!(
                                "{held} permits of semaphore {name} (size {}) held at {}:\n      {}",
                                ctx.sem_size,
                                ctx.rel(t),
                                holders.join("\n      ")
                            ),
                            excerpt: excerpt(h, ctx, &secs, t - 2_000_000, t + 500_000),
                        },
                        t,
                        t,
                    );
                }
            }
            in_excess = excess;
        }
    }
    f.unfenced_stale_overlaps += episodes[1].saturating_sub(episodes[0]);
}

/// An operation's time against its bound, for the liveness check.
struct Timed {
    what: String,
    /// µs, the time its workers were stopped left out.
    took: i64,
    /// µs.
    bound: i64,
    worker: usize,
    t0: i64,
    hung: bool,
}

/// Keeps the slowest operation relative to its bound, and makes one over its bound (or
/// abandoned as hung) a violation.
fn note(h: &History, ctx: &Ctx, f: &mut Findings, t: Timed) {
    let Timed {
        what,
        took,
        bound,
        worker,
        t0,
        hung,
    } = t;
    let ratio = took as f64 / bound.max(1) as f64;
    if ratio > f.worst_liveness {
        f.worst_liveness = ratio;
        f.worst_liveness_what = what.clone();
    }
    if hung || took > bound {
        f.violations.push(Violation {
            kind: "liveness",
            name: None,
            summary: format!(
                "{what} took {:.0} ms (bound {:.0} ms, time its workers were stopped left out){}",
                took as f64 / 1000.0,
                bound as f64 / 1000.0,
                if hung { ": abandoned as hung" } else { "" }
            ),
            excerpt: excerpt_worker(h, ctx, worker, t0 - 1_000_000, t0 + took + 1_000_000),
        });
    }
}

fn check_liveness(h: &History, ctx: &Ctx, f: &mut Findings) {
    for op in &h.ops {
        let took = op.t1 - op.t0 - h.stopped_within(op.worker, op.t0, op.t1, ctx.run_end);
        note(
            h,
            ctx,
            f,
            Timed {
                what: format!(
                    "acquisition {} {} {} ({}, wait {}) by worker {}.{} ({})",
                    op.req,
                    op.prim,
                    op.name,
                    op.via,
                    op.wait_ms
                        .map_or("none: one try".to_owned(), |w| format!("{w} ms")),
                    op.worker,
                    op.inc,
                    op.out
                ),
                took,
                bound: op.bound_ms as i64 * 1000,
                worker: op.worker,
                t0: op.t0,
                hung: op.out == "hung",
            },
        );
    }
    for r in &h.http {
        let stopped = h.stopped_within(r.worker, r.t0, r.t1, ctx.run_end)
            + h.stopped_within(r.peer, r.t0, r.t1, ctx.run_end);
        let took = r.t1 - r.t0 - stopped;
        note(
            h,
            ctx,
            f,
            Timed {
                what: format!(
                    "HTTP {} /{}/{} {} from worker {}.{} to worker {} ({} {})",
                    r.req, r.route, r.key, r.method, r.worker, r.inc, r.peer, r.status, r.out
                ),
                took,
                bound: r.bound_ms as i64 * 1000,
                worker: r.worker,
                t0: r.t0,
                hung: r.out == "hung",
            },
        );
    }
    for sec in &h.secs {
        if let Some((t0, t1, res)) = &sec.rel {
            let took = t1 - t0 - h.stopped_within(sec.worker, *t0, *t1, ctx.run_end);
            note(
                h,
                ctx,
                f,
                Timed {
                    what: format!("release of {} ({})", sec.id, res),
                    took,
                    bound: UNLOCK_BOUND.as_micros() as i64,
                    worker: sec.worker,
                    t0: *t0,
                    hung: res == "hung",
                },
            );
        }
    }
    check_errors(h, f);
}

/// An acquisition that failed with an untyped error, or an HTTP request answered with one,
/// is a violation.
fn check_errors(h: &History, f: &mut Findings) {
    for op in h.ops.iter().filter(|op| op.out == "unexpected") {
        f.violations.push(Violation {
            kind: "error",
            name: None,
            summary: format!(
                "acquisition {} {} {} by worker {}.{} failed with an untyped error: {}",
                op.req,
                op.prim,
                op.name,
                op.worker,
                op.inc,
                op.err.as_deref().unwrap_or("?")
            ),
            excerpt: Vec::new(),
        });
    }
    for r in h.http.iter().filter(|r| r.out == "unexpected") {
        f.violations.push(Violation {
            kind: "error",
            name: None,
            summary: format!(
                "HTTP {} /{}/{} answered {}",
                r.req, r.route, r.key, r.status
            ),
            excerpt: Vec::new(),
        });
    }
}

fn check_kills(h: &History, ctx: &Ctx, f: &mut Findings) {
    for pk in &h.post_kills {
        if pk.client_id.is_none() || pk.error.is_some() {
            f.kill_checks_skipped += 1;
            continue;
        }
        f.kill_checks += 1;
        if !pk.leftovers.is_empty() {
            let what: Vec<String> = pk
                .leftovers
                .iter()
                .map(|l| format!("{}: {}", l.key, l.what))
                .collect();
            push(
                f,
                ctx,
                Violation {
                    kind: "leftover",
                    name: None,
                    summary: format!(
                        "worker {}.{} was killed at {}; at {} (its lease and 3 s later) it still held:\n      {}",
                        pk.worker,
                        pk.inc,
                        ctx.rel(pk.killed),
                        ctx.rel(pk.checked),
                        what.join("\n      ")
                    ),
                    excerpt: excerpt_worker(h, ctx, pk.worker, pk.killed - 3_000_000, pk.checked),
                },
                pk.killed,
                pk.checked,
            );
        }
    }
}

/// The events of sections `secs`, the other sections on their names, the faults and the
/// worker lives around `[from, to]`, in time order.
pub(crate) fn excerpt(h: &History, ctx: &Ctx, secs: &[usize], from: i64, to: i64) -> Vec<String> {
    let mut lines: Vec<(i64, String)> = Vec::new();
    for &k in shown_sections(h, ctx, secs, from, to).keys() {
        push_section(&mut lines, ctx, &h.secs[k]);
    }
    for fault in &h.faults {
        if fault.t0 <= to && fault.t1 >= from {
            lines.push((
                fault.t0,
                format!(
                    "nemesis {} {}until {}: {}",
                    fault.kind.name(),
                    fault
                        .target
                        .map_or(String::new(), |t| format!("worker {t} ")),
                    ctx.rel(fault.t1),
                    fault.detail
                ),
            ));
        }
    }
    let workers: Vec<usize> = secs.iter().map(|&k| h.secs[k].worker).collect();
    for life in h.lives.iter().filter(|l| workers.contains(&l.worker)) {
        push_life(&mut lines, ctx, life, from, to);
    }
    lines.sort_by_key(|(t, _)| *t);
    lines
        .into_iter()
        .map(|(t, l)| format!("{:>12} {l}", ctx.rel(t)))
        .collect()
}

/// Sections `secs` and (at most 12) others on their names within `[from, to]`.
fn shown_sections(
    h: &History,
    ctx: &Ctx,
    secs: &[usize],
    from: i64,
    to: i64,
) -> HashMap<usize, ()> {
    let names: Vec<(String, String)> = secs
        .iter()
        .flat_map(|&k| {
            h.secs[k]
                .parts
                .iter()
                .map(|p| (p.family.clone(), p.name.clone()))
        })
        .collect();
    let mut shown: HashMap<usize, ()> = HashMap::new();
    for &k in secs {
        shown.insert(k, ());
    }
    // Neighbours on the same names (at most 12).
    let mut neighbours = 0;
    for (k, sec) in h.secs.iter().enumerate() {
        if neighbours >= 12 {
            break;
        }
        if shown.contains_key(&k) || sec.start > to || sec.end.unwrap_or(ctx.run_end) < from {
            continue;
        }
        if sec
            .parts
            .iter()
            .any(|p| names.contains(&(p.family.clone(), p.name.clone())))
        {
            shown.insert(k, ());
            neighbours += 1;
        }
    }
    shown
}

/// A section's events: acquired, its writes, lost, ended, released.
fn push_section(lines: &mut Vec<(i64, String)>, ctx: &Ctx, sec: &Sec) {
    let parts: Vec<String> = sec
        .parts
        .iter()
        .map(|p| {
            format!(
                "{}:{}@{}",
                p.family,
                p.name,
                p.token.map_or("-".to_owned(), |t| t.to_string())
            )
        })
        .collect();
    let who = format!("w{}.{} {}", sec.worker, sec.inc, sec.id);
    lines.push((
        sec.start,
        format!(
            "{who} acquired ({} {}, request {}) {} believed until {}",
            sec.via,
            sec.kind,
            sec.req,
            parts.join(" "),
            ctx.rel(sec.acq_valid)
        ),
    ));
    for w in &sec.writes {
        lines.push((w.t0, format!("{who} {}", write_line(w))));
    }
    if let Some(l) = sec.lost {
        lines.push((l, format!("{who} lost() fired")));
    }
    if let Some(e) = sec.end {
        lines.push((
            e,
            format!(
                "{who} ended; believed held until {}",
                sec.valid.map_or("?".to_owned(), |v| ctx.rel(v))
            ),
        ));
    }
    if let Some((t0, t1, res)) = &sec.rel {
        lines.push((
            *t0,
            format!("{who} release sent; answered {res} at {}", ctx.rel(*t1)),
        ));
    }
}

fn push_life(
    lines: &mut Vec<(i64, String)>,
    ctx: &Ctx,
    life: &super::history::Life,
    from: i64,
    to: i64,
) {
    let _ = ctx;
    let who = format!("w{}.{} (pid {})", life.worker, life.inc, life.pid);
    for &(a, b) in &life.stops {
        if a <= to && b.unwrap_or(i64::MAX) >= from {
            lines.push((a, format!("{who} SIGSTOP")));
            if let Some(b) = b {
                lines.push((b, format!("{who} SIGCONT")));
            }
        }
    }
    if let Some(k) = life.killed
        && (from..=to).contains(&k)
    {
        lines.push((k, format!("{who} SIGKILL")));
    }
    if (from..=to).contains(&life.started) {
        lines.push((life.started, format!("{who} started")));
    }
}

fn excerpt_worker(h: &History, ctx: &Ctx, worker: usize, from: i64, to: i64) -> Vec<String> {
    let mut lines: Vec<(i64, String)> = Vec::new();
    for life in h.lives.iter().filter(|l| l.worker == worker) {
        push_life(&mut lines, ctx, life, from, to);
    }
    for fault in &h.faults {
        if fault.t0 <= to && fault.t1 >= from {
            lines.push((
                fault.t0,
                format!(
                    "nemesis {} until {}: {}",
                    fault.kind.name(),
                    ctx.rel(fault.t1),
                    fault.detail
                ),
            ));
        }
    }
    lines.sort_by_key(|(t, _)| *t);
    lines
        .into_iter()
        .map(|(t, l)| format!("{:>12} {l}", ctx.rel(t)))
        .collect()
}

fn write_line(w: &Write) -> String {
    match w.accepted {
        Some(true) => format!("wrote {} with token {}: accepted", w.name, w.token),
        Some(false) => format!(
            "wrote {} with token {}: REFUSED (store has {} from {})",
            w.name, w.token, w.max, w.by
        ),
        None => format!(
            "wrote {} with token {}: check server failed: {}",
            w.name, w.token, w.by
        ),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::history::{Life, Op, Part};
    use super::super::store::Write;
    use super::*;

    pub(crate) const MS: i64 = 1000;

    /// A standalone run of 100 s that started at 0.
    pub(crate) fn ctx() -> Ctx {
        Ctx {
            t0: 0,
            run_end: 100_000 * MS,
            sem_size: 2,
            failovers: Vec::new(),
            min_replicas: 0,
            client_stores: false,
        }
    }

    /// A section of worker `w` on `family`/`name` from `start` to `end` ms, believed held
    /// until `valid` ms, with `token`, whose release answered `rel`.
    #[allow(clippy::too_many_arguments)]
    fn sec(
        h: &mut History,
        w: usize,
        family: &str,
        kind: &str,
        name: &str,
        span: (i64, i64, i64),
        token: Option<u64>,
        rel: &str,
    ) -> usize {
        let (start, end, valid) = span;
        let id = format!("s{w}.0.{}", h.secs.len());
        h.index.insert(id.clone(), h.secs.len());
        h.secs.push(Sec {
            id,
            worker: w,
            inc: 0,
            via: "direct".to_owned(),
            kind: kind.to_owned(),
            n: 1,
            parts: vec![Part {
                family: family.to_owned(),
                name: name.to_owned(),
                token,
            }],
            start: start * MS,
            acq_valid: valid.min(start + 1_000) * MS,
            req: "r".to_owned(),
            end: Some(end * MS),
            valid: Some(valid * MS),
            lost: None,
            writes: Vec::new(),
            rel: Some((end * MS, end * MS + 1, rel.to_owned())),
        });
        h.secs.len() - 1
    }

    /// After a server restart, a store on the lock server that answers none of the writes
    /// sent to it within 5 s is a liveness violation; one answered write is enough, and
    /// writes sent later are not its concern.
    #[test]
    fn a_store_that_does_not_heal_after_a_restart_is_a_violation() {
        let mut h = History::default();
        let s = sec(
            &mut h,
            0,
            "mutex",
            "excl",
            "m:0",
            (10, 50, 1000),
            Some(1),
            "held",
        );
        h.faults.push(super::super::history::Fault {
            kind: FaultKind::ServerRestart,
            target: None,
            t0: 100 * MS,
            t1: 200 * MS,
            done: true,
            detail: String::new(),
        });
        let key = ClientStore::Connection.key("mutex", "m:0");
        let unanswered =
            |at: i64| Write::unanswered(&key, 1, at * MS, at * MS + 1, "broken pipe".into());
        h.secs[s].writes = vec![unanswered(300), unanswered(4_000), unanswered(9_000)];
        let ctx = Ctx {
            client_stores: true,
            ..ctx()
        };
        let f = check(&h, &ctx);
        assert_eq!(kinds(&f), ["liveness"], "{:?}", f.violations);
        // One answer within the 5 s is enough.
        h.secs[s].writes[1].accepted = Some(true);
        assert!(check(&h, &ctx).violations.is_empty());
    }

    fn kinds(f: &Findings) -> Vec<&'static str> {
        f.violations.iter().map(|v| v.kind).collect()
    }

    #[test]
    fn holders_that_both_believe_they_hold_are_a_violation() {
        let mut h = History::default();
        sec(
            &mut h,
            0,
            "mutex",
            "excl",
            "m:0",
            (10, 50, 1000),
            Some(1),
            "held",
        );
        sec(
            &mut h,
            1,
            "mutex",
            "excl",
            "m:0",
            (40, 60, 1000),
            Some(2),
            "held",
        );
        assert_eq!(kinds(&check(&h, &ctx())), ["exclusion"]);
    }

    #[test]
    fn a_release_that_was_still_held_proves_redis_kept_the_lock() {
        // The first holder's belief ended at 30 ms, but its release said the lock was still
        // its own at 50 ms: Redis granted it twice.
        let mut h = History::default();
        sec(
            &mut h,
            0,
            "mutex",
            "excl",
            "m:0",
            (10, 50, 30),
            Some(1),
            "held",
        );
        sec(
            &mut h,
            1,
            "mutex",
            "excl",
            "m:0",
            (40, 60, 1000),
            Some(2),
            "held",
        );
        assert_eq!(kinds(&check(&h, &ctx())), ["exclusion"]);
    }

    #[test]
    fn a_stale_holder_is_a_fenced_overlap_when_the_fence_refused_it() {
        let mut h = History::default();
        let a = sec(
            &mut h,
            0,
            "mutex",
            "excl",
            "m:0",
            (10, 500, 30),
            Some(1),
            "not-held",
        );
        sec(
            &mut h,
            1,
            "mutex",
            "excl",
            "m:0",
            (40, 60, 1000),
            Some(2),
            "held",
        );
        let by = h.secs[1].id.clone();
        h.secs[a].writes.push(Write {
            name: "m:0".to_owned(),
            token: 1,
            t0: 490 * MS,
            t1: 491 * MS,
            accepted: Some(false),
            max: 2,
            by,
        });
        let f = check(&h, &ctx());
        assert!(f.violations.is_empty(), "{:?}", kinds(&f));
        assert_eq!((f.fenced_overlaps, f.fenced_refusals), (1, 1));
    }

    #[test]
    fn a_token_that_does_not_grow_and_a_refused_valid_write_are_violations() {
        let mut h = History::default();
        sec(
            &mut h,
            0,
            "mutex",
            "excl",
            "m:0",
            (10, 20, 1000),
            Some(5),
            "held",
        );
        let b = sec(
            &mut h,
            1,
            "mutex",
            "excl",
            "m:0",
            (30, 40, 1000),
            Some(5),
            "held",
        );
        let by = h.secs[0].id.clone();
        h.secs[b].writes.push(Write {
            name: "m:0".to_owned(),
            token: 5,
            t0: 31 * MS,
            t1: 32 * MS,
            accepted: Some(false),
            max: 5,
            by,
        });
        assert_eq!(kinds(&check(&h, &ctx())), ["fencing", "fencing"]);
    }

    #[test]
    fn readers_share_and_writers_exclude() {
        let mut h = History::default();
        sec(&mut h, 0, "rw", "read", "r:0", (10, 50, 1000), None, "held");
        sec(&mut h, 1, "rw", "read", "r:0", (20, 60, 1000), None, "held");
        assert!(check(&h, &ctx()).violations.is_empty());
        sec(
            &mut h,
            2,
            "rw",
            "write",
            "r:0",
            (55, 70, 1000),
            Some(3),
            "held",
        );
        assert_eq!(kinds(&check(&h, &ctx())), ["exclusion"]);
    }

    #[test]
    fn permits_above_the_size_are_a_violation_unless_a_holder_was_stale() {
        let mut h = History::default();
        sec(
            &mut h,
            0,
            "sem",
            "permit",
            "s:0",
            (10, 50, 1000),
            None,
            "held",
        );
        sec(
            &mut h,
            1,
            "sem",
            "permit",
            "s:0",
            (20, 60, 1000),
            None,
            "held",
        );
        let c = sec(
            &mut h,
            2,
            "sem",
            "permit",
            "s:0",
            (30, 40, 1000),
            None,
            "held",
        );
        assert_eq!(kinds(&check(&h, &ctx())), ["semaphore"]);
        // The third believed it held only until 25 ms and its release found it gone.
        h.secs[c].valid = Some(25 * MS);
        h.secs[c].rel = Some((40 * MS, 41 * MS, "not-held".to_owned()));
        let f = check(&h, &ctx());
        assert!(f.violations.is_empty(), "{:?}", kinds(&f));
        assert_eq!(f.unfenced_stale_overlaps, 1);
    }

    #[test]
    fn a_wait_past_its_bound_is_a_violation_unless_its_worker_was_stopped() {
        let mut h = History::default();
        h.ops.push(Op {
            worker: 0,
            inc: 0,
            req: "r0.0.1".to_owned(),
            prim: "mutex".to_owned(),
            via: "direct".to_owned(),
            name: "m:0".to_owned(),
            wait_ms: Some(1000),
            fixed: false,
            t0: 0,
            t1: 6000 * MS,
            out: "busy".to_owned(),
            err: None,
            bound_ms: 5000,
        });
        assert_eq!(kinds(&check(&h, &ctx())), ["liveness"]);
        h.lives.push(Life {
            worker: 0,
            inc: 0,
            pid: 1,
            started: 0,
            hello: None,
            client_id: None,
            killed: None,
            exited: None,
            drained: None,
            bye: None,
            stops: vec![(1000 * MS, Some(3000 * MS))],
            notes: Vec::new(),
        });
        assert!(check(&h, &ctx()).violations.is_empty());
    }
}
