use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "export", kind = "read", permits = 4)]
async fn export() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = export;
}
