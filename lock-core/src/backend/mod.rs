//! How commands reach Redis.
//!
//! Only a standalone server is supported so far ([`standalone::Standalone`]); Cluster and
//! Sentinel topologies will sit beside it behind the same methods.

pub(crate) mod standalone;

pub(crate) use standalone::Standalone as Backend;
