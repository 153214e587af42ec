//! Connecting a [`LockClientBuilder`]'s deployment: its backend built, how to speak to the
//! server settled, tried again as [`connect_retry`](LockClientBuilder::connect_retry) says.
use bb8::Pool;
use bb8_redis::RedisConnectionManager;

use super::prepare::{Prepared, invalid};
use super::settings::LockClientBuilder;
#[cfg(feature = "testing")]
use crate::backend::Memory;
use crate::backend::{Backend, Cluster, Sentinel, Standalone};
use crate::connect_retry::ConnectRetry;
use crate::engine::Speech;
use crate::error::LockError;

impl LockClientBuilder {
    /// Connects and settles how to speak to the server, tried again as
    /// [`connect_retry`](Self::connect_retry) says.
    pub(super) async fn connect_retrying(&mut self) -> Result<(Backend, Speech), LockError> {
        // `build` refused a pool for any deployment but a standalone server.
        let given_pool = self.pool.take();
        let mut retry = self.connect_retry.map(ConnectRetry::new);
        loop {
            let error = match self.connect(given_pool.clone()).await {
                Ok(backend) => {
                    let needs_wait = self.min_replicas.is_some();
                    match Speech::negotiate(&backend, self.mutex_protocol, needs_wait).await {
                        Ok(speech) => return Ok((backend, speech)),
                        Err(e) => e,
                    }
                }
                Err(e) => e,
            };
            let Some(retry) = retry.as_mut() else {
                return Err(error);
            };
            match retry.pause_after(&error) {
                Some(pause) => tokio::time::sleep(pause).await,
                None => return Err(retry.give_up(error)),
            }
        }
    }

    /// Builds the backend of the deployment (its background tasks not started yet: see
    /// [`Backend::start`]).
    async fn connect(
        &self,
        given_pool: Option<Pool<RedisConnectionManager>>,
    ) -> Result<Backend, LockError> {
        let (connect_timeout, response_timeout) = (self.connect_timeout, self.response_timeout);
        match self.prepare()? {
            Prepared::Standalone(client) => {
                Standalone::check_reachable(&client, connect_timeout).await?;
                let pool = match given_pool {
                    Some(pool) => Standalone::given_pool(pool),
                    None => Standalone::default_pool(&client, self.pool_size, connect_timeout)?,
                };
                let backend = Standalone::new(pool, client, response_timeout, connect_timeout);
                Ok(Backend::Standalone(Box::new(backend)))
            }
            Prepared::Cluster { seeds, .. } => {
                let client = Cluster::client(&seeds, connect_timeout, response_timeout)
                    .map_err(|e| invalid("urls", e))?;
                // Acknowledged acquisitions get their own connection, whose response timeout
                // covers `WAIT`.
                let acks = match self.min_replicas {
                    Some((_, wait)) => Some(
                        Cluster::client(&seeds, connect_timeout, response_timeout + wait)
                            .map_err(|e| invalid("urls", e))?,
                    ),
                    None => None,
                };
                let backend = Cluster::connect(
                    seeds,
                    &client,
                    acks.as_ref(),
                    connect_timeout,
                    response_timeout,
                )
                .await?;
                Ok(Backend::Cluster(backend))
            }
            Prepared::Sentinel(discovery) => Ok(Backend::Sentinel(Sentinel::new(discovery))),
            #[cfg(feature = "testing")]
            Prepared::Memory(server) => Ok(Backend::Memory(Memory::new(
                server,
                connect_timeout,
                response_timeout,
            ))),
        }
    }
}
