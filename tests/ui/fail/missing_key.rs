use lock_core::{LockError, distributed_lock};

#[distributed_lock]
async fn no_arguments(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(wait = "2s")]
async fn no_key(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {
    let _ = no_arguments;
    let _ = no_key;
}
