//! [`LockClientBuilder`] itself: the deployment it connects to, every setting it holds, and
//! their defaults.

use std::fmt;
#[cfg(feature = "testing")]
use std::sync::Arc;
use std::time::Duration;

use bb8::Pool;
use bb8_redis::RedisConnectionManager;

#[cfg(feature = "testing")]
use crate::backend::memory::Server;
use crate::backend::tls::TlsOptions;
use crate::capabilities::MutexProtocol;
use crate::error::LockError;
use crate::metrics::Labeler;
use crate::util::check_range;

pub(crate) const DEFAULT_KEY_PREFIX: &str = "lock:";
const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);
const DEFAULT_FENCE_TTL: Duration = Duration::from_secs(3600);
pub(super) const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(30);
const DEFAULT_POOL_SIZE: u32 = 16;
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Checks a timeout option: 1 ms to 1 h.
pub(super) fn check_timeout(option: &'static str, d: Duration) -> Result<(), LockError> {
    check_range(
        option,
        d,
        Duration::from_millis(1),
        Duration::from_secs(3600),
    )
}

/// The deployment a builder connects to.
pub(super) enum Deployment {
    Standalone {
        url: String,
    },
    Cluster {
        urls: Vec<String>,
    },
    Sentinel {
        urls: Vec<String>,
        service: String,
        primary_url: Option<String>,
    },
    /// A server in this process (`lock_core::testing`).
    #[cfg(feature = "testing")]
    Memory(Arc<Server>),
}

/// Builds a [`LockClient`]. Made by [`LockClient::builder`], [`LockClient::builder_cluster`]
/// or [`LockClient::builder_sentinel`].
///
/// [`LockClient`]: crate::LockClient
/// [`LockClient::builder`]: crate::LockClient::builder
/// [`LockClient::builder_cluster`]: crate::LockClient::builder_cluster
/// [`LockClient::builder_sentinel`]: crate::LockClient::builder_sentinel
pub struct LockClientBuilder {
    pub(super) deployment: Deployment,
    pub(super) min_replicas: Option<(u32, Duration)>,
    pub(super) prefix: String,
    pub(super) watchdog_lease: Duration,
    pub(super) fence_ttl: Duration,
    pub(super) pool: Option<Pool<RedisConnectionManager>>,
    pub(super) pool_size: u32,
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
    pub(super) tls: TlsOptions,
    pub(super) metric_label: Option<Labeler>,
    pub(super) owner_description: Option<String>,
    pub(super) mutex_protocol: MutexProtocol,
    pub(super) connect_retry: Option<Duration>,
}

impl LockClientBuilder {
    /// A builder for a client of the in-memory `server` (see `lock_core::testing`).
    #[cfg(feature = "testing")]
    pub(crate) fn memory(server: Arc<Server>) -> LockClientBuilder {
        LockClientBuilder::new(Deployment::Memory(server))
    }

    pub(super) fn new(deployment: Deployment) -> LockClientBuilder {
        LockClientBuilder {
            deployment,
            min_replicas: None,
            prefix: DEFAULT_KEY_PREFIX.to_owned(),
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            fence_ttl: DEFAULT_FENCE_TTL,
            pool: None,
            pool_size: DEFAULT_POOL_SIZE,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            tls: TlsOptions::default(),
            metric_label: None,
            owner_description: None,
            mutex_protocol: MutexProtocol::Auto,
            connect_retry: None,
        }
    }
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL stays out: it may carry a password.
        f.debug_struct("LockClientBuilder")
            .field("prefix", &self.prefix)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("fence_ttl", &self.fence_ttl)
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("tls", &self.tls)
            .field("metric_label", &self.metric_label.is_some())
            .field("owner_description", &self.owner_description)
            .field("connect_retry", &self.connect_retry)
            .finish_non_exhaustive()
    }
}
