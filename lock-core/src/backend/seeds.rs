//! [`Seeds`]: how to reach a Cluster (its seed nodes and the client's TLS options), for the
//! command connections and the pub/sub connection alike.

use redis::cluster::{ClusterClient, ClusterClientBuilder};

use super::tls::{self, TlsOptions};
use crate::error::LockError;

/// How to reach a Cluster: its seed nodes and the client's TLS options, for the command
/// connections and the pub/sub connection alike.
#[derive(Clone)]
pub(crate) struct Seeds {
    nodes: Vec<redis::ConnectionInfo>,
    tls: TlsOptions,
}

impl Seeds {
    /// Parses the seed URLs (a bad one is [`LockError::InvalidOption`] for `urls`).
    pub(crate) fn new(urls: &[String], tls: TlsOptions) -> Result<Self, LockError> {
        let nodes = urls
            .iter()
            .map(|url| crate::url::parse(url, "urls"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { nodes, tls })
    }

    /// The seeds' `host:port`s, comma separated (never a password), for errors.
    pub(crate) fn addresses(&self) -> String {
        self.nodes
            .iter()
            .map(super::errors::address)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether the seeds are `rediss://`.
    pub(crate) fn is_tls(&self) -> bool {
        self.nodes.first().is_some_and(tls::is_tls)
    }

    /// A cluster client builder for the seeds, with TLS set up when they are `rediss://`.
    pub(crate) fn builder(&self) -> Result<ClusterClientBuilder, redis::RedisError> {
        self.tls
            .cluster(ClusterClient::builder(self.nodes.clone()), &self.nodes)
    }
}
