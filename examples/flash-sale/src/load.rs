//! The load tool: many buyers over HTTP against running instances, with duplicates.
//!
//! [`plan`] makes the list of purchase requests: `buyers` requests of which a share
//! (`duplicate_rate`) repeat an earlier buyer on *another* instance — half of them right
//! after the original (a double click that lands on two instances at once), half later (a
//! retry). [`run`] sends them with `concurrency` workers, bounded in count and in time, then
//! (optionally) pays every accepted order twice, at once, on two instances (a replayed
//! payment callback, with the same `Idempotency-Key`), and returns a [`LoadReport`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use tokio::task::JoinSet;

use crate::greedy::{self, BotReport, ScraperReport};
use crate::limits::CLIENT_ID_HEADER;
use crate::outcome::{Outcome, classify};

/// One purchase request of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shot {
    /// The buyer id (`X-User-Id`).
    pub user: String,
    /// Index of the instance it goes to.
    pub target: usize,
    /// Whether it repeats an earlier buyer.
    pub duplicate: bool,
}

/// Makes the request plan: `buyers` requests over `targets` instances, `duplicate_rate` of
/// them repeating an earlier buyer on another instance. Deterministic for a given `seed`.
pub fn plan(buyers: usize, duplicate_rate: f64, targets: usize, seed: u64) -> Vec<Shot> {
    let targets = targets.max(1);
    let duplicates = ((buyers as f64) * duplicate_rate.clamp(0.0, 1.0)).round() as usize;
    let duplicates = duplicates.min(buyers.saturating_sub(1));
    let unique = buyers - duplicates;
    let mut rng = StdRng::seed_from_u64(seed);
    // Sort keys: originals at 2*i; a double click just after its original; a retry later.
    let mut keyed: Vec<(f64, Shot)> = (0..unique)
        .map(|i| {
            let shot = Shot {
                user: format!("buyer-{i:06}"),
                target: i % targets,
                duplicate: false,
            };
            (i as f64 * 2.0, shot)
        })
        .collect();
    for n in 0..duplicates {
        let i = rng.random_range(0..unique);
        let key = if n % 2 == 0 {
            i as f64 * 2.0 + 0.5
        } else {
            rng.random_range(i as f64 * 2.0 + 1.0..unique as f64 * 2.0 + 1.0)
        };
        let shot = Shot {
            user: format!("buyer-{i:06}"),
            target: (i + 1 + n % targets.saturating_sub(1).max(1)) % targets,
            duplicate: true,
        };
        keyed.push((key, shot));
    }
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
    keyed.into_iter().map(|(_, shot)| shot).collect()
}

/// How to run the load.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Base URLs of the instances (`http://127.0.0.1:PORT`).
    pub targets: Vec<String>,
    /// The sale to buy from.
    pub sale_id: String,
    /// Purchase requests to send.
    pub buyers: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Share of requests that repeat an earlier buyer.
    pub duplicate_rate: f64,
    /// Pay every accepted order, twice (a replayed callback).
    pub pay: bool,
    /// Seed of the plan.
    pub seed: u64,
    /// Timeout of one request.
    pub request_timeout: Duration,
    /// Stop sending new requests after this long.
    pub max_duration: Duration,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// The bot's purchase attempts, one after another, next to the load (0: no bot).
    pub bot_attempts: usize,
    /// The scraper's polls of the sale's stats, one after another (0: no scraper).
    pub scraper_requests: usize,
}

