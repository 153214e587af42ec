use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "catalog", kind = "exclusive")]
async fn update() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = update;
}
