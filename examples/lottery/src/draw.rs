//! `lottery draw`: once per period, exactly one instance draws the winners.
//!
//! Every period each instance wakes up at the period's start (by its own clock) plus a
//! random skew, and makes **one** attempt at the period's lock, named by
//! [`Period::name`] (`lottery:2026-11-24T12:00:00Z`). The lock is taken with a fixed lease of
//! one period and [`hold_at_least`](lock_core::TryLockRequest::hold_at_least) of one period:
//! the winner's job takes milliseconds, and without the minimum hold an instance whose timer
//! fires after the winner *finished* would find the lock free and draw again. The winner
//! draws [`WINNERS`] of [`TICKETS`] tickets and stores them at [`result_key`] with
//! [`fenced::set`] and its fencing token, so a winner that was frozen past its lease (and
//! replaced) cannot overwrite the newer winner's draw.
//!
//! Lines (see [`crate::line`]): `READY`, then one per period: `RAN ... written=true` (or
//! `written=false stored=<token>` when the fence refused the write), `SKIPPED`, `LOST` (the
//! lock was gone before the write) or `ERROR`; `DONE` at the end. In a test's stall period,
//! `STALLING` comes before the winner's `RAN`.

use std::time::{Duration, SystemTime};

use lock_core::fenced::{self, Fenced};
use lock_core::{LockClient, LockGuard, Period};
use rand::Rng;

use crate::BoxError;
use crate::line::{emit, now_ms};

/// How many winners a draw picks.
pub const WINNERS: usize = 10;
/// How many tickets there are (numbered from 1).
pub const TICKETS: usize = 1000;
/// The prefix of the per-period lock names.
pub const PREFIX: &str = "lottery";

/// Where the draw of the period whose lock is `lock_name` is stored (a fenced value: see
/// [`lock_core::fenced`]).
pub fn result_key(lock_name: &str) -> String {
    format!("{lock_name}:winners")
}

/// A freeze in one period, for the tests: the job waits `wait` between its last check of the
/// lock and its write, with a short `lease` (and minimum hold) in that period, so an instance
/// stopped (`SIGSTOP`) during the wait outlives its lease and another instance can win the
/// same period.
#[derive(Debug, Clone, Copy)]
pub struct Stall {
    /// Which period of this run (1 = the first).
    pub period: u32,
    /// How long the job waits before its write.
    pub wait: Duration,
    /// The lease and minimum hold in that period.
    pub lease: Duration,
}

/// What `lottery draw` does.
#[derive(Debug, Clone)]
pub struct DrawOptions {
    /// The Redis URL.
    pub url: String,
    /// The period: whole seconds (see [`Period::every`]).
    pub period: Duration,
    /// Each period's attempt comes after a random skew of up to this.
    pub skew: Duration,
    /// And after this fixed delay (for the tests: an instance that fires late).
    pub delay: Duration,
    /// How many periods to take part in.
    pub periods: u32,
    /// This instance's name, in its lines and in the stored draw.
    pub instance: String,
    /// A freeze in one period (tests).
    pub stall: Option<Stall>,
    /// Without the minimum hold (the control run of the tests: an instance that fires after
    /// the winner released the lock draws the period again).
    pub no_min_hold: bool,
}

/// How many periods an instance ran and skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrawSummary {
    /// Periods whose lock this instance won.
    pub ran: u32,
    /// Periods another instance had.
    pub skipped: u32,
    /// Periods that failed (Redis unreachable, ...).
    pub errors: u32,
}

