//! The user's lints still apply to the annotated function.
#![deny(dead_code)]

use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "a")]
async fn never_called() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
