//! `--runs N`: the median across N runs of every figure a run reports.
//!
//! Each run produces its own [`Report`]; [`merge`] makes the one the output shows. The
//! `BENCH` lines are merged field by field ([`Bench::median`]); the tables, the targets'
//! measured values and the JSON are merged number by number: a table or a measured value is
//! the same text in every run but for its numbers, and each number of the merged text is the
//! median of that number across the runs, written with the decimals it had. A ratio is thus
//! the median of the per-run ratios, each computed within its run, never a ratio of medians.

use std::collections::BTreeMap;

use crate::report::{Bench, Report, Target};
use crate::stats::{Sample, median, range};

/// A piece of a text: words, or a number as it was written.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    Text(&'a str),
    Num(&'a str),
}

/// Splits `s` into text and numbers (`123`, `1.25`, `-4`: a minus sign counts where it does
/// not follow a letter or digit).
fn pieces(s: &str) -> Vec<Piece<'_>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut text_start) = (0, 0);
    while i < b.len() {
        let sign = b[i] == b'-'
            && b.get(i + 1).is_some_and(u8::is_ascii_digit)
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric());
        // A digit inside a word (`W3h`, `p99`) is text.
        let word = i > 0 && (b[i - 1].is_ascii_alphabetic() || b[i - 1] == b'_');
        if (b[i].is_ascii_digit() && !word) || sign {
            let start = i;
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if text_start < start {
                out.push(Piece::Text(&s[text_start..start]));
            }
            out.push(Piece::Num(&s[start..i]));
            text_start = i;
        } else {
            i += 1;
        }
    }
    if text_start < s.len() {
        out.push(Piece::Text(&s[text_start..]));
    }
    out
}

/// The numbers of a text with the same words in every run, each the median across the runs
/// (written with the decimals of the first run's); the first run's text where the words
/// differ. With each changed number's (min, max) when `ranges`.
fn merge_text_with(texts: &[&str]) -> (String, Vec<(f64, f64, usize)>) {
    let split: Vec<Vec<Piece<'_>>> = texts.iter().map(|t| pieces(t)).collect();
    let first = &split[0];
    let same_shape = split.iter().all(|p| {
        p.len() == first.len()
            && p.iter().zip(first).all(|(a, b)| match (a, b) {
                (Piece::Text(x), Piece::Text(y)) => x == y,
                (Piece::Num(_), Piece::Num(_)) => true,
                _ => false,
            })
    });
    if !same_shape {
        return (texts[0].to_owned(), Vec::new());
    }
    let mut out = String::new();
    let mut ranges = Vec::new();
    for (i, piece) in first.iter().enumerate() {
        match piece {
            Piece::Text(t) => out += t,
            Piece::Num(n) => {
                let all: Vec<&str> = split
                    .iter()
                    .map(|p| match p[i] {
                        Piece::Num(x) => x,
                        Piece::Text(x) => x,
                    })
                    .collect();
                let decimals = n.split_once('.').map_or(0, |(_, d)| d.len());
                let values = || all.iter().filter_map(|x| x.parse::<f64>().ok());
                if let Some((lo, hi)) = range(values()) {
                    ranges.push((lo, hi, decimals));
                }
                if all.iter().all(|x| x == n) {
                    out += n;
                } else {
                    out += &format!("{:.*}", decimals, median(values()));
                }
            }
        }
    }
    (out, ranges)
}

/// [`merge_text_with`] without the ranges.
pub(crate) fn merge_text(texts: &[&str]) -> String {
    merge_text_with(texts).0
}

/// A target's measured value across the runs: the median, then the range where the value is
/// one number (`0.912× (0.900–0.925)`).
fn merge_measured(texts: &[&str]) -> String {
    let (text, ranges) = merge_text_with(texts);
    match ranges.as_slice() {
        &[(lo, hi, d)] => format!("{text} ({lo:.d$}–{hi:.d$})"),
        _ => text,
    }
}

/// The JSON values of the runs: numbers by their median, objects key by key, arrays of one
/// length element by element; anything else (text, flags, arrays whose length differs) as the
/// first run has it.
pub(crate) fn merge_json(values: &[&serde_json::Value]) -> serde_json::Value {
    use serde_json::Value;
    let first = values[0];
    if values.iter().all(|v| v.is_number() || v.is_null()) && values.iter().any(|v| v.is_number()) {
        let nums: Vec<&Value> = values.iter().copied().filter(|v| v.is_number()).collect();
        if nums.iter().all(|v| *v == nums[0]) {
            return nums[0].clone();
        }
        let m = median(nums.iter().filter_map(|v| v.as_f64()));
        // An odd count's median is one of the values: keep it as it was (a whole number stays
        // one).
        return nums
            .iter()
            .find(|v| v.as_f64() == Some(m))
            .map_or_else(|| m.into(), |v| (*v).clone());
    }
    match first {
        Value::Object(_) if values.iter().all(|v| v.is_object()) => {
            let mut out = serde_json::Map::new();
            for v in values {
                for key in v.as_object().into_iter().flat_map(|o| o.keys()) {
                    if out.contains_key(key) {
                        continue;
                    }
                    let those: Vec<&Value> = values.iter().filter_map(|v| v.get(key)).collect();
                    out.insert(key.clone(), merge_json(&those));
                }
            }
            Value::Object(out)
        }
        Value::Array(a)
            if values
                .iter()
                .all(|v| v.as_array().is_some_and(|b| b.len() == a.len())) =>
        {
            (0..a.len())
                .map(|i| {
                    let those: Vec<&Value> = values.iter().map(|v| &v[i]).collect();
                    merge_json(&those)
                })
                .collect()
        }
        _ => first.clone(),
    }
}

