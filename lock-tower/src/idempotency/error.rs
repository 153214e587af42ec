//! [`StoreError`]: what a [`RecordStore`](super::RecordStore) says when it cannot answer.

use std::fmt;

use crate::body::BoxError;

/// Why a [`RecordStore`](super::RecordStore) could not get or put a record.
///
/// The layer answers a request whose store failed with `503` and `Retry-After` (kind
/// [`RecordStoreUnavailable`](crate::RejectionKind::RecordStoreUnavailable)) unless it fails
/// open ([`FailMode::Open`](crate::FailMode::Open), for [`Unavailable`](StoreErrorKind::Unavailable)
/// errors only); a record it cannot read ([`Corrupt`](StoreErrorKind::Corrupt)) is `500`
/// ([`Internal`](crate::RejectionKind::Internal)) whatever the mode.
#[derive(Debug)]
pub struct StoreError {
    kind: StoreErrorKind,
    source: BoxError,
}

/// What kind of failure a [`StoreError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store could not be reached or did not answer in time: trying later may help.
    Unavailable,
    /// The store holds something under the key that is not a record this layer wrote.
    Corrupt,
    /// Anything else (a refused permission, a misconfiguration, a failed query).
    Other,
}

impl StoreError {
    /// A failure to reach the store, or an answer that did not come in time.
    pub fn unavailable(source: impl Into<BoxError>) -> Self {
        Self::new(StoreErrorKind::Unavailable, source)
    }

    /// What the store holds under the key cannot be read as a record.
    pub fn corrupt(source: impl Into<BoxError>) -> Self {
        Self::new(StoreErrorKind::Corrupt, source)
    }

    /// Any other failure.
    pub fn other(source: impl Into<BoxError>) -> Self {
        Self::new(StoreErrorKind::Other, source)
    }

    /// A failure of `kind`.
    pub fn new(kind: StoreErrorKind, source: impl Into<BoxError>) -> Self {
        Self {
            kind,
            source: source.into(),
        }
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// True for [`StoreErrorKind::Unavailable`].
    pub fn is_unavailable(&self) -> bool {
        self.kind == StoreErrorKind::Unavailable
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            StoreErrorKind::Unavailable => "the record store is unavailable",
            StoreErrorKind::Corrupt => "the record store holds something that is not a record",
            StoreErrorKind::Other => "the record store failed",
        };
        write!(f, "{what}: {}", self.source)
    }
}

impl std::error::Error for StoreError {}
