//! Lock-name validation and the Redis key layout.
//!
//! A lock named `N` under prefix `P` is one key and one channel that share the hash tag
//! `{N}`, so a Redis Cluster puts them in one slot:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P{N}` | string | `owner|count|token|released|waiters`: the owner id (empty when free), its hold count, the last fencing token issued, the token of the last full release, and `1` while someone waits |
//! | `P{N}:released` | channel | a message on a full release that someone waits for |
//!
//! While held, the key expires with the lease. A free lock keeps its key (and so its fencing
//! counter) for the client's `fence_ttl`, then it expires too. One string rather than a hash:
//! `SET … PX` writes the state and the lease in one call, and on Redis every call a script
//! makes costs several microseconds.

use crate::error::{LockError, shorten};

/// The longest lock name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 512;

/// The longest key prefix accepted, in bytes.
pub const MAX_PREFIX_LEN: usize = 128;

/// The Redis keys and channel of one lock.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LockKeys {
    pub(crate) name: String,
    pub(crate) hash: String,
    pub(crate) channel: String,
}

impl LockKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Self, LockError> {
        validate_name(name)?;
        let hash = format!("{prefix}{{{name}}}");
        Ok(Self {
            name: name.to_owned(),
            channel: format!("{hash}:released"),
            hash,
        })
    }
}

/// Checks a lock name: 1 to [`MAX_NAME_LEN`] bytes, no braces (they would break the hash
/// tag), no whitespace and no control characters.
pub fn validate_name(name: &str) -> Result<(), LockError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("it is longer than 512 bytes")
    } else if name.contains(['{', '}']) {
        Some("it contains `{` or `}`, which would break the Redis Cluster hash tag")
    } else if name.chars().any(char::is_whitespace) {
        Some("it contains whitespace")
    } else if name.chars().any(char::is_control) {
        Some("it contains a control character")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(LockError::InvalidName {
            name: shorten(name),
            reason,
        }),
        None => Ok(()),
    }
}

/// Checks a key prefix: at most [`MAX_PREFIX_LEN`] bytes, no braces, whitespace or control
/// characters. An empty prefix is allowed.
pub(crate) fn validate_prefix(prefix: &str) -> Result<(), LockError> {
    let bad = prefix.len() > MAX_PREFIX_LEN
        || prefix.contains(['{', '}'])
        || prefix.chars().any(|c| c.is_whitespace() || c.is_control());
    if bad {
        return Err(LockError::InvalidOption {
            option: "key_prefix",
            reason: format!(
                "{:?} must be at most {MAX_PREFIX_LEN} bytes without braces, whitespace or \
                 control characters",
                shorten(prefix)
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_shares_one_hash_tag() {
        let k = LockKeys::new("lock:", "order:42").unwrap();
        assert_eq!(k.hash, "lock:{order:42}");
        assert_eq!(k.channel, "lock:{order:42}:released");
    }

    #[test]
    fn suffixes_cannot_collide_with_other_names() {
        // `a` + ":released" must never equal the key of a lock named "a:released".
        let a = LockKeys::new("lock:", "a").unwrap();
        let b = LockKeys::new("lock:", "a:released").unwrap();
        assert_ne!(a.channel, b.hash);
        assert_ne!(a.channel, b.channel);
    }

    #[test]
    fn bad_names_are_refused() {
        let long = "x".repeat(MAX_NAME_LEN + 1);
        for bad in ["", "a{b", "a}b", "a b", "a\nb", "a\0b", "\t", long.as_str()] {
            let err = validate_name(bad).unwrap_err();
            assert!(matches!(err, LockError::InvalidName { .. }), "{bad:?}");
        }
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(validate_name("订单:42").is_ok());
        assert!(validate_name("*").is_ok());
    }

    #[test]
    fn error_name_is_shortened() {
        let long = "é".repeat(600);
        let LockError::InvalidName { name, .. } = validate_name(&long).unwrap_err() else {
            panic!("wrong variant");
        };
        assert!(name.chars().count() <= 65);
    }

    #[test]
    fn bad_prefixes_are_refused() {
        assert!(validate_prefix("").is_ok());
        assert!(validate_prefix("app:lock:").is_ok());
        for bad in ["{x}", "a b", "a\n"] {
            assert!(validate_prefix(bad).is_err(), "{bad:?}");
        }
    }
}
