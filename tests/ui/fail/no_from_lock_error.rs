use lock_core::distributed_lock;

#[derive(Debug)]
struct AppError;

#[distributed_lock(key = "a")]
async fn pay() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = pay;
}
