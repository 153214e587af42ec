//! What a [`RateLimitLayer`](crate::RateLimitLayer) was told: its settings, shared by its
//! services and their futures. No behaviour lives here.

use std::time::Duration;

use std::sync::Arc;

use lock_core::{LocalRateLimits, LockClient};

use crate::keyed::settings::{KeySettings, Keyed};
use crate::keyed::words::Words;

/// The default prefix of a rate-limit layer's limits.
pub(crate) const DEFAULT_PREFIX: &str = "rate:";

/// The layer's settings.
#[derive(Debug, Clone)]
pub(crate) struct RateSettings {
    pub(crate) client: LockClient,
    /// Key rules, missing keys, fail mode, the settings that cannot work.
    pub(crate) keys: KeySettings,
    /// The layer's own bound on a check (`None`: the client's).
    pub(crate) check_timeout: Option<Duration>,
    /// Where a check is decided while the store is unavailable, when it is decided locally.
    pub(crate) local: Option<Arc<LocalRateLimits>>,
}

impl RateSettings {
    pub(crate) fn new(client: LockClient) -> Self {
        RateSettings {
            client,
            keys: KeySettings::new(DEFAULT_PREFIX),
            check_timeout: None,
            local: None,
        }
    }
}

impl Keyed for RateSettings {
    const WORDS: Words = Words {
        layer: "rate-limit",
        label: "rate limit",
        missing_key: "the request does not say whose rate limit applies",
        fail_open: "rate limit store unavailable; letting the request through (fail open)",
        failed: "could not check the rate limit",
    };

    fn keys(&self) -> &KeySettings {
        &self.keys
    }
}
