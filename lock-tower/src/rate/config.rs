//! What a [`RateLimitLayer`](crate::RateLimitLayer) was told: its settings, shared by its
//! services and their futures. No behaviour lives here.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockClient, LockError};

use crate::config::{FailMode, KeyRules, LoggedRoutes, MissingKey, Problems};

/// The default prefix of a rate-limit layer's limits.
pub(crate) const DEFAULT_PREFIX: &str = "rate:";

/// The layer's settings.
#[derive(Debug, Clone)]
pub(crate) struct RateSettings {
    pub(crate) client: LockClient,
    pub(crate) keys: KeyRules,
    /// Settings that cannot work, reported on every request.
    pub(crate) invalid: Problems,
    pub(crate) missing_key: MissingKey,
    pub(crate) fail_mode: FailMode,
    pub(crate) unavailable_retry_after: Duration,
    /// The layer's own bound on a check (`None`: the client's).
    pub(crate) check_timeout: Option<Duration>,
    /// The routes whose key mismatch this layer has logged.
    pub(crate) mismatched_routes: Arc<LoggedRoutes>,
}

impl RateSettings {
    pub(crate) fn new(client: LockClient) -> Self {
        RateSettings {
            client,
            keys: KeyRules {
                prefix: DEFAULT_PREFIX.to_owned(),
                max_key_len: 128,
                hash_keys: false,
            },
            invalid: Problems::default(),
            missing_key: MissingKey::Reject,
            fail_mode: FailMode::Closed,
            unavailable_retry_after: Duration::from_secs(1),
            check_timeout: None,
            mismatched_routes: Arc::default(),
        }
    }

    /// The error of a setting that cannot work, if there is one.
    pub(crate) fn invalid(&self) -> Option<LockError> {
        self.invalid.error()
    }
}
