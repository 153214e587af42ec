use lock_core::{LockError, distributed_lock};

struct BuyRequest {
    user_id: u64,
}

#[distributed_lock(key = "user:{req..user_id}")]
async fn empty_segment(req: &BuyRequest) -> Result<(), LockError> {
    let _ = req.user_id;
    Ok(())
}

// A field that does not exist is rustc's to report, on the key.
#[distributed_lock(key = "user:{req.user}")]
async fn no_such_field(req: &BuyRequest) -> Result<(), LockError> {
    let _ = req.user_id;
    Ok(())
}

fn main() {
    let _ = empty_segment;
    let _ = no_such_field;
}
