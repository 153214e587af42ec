//! The Redis keys and channels of lock-core's locks, for operators and tools such as
//! `lockctl`: every key and channel of every kind of lock under a name, and the way back from
//! a key or channel to the lock it belongs to.
//!
//! An application never needs this module: its locks name their own keys. A tool that looks
//! at a running deployment (finds locks with `SCAN`, watches keyspace notifications, checks
//! which kinds exist under a name) uses it instead of spelling the layout again, so a new key
//! cannot be missed by one of them.
//!
//! A lock named `N` under the key prefix `P` owns keys and channels that all start with
//! `P{N}`, so they share the hash tag `{N}` and a Redis Cluster keeps them in one slot. What
//! follows `P{N}` says which kind of lock it is and what it holds ([`KeyRole`],
//! [`ChannelRole`]):
//!
//! | kind | keys | channels |
//! |---|---|---|
//! | mutex | `P{N}` | `P{N}:released` |
//! | fair lock | `P{N}:fair`, `P{N}:fair:queue`, `P{N}:fair:deadlines` | `P{N}:fair:wake:<owner>` |
//! | read-write lock | `P{N}:rw`, `P{N}:rw:readers`, `P{N}:rw:writer-waiting` | `P{N}:rw:released` |
//! | semaphore | `P{N}:permits`, `P{N}:permits:size` | `P{N}:permits:released` |
//!
//! Two keys under a name are not a lock's but sit beside it, in its slot: its fenced record
//! `P{N}:record` ([`record`](crate::record), [`RECORD_SUFFIX`]) and its rate limit
//! `P{N}:rate` ([`rate_limit`](crate::rate_limit), [`RATE_LIMIT_SUFFIX`]).
//!
//! One key is not a name's: a client with an
//! [`owner_description`](crate::LockClientBuilder::owner_description) records it under
//! `Pclient:<client id>` ([`client_key`]). It has no brace, so it is never a lock's key.
//!
//! Names follow [`validate_name`](crate::validate_name) and prefixes
//! [`validate_prefix`](crate::validate_prefix) (at most 128 bytes): neither has braces, so the
//! first `{` of a key ends its prefix and the first `}` its name. On a Cluster the release
//! channels are sharded (`SPUBLISH`); elsewhere they are plain (`PUBLISH`).
//!
//! ```
//! use lock_core::layout::{self, KeyRole, LockKeys, LockKind, ParsedKey};
//!
//! let keys = LockKeys::new("lock:", "order:42")?;
//! assert_eq!(keys.key(KeyRole::Mutex), "lock:{order:42}");
//! let fair: Vec<String> = keys.keys_of(LockKind::Fair).map(|(_, key)| key).collect();
//! assert_eq!(fair, ["lock:{order:42}:fair", "lock:{order:42}:fair:queue", "lock:{order:42}:fair:deadlines"]);
//!
//! // And back, for a key found by `SCAN MATCH lock:{order:*}*`.
//! assert_eq!(layout::key_glob("lock:", "order:*"), "lock:{order:*}*");
//! assert_eq!(
//!     layout::parse_key("lock:", "lock:{order:42}:rw:readers"),
//!     Some(ParsedKey::Lock { name: "order:42", role: KeyRole::Readers }),
//! );
//! # Ok::<(), lock_core::LockError>(())
//! ```

use crate::error::LockError;
pub use crate::kind::{ChannelRole, KeyRole, LockKind};
use crate::name::{self, Keys};

/// What follows `P{N}` in the key of a name's fenced record ([`record`](crate::record)):
/// `:record`. The record holds `<token>:<bytes>`.
pub const RECORD_SUFFIX: &str = crate::kind::RECORD;

/// What follows `P{N}` in the key of a name's rate limit ([`rate_limit`](crate::rate_limit)):
/// `:rate`. It holds `<tat>|<interval>|<burst>`.
pub const RATE_LIMIT_SUFFIX: &str = crate::kind::RATE;

/// Every key and channel of one lock name under one key prefix, for every kind of lock.
///
/// ```
/// use lock_core::layout::{ChannelRole, KeyRole, LockKeys};
///
/// let keys = LockKeys::new("app:", "job:7")?;
/// assert_eq!(keys.name(), "job:7");
/// assert_eq!(keys.key(KeyRole::Permits), "app:{job:7}:permits");
/// assert_eq!(keys.channel(ChannelRole::RwReleased), "app:{job:7}:rw:released");
/// assert_eq!(keys.keys().count(), KeyRole::ALL.len());
/// assert!(LockKeys::new("app:", "job 7").is_err());
/// # Ok::<(), lock_core::LockError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockKeys {
    keys: Keys,
}

