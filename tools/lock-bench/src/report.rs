//! What a run reports: the tables, the targets, the `BENCH` lines, the hand-off chart and the
//! raw results file.

use std::path::{Path, PathBuf};

use crate::chart;
use crate::contender::Kind;
use crate::server::ServerVersion;
use crate::stats::Sample;

/// One scenario's headline figure per contender, for its `BENCH` line.
pub(crate) struct Bench {
    scenario: &'static str,
    /// `[ours, floor, rslock]`
    values: [Option<f64>; 3],
    decimals: usize,
    /// The native floor's figure, where it ran (a server with `DELIFEQ`).
    pub(crate) native: Option<f64>,
    /// Server µs per cycle of each row that has it, in the order of the rows: (row key, µs).
    pub(crate) server_us: Vec<(&'static str, f64)>,
    /// The client's CPU µs per cycle of each row that has it, in the order of the rows: (row
    /// key, µs).
    pub(crate) client_us: Vec<(&'static str, f64)>,
    /// The client's heap allocations per cycle (W1, W2) or request (W6) of each row that has
    /// it (with the `allocs` feature; NaN where not counted, left off the line), in the order
    /// of the rows: (row key, allocations).
    pub(crate) allocs: Vec<(&'static str, f64)>,
    /// Figures of the scenario's own, last on the line, in this order: (field, whole
    /// number). R1/R2: each row's state per key in bytes.
    pub(crate) extra: Vec<(String, f64)>,
    /// Words of the scenario's own, after [`extra`](Self::extra): (field, value). X1:
    /// `pinned=yes|no`.
    pub(crate) labels: Vec<(&'static str, String)>,
    /// With `--runs` above 1: the medians of the per-run ratios (floor, rslock, native
    /// floor), written in place of the ratios of the values.
    ratios: Option<[Option<f64>; 3]>,
    /// With `--runs` above 1: the fields after every other one (`runs=`, the ranges).
    tail: String,
}

impl Bench {
    pub(crate) fn new(scenario: &'static str, values: [Option<f64>; 3], decimals: usize) -> Self {
        Bench {
            scenario,
            values,
            decimals,
            native: None,
            server_us: Vec::new(),
            client_us: Vec::new(),
            allocs: Vec::new(),
            extra: Vec::new(),
            labels: Vec::new(),
            ratios: None,
            tail: String::new(),
        }
    }

    pub(crate) fn scenario(&self) -> &'static str {
        self.scenario
    }

    /// The ratios of a run: ours over the floor, rslock and the native floor.
    fn run_ratios(&self) -> [Option<f64>; 3] {
        [
            ratio(self.values[0], self.values[1]),
            ratio(self.values[0], self.values[2]),
            ratio(self.values[0], self.native),
        ]
    }

    /// The line of several runs of one scenario: each figure the median across the runs, each
    /// ratio the median of the per-run ratios; then, after every field a run has, `runs=` and
    /// the range of the values and of the ratios (`<field>_min=`, `<field>_max=`).
    pub(crate) fn median(runs: &[&Bench]) -> Bench {
        use crate::stats::{median, range};
        let first = runs[0];
        let med = |f: &dyn Fn(&Bench) -> Option<f64>| -> Option<f64> {
            let m = median(runs.iter().filter_map(|b| f(b)));
            m.is_finite().then_some(m)
        };
        let by_key = |pick: &dyn Fn(&Bench) -> &Vec<(&'static str, f64)>| {
            pick(first)
                .iter()
                .map(|(key, _)| {
                    let all = runs
                        .iter()
                        .filter_map(|b| pick(b).iter().find(|(k, _)| k == key).map(|p| p.1));
                    (*key, median(all))
                })
                .collect::<Vec<_>>()
        };
        let mut b = Bench::new(
            first.scenario,
            [0, 1, 2].map(|i| med(&|b: &Bench| b.values[i])),
            first.decimals,
        );
        b.native = med(&|b: &Bench| b.native);
        b.server_us = by_key(&|b: &Bench| &b.server_us);
        b.client_us = by_key(&|b: &Bench| &b.client_us);
        b.allocs = by_key(&|b: &Bench| &b.allocs);
        b.extra = first
            .extra
            .iter()
            .map(|(key, _)| {
                let all = runs
                    .iter()
                    .filter_map(|b| b.extra.iter().find(|(k, _)| k == key).map(|p| p.1));
                (key.clone(), median(all))
            })
            .collect();
        b.labels = first.labels.clone();
        b.ratios = Some([0, 1, 2].map(|i| med(&|b: &Bench| b.run_ratios()[i])));
        let mut tail = format!(" runs={}", runs.len());
        for (i, kind) in Kind::ALL.iter().enumerate() {
            if let Some((lo, hi)) = range(runs.iter().filter_map(|b| b.values[i])) {
                let d = first.decimals;
                let name = kind.name();
                tail += &format!(" {name}_min={lo:.d$} {name}_max={hi:.d$}");
            }
        }
        for (i, label) in ["ratio_floor", "ratio_rslock", "ratio_native_floor"]
            .into_iter()
            .enumerate()
        {
            if let Some((lo, hi)) = range(runs.iter().filter_map(|b| b.run_ratios()[i])) {
                tail += &format!(" {label}_min={lo:.3} {label}_max={hi:.3}");
            }
        }
        b.tail = tail;
        b
    }

    /// The `BENCH` line: `ours=`, `floor=`, `rslock=` and their ratios as always, then (new
    /// fields at the end, so older parsers keep working) `native_floor=` and
    /// `ratio_native_floor=` where the native floor ran, `server_us_<row>=` per row, then
    /// `client_cpu_us_<row>=` per row, then `client_allocs_<row>=` per row where counted, then
    /// the scenario's [`extra`](Self::extra) fields, then its [`labels`](Self::labels).
    pub(crate) fn line(&self) -> String {
        let fmt = |v: f64| format!("{v:.*}", self.decimals);
        let mut s = format!("BENCH {}", self.scenario);
        for (kind, v) in Kind::ALL.iter().zip(self.values) {
            if let Some(v) = v {
                s += &format!(" {}={}", kind.name(), fmt(v));
            }
        }
        let ratios = self.ratios.unwrap_or_else(|| self.run_ratios());
        for (i, label) in [(0, "ratio_floor"), (1, "ratio_rslock")] {
            if let Some(r) = ratios[i] {
                s += &format!(" {label}={r:.3}");
            }
        }
        if let Some(n) = self.native {
            s += &format!(" {}={}", Kind::NativeFloor.name(), fmt(n));
            if let Some(r) = ratios[2] {
                s += &format!(" ratio_native_floor={r:.3}");
            }
        }
        for (key, us) in &self.server_us {
            if us.is_finite() {
                s += &format!(" server_us_{key}={us:.2}");
            }
        }
        for (key, us) in &self.client_us {
            if us.is_finite() {
                s += &format!(" client_cpu_us_{key}={us:.2}");
            }
        }
        for (key, n) in &self.allocs {
            if n.is_finite() {
                s += &format!(" client_allocs_{key}={n:.1}");
            }
        }
        for (key, v) in &self.extra {
            if v.is_finite() {
                s += &format!(" {key}={v:.0}");
            }
        }
        for (key, v) in &self.labels {
            s += &format!(" {key}={v}");
        }
        s + &self.tail
    }
}

/// A target of the issue, checked against this run.
pub(crate) struct Target {
    pub(crate) scenario: &'static str,
    pub(crate) what: String,
    pub(crate) measured: String,
    pub(crate) met: Option<bool>,
}

/// Everything a run found, for the tables, the targets, the files and the `BENCH` lines.
#[derive(Default)]
pub(crate) struct Report {
    pub(crate) tables: Vec<String>,
    pub(crate) benches: Vec<Bench>,
    pub(crate) targets: Vec<Target>,
    pub(crate) json: serde_json::Map<String, serde_json::Value>,
    /// (scenario, contender, hand-off sample) for the chart.
    pub(crate) handoffs: Vec<(&'static str, &'static str, Sample)>,
}

impl Report {
    pub(crate) fn target(
        &mut self,
        scenario: &'static str,
        what: &str,
        measured: String,
        met: Option<bool>,
    ) {
        self.targets.push(Target {
            scenario,
            what: what.to_owned(),
            measured,
            met,
        });
    }
}

/// What the native floor's row says on a server without `DELIFEQ`.
pub(crate) const NO_DELIFEQ: &str = "n/a: the server has no DELIFEQ";

/// `a / b` where both are known.
pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? / b?)
}

/// A table row saying the native floor did not run: its label, [`NO_DELIFEQ`], and `cells`
/// empty cells after it (the table's other columns).
pub(crate) fn na_row(cells: usize) -> String {
    format!(
        "| {} | {NO_DELIFEQ} |{}\n",
        Kind::NativeFloor.label(),
        " |".repeat(cells - 1)
    )
}

/// The informational "ours ÷ native floor" line of the targets table (no target: the native
/// floor needs a server with `DELIFEQ`, and lock-core does not use it).
pub(crate) fn native_ratio(
    report: &mut Report,
    scenario: &'static str,
    what: &str,
    ours: Option<f64>,
    native: Option<f64>,
) {
    let measured = match (ours, native) {
        (Some(o), Some(n)) => format!("{:.3}×", o / n),
        (_, None) => NO_DELIFEQ.to_owned(),
        (None, Some(_)) => "n/a".to_owned(),
    };
    report.target(scenario, &format!("no target: {what}"), measured, None);
}

/// The two ratios the floor's client on lock-core's calls gives (rates `ours`, `floor`,
/// `calls`): what lock-core's server calls alone leave of the floor's rate (the most any client
/// of those calls reaches), and how much of that lock-core's own client keeps.
pub(crate) fn core_calls_bounds(
    report: &mut Report,
    scenario: &'static str,
    ours: f64,
    floor: f64,
    calls: f64,
) {
    report.target(
        scenario,
        "bound, no target: floor client on lock-core's server calls ÷ floor",
        format!("{:.3}×", calls / floor),
        None,
    );
    report.target(
        scenario,
        "client, no target: ours ÷ floor client on lock-core's server calls",
        format!("{:.3}×", ours / calls),
        None,
    );
}

// ---------------------------------------------------------------- W3h, W3x

/// What the output says about the run itself.
pub(crate) struct RunInfo<'a> {
    pub(crate) quick: bool,
    pub(crate) seconds: f64,
    pub(crate) version: &'a ServerVersion,
    pub(crate) has_delifeq: bool,
    pub(crate) pool: u32,
    pub(crate) rslock_retry_ms: u64,
    pub(crate) failures: &'a [String],
    /// `--runs`: how many runs the report is the median of.
    pub(crate) runs: usize,
}

