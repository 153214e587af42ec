use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "export", permits = 0)]
async fn none() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "export", permits = "4")]
async fn text() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = (none, text);
}