impl LockKeys {
    /// The keys of the lock `name` under `prefix`. Checks both, as a client does:
    /// [`LockError::InvalidOption`] for a bad prefix ([`validate_prefix`](crate::validate_prefix)),
    /// [`LockError::InvalidName`] for a bad name ([`validate_name`](crate::validate_name)).
    pub fn new(prefix: &str, name: &str) -> Result<LockKeys, LockError> {
        name::validate_prefix(prefix)?;
        Ok(LockKeys {
            keys: Keys::new(prefix, name)?,
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// The key of `role`.
    pub fn key(&self, role: KeyRole) -> String {
        self.keys.with(role.suffix()).to_string()
    }

    /// The channel of `role`; for [`ChannelRole::FairWake`], the prefix of the waiters'
    /// channels (`P{N}:fair:wake:`), which each waiter follows with its owner id.
    pub fn channel(&self, role: ChannelRole) -> String {
        self.keys.with(role.suffix()).to_string()
    }

    /// The key of the name's fenced record, `P{N}:record` (see [`RECORD_SUFFIX`]).
    pub fn record_key(&self) -> String {
        self.keys.record()
    }

    /// The key of the name's rate limit, `P{N}:rate` (see [`RATE_LIMIT_SUFFIX`]).
    pub fn rate_limit_key(&self) -> String {
        self.keys.rate()
    }

    /// Every key, with its role, in the order of [`KeyRole::ALL`].
    pub fn keys(&self) -> impl Iterator<Item = (KeyRole, String)> + '_ {
        KeyRole::ALL.into_iter().map(|role| (role, self.key(role)))
    }

    /// The keys of one kind of lock, with their roles, its main key first.
    pub fn keys_of(&self, kind: LockKind) -> impl Iterator<Item = (KeyRole, String)> + '_ {
        kind.keys().iter().map(|&role| (role, self.key(role)))
    }

    /// Every channel, with its role, in the order of [`ChannelRole::ALL`].
    pub fn channels(&self) -> impl Iterator<Item = (ChannelRole, String)> + '_ {
        ChannelRole::ALL
            .into_iter()
            .map(|role| (role, self.channel(role)))
    }
}

/// The key under which the client `client_id` records its owner description:
/// `P` + `client:` + the client id (see
/// [`LockClientBuilder::owner_description`](crate::LockClientBuilder::owner_description)).
///
/// ```
/// let key = lock_core::layout::client_key("lock:", "4b7c0e557d0f4c1a9d0e2f4b7d0a1c3e");
/// assert_eq!(key, "lock:client:4b7c0e557d0f4c1a9d0e2f4b7d0a1c3e");
/// ```
pub fn client_key(prefix: &str, client_id: &str) -> String {
    name::client_key(prefix, client_id)
}

/// What a key under a prefix is, as [`parse_key`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParsedKey<'a> {
    /// A key of the lock `name`.
    Lock {
        /// The lock's name.
        name: &'a str,
        /// What the key holds (and, through [`KeyRole::kind`], the kind of lock).
        role: KeyRole,
    },
    /// The fenced record of the name `name`, `P{N}:record` ([`record`](crate::record)).
    Record {
        /// The name.
        name: &'a str,
    },
    /// The rate limit of the name `name`, `P{N}:rate` ([`rate_limit`](crate::rate_limit)).
    RateLimit {
        /// The name.
        name: &'a str,
    },
    /// A client's owner description, `Pclient:<client id>`.
    ClientDescription {
        /// The client's id: the part before the first `:` of its owner ids.
        client_id: &'a str,
    },
}