impl RunInfo<'_> {
    fn kind(&self) -> &'static str {
        if self.quick { "quick" } else { "full" }
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// Prints the run's header, every table, the targets and the failures.
pub(crate) fn print_tables(report: &Report, info: &RunInfo<'_>) {
    println!();
    println!(
        "lock-bench ({} run, {:.0} s): {}-server {} on 127.0.0.1, {} CPUs, \
         lock-core pool {}, rslock retry delay 0..{} ms, native floor {}{}",
        info.kind(),
        info.seconds,
        info.version.product(),
        info.version.version(),
        cpus(),
        info.pool,
        info.rslock_retry_ms,
        if info.has_delifeq {
            "on (DELIFEQ)"
        } else {
            NO_DELIFEQ
        },
        if info.runs > 1 {
            format!(
                "; every figure the median of {} runs (targets: met in more than half, measured (min–max))",
                info.runs
            )
        } else {
            String::new()
        }
    );
    for t in &report.tables {
        println!();
        print!("{t}");
    }
    if !report.targets.is_empty() {
        println!();
        println!("| scenario | target (ours) | measured | |");
        println!("|---|---|---|---|");
        for t in &report.targets {
            let verdict = match t.met {
                Some(true) => "met",
                Some(false) => "**missed**",
                None => "n/a",
            };
            println!(
                "| {} | {} | {} | {verdict} |",
                t.scenario, t.what, t.measured
            );
        }
    }
    for f in info.failures {
        println!("FAILED {f}");
    }
}

