//! [`LockClientBuilder`]: connecting a [`LockClient`](crate::LockClient) to a standalone
//! server, a Sentinel-managed primary or a Cluster, with its options and their defaults.
//!
//! From the bottom: [`settings`] (the builder itself: its deployment, settings and defaults),
//! [`options`] (one method per option), [`prepare`] (a deployment's URLs parsed, TLS checked),
//! [`connect`] (its backend built, the speech settled, retried), [`build`] (the options
//! checked, the client started), [`primaries`] (`connect_primaries`, for operators) and
//! [`constructors`] (`LockClient::connect`, `builder`, `builder_cluster`, `builder_sentinel`).

mod build;
mod connect;
mod constructors;
mod options;
mod prepare;
mod primaries;
mod settings;

#[cfg(feature = "testing")]
pub(crate) use settings::DEFAULT_KEY_PREFIX;
pub use settings::LockClientBuilder;
