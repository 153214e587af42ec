//! A job that runs once per period: skipped when busy, kept for a minimum time.

use std::time::Duration;

use lock_core::{LockError, distributed_lock};

struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "{period}", on_busy = "skip", hold_at_least = "55s", held = lock)]
async fn draw(period: &str) -> Result<Option<u64>, LockError> {
    Ok(lock.fencing_token())
}

#[distributed_lock(
    key = "report:{day}",
    on_busy = "skip",
    wait = "1s",
    lease = "10m",
    hold_at_least = Duration::from_secs(300)
)]
async fn report(day: u32) -> Result<std::option::Option<()>, AppError> {
    Ok(Some(()))
}

#[distributed_lock(key = "always", on_busy = "wait")]
async fn wait_for_it() -> Result<u8, LockError> {
    Ok(1)
}

fn main() {
    let _ = (draw, report, wait_for_it);
}
