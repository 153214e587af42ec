use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "report", ttl = "10s")]
async fn report() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = report;
}
