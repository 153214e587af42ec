use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "a", wait = "2 secs")]
async fn spaced() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "b", lease = "5ms")]
async fn too_short() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "c", wait = 2)]
async fn no_unit() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "d", wait = 2u64)]
async fn not_a_duration() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = spaced;
    let _ = too_short;
    let _ = no_unit;
    let _ = not_a_duration;
}
