//! [`EvictionRisk`]: whether the server's `maxmemory-policy` may evict lock keys.

use std::fmt;

/// Whether Redis may evict this client's lock keys under memory pressure, as read from
/// `CONFIG GET maxmemory-policy` when the client was built
/// ([`LockClient::eviction_risk`](crate::LockClient::eviction_risk)).
///
/// An evicted lock key is a lock silently lost: another client can take it while its holder
/// still believes it holds it (until the holder's next renewal finds it gone). Only
/// `noeviction` keeps lock keys: Redis then refuses writes when memory is full instead (the
/// lock commands fail with an error, which is loud, not silent). Every other policy can evict
/// them: `allkeys-*` evicts any key, and `volatile-*` evicts keys that have a time to live,
/// which every held lock key has (its lease).
///
/// `build()` logs one `warn` for [`Evicts`](Self::Evicts) and never fails because of it.
/// Reading the policy needs `CONFIG GET` (`+config|get` for an ACL user); where it is refused
/// (an ACL without it, a managed service that renames or forbids `CONFIG`) or not answered,
/// the risk is [`Unknown`](Self::Unknown) (logged at `info`). On a Cluster one primary is asked
/// (the nodes of a cluster are normally configured alike); with Sentinel, the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvictionRisk {
    /// `maxmemory-policy` is `noeviction`: lock keys are never evicted.
    None,
    /// The policy (named) can evict lock keys under memory pressure.
    Evicts {
        /// The server's `maxmemory-policy`, e.g. `allkeys-lru` or `volatile-ttl`.
        policy: String,
    },
    /// The policy could not be read: `CONFIG GET` was refused or not answered.
    Unknown,
}

impl EvictionRisk {
    /// The risk of `policy` (`None`: not read).
    pub(crate) fn of(policy: Option<&str>) -> Self {
        match policy {
            None => EvictionRisk::Unknown,
            Some(p) if p.eq_ignore_ascii_case("noeviction") => EvictionRisk::None,
            Some(p) => EvictionRisk::Evicts {
                policy: p.to_owned(),
            },
        }
    }

    /// True when the policy can evict lock keys.
    pub fn evicts(&self) -> bool {
        matches!(self, EvictionRisk::Evicts { .. })
    }
}

impl fmt::Display for EvictionRisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvictionRisk::None => f.write_str("noeviction: lock keys are never evicted"),
            EvictionRisk::Evicts { policy } => write!(
                f,
                "maxmemory-policy {policy} can evict lock keys: locks may be silently lost under memory pressure"
            ),
            EvictionRisk::Unknown => f.write_str("maxmemory-policy unknown (CONFIG GET refused)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_noeviction_is_safe() {
        assert_eq!(EvictionRisk::of(Some("noeviction")), EvictionRisk::None);
        assert_eq!(EvictionRisk::of(None), EvictionRisk::Unknown);
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            assert!(EvictionRisk::of(Some(policy)).evicts(), "{policy}");
        }
    }
}
