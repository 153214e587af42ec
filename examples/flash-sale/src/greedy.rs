//! Two clients that ask too much, sent next to the load ([`crate::load`]) to show what the rate
//! limits ([`crate::limits`]) stop: a bot buyer firing purchase attempts one after another,
//! rotating over the instances, and a scraper polling the sale's numbers as fast as it can
//! ([`SCRAPER_STREAMS`] polls at a time).
//! With the limits on, most of their requests are answered `429` before they cost a lock or a
//! database read; with them off (`--no-limit`), every one reaches the handler.

use std::time::Duration;

use serde_json::Value;

use crate::limits::CLIENT_ID_HEADER;
use crate::outcome::{Outcome, classify};

/// The bot's buyer id (and client id).
pub const BOT: &str = "bot-000001";
/// The scraper's client id.
pub const SCRAPER: &str = "scraper-1";

/// What the bot's purchase attempts were answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BotReport {
    /// Attempts sent.
    pub sent: usize,
    /// `429`: refused by a rate limit, before any lock.
    pub rate_limited: usize,
    /// `201`: an order (the bot is a buyer too: one order is its due).
    pub accepted: usize,
    /// `409 already_ordered`: read under the sale's stock lock, which the attempt queued for.
    pub already_ordered: usize,
    /// `409 lock_busy`: turned away by the buyer lock.
    pub lock_busy: usize,
    /// `410 sold_out`.
    pub sold_out: usize,
    /// Anything else.
    pub other: usize,
    /// The orders it got.
    pub orders: Vec<String>,
}

impl BotReport {
    /// The attempts that got past the rate limits into the purchase path.
    pub fn reached(&self) -> usize {
        self.sent - self.rate_limited
    }
}

/// What the scraper's polls were answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScraperReport {
    /// Requests sent.
    pub sent: usize,
    /// `200`.
    pub served: usize,
    /// `429`: refused by the per-client rate limit.
    pub rate_limited: usize,
    /// Anything else.
    pub other: usize,
}

/// The bot: `attempts` purchases of sale `sale` as [`BOT`], one after another, on the
/// instances in turn, for at most `max` altogether.
pub async fn bot(
    http: &reqwest::Client,
    targets: &[String],
    sale: &str,
    attempts: usize,
    max: Duration,
) -> BotReport {
    let mut report = BotReport::default();
    let deadline = tokio::time::Instant::now() + max;
    for i in 0..attempts {
        if targets.is_empty() || tokio::time::Instant::now() >= deadline {
            break;
        }
        let url = format!("{}/api/sales/{sale}/orders", targets[i % targets.len()]);
        let sent = http
            .post(&url)
            .header("x-user-id", BOT)
            .header(CLIENT_ID_HEADER, BOT)
            .send()
            .await;
        report.sent += 1;
        let Ok(res) = sent else {
            report.other += 1;
            continue;
        };
        let status = res.status().as_u16();
        let body: Value = res.json().await.unwrap_or(Value::Null);
        match classify(status, body["code"].as_str().unwrap_or("")) {
            Outcome::RateLimited => report.rate_limited += 1,
            Outcome::Accepted => {
                report.accepted += 1;
                report.orders.extend(body["id"].as_str().map(str::to_owned));
            }
            Outcome::AlreadyOrdered => report.already_ordered += 1,
            Outcome::LockBusy => report.lock_busy += 1,
            Outcome::SoldOut => report.sold_out += 1,
            _ => report.other += 1,
        }
    }
    report
}

/// How many polls the scraper has in flight at once.
pub const SCRAPER_STREAMS: usize = 8;

/// The scraper: `requests` polls of the sale's stats as [`SCRAPER`], [`SCRAPER_STREAMS`] at a
/// time, on the instances in turn, for at most `max` altogether.
pub async fn scraper(
    http: &reqwest::Client,
    targets: &[String],
    sale: &str,
    requests: usize,
    max: Duration,
) -> ScraperReport {
    let deadline = tokio::time::Instant::now() + max;
    let mut streams = tokio::task::JoinSet::new();
    for stream in 0..SCRAPER_STREAMS.min(requests) {
        let (http, targets) = (http.clone(), targets.to_vec());
        let sale = sale.to_owned();
        let n = requests / SCRAPER_STREAMS + usize::from(stream < requests % SCRAPER_STREAMS);
        streams.spawn(async move {
            let mut report = ScraperReport::default();
            for i in 0..n {
                if targets.is_empty() || tokio::time::Instant::now() >= deadline {
                    break;
                }
                let url = format!(
                    "{}/api/sales/{sale}/stats",
                    targets[(stream + i) % targets.len()]
                );
                let sent = http
                    .get(&url)
                    .header(CLIENT_ID_HEADER, SCRAPER)
                    .send()
                    .await;
                report.sent += 1;
                match sent.map(|r| r.status().as_u16()) {
                    Ok(200) => report.served += 1,
                    Ok(429) => report.rate_limited += 1,
                    _ => report.other += 1,
                }
            }
            report
        });
    }
    let mut all = ScraperReport::default();
    while let Some(Ok(r)) = streams.join_next().await {
        all.sent += r.sent;
        all.served += r.served;
        all.rate_limited += r.rate_limited;
        all.other += r.other;
    }
    all
}
