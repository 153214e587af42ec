//! A deployment prepared to connect to ([`Prepared`]): its URLs parsed, the TLS options
//! checked and applied. Both [`build`](LockClientBuilder::build) and
//! [`connect_primaries`](LockClientBuilder::connect_primaries) start here.
use std::sync::Arc;

use super::settings::{Deployment, LockClientBuilder};
#[cfg(feature = "testing")]
use crate::backend::memory::Server;
use crate::backend::tls;
use crate::backend::{Discovery, Seeds, SentinelSettings};
use crate::error::LockError;

/// A deployment, ready to connect to (see [`LockClientBuilder::prepare`]).
pub(super) enum Prepared<'a> {
    Standalone(redis::Client),
    Cluster {
        urls: &'a [String],
        seeds: Seeds,
    },
    /// How to find the primary (not started).
    Sentinel(Arc<Discovery>),
    #[cfg(feature = "testing")]
    Memory(Arc<Server>),
}

/// A URL the redis crate refuses: only the reason is reported (URLs may carry a password).
pub(super) fn invalid(option: &'static str, e: redis::RedisError) -> LockError {
    LockError::InvalidOption {
        option,
        reason: e.to_string(),
    }
}

impl LockClientBuilder {
    /// The deployment's URLs parsed, with the TLS options checked and applied: what
    /// [`build`](Self::build) and [`connect_primaries`](Self::connect_primaries) connect with.
    pub(super) fn prepare(&self) -> Result<Prepared<'_>, LockError> {
        match &self.deployment {
            Deployment::Standalone { url } => {
                let info = crate::url::parse(url, "url")?;
                self.tls.check(tls::is_tls(&info))?;
                let client = redis::Client::open(self.tls.apply(info, "url")?)
                    .map_err(|e| invalid("url", e))?;
                Ok(Prepared::Standalone(client))
            }
            Deployment::Cluster { urls } => {
                if urls.is_empty() {
                    return Err(LockError::InvalidOption {
                        option: "urls",
                        reason: "no cluster node given".to_owned(),
                    });
                }
                let seeds = Seeds::new(urls, self.tls.clone())?;
                self.tls.check(seeds.is_tls())?;
                Ok(Prepared::Cluster { urls, seeds })
            }
            Deployment::Sentinel {
                urls,
                service,
                primary_url,
            } => {
                if urls.is_empty() {
                    return Err(LockError::InvalidOption {
                        option: "sentinels",
                        reason: "no sentinel given".to_owned(),
                    });
                }
                if service.is_empty() {
                    return Err(LockError::InvalidOption {
                        option: "service",
                        reason: "the Sentinel service name is empty".to_owned(),
                    });
                }
                // TLS to the sentinels and to the primary each follow their own URL's scheme.
                let sentinels = urls
                    .iter()
                    .map(|url| crate::url::parse(url, "sentinels"))
                    .collect::<Result<Vec<_>, _>>()?;
                let primary = crate::url::parse(
                    primary_url.as_deref().unwrap_or("redis://primary/"),
                    "sentinel_primary_url",
                )?;
                self.tls
                    .check(sentinels.iter().any(tls::is_tls) || tls::is_tls(&primary))?;
                let sentinels = sentinels
                    .into_iter()
                    .map(|info| {
                        redis::Client::open(self.tls.apply(info, "sentinels")?)
                            .map_err(|e| invalid("sentinels", e))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let primary = self.tls.apply(primary, "sentinel_primary_url")?;
                Ok(Prepared::Sentinel(Discovery::new(SentinelSettings {
                    sentinels,
                    service: service.clone(),
                    primary,
                    pool_size: self.pool_size,
                    connect_timeout: self.connect_timeout,
                    response_timeout: self.response_timeout,
                })))
            }
            #[cfg(feature = "testing")]
            Deployment::Memory(server) => {
                self.tls.check(false)?;
                Ok(Prepared::Memory(server.clone()))
            }
        }
    }
}
