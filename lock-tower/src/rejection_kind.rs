//! [`RejectionKind`]: why a layer of this crate answered a request itself, and the short
//! machine-readable code each kind has in the default JSON body.

use std::fmt;

/// Why a layer of this crate answered a request itself instead of calling the inner service
/// (or instead of sending its response): the lock layer's kinds, then the
/// [`IdempotencyLayer`](crate::IdempotencyLayer)'s (which also answers with `Unavailable`,
/// `Lost` and `Internal`), then the [`RateLimitLayer`](crate::RateLimitLayer)'s
/// [`RateLimited`](Self::RateLimited) (which also answers with `MissingKey`, `InvalidKey`,
/// `KeyNotInRoute`, `Unavailable` and `Internal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectionKind {
    /// The request has no key and the layer rejects such requests.
    MissingKey,
    /// The request's key cannot be a lock key (too long, control characters, braces, ...).
    InvalidKey,
    /// Another request holds the lock, and it stayed held for as long as the layer waits.
    Busy,
    /// The busy answer of a [`permits(n)`](crate::DistributedLockLayer::permits) layer: all
    /// `n` permits of the key stayed in use for as long as the layer waits. Answered like
    /// [`Busy`](Self::Busy) (the busy status, `Retry-After`).
    PermitsInUse,
    /// Redis could not be reached, did not answer in time, or failed.
    Unavailable,
    /// The lock was lost while the handler ran, and the layer aborted the handler.
    Lost,
    /// The layer or the lock client is misconfigured.
    Internal,
    /// The key extractor looks for something the request's route does not have (a
    /// [`PathParam`](crate::PathParam) naming a parameter the route does not declare): every
    /// request of the route would be refused, so this is the server's fault (`500`), not the
    /// request's. See [`KeyExtractor::route_mismatch`](crate::KeyExtractor::route_mismatch).
    KeyNotInRoute,
    /// The request has no idempotency key, and the layer requires one for its method (`400`).
    IdempotencyKeyMissing,
    /// The idempotency key (or its scope) is not acceptable: empty, longer than 255 bytes,
    /// or not printable ASCII (`400`).
    IdempotencyKeyInvalid,
    /// The layer scopes keys (per client, say) and the request has no scope (`400`).
    IdempotencyScopeMissing,
    /// Another request with the same key is still running (`409` with `Retry-After`).
    IdempotencyKeyInUse,
    /// The key was used for another request: another method, path or body (`422`).
    IdempotencyKeyReused,
    /// The request body is larger than the idempotency layer buffers (`413`).
    RequestBodyTooLarge,
    /// The request body could not be read (`400`).
    RequestBodyFailed,
    /// A request with this key completed, but its response could not be stored for replay
    /// (its body was over [`max_record_body`](crate::IdempotencyLayer::max_record_body), or
    /// it had trailers): the layer keeps a "completed, not replayable" marker instead, and
    /// answers the key's retries with this (`409`, no `Retry-After`: retrying never helps),
    /// never running the handler twice. Use a new key to run it again.
    IdempotencyResponseNotReplayable,
    /// The store of idempotency records could not be reached or failed (`503` with
    /// `Retry-After`).
    RecordStoreUnavailable,
    /// The request's rate limit has no permit left: `429 Too Many Requests` with
    /// `Retry-After` (when the next permit comes, rounded up to whole seconds, at least 1),
    /// from a [`RateLimitLayer`](crate::RateLimitLayer).
    RateLimited,
}

/// The facts of one kind, from the one table of them ([`RejectionKind::facts`]).
struct Facts {
    code: &'static str,
    expected: bool,
    idempotency: bool,
}

impl RejectionKind {
    /// Every kind's facts, in one table: its code, whether a service expects it, whether
    /// only the idempotency layer gives it.
    fn facts(self) -> Facts {
        use RejectionKind as K;
        let (code, expected, idempotency) = match self {
            K::MissingKey => ("missing_lock_key", true, false),
            K::InvalidKey => ("invalid_lock_key", true, false),
            K::Busy => ("lock_busy", true, false),
            K::PermitsInUse => ("lock_permits_in_use", true, false),
            K::Unavailable => ("lock_unavailable", false, false),
            K::Lost => ("lock_lost", false, false),
            K::Internal => ("lock_error", false, false),
            K::KeyNotInRoute => ("lock_key_not_in_route", false, false),
            K::IdempotencyKeyMissing => ("idempotency_key_missing", true, true),
            K::IdempotencyKeyInvalid => ("idempotency_key_invalid", true, true),
            K::IdempotencyScopeMissing => ("idempotency_scope_missing", true, true),
            K::IdempotencyKeyInUse => ("idempotency_key_in_use", true, true),
            K::IdempotencyKeyReused => ("idempotency_key_reused", true, true),
            K::RequestBodyTooLarge => ("request_body_too_large", true, true),
            K::RequestBodyFailed => ("request_body_failed", true, true),
            K::IdempotencyResponseNotReplayable => {
                ("idempotency_response_not_replayable", true, true)
            }
            K::RecordStoreUnavailable => ("idempotency_store_unavailable", false, true),
            K::RateLimited => ("rate_limited", true, false),
        };
        Facts {
            code,
            expected,
            idempotency,
        }
    }

    /// A short machine-readable code, the `code` member of the default JSON body.
    pub fn code(self) -> &'static str {
        self.facts().code
    }

    /// Whether a service expects this refusal in normal operation: the layer doing its job
    /// (a busy lock, permits in use, no rate-limit permit left, an idempotency key in use or
    /// reused, a response kept as not replayable) or the client's own mistake (a missing or
    /// bad key, a body too large or broken). Its event is logged at `debug`; the others
    /// ([`Unavailable`](Self::Unavailable), [`Lost`](Self::Lost),
    /// [`Internal`](Self::Internal), [`KeyNotInRoute`](Self::KeyNotInRoute),
    /// [`RecordStoreUnavailable`](Self::RecordStoreUnavailable): the service's or the
    /// store's trouble) at `info`.
    pub fn is_expected(self) -> bool {
        self.facts().expected
    }

    /// Whether the [`IdempotencyLayer`](crate::IdempotencyLayer) gives this kind (and the lock
    /// layer never does).
    pub fn is_idempotency(self) -> bool {
        self.facts().idempotency
    }
}

impl fmt::Display for RejectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}