/// The first line of a table: what identifies it across runs.
fn title(table: &str) -> &str {
    table.lines().next().unwrap_or("")
}

/// The report of `runs` (two or more): every table, target, `BENCH` line and JSON figure the
/// median across the runs that have it, in the order they first appear; the hand-off chart
/// pools every run's hand-offs.
pub(crate) fn merge(runs: &[Report]) -> Report {
    Report {
        tables: merge_tables(runs),
        targets: merge_targets(runs),
        benches: merge_benches(runs),
        json: merge_json_by_scenario(runs),
        handoffs: pool_handoffs(runs),
    }
}

/// Every table, matched across runs by its first line.
fn merge_tables(runs: &[Report]) -> Vec<String> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for table in runs.iter().flat_map(|r| &r.tables) {
        if seen.contains(&title(table)) {
            continue;
        }
        seen.push(title(table));
        let those: Vec<&str> = runs
            .iter()
            .flat_map(|r| &r.tables)
            .filter(|t| title(t) == title(table))
            .map(String::as_str)
            .collect();
        out.push(merge_text(&those));
    }
    out
}

/// Every target, matched by scenario and text; met where it was met in more than half the
/// runs that judged it.
fn merge_targets(runs: &[Report]) -> Vec<Target> {
    let mut out: Vec<Target> = Vec::new();
    for t in runs.iter().flat_map(|r| &r.targets) {
        if out
            .iter()
            .any(|o| o.scenario == t.scenario && o.what == t.what)
        {
            continue;
        }
        let those: Vec<&Target> = runs
            .iter()
            .flat_map(|r| &r.targets)
            .filter(|o| o.scenario == t.scenario && o.what == t.what)
            .collect();
        let measured: Vec<&str> = those.iter().map(|o| o.measured.as_str()).collect();
        let judged: Vec<bool> = those.iter().filter_map(|o| o.met).collect();
        let met =
            (!judged.is_empty()).then(|| 2 * judged.iter().filter(|m| **m).count() > judged.len());
        out.push(Target {
            scenario: t.scenario,
            what: t.what.clone(),
            measured: merge_measured(&measured),
            met,
        });
    }
    out
}

/// Every `BENCH` line, matched by scenario.
fn merge_benches(runs: &[Report]) -> Vec<Bench> {
    let mut out: Vec<Bench> = Vec::new();
    for b in runs.iter().flat_map(|r| &r.benches) {
        if out.iter().any(|o| o.scenario() == b.scenario()) {
            continue;
        }
        let those: Vec<&Bench> = runs
            .iter()
            .flat_map(|r| &r.benches)
            .filter(|o| o.scenario() == b.scenario())
            .collect();
        out.push(Bench::median(&those));
    }
    out
}

/// The JSON, scenario by scenario.
fn merge_json_by_scenario(runs: &[Report]) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    for (key, _) in runs.iter().flat_map(|r| &r.json) {
        if out.contains_key(key) {
            continue;
        }
        let those: Vec<&serde_json::Value> = runs.iter().filter_map(|r| r.json.get(key)).collect();
        out.insert(key.clone(), merge_json(&those));
    }
    out
}

/// The hand-offs, pooled per (scenario, contender) in the order they first appear.
fn pool_handoffs(runs: &[Report]) -> Vec<(&'static str, &'static str, Sample)> {
    let mut pooled: BTreeMap<(usize, &str, &str), Vec<&Sample>> = BTreeMap::new();
    let mut order = Vec::new();
    for (s, c, sample) in runs.iter().flat_map(|r| &r.handoffs) {
        let i = order
            .iter()
            .position(|k| *k == (*s, *c))
            .unwrap_or_else(|| {
                order.push((*s, *c));
                order.len() - 1
            });
        pooled.entry((i, s, c)).or_default().push(sample);
    }
    pooled
        .into_iter()
        .map(|((_, s, c), samples)| (s, c, Sample::pooled(&samples)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_numbers_become_medians_with_their_decimals() {
        let a = "| W1: 1 task(s), 5000 cycles | ours | 900 | 12.5 | 0.912× |\n";
        let b = "| W1: 1 task(s), 5000 cycles | ours | 1000 | 11.0 | 0.950× |\n";
        let c = "| W1: 1 task(s), 5000 cycles | ours | 950 | 13.0 | 0.900× |\n";
        assert_eq!(
            merge_text(&[a, b, c]),
            "| W1: 1 task(s), 5000 cycles | ours | 950 | 12.5 | 0.912× |\n"
        );
        // Different words: the first run's text.
        assert_eq!(merge_text(&["1 met", "2 missed"]), "1 met");
        assert_eq!(
            merge_measured(&["0.900×", "0.950×", "0.912×"]),
            "0.912× (0.900–0.950)"
        );
        assert_eq!(merge_text(&["x -2 W3h", "x -4 W3h"]), "x -3 W3h");
    }

    #[test]
    fn json_numbers_become_medians() {
        let runs = [
            serde_json::json!({"a": 1, "b": {"c": 2.5, "d": "x"}, "e": [1, 2]}),
            serde_json::json!({"a": 3, "b": {"c": 1.5, "d": "y"}, "e": [3]}),
            serde_json::json!({"a": 2, "b": {"c": 0.5, "d": "z"}, "f": null}),
        ];
        let refs: Vec<&serde_json::Value> = runs.iter().collect();
        assert_eq!(
            merge_json(&refs),
            serde_json::json!({"a": 2, "b": {"c": 1.5, "d": "x"}, "e": [1, 2], "f": null})
        );
    }
}
