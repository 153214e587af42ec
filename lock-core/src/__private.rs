//! Not public API: the items `#[distributed_lock]` expands to. They may change in any release.
//!
//! An annotated function's body becomes (see the `lock-macros` docs for the whole expansion):
//!
//! ```ignore
//! ::lock_core::__private::reentrant(async move {
//!     let __lock_acquire = ::lock_core::__private::acquire(
//!         client,
//!         move |client: &::lock_core::LockClient| client.read_write_lock(name).write(),
//!         wait,
//!         lease,
//!     );
//!     ::lock_core::__private::run(__lock_acquire, E::from, on_lost, move |held| async move {
//!         body
//!     })
//!     .await
//! })
//! .await
//! ```

use std::time::Duration;

use crate::client::LockClient;
use crate::error::LockError;
use crate::guard::Guard;
use crate::held_lock::HeldLock;
use crate::request::LockRequest;
use crate::run::locked;

pub use crate::global::global_client;
pub use crate::scope::reentrant;

pub use crate::run::OnLost;

/// The client given with `client = <expr>`; its type check (`&LockClient`, through deref
/// coercion) is spanned at the user's expression.
pub fn client(client: &LockClient) -> Result<&LockClient, LockError> {
    Ok(client)
}

/// Starts taking the lock that `request` makes from the client (`client.lock(name)`,
/// `client.read_write_lock(name).read()`, ...), with the macro's `wait` and `lease`. The
/// client is only borrowed for this call, so the body may move whatever the client expression
/// borrowed from (`self: Arc<Self>`).
pub fn acquire<G, R>(
    client: Result<&LockClient, LockError>,
    request: R,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> impl Future<Output = Result<G, LockError>> + Send + use<G, R>
where
    G: Send + 'static,
    R: FnOnce(&LockClient) -> LockRequest<G>,
{
    let request = client.map(|client| {
        let mut request = request(client);
        if let Some(wait) = wait {
            request = request.wait(wait);
        }
        if let Some(lease) = lease {
            request = request.lease(lease);
        }
        request
    });
    async move { request?.await }
}

/// Takes the lock, runs the body under it and releases it (see [`LockRequest::run`]).
///
/// `convert` is `E::from`, named in the expansion at the user's error type, so that a missing
/// `From<LockError>` is reported there.
pub async fn run<G, A, B, F, T, E>(
    acquire: A,
    convert: fn(LockError) -> E,
    on_lost: OnLost,
    body: B,
) -> Result<T, E>
where
    G: Guard + 'static,
    A: Future<Output = Result<G, LockError>>,
    B: FnOnce(HeldLock) -> F,
    F: Future<Output = Result<T, E>>,
{
    let guard = acquire.await.map_err(convert)?;
    locked(guard, on_lost, body).await.map_err(convert)?
}

/// As [`run`], for `on_busy = "skip"`: `Ok(None)` without running the body when the lock
/// stayed busy for the whole wait (the function returns `Result<Option<T>, E>`).
pub async fn run_or_skip<G, A, B, F, T, E>(
    acquire: A,
    convert: fn(LockError) -> E,
    on_lost: OnLost,
    body: B,
) -> Result<Option<T>, E>
where
    G: Guard + 'static,
    A: Future<Output = Result<G, LockError>>,
    B: FnOnce(HeldLock) -> F,
    F: Future<Output = Result<Option<T>, E>>,
{
    let guard = match acquire.await {
        Ok(guard) => guard,
        Err(LockError::Timeout { .. }) => return Ok(None),
        Err(e) => return Err(convert(e)),
    };
    locked(guard, on_lost, body).await.map_err(convert)?
}