/// What the load saw.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// Purchase requests sent.
    pub requests: usize,
    /// Planned requests not sent because time ran out.
    pub not_sent: usize,
    /// `201`: an order.
    pub accepted: usize,
    /// `410 sold_out`.
    pub sold_out: usize,
    /// `409 already_ordered`: the per-buyer check found the buyer's earlier order.
    pub already_ordered: usize,
    /// `409 lock_busy`: a double click turned away at once because the buyer lock was held
    /// (by the buyer's other request, on another instance).
    pub lock_busy: usize,
    /// `429`: refused by a rate limit (the buyer's or the client's), before any lock.
    pub rate_limited: usize,
    /// `503` busy or lock lost: retryable.
    pub busy: usize,
    /// `503 stale_lock`: a stale write refused by the fencing check.
    pub stale: usize,
    /// Anything else: other statuses, transport errors, timeouts.
    pub errors: usize,
    /// A few examples of errors.
    pub error_samples: Vec<String>,
    /// Wall time of the purchase phase.
    pub elapsed: Duration,
    /// Latency percentiles of purchase requests, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency, in milliseconds.
    pub p99_ms: f64,
    /// Ids of the orders created.
    pub orders: Vec<String>,
    /// Payment callbacks that paid an order.
    pub payments_applied: usize,
    /// Replayed callbacks answered without paying again.
    pub payments_replayed: usize,
    /// Of those, the replays answered with the first callback's stored response
    /// (`Idempotent-Replayed: true`: the idempotency layer's record; the handler did not run).
    pub replays_from_record: usize,
    /// Of those, the replays that the database's conditional write refused (they read the
    /// order unpaid, alongside the first callback); the others found the order paid.
    pub replays_refused_by_write: usize,
    /// Payment callbacks that failed.
    pub payment_errors: usize,
    /// What the bot's burst of purchase attempts was answered (not in the counts above).
    pub bot: BotReport,
    /// What the scraper's polls were answered.
    pub scraper: ScraperReport,
}

impl LoadReport {
    /// The replayed callbacks that ran the handler and found the order paid.
    pub fn replays_found_paid(&self) -> usize {
        self.payments_replayed
            .saturating_sub(self.replays_refused_by_write + self.replays_from_record)
    }

    /// Purchase requests per second.
    pub fn rps(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.requests as f64 / secs
        } else {
            0.0
        }
    }

    /// The report, as lines for people.
    pub fn lines(&self) -> Vec<String> {
        let row = |label: &str, n: usize, why: &str| {
            if why.is_empty() {
                format!("  {label:<16}{n:>6}")
            } else {
                format!("  {label:<16}{n:>6}   ({why})")
            }
        };
        let mut lines = vec![
            row("accepted", self.accepted, "201: an order"),
            row("sold out", self.sold_out, "410"),
            row(
                "already ordered",
                self.already_ordered,
                "409: the per-buyer check found the buyer's earlier order",
            ),
            row(
                "lock busy",
                self.lock_busy,
                "409: a double click turned away at once by the buyer lock",
            ),
            row(
                "rate limited",
                self.rate_limited,
                "429: over the buyer's or the client's rate limit, before any lock",
            ),
            row("busy", self.busy, "503: retry"),
            row(
                "stale",
                self.stale,
                "503: write refused by the fencing check",
            ),
            row("errors", self.errors, ""),
        ];
        if self.not_sent > 0 {
            lines.push(row("not sent", self.not_sent, "time limit reached"));
        }
        lines.push(format!(
            "  {} requests in {:.2} s: {:.0} req/s, p50 {:.1} ms, p99 {:.1} ms",
            self.requests,
            self.elapsed.as_secs_f64(),
            self.rps(),
            self.p50_ms,
            self.p99_ms
        ));
        if self.payments_applied + self.payments_replayed + self.payment_errors > 0 {
            lines.push(format!(
                "  payments: {} callbacks paid an order, {} failed; {} replays answered without \
                 paying again:",
                self.payments_applied, self.payment_errors, self.payments_replayed,
            ));
            lines.push(format!(
                "            {} replayed from the idempotency record, {} found the order paid,",
                self.replays_from_record,
                self.replays_found_paid(),
            ));
            lines.push(format!(
                "            {} refused by the database's conditional write",
                self.replays_refused_by_write,
            ));
        }
        lines.extend(self.greedy_lines());
        for sample in &self.error_samples {
            lines.push(format!("  error: {sample}"));
        }
        lines
    }
}

