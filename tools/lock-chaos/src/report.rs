//! The report of a run: faults by kind, operations by outcome, what every checker said, each
//! violation with the history that shows it, and the `RESULT` line.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::check::{Findings, Violation};
use super::cli::{RunConfig, TopologyKind};
use super::history::History;
use super::judge::Judged;
use super::nemesis::FaultKind;

/// What a run found.
#[derive(Debug)]
pub struct Report {
    pub(crate) seed: u64,
    pub(crate) topology: TopologyKind,
    pub(crate) workers: usize,
    pub(crate) tasks: usize,
    pub(crate) lease_ms: u64,
    pub(crate) http: bool,
    pub(crate) seconds: f64,
    pub(crate) clock_step_ms: i64,
    pub(crate) planned_faults: usize,
    /// Fault kind → (injected, skipped).
    pub(crate) faults: BTreeMap<&'static str, (usize, usize)>,
    /// Operation kind → outcome → count.
    pub(crate) ops: BTreeMap<String, BTreeMap<String, usize>>,
    /// Release outcome → count.
    pub(crate) releases: BTreeMap<String, usize>,
    /// Sections by family.
    pub(crate) sections: BTreeMap<String, usize>,
    pub(crate) worker_processes: usize,
    /// Changes of the primaries the coordinator saw (Sentinel and Cluster runs).
    pub(crate) primary_changes: Vec<String>,
    pub(crate) findings: Findings,
    /// The outside judge's verdicts (set by the coordinator after the checks).
    pub(crate) judged: Judged,
    pub(crate) log_dir: Option<String>,
    pub(crate) replay: String,
}

impl Report {
    pub(crate) fn new(
        cfg: &RunConfig,
        planned: usize,
        h: &History,
        findings: Findings,
        seconds: f64,
        clock_step_ms: i64,
        log_dir: Option<String>,
    ) -> Report {
        let (releases, sections) = section_counts(h);
        Report {
            seed: cfg.seed,
            topology: cfg.topology,
            workers: cfg.workers,
            tasks: cfg.tasks,
            lease_ms: cfg.lease.as_millis() as u64,
            http: cfg.http,
            seconds,
            clock_step_ms,
            planned_faults: planned,
            faults: fault_counts(h),
            ops: op_counts(h),
            releases,
            sections,
            worker_processes: h.lives.len(),
            primary_changes: h
                .faults
                .iter()
                .filter(|f| f.kind == FaultKind::PrimaryChanged)
                .map(|f| f.detail.clone())
                .collect(),
            findings,
            judged: Judged::default(),
            log_dir,
            replay: replay_line(cfg),
        }
    }

    /// How many violations the checkers found.
    pub fn violations(&self) -> usize {
        self.findings.violations.len()
    }

    /// How many faults the nemesis injected.
    pub fn faults_injected(&self) -> usize {
        self.faults.values().map(|v| v.0).sum()
    }

    pub(crate) fn operations(&self) -> usize {
        self.ops.values().flat_map(|m| m.values()).sum()
    }

    pub(crate) fn result_line(&self) -> String {
        format!(
            "RESULT seconds={:.0} ops={} faults={} violations={} fenced_overlaps={} not_linearizable={} seed={}",
            self.seconds,
            self.operations(),
            self.faults_injected(),
            self.violations(),
            self.findings.fenced_overlaps,
            self.judged.failures().len(),
            self.seed
        )
    }

    fn count(&self, kind: &str) -> usize {
        self.findings
            .violations
            .iter()
            .filter(|v| v.kind == kind)
            .count()
    }

    /// Guarded takes from the locks' counters: (applied, refused because the hold was not
    /// the lock's any more).
    pub fn takes(&self) -> (usize, usize) {
        (self.findings.takes_applied, self.findings.takes_not_held)
    }

    /// Whether the outside judge found every history linearizable and agreed with the
    /// checkers on every name.
    pub fn judge_agrees(&self) -> bool {
        self.judged.failures().is_empty() && self.judged.disagreements.is_empty()
    }

