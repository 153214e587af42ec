//! The conformance suite: every behavioural claim of `lock_tests::conformance::claims` run
//! against every backend of this run (`lock_tests::conformance::Kind::ALL`): the test server
//! with the protocol it offers (scripted on Redis 7.0, native on Valkey 9), the same server
//! with the scripted protocol forced (on Valkey; on Redis it is the same as the first and is
//! skipped, saying so), and lock-core's in-memory backend.
//!
//! Each test prints `HOLDS <claim> on <backend>: <what it showed>` per backend (`--nocapture`
//! shows them) and `SKIPPED ...` with the reason on standard error, uncaptured. A failure
//! names the claim and the backend.

use lock_tests::conformance::claims;
use lock_tests::conformance::{Claim, run_everywhere};

macro_rules! conformance {
    ($($test:ident: $claim:ident => $run:path;)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                lock_tests::init_tracing();
                run_everywhere(Claim::$claim, $run).await;
            }
        )*
    };
}

conformance! {
    a_lock_is_granted_once_and_free_again_after_its_release: Basics => claims::basics;
    a_wait_that_runs_out_is_a_typed_timeout_for_every_primitive: Timeouts => claims::timeouts;
    bad_input_is_a_typed_error_and_takes_nothing: BadInput => claims::bad_input;
    contending_clients_exclude_each_other_and_the_history_is_linearizable: Exclusion => claims::exclusion;
    fencing_tokens_increase_across_release_expiry_and_force_unlock: Tokens => claims::tokens;
    reentry_counts_holds_and_frees_at_zero: Reentry => claims::reentry;
    the_watchdog_keeps_a_lock_past_its_lease: Renewal => claims::renewal;
    a_deleted_lock_fires_lost_and_its_release_spares_the_next_holder: LostOnDeletion => claims::lost_on_deletion;
    an_expired_fixed_lease_fires_lost_and_its_release_spares_the_next_holder: LostOnExpiry => claims::lost_on_expiry;
    an_abandoned_lock_goes_to_a_waiter_at_its_lease: Abandonment => claims::abandonment;
    a_cancelled_acquisition_leaves_nothing_held: Cancellation => claims::cancellation;
    a_fair_lock_serves_waiters_in_arrival_order: FairOrder => claims::fair_order;
    readers_share_and_a_waiting_writer_holds_new_readers_back: ReadWrite => claims::read_write;
    a_semaphore_counts_permits_and_its_users_agree_on_its_size: Semaphore => claims::semaphore;
    a_multi_lock_takes_all_or_none: MultiLock => claims::multi_lock;
    hold_at_least_keeps_a_released_lock_until_its_minimum_hold: HoldAtLeast => claims::hold_at_least;
    one_leader_at_a_time_with_growing_terms: Leader => claims::leader;
}
