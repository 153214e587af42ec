use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "job:{id}")]
fn run_job(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {
    let _ = run_job;
}
