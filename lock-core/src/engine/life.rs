//! [`Life`]: where a client is in its life (open, shutting down, shut down), and the
//! background tasks to stop at its end. The shutdown itself is `shutdown.rs`'s.

use std::sync::Mutex;
use std::sync::atomic::AtomicU8;

use tokio::task::AbortHandle;

pub(super) const OPEN: u8 = 0;
/// No acquisition starts; releases go on.
pub(super) const CLOSING: u8 = 1;
/// Nothing is sent any more.
pub(super) const CLOSED: u8 = 2;

/// Where a client is in its life, and the background tasks to stop at its end.
#[derive(Default)]
pub(crate) struct Life {
    pub(super) state: AtomicU8,
    pub(super) tasks: Mutex<Vec<AbortHandle>>,
}