/// What `key` is, if it is a key lock-core writes under `prefix`: a lock's (its name and
/// role), a name's record or rate limit, or a client's owner description. `None` for any
/// other key: another prefix, a name lock-core refuses, an unknown suffix.
///
/// ```
/// use lock_core::layout::{parse_key, KeyRole, ParsedKey};
///
/// assert_eq!(
///     parse_key("lock:", "lock:{a}:permits:size"),
///     Some(ParsedKey::Lock { name: "a", role: KeyRole::PermitsSize }),
/// );
/// assert_eq!(
///     parse_key("lock:", "lock:client:0123456789abcdef0123456789abcdef"),
///     Some(ParsedKey::ClientDescription { client_id: "0123456789abcdef0123456789abcdef" }),
/// );
/// assert_eq!(parse_key("lock:", "lock:{a}:record"), Some(ParsedKey::Record { name: "a" }));
/// assert_eq!(parse_key("lock:", "lock:{a}:rate"), Some(ParsedKey::RateLimit { name: "a" }));
/// assert_eq!(parse_key("lock:", "other:{a}"), None);
/// assert_eq!(parse_key("lock:", "lock:{a}:junk"), None);
/// ```
pub fn parse_key<'a>(prefix: &str, key: &'a str) -> Option<ParsedKey<'a>> {
    if let Some(client_id) = key
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix(crate::kind::CLIENT))
        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Some(ParsedKey::ClientDescription { client_id });
    }
    let (name, suffix) = name::split(prefix, key)?;
    match suffix {
        RECORD_SUFFIX => return Some(ParsedKey::Record { name }),
        RATE_LIMIT_SUFFIX => return Some(ParsedKey::RateLimit { name }),
        _ => {}
    }
    KeyRole::ALL
        .into_iter()
        .find(|role| role.suffix() == suffix)
        .map(|role| ParsedKey::Lock { name, role })
}

/// What a release channel is, as [`parse_channel`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ParsedChannel<'a> {
    /// The lock's name.
    pub name: &'a str,
    /// Which channel (and, through [`ChannelRole::kind`], the kind of lock).
    pub role: ChannelRole,
    /// For [`ChannelRole::FairWake`]: the owner id of the waiter it wakes.
    pub waiter: Option<&'a str>,
}

/// What `channel` is, if it is a release channel lock-core publishes on under `prefix`: the
/// lock's name, the channel's role and, for a fair lock's wake-up, the waiter it wakes.
/// `None` for any other channel.
///
/// ```
/// use lock_core::layout::{parse_channel, ChannelRole};
///
/// let wake = parse_channel("lock:", "lock:{q}:fair:wake:c1:7").unwrap();
/// assert_eq!((wake.name, wake.role, wake.waiter), ("q", ChannelRole::FairWake, Some("c1:7")));
/// assert_eq!(parse_channel("lock:", "lock:{q}:released").unwrap().role, ChannelRole::Released);
/// assert!(parse_channel("lock:", "lock:{q}").is_none());
/// ```
pub fn parse_channel<'a>(prefix: &str, channel: &'a str) -> Option<ParsedChannel<'a>> {
    let (name, suffix) = name::split(prefix, channel)?;
    ChannelRole::ALL.into_iter().find_map(|role| {
        let waiter = if role == ChannelRole::FairWake {
            // One channel per waiter: its owner id follows.
            Some(
                suffix
                    .strip_prefix(role.suffix())
                    .filter(|o| !o.is_empty())?,
            )
        } else if suffix == role.suffix() {
            None
        } else {
            return None;
        };
        Some(ParsedChannel { name, role, waiter })
    })
}

/// The Redis glob (for `SCAN MATCH`, or `PSUBSCRIBE` on keyspace channels) of every key and
/// channel of the locks whose names match the glob `names` (`*`, `?`, `[…]`, `\` escapes),
/// under `prefix` matched literally.
///
/// ```
/// assert_eq!(lock_core::layout::key_glob("lock:", "order:*"), "lock:{order:*}*");
/// assert_eq!(lock_core::layout::key_glob("a*b:", "*"), "a\\*b:{*}*");
/// ```
pub fn key_glob(prefix: &str, names: &str) -> String {
    name::glob(prefix, names)
}