/// Where the chart goes: `--svg`, else beside `--json`, else the workspace's target directory.
pub(crate) fn svg_path(svg: Option<&Path>, json: Option<&Path>) -> PathBuf {
    match (svg, json) {
        (Some(s), _) => s.to_owned(),
        (None, Some(j)) => j.with_file_name("handoff.svg"),
        // The workspace's target directory (this crate is tools/lock-bench).
        (None, None) => Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .unwrap_or(Path::new("."))
            .join("target/lock-bench/handoff.svg"),
    }
}

/// Writes the hand-off chart (W3h, W3x, W4: one panel each, where they ran).
pub(crate) fn write_chart(report: &Report, svg_path: &Path) {
    let panels: Vec<chart::Panel<'_>> = ["W3h", "W3x", "W4"]
        .into_iter()
        .filter_map(|sc| {
            let series: Vec<(&str, &Sample)> = report
                .handoffs
                .iter()
                .filter(|(s, _, _)| *s == sc)
                .map(|(_, c, sample)| (*c, sample))
                .collect();
            (!series.is_empty()).then(|| chart::Panel {
                title: match sc {
                    "W3h" => "W3h: 16 tasks, 1 process".to_owned(),
                    "W3x" => "W3x: 4 processes × 4 tasks".to_owned(),
                    _ => "W4: one waiter, another client".to_owned(),
                },
                series,
            })
        })
        .collect();
    if !panels.is_empty() {
        match chart::write(svg_path, &panels) {
            Ok(()) => println!("\nhand-off chart: {}", svg_path.display()),
            Err(e) => eprintln!("lock-bench: could not write {}: {e}", svg_path.display()),
        }
    }
}

