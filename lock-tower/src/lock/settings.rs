//! [`Settings`]: what a [`DistributedLockLayer`](crate::DistributedLockLayer) was told,
//! shared by its services and their futures, with the kind of lock it takes. No behaviour
//! lives here.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use lock_core::LockClient;

use crate::config::{HoldTimes, LeaseLost, REDIS_ALLOWANCE, Release, Side};
use crate::keyed::settings::{KeySettings, Keyed};
use crate::keyed::words::Words;

/// The kind of lock each request takes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Mutex,
    Fair,
    ReadWrite(fn(&Method) -> Side),
    /// A semaphore of this size per key; each request takes one permit.
    Permits(u32),
}

/// The layer's settings, shared by its services and their futures.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) client: LockClient,
    pub(crate) kind: Kind,
    /// Key rules, missing keys, fail mode, the settings that cannot work.
    pub(crate) keys: KeySettings,
    pub(crate) wait: Duration,
    pub(crate) fixed_lease: Option<Duration>,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) lease_lost: LeaseLost,
    pub(crate) release: Release,
    pub(crate) busy_status: StatusCode,
    pub(crate) max_retry_after: Duration,
    /// How long this layer's requests have held their locks lately.
    pub(crate) hold_times: Arc<HoldTimes>,
}

/// The default prefix of the lock layer's locks.
pub(crate) const DEFAULT_PREFIX: &str = "http:";

impl Settings {
    pub(crate) fn new(client: LockClient) -> Self {
        Settings {
            client,
            kind: Kind::Mutex,
            keys: KeySettings::new(DEFAULT_PREFIX),
            wait: Duration::ZERO,
            fixed_lease: None,
            acquire_timeout: None,
            lease_lost: LeaseLost::Abort,
            release: Release::AfterBody,
            busy_status: StatusCode::CONFLICT,
            max_retry_after: Duration::from_secs(5),
            hold_times: Arc::default(),
        }
    }

    /// The bound on one whole acquisition, waiting included.
    pub(crate) fn acquire_timeout(&self) -> Duration {
        self.acquire_timeout
            .unwrap_or_else(|| self.wait.saturating_add(REDIS_ALLOWANCE))
    }
}

impl Keyed for Settings {
    const WORDS: Words = Words {
        layer: "lock",
        label: "lock",
        missing_key: "the request does not say which resource to lock",
        fail_open: "lock service unavailable; running the request without the lock (fail open)",
        failed: "could not take the lock",
    };

    fn keys(&self) -> &KeySettings {
        &self.keys
    }
}