/// The Redis glob of every key and channel under `prefix` (matched literally), client keys
/// included: `lock:*`. An ACL user's channel pattern `&lock:*` allows exactly this
/// `PSUBSCRIBE`, and no narrower one.
///
/// ```
/// assert_eq!(lock_core::layout::prefix_glob("lock:"), "lock:*");
/// ```
pub fn prefix_glob(prefix: &str) -> String {
    name::escape_glob(prefix) + "*"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::HoldKind;

    #[test]
    fn the_roles_spell_the_keys_the_locks_use() {
        let keys = LockKeys::new("lock:", "order:42").unwrap();
        // The layout every deployment already has in Redis: spelled out, not derived.
        let expected = [
            "lock:{order:42}",
            "lock:{order:42}:fair",
            "lock:{order:42}:fair:queue",
            "lock:{order:42}:fair:deadlines",
            "lock:{order:42}:rw",
            "lock:{order:42}:rw:readers",
            "lock:{order:42}:rw:writer-waiting",
            "lock:{order:42}:permits",
            "lock:{order:42}:permits:size",
        ];
        let spelled: Vec<String> = keys.keys().map(|(_, key)| key).collect();
        assert_eq!(spelled, expected);
        let channels: Vec<String> = keys.channels().map(|(_, c)| c).collect();
        assert_eq!(
            channels,
            [
                "lock:{order:42}:released",
                "lock:{order:42}:fair:wake:",
                "lock:{order:42}:rw:released",
                "lock:{order:42}:permits:released",
            ]
        );
        // And the locks use them: a hold's key is its kind's main key.
        let inner = Keys::new("lock:", "order:42").unwrap();
        for (kind, role) in [
            (HoldKind::Mutex, KeyRole::Mutex),
            (HoldKind::Fair, KeyRole::Fair),
            (HoldKind::Write, KeyRole::Writer),
            (HoldKind::Read, KeyRole::Readers),
            (HoldKind::Permits(2), KeyRole::Permits),
        ] {
            assert_eq!(inner.hold(kind), keys.key(role));
        }
        for kind in LockKind::ALL {
            assert_eq!(kind.channel().kind(), kind);
            for role in kind.keys() {
                assert_eq!(role.kind(), kind);
            }
        }
        let by_kind: usize = LockKind::ALL.iter().map(|k| k.keys().len()).sum();
        assert_eq!(by_kind, KeyRole::ALL.len());
    }

    #[test]
    fn keys_and_channels_parse_back() {
        for prefix in ["lock:", "", "a*b:"] {
            let keys = LockKeys::new(prefix, "order:42").unwrap();
            for (role, key) in keys.keys() {
                assert_eq!(
                    parse_key(prefix, &key),
                    Some(ParsedKey::Lock {
                        name: "order:42",
                        role
                    }),
                    "{key}"
                );
                assert!(parse_channel(prefix, &key).is_none(), "{key}");
            }
            for (role, channel) in keys.channels() {
                let channel = match role {
                    ChannelRole::FairWake => channel + "c1:7",
                    _ => channel,
                };
                let parsed = parse_channel(prefix, &channel).unwrap();
                assert_eq!((parsed.name, parsed.role), ("order:42", role));
                assert_eq!(parsed.waiter.is_some(), role == ChannelRole::FairWake);
                assert!(parse_key(prefix, &channel).is_none(), "{channel}");
            }
        }
        // Not lock-core's: another prefix, an unknown suffix, a name it refuses.
        for key in [
            "other:{a}",
            "lock:{a}:junk",
            "lock:{a}b}:rw",
            "lock:{}",
            "lock:{a b}",
            "lock:client:",
            "lock:client:xyz",
        ] {
            assert_eq!(parse_key("lock:", key), None, "{key}");
        }
        assert!(parse_channel("lock:", "lock:{a}:fair:wake:").is_none());
    }

    #[test]
    fn records_and_rate_limits_parse_back_and_are_no_locks() {
        for prefix in ["lock:", "", "a*b:"] {
            let keys = LockKeys::new(prefix, "order:42").unwrap();
            let record = keys.record_key();
            assert_eq!(record, format!("{prefix}{{order:42}}:record"));
            assert_eq!(
                parse_key(prefix, &record),
                Some(ParsedKey::Record { name: "order:42" })
            );
            let rate = keys.rate_limit_key();
            assert_eq!(rate, format!("{prefix}{{order:42}}:rate"));
            assert_eq!(
                parse_key(prefix, &rate),
                Some(ParsedKey::RateLimit { name: "order:42" })
            );
            assert!(keys.keys().all(|(_, key)| key != record && key != rate));
        }
        for key in ["lock:{a}:record:x", "lock:{a}:rates", "lock:{a b}:record"] {
            assert_eq!(parse_key("lock:", key), None, "{key}");
        }
    }

    #[test]
    fn client_keys_parse_back_and_are_never_lock_keys() {
        let id = "0123456789abcdef0123456789abcdef";
        let key = client_key("lock:", id);
        assert_eq!(
            parse_key("lock:", &key),
            Some(ParsedKey::ClientDescription { client_id: id })
        );
        // Under the prefix `lock:client:`, a lock's key still parses as the lock's.
        let lock = LockKeys::new("lock:client:", "x").unwrap();
        assert!(matches!(
            parse_key("lock:client:", &lock.key(KeyRole::Mutex)),
            Some(ParsedKey::Lock { name: "x", .. })
        ));
        assert_eq!(parse_key("lock:", &lock.key(KeyRole::Mutex)), None);
    }

    #[test]
    fn globs_match_the_prefix_literally() {
        assert_eq!(key_glob("lock:", "*"), "lock:{*}*");
        assert_eq!(key_glob("a*[b]:", "x?"), "a\\*\\[b\\]:{x?}*");
        assert_eq!(prefix_glob("lock:"), "lock:*");
        assert_eq!(prefix_glob("a\\?"), "a\\\\\\?*");
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;
        use crate::util::arbitrary::config;

        /// Text of the characters keys are made of, `{` and `}` included (which names and
        /// prefixes refuse), and those that mean something in a key (`:`) or a glob.
        fn text(max: usize) -> impl Strategy<Value = String> {
            prop::collection::vec(
                prop::sample::select(vec![
                    'a', 'b', 'c', 'f', 'r', 'w', ':', '*', '?', '[', '\\', '{', '}', 'é', ' ',
                ]),
                0..max,
            )
            .prop_map(String::from_iter)
        }

        proptest! {
            #![proptest_config(config(500))]

            /// Every key and channel of an accepted name parses back to that name and role,
            /// under its own prefix; any text parses to a name lock-core accepts, or to nothing.
            #[test]
            fn keys_parse_back_to_their_lock(
                prefix in text(8),
                name in text(12),
                tail in text(12),
                noise in text(24),
            ) {
                if let Ok(keys) = LockKeys::new(&prefix, &name) {
                    for (role, key) in keys.keys() {
                        prop_assert_eq!(
                            parse_key(&prefix, &key),
                            Some(ParsedKey::Lock { name: name.as_str(), role })
                        );
                    }
                    for (role, channel) in keys.channels() {
                        let channel = channel + &tail;
                        let parsed = parse_channel(&prefix, &channel);
                        if let Some(parsed) = parsed {
                            prop_assert_eq!(parsed.name, name.as_str());
                        }
                        // A fair lock's wake channel needs the waiter's id after it; the
                        // others are exact.
                        let waiter = role == ChannelRole::FairWake;
                        prop_assert_eq!(parsed.is_some(), waiter != tail.is_empty());
                    }
                }
                match parse_key(&prefix, &noise) {
                    Some(ParsedKey::Lock { name, role }) => {
                        let keys = LockKeys::new(&prefix, name);
                        prop_assert!(keys.is_ok() || crate::validate_prefix(&prefix).is_err());
                        if let Ok(keys) = keys {
                            prop_assert_eq!(keys.key(role), noise.clone());
                        }
                    }
                    Some(ParsedKey::Record { name }) => {
                        let keys = LockKeys::new(&prefix, name);
                        prop_assert!(keys.is_ok() || crate::validate_prefix(&prefix).is_err());
                        if let Ok(keys) = keys {
                            prop_assert_eq!(keys.record_key(), noise.clone());
                        }
                    }
                    Some(ParsedKey::RateLimit { name }) => {
                        let keys = LockKeys::new(&prefix, name);
                        prop_assert!(keys.is_ok() || crate::validate_prefix(&prefix).is_err());
                        if let Ok(keys) = keys {
                            prop_assert_eq!(keys.rate_limit_key(), noise.clone());
                        }
                    }
                    Some(ParsedKey::ClientDescription { client_id }) => {
                        prop_assert_eq!(client_key(&prefix, client_id), noise.clone());
                    }
                    None => {}
                }
            }
        }
    }

    #[test]
    fn a_bad_prefix_or_name_is_refused() {
        assert!(matches!(
            LockKeys::new("a b", "x"),
            Err(LockError::InvalidOption {
                option: "key_prefix",
                ..
            })
        ));
        assert!(matches!(
            LockKeys::new("lock:", "{x}"),
            Err(LockError::InvalidName { .. })
        ));
    }
}