    /// How many keys, and operations on them, the outside judge judged as `model` ("lease
    /// mutex" or "fenced register").
    pub fn judged(&self, model: &str) -> (usize, usize) {
        let keys = self
            .judged
            .verdicts
            .iter()
            .filter(|v| v.model == model)
            .count();
        (keys, self.judged.ops(model))
    }

    /// How many kinds of fault the run planned (injected or skipped).
    pub fn fault_kinds(&self) -> usize {
        self.faults.len()
    }

    /// How many locks of the operation kinds starting with `kind` were acquired.
    pub fn acquisitions(&self, kind: &str) -> usize {
        self.ops
            .iter()
            .filter(|(k, _)| k.starts_with(kind))
            .map(|(_, outcomes)| outcomes.get("acquired").copied().unwrap_or(0))
            .sum()
    }

    /// The report as text, ending with the `RESULT` line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_header(&mut out);
        self.render_faults(&mut out);
        self.render_ops(&mut out);
        self.render_checks(&mut out);
        self.render_documented(&mut out);
        self.render_judge(&mut out);
        let _ = writeln!(out, "\nviolations: {}", self.violations());
        let f = &self.findings;
        for v in f.violations.iter().take(20) {
            render_violation(&mut out, v);
        }
        if f.violations.len() > 20 {
            let _ = writeln!(out, "  ... and {} more", f.violations.len() - 20);
        }
        if let Some(dir) = &self.log_dir {
            let _ = writeln!(out, "worker logs: {dir}");
        }
        out.push('\n');
        out.push_str(&self.result_line());
        out.push('\n');
        out
    }

    /// The run's line, the replay line and a clock warning.
    fn render_header(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "lock-chaos: seed {} ({} deployment, {} worker processes x {} tasks{}, lease {} ms), {:.1} s, {} worker processes in all",
            self.seed,
            self.topology.name(),
            self.workers,
            self.tasks,
            if self.http { " + HTTP" } else { "" },
            self.lease_ms,
            self.seconds,
            self.worker_processes,
        );
        let _ = writeln!(out, "replay the schedule: {}", self.replay);
        if self.clock_step_ms.abs() > 50 {
            let _ = writeln!(
                out,
                "WARNING: the system clock moved {} ms against the monotonic one during the run; the history's order may be off",
                self.clock_step_ms
            );
        }
    }

    /// Faults injected, by kind.
    fn render_faults(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\nfaults injected, by kind ({} planned):",
            self.planned_faults
        );
        for (kind, (done, skipped)) in &self.faults {
            let _ = write!(out, "  {kind:<26} {done:>6}");
            if *skipped > 0 {
                let _ = write!(out, "   ({skipped} skipped: target not running, or failed)");
            }
            out.push('\n');
        }
        let _ = writeln!(out, "  {:<26} {:>6}", "total", self.faults_injected());
        if !self.primary_changes.is_empty() {
            let _ = writeln!(
                out,
                "  observed changes of primary: {} ({})",
                self.primary_changes.len(),
                self.primary_changes.join("; ")
            );
        }
    }

    /// Operations by kind and outcome, releases and critical sections.
    fn render_ops(&self, out: &mut String) {
        let f = &self.findings;
        let _ = writeln!(out, "\noperations, by kind and outcome:");
        for (kind, outcomes) in &self.ops {
            let total: usize = outcomes.values().sum();
            let parts: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o} {n}")).collect();
            let _ = writeln!(out, "  {kind:<28} {total:>7}: {}", parts.join(", "));
        }
        let _ = writeln!(out, "  {:<28} {:>7}", "total", self.operations());
        let parts: Vec<String> = self
            .releases
            .iter()
            .map(|(o, n)| format!("{o} {n}"))
            .collect();
        let _ = writeln!(out, "  releases: {}", parts.join(", "));
        let parts: Vec<String> = self
            .sections
            .iter()
            .map(|(o, n)| format!("{o} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "  critical sections: {} ({}); fenced writes accepted {}, refused {}",
            f.sections,
            parts.join(", "),
            f.writes_accepted,
            f.writes_refused
        );
        let _ = writeln!(
            out,
            "  guarded takes from the counters: applied {}, not held {}, not enough {}, \
             unknown {}",
            f.takes_applied, f.takes_not_held, f.takes_not_enough, f.takes_unknown
        );
    }

    /// Every checker's verdict.
    fn render_checks(&self, out: &mut String) {
        let f = &self.findings;
        let ok = |n: usize| {
            if n == 0 {
                "ok".to_owned()
            } else {
                format!("{n} VIOLATIONS")
            }
        };
        let _ = writeln!(out, "\nchecks:");
        let _ = writeln!(
            out,
            "  mutual exclusion while both holders believed they held ... {}",
            ok(self.count("exclusion"))
        );
        let _ = writeln!(
            out,
            "  fencing tokens grow; no write within a lease refused .... {}",
            ok(self.count("fencing"))
        );
        let _ = writeln!(
            out,
            "  semaphore never above its size ........................... {}",
            ok(self.count("semaphore"))
        );
        let _ = writeln!(
            out,
            "  counters: exact, never below 0, taken by current holders . {}",
            ok(self.count("counter"))
        );
        let _ = writeln!(
            out,
            "  a killed worker's locks gone a lease later ............... {} ({} kills checked, {} not checkable)",
            ok(self.count("leftover")),
            f.kill_checks,
            f.kill_checks_skipped
        );
        let _ = writeln!(
            out,
            "  every wait, release and request ends within its bound .... {} (slowest: {:.0}% of its bound: {})",
            ok(self.count("liveness")),
            f.worst_liveness * 100.0,
            if f.worst_liveness_what.is_empty() {
                "-"
            } else {
                &f.worst_liveness_what
            }
        );
        let _ = writeln!(
            out,
            "  nothing held, subscribed or without a TTL after the run .. {}",
            ok(self.count("clean"))
        );
        let _ = writeln!(
            out,
            "  no crash, panic or untyped error ......................... {}",
            ok(self.count("crash") + self.count("error") + self.count("run"))
        );
    }

    /// The documented overlaps (not violations).
    fn render_documented(&self, out: &mut String) {
        let f = &self.findings;
        let _ = writeln!(
            out,
            "\ndocumented overlaps (DESIGN.md, \"What this does not promise\"; not violations):"
        );
        let _ = writeln!(
            out,
            "  fenced overlaps: {} (a holder past its lease overlapped the next holder; in {} of them its late write was refused by the fence, in the others it wrote nothing after the next holder)",
            f.fenced_overlaps, f.fenced_refusals
        );
        let _ = writeln!(
            out,
            "  unfenced stale overlaps: {} (read shares or permits past their lease: no token to fence them)",
            f.unfenced_stale_overlaps
        );
        if self.topology != TopologyKind::Standalone {
            let _ = writeln!(
                out,
                "  anomalies within a failover window: {}",
                f.failover_anomalies.len()
            );
            for v in f.failover_anomalies.iter().take(5) {
                let _ = writeln!(out, "    [{}] {}", v.kind, v.summary);
            }
        }
    }
}

