use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "a", wait = "1s", key = "b")]
async fn twice() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = twice;
}
