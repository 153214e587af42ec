use lock_core::distributed_lock;

#[distributed_lock(key = "a")]
async fn nothing() {}

#[distributed_lock(key = "b")]
async fn option() -> Option<u32> {
    None
}

fn main() {
    let _ = nothing;
    let _ = option;
}
