use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "lottery", on_busy = "skip")]
async fn draw() -> Result<u32, LockError> {
    Ok(7)
}

fn main() {
    let _ = draw;
}