impl LoadReport {
    /// The bot's and the scraper's lines, if they ran.
    fn greedy_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let bot = &self.bot;
        if bot.sent > 0 {
            lines.push(format!(
                "  bot {}: {} purchase attempts in a row; {} refused 429 by a rate limit, {} \
                 reached the purchase: {} ordered, {} already ordered, {} lock busy, {} sold \
                 out, {} other",
                greedy::BOT,
                bot.sent,
                bot.rate_limited,
                bot.reached(),
                bot.accepted,
                bot.already_ordered,
                bot.lock_busy,
                bot.sold_out,
                bot.other
            ));
        }
        let scraper = &self.scraper;
        if scraper.sent > 0 {
            lines.push(format!(
                "  scraper {}: {} polls of the sale's stats; {} served, {} refused 429 by the \
                 per-client rate limit, {} other",
                greedy::SCRAPER,
                scraper.sent,
                scraper.served,
                scraper.rate_limited,
                scraper.other
            ));
        }
        lines
    }
}

#[derive(Default)]
struct Tally {
    outcomes: [usize; 8],
    latencies_us: Vec<u64>,
    orders: Vec<String>,
    samples: Vec<String>,
    sent: usize,
}

/// Creates a sale of `stock` items on `target` and returns its id.
pub async fn create_sale(
    http: &reqwest::Client,
    target: &str,
    stock: i64,
) -> Result<String, String> {
    let body = serde_json::json!({
        "sku": "FLASH-1",
        "name": "Limited sneakers",
        "stock": stock,
        "price_cents": 9900,
    });
    let res = http
        .post(format!("{target}/api/sales"))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("POST /api/sales: {e}"))?;
    let status = res.status();
    let value: Value = res
        .json()
        .await
        .map_err(|e| format!("POST /api/sales: {e}"))?;
    if status.as_u16() != 201 {
        return Err(format!("POST /api/sales: {status}: {value}"));
    }
    value["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("POST /api/sales: no id in {value}"))
}

/// An HTTP client for the load: many connections per instance, a timeout per request.
pub fn http_client(timeout: Duration, concurrency: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(concurrency.max(1))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// What every worker of the load shares.
#[derive(Clone)]
struct Shared {
    shots: Arc<Vec<Shot>>,
    targets: Arc<Vec<String>>,
    http: reqwest::Client,
    sale: String,
    next: Arc<AtomicUsize>,
    sold: Arc<AtomicUsize>,
    bar: ProgressBar,
    deadline: Instant,
}

impl Shared {
    /// Sends the plan's next shot, and the next, until there is none or time is up.
    async fn work(self) -> Tally {
        let mut tally = Tally::default();
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.shots.len() || Instant::now() >= self.deadline {
                break;
            }
            let shot = &self.shots[i];
            let url = format!(
                "{}/api/sales/{}/orders",
                self.targets[shot.target], self.sale
            );
            let t0 = Instant::now();
            // Each buyer is a browser of its own for the per-client rate limit (they all come
            // from one loopback address).
            let result = self
                .http
                .post(&url)
                .header("x-user-id", &shot.user)
                .header(CLIENT_ID_HEADER, &shot.user)
                .send()
                .await;
            let outcome = self.outcome(&mut tally, &url, result).await;
            tally
                .latencies_us
                .push(t0.elapsed().as_micros().min(u64::MAX as u128) as u64);
            tally.outcomes[outcome as usize] += 1;
            tally.sent += 1;
            self.bar.inc(1);
        }
        tally
    }

    /// What an answer means; an order and error samples go into `tally`.
    async fn outcome(
        &self,
        tally: &mut Tally,
        url: &str,
        result: reqwest::Result<reqwest::Response>,
    ) -> Outcome {
        let res = match result {
            Ok(res) => res,
            Err(e) => {
                if tally.samples.len() < 3 {
                    tally.samples.push(format!("{url}: {e}"));
                }
                return Outcome::Error;
            }
        };
        let status = res.status().as_u16();
        let body: Value = res.json().await.unwrap_or(Value::Null);
        let outcome = classify(status, body["code"].as_str().unwrap_or(""));
        if outcome == Outcome::Accepted {
            if let Some(id) = body["id"].as_str() {
                tally.orders.push(id.to_owned());
            }
            let n = self.sold.fetch_add(1, Ordering::Relaxed) + 1;
            self.bar.set_message(format!("({n} orders)"));
        } else if outcome == Outcome::Error && tally.samples.len() < 3 {
            tally.samples.push(format!("{status} {body}"));
        }
        outcome
    }
}