impl Report {
    /// The outside judge's section: verdicts by model, failures, and disagreements with the
    /// checks above.
    fn render_judge(&self, out: &mut String) {
        let j = &self.judged;
        let _ = writeln!(
            out,
            "\noutside judge (stateright's linearizability tester, one history per key; {:.2} s):",
            j.seconds
        );
        for model in ["lease mutex", "fenced register"] {
            let verdicts: Vec<_> = j.verdicts.iter().filter(|v| v.model == model).collect();
            let bad: Vec<_> = verdicts.iter().filter(|v| !v.ok()).collect();
            let steps: u64 = verdicts.iter().map(|v| v.steps).sum();
            let _ = writeln!(
                out,
                "  {model:<16} {} keys, {} operations ({} of unknown outcome), {} search steps: {}",
                verdicts.len(),
                j.ops(model),
                verdicts.iter().map(|v| v.unknown).sum::<usize>(),
                steps,
                if bad.is_empty() {
                    "every key linearizable".to_owned()
                } else {
                    format!("{} keys NOT linearizable or undecided", bad.len())
                }
            );
            for v in bad {
                let documented = if j.documented.contains(&v.key) {
                    " (within a failover window: documented)"
                } else {
                    ""
                };
                let _ = writeln!(out, "    {v}{documented}");
            }
        }
        let _ = writeln!(
            out,
            "  not judged: read shares and semaphore permits (no model), busy answers (a killed worker's acquisition leaves no trace)"
        );
        if j.disagreements.is_empty() {
            let _ = writeln!(
                out,
                "  the judge and the checks above agree on every judged name"
            );
        } else {
            let _ = writeln!(
                out,
                "  DISAGREEMENTS with the checks above: {}",
                j.disagreements.len()
            );
            for d in &j.disagreements {
                let _ = writeln!(out, "    {d}");
            }
        }
    }
}