/// Runs `lottery draw`: `periods` periods, one line each.
pub async fn run(options: DrawOptions) -> Result<DrawSummary, BoxError> {
    let period = Period::every(options.period)?;
    if options.skew + options.delay >= options.period {
        return Err(format!(
            "the skew ({:?}) plus the delay ({:?}) must be shorter than the period ({:?})",
            options.skew, options.delay, options.period
        )
        .into());
    }
    let client = LockClient::connect(&options.url).await?;
    // The client's own connections: they work again by themselves after a Redis restart.
    let mut conn = client.connection();
    emit("READY", &[("instance", options.instance.clone())]);

    let mut summary = DrawSummary::default();
    for k in 1..=options.periods {
        // The next period's start by this instance's clock, then the delay and the skew.
        let start = period.start_at(SystemTime::now()) + period.length();
        let skew_ms = u64::try_from(options.skew.as_millis()).unwrap_or(u64::MAX);
        let skew = Duration::from_millis(rand::rng().random_range(0..=skew_ms));
        sleep_until(start + options.delay + skew).await;

        let now = SystemTime::now();
        let index = period.index_at(now);
        let name = period.name_at(PREFIX, now);
        let stall = options.stall.filter(|s| s.period == k);
        let (lease, min_hold) = match stall {
            Some(s) => (s.lease, s.lease),
            None => (period.length(), period.length()),
        };
        let mut request = client.try_lock(name.clone()).lease(lease);
        if !options.no_min_hold {
            request = request.hold_at_least(min_hold);
        }
        let attempt = request.await;
        let base = [
            ("instance", options.instance.clone()),
            ("period", index.to_string()),
            ("name", name.clone()),
        ];
        match attempt {
            Ok(Some(guard)) => {
                summary.ran += 1;
                job(&mut conn, guard, &base, stall).await;
            }
            Ok(None) => {
                summary.skipped += 1;
                emit("SKIPPED", &with(&base, [("at_ms", now_ms().to_string())]));
            }
            Err(e) => {
                summary.errors += 1;
                emit("ERROR", &with(&base, [("error", e.to_string())]));
            }
        }
    }
    emit(
        "DONE",
        &[
            ("instance", options.instance.clone()),
            ("ran", summary.ran.to_string()),
            ("skipped", summary.skipped.to_string()),
            ("errors", summary.errors.to_string()),
        ],
    );
    Ok(summary)
}

/// The winner's job: draw, check the lock, (stall), write fenced, release (the lock stays
/// taken until its minimum hold is over).
async fn job(
    conn: &mut lock_core::Connection,
    guard: LockGuard,
    base: &[(&str, String); 3],
    stall: Option<Stall>,
) {
    let token = guard.fencing_token();
    let winners = draw_winners();
    let value = format!("instance={} winners={winners}", base[0].1);
    if !guard.is_held() {
        emit("LOST", &with(base, [("token", token.to_string())]));
        return;
    }
    if let Some(stall) = stall {
        // A pause between the last check and the write (a GC pause, a frozen VM): no check
        // can close this window; the fence at the resource does. Said first, so a test can
        // freeze the process in it.
        let stall_ms = u64::try_from(stall.wait.as_millis()).unwrap_or(u64::MAX);
        emit(
            "STALLING",
            &with(
                base,
                [
                    ("token", token.to_string()),
                    ("stall_ms", stall_ms.to_string()),
                ],
            ),
        );
        tokio::time::sleep(stall.wait).await;
    }
    let key = result_key(&base[2].1);
    match fenced::set(conn, &key, value, token).await {
        Ok(outcome) => {
            let (written, stored) = match outcome {
                Fenced::Written => (true, token),
                Fenced::Refused { stored } => (false, stored),
            };
            emit(
                "RAN",
                &with(
                    base,
                    [
                        ("token", token.to_string()),
                        ("written", written.to_string()),
                        ("stored", stored.to_string()),
                        ("winners", winners),
                        ("at_ms", now_ms().to_string()),
                    ],
                ),
            );
        }
        Err(e) => emit(
            "ERROR",
            &with(
                base,
                [("token", token.to_string()), ("error", e.to_string())],
            ),
        ),
    }
    // Released now, freed only once the minimum hold is over (or expired, if lost).
    let _ = guard.unlock().await;
}

/// `WINNERS` distinct tickets of `1..=TICKETS`, sorted, comma-separated.
pub fn draw_winners() -> String {
    let mut winners: Vec<usize> = rand::seq::index::sample(&mut rand::rng(), TICKETS, WINNERS)
        .into_iter()
        .map(|i| i + 1)
        .collect();
    winners.sort_unstable();
    winners
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Sleeps until `target` by the wall clock (a timer that fires a little early sleeps again).
async fn sleep_until(target: SystemTime) {
    for _ in 0..100 {
        match target.duration_since(SystemTime::now()) {
            Ok(left) if !left.is_zero() => tokio::time::sleep(left).await,
            _ => return,
        }
    }
}

fn with<'a, const N: usize>(
    base: &[(&'a str, String)],
    more: [(&'a str, String); N],
) -> Vec<(&'a str, String)> {
    base.iter().cloned().chain(more).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_ten_distinct_tickets() {
        let winners: Vec<usize> = draw_winners()
            .split(',')
            .map(|w| w.parse().unwrap())
            .collect();
        assert_eq!(winners.len(), WINNERS);
        assert!(winners.windows(2).all(|w| w[0] < w[1]));
        assert!(winners.iter().all(|w| (1..=TICKETS).contains(w)));
    }
}
