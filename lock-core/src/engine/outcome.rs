//! [`Attempt`]: the outcome of one attempt to acquire, for every primitive.

use std::time::Duration;

/// The outcome of one attempt.
pub(crate) enum Attempt<G> {
    Acquired(G),
    /// The `index`-th lock is held by someone else. Look again within `retry_in` (None:
    /// nothing says when), or when its release is announced.
    Busy {
        index: usize,
        retry_in: Option<Duration>,
    },
    /// The `index`-th lock is held by someone else, for a time the attempt did not ask (the
    /// first attempt of a request that will wait): subscribe to its release and try again at
    /// once, asking.
    BusyAskAgain {
        index: usize,
    },
    /// Granted, but the answer came after the lease (less the drift margin) had run out, so
    /// the lock may already be someone else's: not a success (the grant is being given back).
    /// A first attempt reports [`LockError::Lost`]; a request already waiting tries again.
    Late,
}

impl<G> Attempt<G> {
    /// The same outcome with the acquired value mapped.
    pub(crate) fn map<T>(self, f: impl FnOnce(G) -> T) -> Attempt<T> {
        match self {
            Attempt::Acquired(g) => Attempt::Acquired(f(g)),
            Attempt::Busy { index, retry_in } => Attempt::Busy { index, retry_in },
            Attempt::BusyAskAgain { index } => Attempt::BusyAskAgain { index },
            Attempt::Late => Attempt::Late,
        }
    }
}
