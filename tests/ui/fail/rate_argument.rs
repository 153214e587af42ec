use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "user:{id}", rate = "10/s", burst = 20)]
async fn search(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {
    let _ = search;
}
