//! [`LockClientBuilder::build`]: every option checked, then the deployment connected, the
//! engine and the client's background tasks started.

use std::sync::Arc;
use std::time::Duration;

use super::settings::{Deployment, LockClientBuilder, MIN_WATCHDOG_LEASE, check_timeout};
use crate::backend::Backend;
use crate::client::LockClient;
use crate::connect_retry;
use crate::description;
use crate::engine::{Config, Engine};
use crate::error::LockError;
use crate::eviction::EvictionRisk;
use crate::metrics;
use crate::name::validate_prefix;
use crate::util::{MAX_LEASE, check_range};
use crate::waiters::Waiters;
use crate::watchdog;

impl LockClientBuilder {
    /// Connects, loads the scripts, and starts the client's background tasks (watchdog,
    /// pub/sub, background releases) on the current tokio runtime. Every option is checked
    /// first: a bad one is [`LockError::InvalidOption`] naming it, before anything connects.
    pub async fn build(mut self) -> Result<LockClient, LockError> {
        validate_prefix(&self.prefix)?;
        if let Some(description) = &self.owner_description {
            description::validate(description)?;
        }
        check_range(
            "watchdog_lease",
            self.watchdog_lease,
            MIN_WATCHDOG_LEASE,
            MAX_LEASE,
        )?;
        check_range(
            "fence_ttl",
            self.fence_ttl,
            Duration::from_secs(1),
            MAX_LEASE,
        )?;
        if self.pool_size == 0 || self.pool_size > 1024 {
            return Err(LockError::InvalidOption {
                option: "pool_size",
                reason: format!("{} is outside 1..=1024", self.pool_size),
            });
        }
        check_timeout("connect_timeout", self.connect_timeout)?;
        check_timeout("response_timeout", self.response_timeout)?;
        if let Some(max_wait) = self.connect_retry {
            check_range(
                "connect_retry",
                max_wait,
                Duration::from_millis(1),
                connect_retry::MAX_WAIT,
            )?;
        }
        if let Some((n, timeout)) = self.min_replicas {
            if !(1..=16).contains(&n) {
                return Err(LockError::InvalidOption {
                    option: "min_replicas",
                    reason: format!("{n} replicas is outside 1..=16"),
                });
            }
            check_timeout("min_replicas", timeout)?;
        }
        if self.pool.is_some() && !matches!(self.deployment, Deployment::Standalone { .. }) {
            return Err(LockError::InvalidOption {
                option: "pool",
                reason: "an existing pool can only be used with a standalone server".to_owned(),
            });
        }
        metrics::describe();
        let (backend, speech) = self.connect_retrying().await?;
        backend.start();
        let eviction = eviction_risk(&backend).await;
        let waiters = Waiters::start(backend.pubsub_source(), self.connect_timeout);
        let engine = Engine::start(
            backend,
            speech,
            Config {
                prefix: self.prefix,
                watchdog_lease: self.watchdog_lease,
                response_timeout: self.response_timeout,
                fence_ttl: self.fence_ttl,
                min_replicas: self.min_replicas,
                metric_label: self.metric_label,
                eviction,
                owner_description: self.owner_description,
            },
            waiters,
        );
        description::refresh(&engine, self.response_timeout).await;
        let watchdog = tokio::spawn(watchdog::run(Arc::downgrade(&engine), self.watchdog_lease));
        engine.add_task(watchdog.abort_handle());
        Ok(LockClient::from_engine(engine))
    }
}

/// Reads the server's `maxmemory-policy` and says once if it can evict lock keys. Never fails:
/// a refused or unanswered `CONFIG GET` is [`EvictionRisk::Unknown`].
async fn eviction_risk(backend: &Backend) -> EvictionRisk {
    let risk = match backend.max_memory_policy().await {
        Ok(policy) => EvictionRisk::of(Some(&policy)),
        Err(error) => {
            tracing::info!(%error, "could not read maxmemory-policy (CONFIG GET); \
                eviction risk unknown: make sure the server uses noeviction");
            EvictionRisk::Unknown
        }
    };
    if let EvictionRisk::Evicts { policy } = &risk {
        tracing::warn!(
            policy = %policy,
            "Redis maxmemory-policy can evict lock keys: under memory pressure locks may be \
             silently lost (use maxmemory-policy noeviction for the lock server)"
        );
    }
    risk
}