fn progress_bar(shown: bool, len: usize) -> ProgressBar {
    let bar = if shown {
        ProgressBar::new(len as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "  {spinner} {elapsed_precise} [{wide_bar}] {pos}/{len} requests {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar
}

/// The workers' tallies, added up.
async fn join_tallies(mut workers: JoinSet<Tally>) -> Tally {
    let mut all = Tally::default();
    while let Some(joined) = workers.join_next().await {
        let Ok(t) = joined else { continue };
        for (a, b) in all.outcomes.iter_mut().zip(t.outcomes) {
            *a += b;
        }
        all.latencies_us.extend(t.latencies_us);
        all.orders.extend(t.orders);
        all.sent += t.sent;
        for s in t.samples {
            if all.samples.len() < 5 {
                all.samples.push(s);
            }
        }
    }
    all.latencies_us.sort_unstable();
    all
}

/// The `p`-quantile of sorted latencies, in milliseconds.
fn quantile_ms(sorted_us: &[u64], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let idx = ((sorted_us.len() as f64 * p).ceil() as usize).clamp(1, sorted_us.len()) - 1;
    sorted_us[idx] as f64 / 1000.0
}

/// Runs the load described by `options`: the plan's purchases, with the bot and the scraper
/// ([`crate::greedy`]) alongside, then the payments.
pub async fn run(options: &LoadOptions) -> LoadReport {
    let shots = Arc::new(plan(
        options.buyers,
        options.duplicate_rate,
        options.targets.len(),
        options.seed,
    ));
    let http = http_client(options.request_timeout, options.concurrency);
    let started = Instant::now();
    let shared = Shared {
        bar: progress_bar(options.progress, shots.len()),
        shots: shots.clone(),
        targets: Arc::new(options.targets.clone()),
        http: http.clone(),
        sale: options.sale_id.clone(),
        next: Arc::new(AtomicUsize::new(0)),
        sold: Arc::new(AtomicUsize::new(0)),
        deadline: started + options.max_duration,
    };
    let mut workers = JoinSet::new();
    for _ in 0..options.concurrency.max(1) {
        workers.spawn(shared.clone().work());
    }
    let (targets, sale) = (&options.targets, &options.sale_id);
    let (all, bot, scraper) = tokio::join!(
        join_tallies(workers),
        greedy::bot(
            &http,
            targets,
            sale,
            options.bot_attempts,
            options.max_duration
        ),
        greedy::scraper(
            &http,
            targets,
            sale,
            options.scraper_requests,
            options.max_duration
        ),
    );
    let elapsed = started.elapsed();
    shared.bar.finish_and_clear();
    let count = |o: Outcome| all.outcomes[o as usize];
    let mut report = LoadReport {
        requests: all.sent,
        not_sent: shots.len() - all.sent,
        accepted: count(Outcome::Accepted),
        sold_out: count(Outcome::SoldOut),
        already_ordered: count(Outcome::AlreadyOrdered),
        lock_busy: count(Outcome::LockBusy),
        rate_limited: count(Outcome::RateLimited),
        busy: count(Outcome::Busy),
        stale: count(Outcome::Stale),
        errors: count(Outcome::Error),
        error_samples: all.samples,
        elapsed,
        p50_ms: quantile_ms(&all.latencies_us, 0.50),
        p99_ms: quantile_ms(&all.latencies_us, 0.99),
        orders: all.orders,
        bot,
        scraper,
        ..LoadReport::default()
    };
    report.orders.extend(report.bot.orders.iter().cloned());
    if options.pay {
        pay_all(&http, &shared.targets, &mut report, options.concurrency).await;
    }
    report
}

/// What a payment callback's `200` said.
#[derive(Debug, Clone, Copy)]
enum PaymentAnswer {
    /// It paid the order.
    Applied,
    /// A replay that found the order paid.
    FoundPaid,
    /// A replay that read the order unpaid and was refused by the conditional write.
    RefusedByWrite,
    /// A replay answered with the first callback's stored response.
    FromRecord,
}

/// Pays every order twice at once on two instances, with the same payment reference and the
/// same `Idempotency-Key` (the provider's event id, `psp-event-<order>`).
async fn pay_all(
    http: &reqwest::Client,
    targets: &Arc<Vec<String>>,
    report: &mut LoadReport,
    concurrency: usize,
) {
    let semaphore = Arc::new(tokio::sync::Semaphore::new((concurrency / 2).max(1)));
    let mut calls = JoinSet::new();
    for (n, order) in report.orders.iter().enumerate() {
        for copy in 0..2 {
            let target = targets[(n + copy) % targets.len()].clone();
            let (http, semaphore, order) = (http.clone(), semaphore.clone(), order.clone());
            calls.spawn(async move {
                let _permit = semaphore.acquire_owned().await;
                let res = http
                    .post(format!("{target}/api/orders/{order}/pay"))
                    .header("idempotency-key", format!("psp-event-{order}"))
                    .json(&serde_json::json!({ "payment_ref": format!("psp-{order}") }))
                    .send()
                    .await;
                match res {
                    Ok(res) if res.status().as_u16() == 200 => {
                        let replayed = res.headers().contains_key("idempotent-replayed");
                        let body: Value = res.json().await.unwrap_or(Value::Null);
                        Some(if replayed {
                            PaymentAnswer::FromRecord
                        } else if body["applied"].as_bool() == Some(true) {
                            PaymentAnswer::Applied
                        } else if body["replay_caught_by"] == "conditional_write" {
                            PaymentAnswer::RefusedByWrite
                        } else {
                            PaymentAnswer::FoundPaid
                        })
                    }
                    _ => None,
                }
            });
        }
    }
    while let Some(joined) = calls.join_next().await {
        match joined.ok().flatten() {
            Some(PaymentAnswer::Applied) => report.payments_applied += 1,
            Some(PaymentAnswer::FoundPaid) => report.payments_replayed += 1,
            Some(PaymentAnswer::RefusedByWrite) => {
                report.payments_replayed += 1;
                report.replays_refused_by_write += 1;
            }
            Some(PaymentAnswer::FromRecord) => {
                report.payments_replayed += 1;
                report.replays_from_record += 1;
            }
            None => report.payment_errors += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_has_the_asked_shape() {
        let shots = plan(5000, 0.2, 3, 7);
        assert_eq!(shots.len(), 5000);
        let dups: Vec<_> = shots.iter().filter(|s| s.duplicate).collect();
        assert_eq!(dups.len(), 1000);
        let distinct: std::collections::HashSet<_> = shots.iter().map(|s| &s.user).collect();
        assert_eq!(distinct.len(), 4000);
        // Every duplicate comes after its original, on another instance.
        for (i, s) in shots.iter().enumerate().filter(|(_, s)| s.duplicate) {
            let orig = shots[..i]
                .iter()
                .find(|o| o.user == s.user && !o.duplicate)
                .expect("original first");
            assert_ne!(orig.target, s.target);
        }
        assert_eq!(plan(5000, 0.2, 3, 7), shots);
    }
}
