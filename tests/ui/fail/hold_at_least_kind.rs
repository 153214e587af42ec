use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "lottery", kind = "fair", hold_at_least = "55s")]
async fn draw() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = draw;
}
