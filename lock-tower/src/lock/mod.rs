//! The lock layer: [`DistributedLockLayer`] builds [`DistributedLock`], whose
//! [`ResponseFuture`] takes a Redis lock named after a key from each request and holds it
//! while the inner service runs and its response body is sent. See the [crate docs](crate)
//! for an example, the kinds of lock, the defaults and the status codes.
//!
//! The files, from the top: `layer` (the builder), `service` (names the request's lock),
//! `future` (takes it, runs the inner service, gives it back), `acquire` (one acquisition of
//! the layer's kind of lock), `decision` (what an acquisition's outcome means for the
//! request), `request_lock` (the lock a request holds, carried into the response body),
//! `guard` (a guard of any kind of lock) and `settings` (what the layer was told).

mod acquire;
mod decision;
mod future;
mod guard;
mod layer;
mod rejection;
mod request_lock;
mod service;
mod settings;

pub use future::{BUFFER_LIMIT, ResponseFuture};
pub use layer::DistributedLockLayer;
pub use service::DistributedLock;
