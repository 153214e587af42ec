//! The hold's transitions, one generation after another.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::base::Hold;
use super::release::Released;
use super::state::{Lease, Status};
use crate::kind::HoldKind;
use crate::lease::LeaseState;
use crate::metrics::{Labels, LossReason};
use crate::name::Keys;
use crate::util::validity;

fn hold() -> Arc<Hold> {
    Arc::new(Hold::new(
        HoldKind::Mutex,
        Keys::new("lock:", "unit").unwrap(),
        1,
        Labels::new("mutex", None, "unit"),
    ))
}

#[tokio::test(start_paused = true)]
async fn an_acquisition_starts_a_generation_and_reentry_counts() {
    let h = hold();
    let now = Instant::now();
    let g1 = h.acquired(7, now, Lease::Watchdog, Duration::from_secs(30));
    assert!(h.is_held(g1));
    assert_eq!(h.fencing_token(), Some(7));
    let g2 = h.acquired(7, now, Lease::Fixed, Duration::from_secs(1));
    assert_eq!(g1, g2, "re-entry keeps the generation");
    assert_eq!(h.state().count, 2);
    assert_eq!(h.state().lease, Lease::Watchdog, "a watchdog lease stays");
    h.released(g1, Released::Yes);
    h.released(g1, Released::Yes);
    assert_eq!(h.state().status, Status::Idle);
    let g3 = h.acquired(8, Instant::now(), Lease::Fixed, Duration::from_secs(1));
    assert_ne!(g3, g1);
}

#[tokio::test(start_paused = true)]
async fn late_news_never_touches_a_newer_generation() {
    let h = hold();
    let g1 = h.acquired(1, Instant::now(), Lease::Fixed, Duration::from_secs(1));
    h.released(g1, Released::Yes);
    let g2 = h.acquired(2, Instant::now(), Lease::Fixed, Duration::from_secs(1));
    h.mark_lost(g1, "late", LossReason::Deleted);
    assert!(h.is_held(g2));
}

#[tokio::test(start_paused = true)]
async fn ended_resolves_at_the_validity_deadline() {
    let h = hold();
    let g = h.acquired(1, Instant::now(), Lease::Fixed, Duration::from_secs(1));
    let started = Instant::now();
    h.clone().ended(g).await;
    assert!(started.elapsed() >= validity(Duration::from_secs(1)));
    assert_eq!(h.state().status, Status::Lost);
}

#[tokio::test(start_paused = true)]
async fn ended_resolves_when_marked_lost() {
    let h = hold();
    let g = h.acquired(1, Instant::now(), Lease::Watchdog, Duration::from_secs(30));
    let ended = tokio::spawn(h.clone().ended(g));
    tokio::task::yield_now().await;
    h.mark_lost(g, "test", LossReason::Deleted);
    tokio::time::timeout(Duration::from_millis(10), ended)
        .await
        .expect("woken at once")
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failed_renewal_is_at_risk_until_one_succeeds_or_the_lease_runs_out() {
    let h = hold();
    let lease = Duration::from_secs(30);
    let g = h.acquired(1, Instant::now(), Lease::Watchdog, lease);
    assert_eq!(h.lease_state(g), LeaseState::Held);
    let mut changes = h.changes();
    h.renewal_failed(g, "no answer");
    assert!(changes.has_changed().unwrap(), "watchers are told");
    changes.borrow_and_update();
    assert_eq!(h.lease_state(g), LeaseState::AtRisk);
    assert!(h.is_held(g), "at risk is still held");
    h.renewal_failed(g, "no answer again");
    assert!(!changes.has_changed().unwrap(), "one episode, said once");
    h.renewed(g, Instant::now(), lease);
    assert_eq!(h.lease_state(g), LeaseState::Held, "a renewal clears it");
    assert!(changes.has_changed().unwrap());

    h.renewal_failed(g, "no answer");
    tokio::time::sleep(lease).await;
    assert_eq!(h.lease_state(g), LeaseState::Ended, "the lease ran out");
    assert!(h.expire_if_due(Instant::now()));
    assert!(!h.state().at_risk, "a lost hold is not at risk");
    h.renewal_failed(g, "late news");
    assert!(!h.state().at_risk, "nor becomes so");
}

#[tokio::test(start_paused = true)]
async fn a_fixed_lease_is_never_at_risk_and_a_released_one_is_ended() {
    let fixed = hold();
    let g = fixed.acquired(1, Instant::now(), Lease::Fixed, Duration::from_secs(30));
    fixed.renewal_failed(g, "not renewed");
    assert_eq!(fixed.lease_state(g), LeaseState::Held);

    let h = hold();
    let g = h.acquired(1, Instant::now(), Lease::Watchdog, Duration::from_secs(30));
    h.guard_added();
    h.renewal_failed(g, "no answer");
    assert!(h.guard_removed());
    assert_eq!(h.lease_state(g), LeaseState::Ended, "no guard: not held");
    assert!(!h.state().at_risk);
}

#[tokio::test]
async fn the_owners_commands_take_turns() {
    let h = hold();
    let first = h.command_turn().await;
    let second = tokio::spawn({
        let h = h.clone();
        async move { drop(h.command_turn().await) }
    });
    tokio::task::yield_now().await;
    assert!(!second.is_finished());
    drop(first);
    second.await.unwrap();
}

#[test]
fn a_lost_hold_with_guards_cannot_be_reentered() {
    let h = hold();
    let g = h.acquired(1, Instant::now(), Lease::Fixed, Duration::from_secs(1));
    h.guard_added();
    h.mark_lost(g, "test", LossReason::Deleted);
    assert!(h.expected_count().unwrap_err().is_lost());
    assert!(h.guard_removed());
    assert_eq!(h.expected_count().unwrap(), 0);
}