/// A report's results in the JSON file: its scenarios, targets and `BENCH` lines.
fn results_json(report: &Report, root: &mut serde_json::Map<String, serde_json::Value>) {
    root.insert(
        "scenarios".into(),
        serde_json::Value::Object(report.json.clone()),
    );
    root.insert(
        "targets".into(),
        report
            .targets
            .iter()
            .map(|t| serde_json::json!({"scenario": t.scenario, "target": t.what, "measured": t.measured, "met": t.met}))
            .collect(),
    );
    root.insert(
        "bench".into(),
        report.benches.iter().map(|b| b.line()).collect(),
    );
}

/// Writes the raw results file (`--json`): `report` (the median of `runs` where there are
/// several), then each run's own result under `runs`.
pub(crate) fn write_json(
    report: &Report,
    runs: &[Report],
    info: &RunInfo<'_>,
    path: &Path,
    svg_path: &Path,
) {
    let mut root = serde_json::Map::new();
    root.insert(
        "run".into(),
        serde_json::json!({
            "quick": info.quick,
            "metrics": cfg!(feature = "metrics"),
            "seconds": info.seconds,
            "redis_version": info.version.redis,
            "valkey_version": info.version.valkey,
            "server": info.version.describe(),
            "native_floor": info.has_delifeq,
            "cpus": cpus(),
            "lock_core_pool": info.pool,
            "rslock_retry_delay_ms": info.rslock_retry_ms,
            "rslock_version": "0.10",
            "failures": info.failures,
            "chart": svg_path.display().to_string(),
        }),
    );
    results_json(report, &mut root);
    if runs.len() > 1 {
        root["run"]["runs"] = runs.len().into();
        root.insert(
            "runs".into(),
            runs.iter()
                .map(|r| {
                    let mut one = serde_json::Map::new();
                    results_json(r, &mut one);
                    serde_json::Value::Object(one)
                })
                .collect(),
        );
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::write(
        path,
        serde_json::to_string_pretty(&root).unwrap_or_default(),
    ) {
        Ok(()) => println!("raw results: {}", path.display()),
        Err(e) => eprintln!("lock-bench: could not write {}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_line_keeps_its_fields_first_and_adds_new_ones_at_the_end() {
        let old = "BENCH W1 ours=900 floor=1000 rslock=1200 ratio_floor=0.900 ratio_rslock=0.750";
        let mut b = Bench::new("W1", [Some(900.0), Some(1000.0), Some(1200.0)], 0);
        assert_eq!(b.line(), old);
        b.native = Some(1125.0);
        b.server_us = vec![("ours", 7.891), ("floor", 3.9), ("native_floor", f64::NAN)];
        b.client_us = vec![("ours", 12.345), ("floor", 8.0)];
        let line = b.line();
        assert_eq!(
            line,
            format!(
                "{old} native_floor=1125 ratio_native_floor=0.800 server_us_ours=7.89 server_us_floor=3.90 client_cpu_us_ours=12.35 client_cpu_us_floor=8.00"
            )
        );
        // Every field after the scenario is key=number.
        for field in line.split(' ').skip(2) {
            let (_, v) = field.split_once('=').unwrap();
            assert!(v.parse::<f64>().is_ok(), "{field}");
        }
    }

    #[test]
    fn median_line_keeps_the_fields_and_adds_runs_and_ranges_at_the_end() {
        let run = |ours: f64, floor: f64, us: f64| {
            let mut b = Bench::new("W1", [Some(ours), Some(floor), Some(1000.0)], 0);
            b.server_us = vec![("ours", us), ("floor", 4.0)];
            b
        };
        let (a, b, c) = (
            run(900.0, 1000.0, 8.0),
            run(800.0, 1000.0, 9.0),
            run(990.0, 900.0, 7.0),
        );
        let line = Bench::median(&[&a, &b, &c]).line();
        // Medians: ours 900, floor 1000, ratio_floor the median of 0.9, 0.8, 1.1 (not 900/1000
        // by chance: ratio_rslock is the median of 0.9, 0.8, 0.99).
        assert_eq!(
            line,
            "BENCH W1 ours=900 floor=1000 rslock=1000 ratio_floor=0.900 ratio_rslock=0.900 \
             server_us_ours=8.00 server_us_floor=4.00 runs=3 ours_min=800 ours_max=990 \
             floor_min=900 floor_max=1000 rslock_min=1000 rslock_max=1000 \
             ratio_floor_min=0.800 ratio_floor_max=1.100 ratio_rslock_min=0.800 ratio_rslock_max=0.990"
        );
        let (x, y) = (run(1.0, 4.0, 1.0), run(3.0, 2.0, 1.0));
        // Even count: the mean of the middle two, of the ratios too (0.25 and 1.5).
        assert!(
            Bench::median(&[&x, &y])
                .line()
                .contains(" ours=2 floor=3 rslock=1000 ratio_floor=0.875 ")
        );
    }

    #[test]
    fn labels_come_after_the_extra_fields_and_before_the_runs() {
        let run = |ours: f64| {
            let mut b = Bench::new("X1", [Some(ours), Some(100.0), Some(50.0)], 0);
            b.extra = vec![("procs".into(), 4.0)];
            b.labels = vec![("pinned", "yes".into())];
            b
        };
        assert_eq!(
            run(90.0).line(),
            "BENCH X1 ours=90 floor=100 rslock=50 ratio_floor=0.900 ratio_rslock=1.800 procs=4 pinned=yes"
        );
        let (a, b, c) = (run(90.0), run(80.0), run(70.0));
        assert!(
            Bench::median(&[&a, &b, &c])
                .line()
                .contains(" procs=4 pinned=yes runs=3 ")
        );
    }

    #[test]
    fn na_row_has_the_tables_cell_count() {
        let header = "| W4: ... | release→acquire p50 µs | p99 µs | max µs | server µs/cycle | client CPU µs/cycle |";
        let row = na_row(5);
        assert_eq!(row.matches('|').count(), header.matches('|').count());
        assert!(row.starts_with("| native floor | n/a: the server has no DELIFEQ |"));
    }
}
