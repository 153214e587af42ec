//! What an [`IdempotencyLayer`](crate::IdempotencyLayer) was told: [`Settings`], shared by its
//! services and their futures. No behaviour lives here.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use http::header::{CONTENT_TYPE, HeaderName, LOCATION, RETRY_AFTER};
use http::response::Parts;
use lock_core::{LockClient, LockError};

use super::redis_store::LockClientStore;
use super::store::RecordStore;
use crate::config::{FailMode, LeaseLost, REDIS_ALLOWANCE};
use crate::keyed::validate::Problems;
use crate::keyed::words::Words;

/// The header that carries the key by default: `Idempotency-Key`.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The header that marks a replayed response: `Idempotent-Replayed: true`.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// The default [`max_request_body`](crate::IdempotencyLayer::max_request_body): 1 MiB.
pub const DEFAULT_MAX_REQUEST_BODY: usize = 1024 * 1024;

/// The default [`max_record_body`](crate::IdempotencyLayer::max_record_body): 256 KiB.
pub const DEFAULT_MAX_RECORD_BODY: usize = 256 * 1024;

/// The largest [`max_record_body`](crate::IdempotencyLayer::max_record_body) accepted: 8 MiB
/// (lock-core's records hold up to 16 MiB).
pub const MAX_RECORD_BODY: usize = 8 * 1024 * 1024;

/// The default [`ttl`](crate::IdempotencyLayer::ttl) of a record: 24 hours.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);

/// The default [`store_if`](crate::IdempotencyLayer::store_if): a response is final, and
/// stored, unless it is a server error (`5xx`) or says when to try again (`Retry-After`: a
/// `409` busy answer of a lock inside, a `429`, a `503`), whose retries should run again.
pub fn is_final(response: &Parts) -> bool {
    !response.status.is_server_error() && !response.headers.contains_key(RETRY_AFTER)
}

/// How the idempotency layer names itself in the steps it shares with the keyed layers.
pub(crate) const WORDS: Words = Words {
    layer: "idempotency",
    label: "idempotency",
    missing_key: "the request has no idempotency key",
    fail_open: "idempotency unavailable; running the request without the lock and without \
                recording it (fail open)",
    failed: "could not prepare the request's idempotency",
};

/// The layer's settings.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) client: LockClient,
    pub(crate) store: Arc<dyn RecordStore>,
    /// The store's type, for `Debug`.
    pub(crate) store_type: &'static str,
    pub(crate) header: HeaderName,
    pub(crate) required: Vec<Method>,
    /// Whether keys are scoped by the layer's scope extractor.
    pub(crate) scoped: bool,
    pub(crate) prefix: String,
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) fixed_lease: Option<Duration>,
    pub(crate) retry_after: Duration,
    pub(crate) unavailable_retry_after: Duration,
    pub(crate) max_request_body: usize,
    pub(crate) max_record_body: usize,
    pub(crate) replay_headers: Arc<[HeaderName]>,
    pub(crate) store_if: fn(&Parts) -> bool,
    pub(crate) fail_mode: FailMode,
    pub(crate) lease_lost: LeaseLost,
    pub(crate) invalid: Problems,
}

impl Settings {
    pub(crate) fn new(client: LockClient) -> Self {
        let store = LockClientStore::new(&client);
        Self {
            client,
            store: Arc::new(store),
            store_type: std::any::type_name::<LockClientStore>(),
            header: IDEMPOTENCY_KEY,
            required: Vec::new(),
            scoped: false,
            prefix: "idem:".to_owned(),
            ttl: DEFAULT_TTL,
            wait: Duration::ZERO,
            fixed_lease: None,
            retry_after: Duration::from_secs(1),
            unavailable_retry_after: Duration::from_secs(1),
            max_request_body: DEFAULT_MAX_REQUEST_BODY,
            max_record_body: DEFAULT_MAX_RECORD_BODY,
            replay_headers: Arc::new([CONTENT_TYPE, LOCATION]),
            store_if: is_final,
            fail_mode: FailMode::Closed,
            lease_lost: LeaseLost::Abort,
            invalid: Problems::default(),
        }
    }

    /// The error of a setting that cannot work, if there is one.
    pub(crate) fn invalid(&self) -> Option<LockError> {
        self.invalid.error()
    }

    /// The bound on taking a key's lock, waiting included.
    pub(crate) fn acquire_timeout(&self) -> Duration {
        self.wait.saturating_add(REDIS_ALLOWANCE)
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("client", &self.client)
            .field("store", &self.store_type)
            .field("header", &self.header)
            .field("required", &self.required)
            .field("scoped", &self.scoped)
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("fixed_lease", &self.fixed_lease)
            .field("max_request_body", &self.max_request_body)
            .field("max_record_body", &self.max_record_body)
            .field("replay_headers", &self.replay_headers)
            .field("fail_mode", &self.fail_mode)
            .field("lease_lost", &self.lease_lost)
            .field("invalid", &self.invalid)
            .finish_non_exhaustive()
    }
}
