//! `lottery lead`: leader election. Every instance campaigns for [`LEADER`] with
//! [`LockClient::leader`]; the one that leads does units of work, each only after
//! [`Term::is_leader`](lock_core::Term::is_leader) said it still leads, and writes each unit
//! to [`WORK_KEY`] with [`fenced::set`] and its term number (the fencing token), so a leader
//! that was paused past its lease and wakes up believing it leads is refused by the resource.
//! When it is deposed it says so and campaigns again.
//!
//! Lines (see [`crate::line`]), each with `at_ms` (this machine's clock):
//! `ELECTED term=<n>`, `UNIT term=<n> n=<units so far> checked_ms=<when is_leader() said yes>
//! written=true|false`, `LOST term=<n> reason=<why>`, `STEPPED_DOWN`, `ERROR`, `DONE`.

use std::time::Duration;

use lock_core::fenced::{self, Fenced};
use lock_core::{Leader, LockClient};

use crate::BoxError;
use crate::line::{emit, now_ms};

/// The name the instances campaign for.
pub const LEADER: &str = "lottery:leader";
/// Where the leader writes its units of work (a fenced value).
pub const WORK_KEY: &str = "lottery:leader:work";
/// How many campaigns in a row may fail (Redis unreachable) before `lead` gives up.
pub const MAX_FAILED_CAMPAIGNS: u32 = 30;

/// What `lottery lead` does.
#[derive(Debug, Clone)]
pub struct LeadOptions {
    /// The Redis URL.
    pub url: String,
    /// This instance's name, in its lines and its writes.
    pub instance: String,
    /// How many units of work to do in all (over every term), then step down and exit.
    pub units: u64,
    /// The pause between units.
    pub unit: Duration,
    /// The leader's lease (the client's watchdog lease, renewed every third of it).
    pub lease: Duration,
}

/// Runs `lottery lead` until `units` units are done.
pub async fn run(options: LeadOptions) -> Result<(), BoxError> {
    let client = LockClient::builder(&options.url)
        .watchdog_lease(options.lease)
        .build()
        .await?;
    // The client's own connections: they work again by themselves after a Redis restart.
    let mut conn = client.connection();
    let leader = client.leader(LEADER);
    let me = || ("instance", options.instance.clone());
    emit("READY", &[me()]);

    let mut done = 0;
    let mut failed = 0;
    while done < options.units {
        let term = match leader.campaign().await {
            Ok(term) => term,
            Err(e) => {
                failed += 1;
                emit("ERROR", &[me(), ("error", e.to_string())]);
                if failed >= MAX_FAILED_CAMPAIGNS {
                    return Err(format!("{failed} campaigns failed in a row: {e}").into());
                }
                tokio::time::sleep(Leader::RETRY).await;
                continue;
            }
        };
        failed = 0;
        let number = term.number();
        emit(
            "ELECTED",
            &[
                me(),
                ("term", number.to_string()),
                ("at_ms", now_ms().to_string()),
            ],
        );
        while done < options.units {
            let checked = now_ms();
            if !term.is_leader() {
                let reason = term
                    .lost_reason()
                    .unwrap_or("the lease ran out by the local clock");
                emit(
                    "LOST",
                    &[
                        me(),
                        ("term", number.to_string()),
                        ("reason", reason.to_owned()),
                        ("at_ms", now_ms().to_string()),
                    ],
                );
                break;
            }
            done += 1;
            let value = format!("{}:{done}", options.instance);
            match fenced::set(&mut conn, WORK_KEY, value, number).await {
                Ok(outcome) => emit(
                    "UNIT",
                    &[
                        me(),
                        ("term", number.to_string()),
                        ("n", done.to_string()),
                        ("checked_ms", checked.to_string()),
                        ("written", (outcome == Fenced::Written).to_string()),
                        ("at_ms", now_ms().to_string()),
                    ],
                ),
                Err(e) => emit(
                    "ERROR",
                    &[me(), ("term", number.to_string()), ("error", e.to_string())],
                ),
            }
            // The next unit after the pause, or at once when leadership is lost (the check
            // at the top of the loop then says so).
            tokio::select! {
                () = term.deposed() => {}
                () = tokio::time::sleep(options.unit) => {}
            }
        }
        if done >= options.units && term.is_leader() {
            let led = term.step_down().await.unwrap_or(false);
            emit(
                "STEPPED_DOWN",
                &[
                    me(),
                    ("term", number.to_string()),
                    ("led_until_now", led.to_string()),
                ],
            );
        }
    }
    emit("DONE", &[me(), ("units", done.to_string())]);
    Ok(())
}
