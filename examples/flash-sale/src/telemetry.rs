//! Metrics: the process's Prometheus recorder, the app's own counters, and a reader of the
//! Prometheus text format for the demo's report.
//!
//! Each `serve` process installs one recorder ([`install`], idempotent) for the `metrics`
//! facade and serves what it holds at `GET /metrics` (see [`crate::panel`]). In it:
//!
//! | metric | what |
//! |---|---|
//! | `flash_sale_orders_total` | orders created (purchases written) |
//! | `flash_sale_units_sold_total` | items taken from the stock (one per order) |
//! | `flash_sale_payments_total{applied}` | payment callbacks answered `200`: `true` once per order, `false` for replays |
//! | `flash_sale_rejections_total{route,status,code}` | API requests answered with an error, by route (`orders`, `pay`, `other`), HTTP status and problem `code` (`409 lock_busy`, `410 sold_out`, `503 busy`, ...) |
//! | `flash_sale_idempotent_replays_total{route}` | requests with an `Idempotency-Key` answered with the stored response of the key's first request (`Idempotent-Replayed: true`), by route |
//! | `lock_*` | lock-core's own metrics, when it is built with its `metrics` feature |
//!
//! lock-core's histograms (acquire, wait and hold times, batch sizes) are rendered as
//! Prometheus histograms with the buckets lock-core gives for each
//! ([`lock_core::metrics::HISTOGRAMS`]; the durations' are 100 µs to 10 s), so that the
//! figures of several instances add up (summaries' quantiles do not).
//!
//! The demo runs its instances as separate processes, so each has its own recorder; the demo
//! scrapes every instance's `/metrics` before stopping it and adds the figures up with
//! [`Scrape`].

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

/// Orders created.
pub const ORDERS: &str = "flash_sale_orders_total";
/// Items taken from the stock.
pub const UNITS_SOLD: &str = "flash_sale_units_sold_total";
/// Payment callbacks answered `200`, by `applied`.
pub const PAYMENTS: &str = "flash_sale_payments_total";
/// Requests answered with an error, by `route`, `status` and `code`.
pub const REJECTIONS: &str = "flash_sale_rejections_total";
/// Requests answered with a stored response (an idempotency key's retry), by `route`.
pub const IDEMPOTENT_REPLAYS: &str = "flash_sale_idempotent_replays_total";

/// How often the recorder's histograms are drained into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs this process's recorder on first call and returns its handle; later calls
/// return the same handle. If another recorder was installed first (by an embedding
/// program), the handle renders only what this one records, which is nothing, and a warning
/// says so.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let builder = with_lock_buckets(PrometheusBuilder::new()).unwrap_or_else(|e| {
            // Only for an empty bucket list, which lock-core's are not.
            tracing::warn!(error = %e, "histogram buckets refused; rendering summaries");
            PrometheusBuilder::new()
        });
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        if let Err(e) = metrics::set_global_recorder(recorder) {
            tracing::warn!(error = %e, "another metrics recorder is installed: /metrics stays empty");
        }
        describe();
        let upkeep = handle.clone();
        let _ = std::thread::Builder::new()
            .name("metrics-upkeep".to_owned())
            .spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_EVERY);
                    upkeep.run_upkeep();
                }
            });
        handle
    })
}

/// `builder` with the bucket bounds of each of lock-core's histograms.
pub fn with_lock_buckets(mut builder: PrometheusBuilder) -> Result<PrometheusBuilder, BuildError> {
    for &(name, buckets) in lock_core::metrics::HISTOGRAMS {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)?;
    }
    Ok(builder)
}

fn describe() {
    metrics::describe_counter!(ORDERS, "Orders created (purchases written).");
    metrics::describe_counter!(UNITS_SOLD, "Items taken from the stock.");
    metrics::describe_counter!(
        PAYMENTS,
        "Payment callbacks answered 200: applied=true once per order, false for replays."
    );
    metrics::describe_counter!(
        REJECTIONS,
        "API requests answered with an error, by route, HTTP status and problem code."
    );
    metrics::describe_counter!(
        IDEMPOTENT_REPLAYS,
        "Requests with an Idempotency-Key answered with the stored response of their first \
         request, by route."
    );
}

/// Counts a request answered with a stored response.
pub fn idempotent_replay(route: &'static str) {
    metrics::counter!(IDEMPOTENT_REPLAYS, "route" => route).increment(1);
}

/// Counts a purchase written: one order, `units` items.
pub fn order_created(units: u64) {
    metrics::counter!(ORDERS).increment(1);
    metrics::counter!(UNITS_SOLD).increment(units);
}

/// Counts a payment callback answered `200`.
pub fn payment(applied: bool) {
    metrics::counter!(PAYMENTS, "applied" => if applied { "true" } else { "false" }).increment(1);
}

