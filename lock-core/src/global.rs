//! A process-wide default client, for code (such as `#[distributed_lock]`) that is not handed
//! one.

use std::sync::OnceLock;

use crate::client::LockClient;
use crate::error::LockError;

static GLOBAL: OnceLock<LockClient> = OnceLock::new();

/// Installs the process-wide default client, once, at startup. Returns the client back if one
/// was already installed.
///
/// ```no_run
/// # async fn f() -> Result<(), lock_core::LockError> {
/// let client = lock_core::LockClient::connect("redis://127.0.0.1:6379").await?;
/// lock_core::install_global(client).expect("installed once");
/// let guard = lock_core::global_client()?.lock("job").await?;
/// # drop(guard); Ok(()) }
/// ```
pub fn install_global(client: LockClient) -> Result<(), LockClient> {
    GLOBAL.set(client)
}

/// The client installed by [`install_global`], or [`LockError::NoClient`].
pub fn global_client() -> Result<&'static LockClient, LockError> {
    GLOBAL.get().ok_or(LockError::NoClient)
}
