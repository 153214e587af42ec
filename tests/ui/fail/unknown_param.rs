use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "order:{order}")]
async fn pay(order_id: u64, amount: u64) -> Result<(), LockError> {
    let _ = (order_id, amount);
    Ok(())
}

#[distributed_lock(key = "account:{self.id}")]
async fn not_a_method(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {
    let _ = pay;
    let _ = not_a_method;
}