/// Counts a request answered with an error.
pub fn rejection(route: &'static str, status: u16, code: &'static str) {
    metrics::counter!(REJECTIONS, "route" => route, "status" => status.to_string(), "code" => code)
        .increment(1);
}

/// One sample of the Prometheus text format: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric's name (with `_bucket`, `_sum`, `_count` for a histogram's series).
    pub name: String,
    /// Its labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn matches(&self, filter: &[(&str, &str)]) -> bool {
        filter.iter().all(|(n, v)| self.label(n) == Some(v))
    }
}

/// Samples read from one or more `/metrics` pages, added up across them.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    samples: Vec<Sample>,
}

impl Scrape {
    /// Reads a page of the Prometheus text format. Lines that are not samples (comments,
    /// malformed lines) are skipped.
    pub fn parse(text: &str) -> Scrape {
        Scrape {
            samples: text.lines().filter_map(parse_line).collect(),
        }
    }

    /// Adds another page's samples (another instance's).
    pub fn add(&mut self, other: Scrape) {
        self.samples.extend(other.samples);
    }

    /// The samples read.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// Whether any sample of metric `name` was read.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }

    /// The sum of the samples of `name` whose labels include `filter`.
    pub fn sum(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name && s.matches(filter))
            .map(|s| s.value)
            .sum()
    }

    /// The sums of the samples of `name` by the value of label `by` (samples without it are
    /// left out).
    pub fn sum_by(&self, name: &str, by: &str) -> BTreeMap<String, f64> {
        let mut sums = BTreeMap::new();
        for s in self.samples.iter().filter(|s| s.name == name) {
            if let Some(v) = s.label(by) {
                *sums.entry(v.to_owned()).or_insert(0.0) += s.value;
            }
        }
        sums
    }

    /// The `q` quantile of histogram `name` over the series whose labels include `filter`,
    /// their buckets added up, interpolated within the bucket like Prometheus'
    /// `histogram_quantile`. Without buckets (a summary), the largest `quantile="q"` sample
    /// of the series. `None` without observations.
    pub fn quantile(&self, q: f64, name: &str, filter: &[(&str, &str)]) -> Option<f64> {
        let bucket_name = format!("{name}_bucket");
        let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for s in self
            .samples
            .iter()
            .filter(|s| s.name == bucket_name && s.matches(filter))
        {
            let Some(le) = s.label("le").and_then(parse_value) else {
                continue;
            };
            if le.is_nan() {
                continue;
            }
            // Keyed by the bound's bits: f64s of one sign order like their bits.
            let entry = buckets.entry(le.max(0.0).to_bits()).or_insert((le, 0.0));
            entry.1 += s.value;
        }
        if buckets.is_empty() {
            let wanted = format!("{q}");
            return self
                .samples
                .iter()
                .filter(|s| {
                    s.name == name
                        && s.matches(filter)
                        && s.label("quantile")
                            .and_then(parse_value)
                            .is_some_and(|v| format!("{v}") == wanted)
                })
                .map(|s| s.value)
                .filter(|v| v.is_finite())
                .reduce(f64::max);
        }
        let buckets: Vec<(f64, f64)> = buckets.into_values().collect();
        let total = buckets.last().map_or(0.0, |&(_, count)| count);
        if total.is_nan() || total <= 0.0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = q * total;
        let mut lower = (0.0, 0.0);
        for &(le, count) in &buckets {
            if count >= rank {
                if le.is_infinite() {
                    // Above the highest finite bound: say that bound, as Prometheus does.
                    return Some(lower.0);
                }
                let in_bucket = count - lower.1;
                let share = if in_bucket > 0.0 {
                    (rank - lower.1) / in_bucket
                } else {
                    1.0
                };
                return Some(lower.0 + (le - lower.0) * share.clamp(0.0, 1.0));
            }
            lower = (le, count);
        }
        Some(lower.0)
    }
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => text.parse().ok(),
    }
}

