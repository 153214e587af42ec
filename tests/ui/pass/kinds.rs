//! Every kind of lock the attribute takes, with the held lock in the body.

use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "catalog:{id}", kind = "read", held = lock)]
async fn read(id: u32) -> Result<Option<u64>, LockError> {
    Ok(lock.fencing_token())
}

#[distributed_lock(key = "catalog:{id}", kind = "write", wait = "1s", held = lock)]
async fn write(id: u32) -> Result<Option<u64>, LockError> {
    Ok(lock.fencing_token())
}

#[distributed_lock(key = "queue", kind = "fair", wait = "5s")]
async fn in_turn() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "export:{tenant}", permits = 4, lease = "30s", held = permit)]
async fn export(tenant: &str) -> Result<String, LockError> {
    Ok(permit.name().to_owned())
}

#[distributed_lock(key = "plain", kind = "mutex")]
async fn plain() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = (read, write, in_turn, export, plain);
}