fn render_violation(out: &mut String, v: &Violation) {
    let _ = writeln!(out, "  [{}] {}", v.kind, v.summary);
    let shown = v.excerpt.len().min(40);
    for line in &v.excerpt[..shown] {
        let _ = writeln!(out, "      | {line}");
    }
    if v.excerpt.len() > shown {
        let _ = writeln!(out, "      | ... {} more lines", v.excerpt.len() - shown);
    }
}

/// Fault kind → (injected, skipped); the observed changes of primary are not faults.
fn fault_counts(h: &History) -> BTreeMap<&'static str, (usize, usize)> {
    let mut faults: BTreeMap<&'static str, (usize, usize)> = BTreeMap::new();
    for f in h
        .faults
        .iter()
        .filter(|f| f.kind != FaultKind::PrimaryChanged)
    {
        let e = faults.entry(f.kind.name()).or_default();
        if f.done {
            e.0 += 1;
        } else {
            e.1 += 1;
        }
    }
    faults
}

/// Operation kind (fixed-lease ones apart, HTTP requests by method and route) → outcome →
/// count.
fn op_counts(h: &History) -> BTreeMap<String, BTreeMap<String, usize>> {
    let mut ops: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for op in &h.ops {
        let kind = if op.fixed {
            format!("{} (fixed lease)", op.prim)
        } else {
            op.prim.clone()
        };
        *ops.entry(kind)
            .or_default()
            .entry(op.out.clone())
            .or_default() += 1;
    }
    for r in &h.http {
        let kind = format!("http {} /{}", r.method, r.route);
        *ops.entry(kind)
            .or_default()
            .entry(r.out.clone())
            .or_default() += 1;
    }
    ops
}

/// (release outcome → count, sections by family and path → count).
fn section_counts(h: &History) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut releases: BTreeMap<String, usize> = BTreeMap::new();
    let mut sections: BTreeMap<String, usize> = BTreeMap::new();
    for sec in &h.secs {
        if let Some((_, _, res)) = &sec.rel {
            *releases.entry(res.clone()).or_default() += 1;
        }
        let family = sec.parts.first().map_or("?", |p| p.family.as_str());
        let key = if sec.via == "direct" {
            family.to_owned()
        } else {
            format!("{family} ({})", sec.via)
        };
        *sections.entry(key).or_default() += 1;
    }
    (releases, sections)
}

/// The command line that replays the run's schedule (options left at their defaults left
/// out).
fn replay_line(cfg: &RunConfig) -> String {
    let mut replay = format!(
        "lock-chaos --seed {} --duration {}s",
        cfg.seed,
        cfg.duration.as_secs()
    );
    if cfg.topology != TopologyKind::Standalone {
        let _ = write!(replay, " --topology {}", cfg.topology.name());
    }
    if cfg.min_replicas > 0 {
        let _ = write!(replay, " --min-replicas {}", cfg.min_replicas);
    }
    if cfg.workers != 3 || cfg.tasks != 4 {
        let _ = write!(replay, " --workers {} --tasks {}", cfg.workers, cfg.tasks);
    }
    if cfg.lease.as_millis() != 1500 {
        let _ = write!(replay, " --lease {}ms", cfg.lease.as_millis());
    }
    if cfg.interval.as_millis() != 300 {
        let _ = write!(replay, " --interval {}ms", cfg.interval.as_millis());
    }
    if !cfg.http {
        replay.push_str(" --no-http");
    }
    replay
}