/// `name{a="b",...} value [timestamp]`, or `None`.
fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, tail) = parse_labels(after)?;
        labels = parsed;
        rest = tail;
    }
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// The labels after a `{`, and what follows the closing `}`.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches([' ', ',']);
        if let Some(tail) = s.strip_prefix('}') {
            return Some((labels, tail));
        }
        let eq = s.find('=')?;
        let name = s[..eq].trim().to_owned();
        s = s[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        labels.push((name, value));
        s = &s[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"# HELP flash_sale_orders_total Orders created.
# TYPE flash_sale_orders_total counter
flash_sale_orders_total 3
flash_sale_rejections_total{route="orders",status="409",code="lock_busy"} 2
flash_sale_rejections_total{route="orders",status="410",code="sold_out"} 5
lock_acquire_duration_seconds_bucket{kind="mutex",outcome="acquired",le="0.001"} 50
lock_acquire_duration_seconds_bucket{kind="mutex",outcome="acquired",le="0.01"} 90
lock_acquire_duration_seconds_bucket{kind="mutex",outcome="acquired",le="0.1"} 100
lock_acquire_duration_seconds_bucket{kind="mutex",outcome="acquired",le="+Inf"} 100
lock_acquire_duration_seconds_sum{kind="mutex",outcome="acquired"} 0.5
lock_acquire_duration_seconds_count{kind="mutex",outcome="acquired"} 100
"#;

    #[test]
    fn lock_histograms_render_as_histograms_with_lock_cores_buckets() {
        let recorder = with_lock_buckets(PrometheusBuilder::new())
            .unwrap()
            .build_recorder();
        metrics::with_local_recorder(&recorder, || {
            let hold = metrics::histogram!(lock_core::metrics::HOLD_DURATION, "kind" => "mutex");
            hold.record(0.003);
            hold.record(0.2);
            metrics::histogram!(lock_core::metrics::BATCH_SIZE).record(3.0);
        });
        let text = recorder.handle().render();
        let scrape = Scrape::parse(&text);
        let hold = "lock_hold_duration_seconds";
        assert!(text.contains(&format!("# TYPE {hold} histogram")), "{text}");
        assert!(!text.contains("quantile="), "no summary: {text}");
        let bucket = |name: &str, le: &str| scrape.sum(&format!("{name}_bucket"), &[("le", le)]);
        assert_eq!(bucket(hold, "0.0025"), 0.0, "{text}");
        assert_eq!(bucket(hold, "0.005"), 1.0, "{text}");
        assert_eq!(bucket(hold, "10"), 2.0, "{text}");
        assert_eq!(bucket(hold, "+Inf"), 2.0, "{text}");
        assert_eq!(bucket("lock_batch_size", "4"), 1.0, "{text}");
        assert_eq!(bucket("lock_batch_size", "2"), 0.0, "{text}");
    }

    #[test]
    fn reads_counters_with_and_without_labels() {
        let scrape = Scrape::parse(PAGE);
        assert_eq!(scrape.sum(ORDERS, &[]), 3.0);
        assert_eq!(scrape.sum(REJECTIONS, &[]), 7.0);
        assert_eq!(scrape.sum(REJECTIONS, &[("status", "409")]), 2.0);
        let by_code = scrape.sum_by(REJECTIONS, "code");
        assert_eq!(by_code.get("sold_out"), Some(&5.0));
        assert!(!scrape.has("lock_acquisitions_total"));
    }

    #[test]
    fn adds_instances_up_and_interpolates_a_quantile_from_buckets() {
        let mut scrape = Scrape::parse(PAGE);
        scrape.add(Scrape::parse(PAGE));
        assert_eq!(scrape.sum(ORDERS, &[]), 6.0);
        let name = "lock_acquire_duration_seconds";
        // 200 observations: rank 100 of p50 is the end of the first bucket.
        let p50 = scrape
            .quantile(0.5, name, &[("outcome", "acquired")])
            .unwrap();
        assert!((p50 - 0.001).abs() < 1e-12, "{p50}");
        // Rank 198 of p99: 18 of the last bucket's 20, between 0.01 and 0.1.
        let p99 = scrape.quantile(0.99, name, &[]).unwrap();
        assert!((p99 - (0.01 + 0.09 * 0.9)).abs() < 1e-9, "{p99}");
        assert_eq!(scrape.quantile(0.99, name, &[("outcome", "busy")]), None);
    }

    #[test]
    fn reads_a_summary_quantile_when_there_are_no_buckets() {
        let scrape = Scrape::parse(
            "x{quantile=\"0.99\"} 0.2\nx{quantile=\"0.5\"} 0.1\nx{quantile=\"0.99\"} 0.3\n",
        );
        assert_eq!(scrape.quantile(0.99, "x", &[]), Some(0.3));
    }

    #[test]
    fn malformed_lines_are_skipped_not_a_panic() {
        let scrape = Scrape::parse(
            "{}\nname{a=\"unterminated 1\nname{a=b} 1\nname{a=\"x\\\"y\"} 2\nname nope\n\u{fffd}{ 1\nname 4 1700000000\n",
        );
        let values: Vec<f64> = scrape.samples().iter().map(|s| s.value).collect();
        assert_eq!(values, [2.0, 4.0]);
        assert_eq!(scrape.samples()[0].label("a"), Some("x\"y"));
        assert_eq!(Scrape::parse("").quantile(0.99, "x", &[]), None);
        let only_inf = Scrape::parse("h_bucket{le=\"+Inf\"} 3\n");
        assert_eq!(only_inf.quantile(0.99, "h", &[]), Some(0.0));
        assert_eq!(only_inf.quantile(7.0, "h", &[]), None);
    }
}
