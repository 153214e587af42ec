//! Lock names and key prefixes (checked), and the keys and channels of one name ([`Keys`]).
//!
//! A lock named `N` under prefix `P` owns keys and channels that all start with `P{N}`, so
//! they share the hash tag `{N}` and a Redis Cluster keeps them in one slot. What follows
//! `P{N}` is spelled in [`kind`](crate::kind), by role. A client with an owner description
//! also writes `Pclient:<client id>` (see [`client_key`]).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use redis::{RedisWrite, ToRedisArgs};

use crate::error::LockError;
use crate::kind::{CLIENT, ChannelRole, HoldKind, KeyRole, RATE, RECORD, UPDATED};
use crate::util::shorten;

/// The longest lock name accepted, in bytes.
pub(crate) const MAX_NAME_LEN: usize = 512;

/// The longest key prefix accepted, in bytes.
pub(crate) const MAX_PREFIX_LEN: usize = 128;

/// Checks a lock name: 1 to 512 bytes, no braces (they would break the hash tag), no
/// whitespace and no control characters. Returns [`LockError::InvalidName`] with the reason
/// otherwise.
///
/// Every constructor of a lock checks its name this way; call it yourself to vet names built
/// from external input (a payment provider's id, a path segment) before you lock them.
///
/// ```
/// assert!(lock_core::validate_name("order:42").is_ok());
/// assert!(lock_core::validate_name("order 42").unwrap_err().to_string().contains("whitespace"));
/// ```
pub fn validate_name(name: &str) -> Result<(), LockError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("it is longer than 512 bytes")
    } else if name.is_ascii() {
        // The common case, checked in one pass over the bytes.
        name.bytes().find_map(|b| match b {
            b'{' | b'}' => Some(BRACES),
            b if b.is_ascii_whitespace() => Some(WHITESPACE),
            b if b.is_ascii_control() => Some(CONTROL),
            _ => None,
        })
    } else if name.contains(['{', '}']) {
        Some(BRACES)
    } else if name.chars().any(char::is_whitespace) {
        Some(WHITESPACE)
    } else if name.chars().any(char::is_control) {
        Some(CONTROL)
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

const BRACES: &str = "it contains `{` or `}`, which would break the Redis Cluster hash tag";
const WHITESPACE: &str = "it contains whitespace";
const CONTROL: &str = "it contains a control character";

/// Checks a key prefix: at most 128 bytes, without braces (the `{` after the prefix starts the
/// hash tag), whitespace or control characters; an empty prefix is allowed. Returns
/// [`LockError::InvalidOption`] with option `"key_prefix"` otherwise.
///
/// [`LockClientBuilder::build`](crate::LockClientBuilder::build) checks its
/// [`key_prefix`](crate::LockClientBuilder::key_prefix) this way; tools that take a prefix
/// from their user (lockctl's `--prefix`, lock-tower's layer prefix) call it to apply the same
/// rule.
///
/// ```
/// assert!(lock_core::validate_prefix("shop:lock:").is_ok());
/// assert!(lock_core::validate_prefix("").is_ok());
/// assert!(lock_core::validate_prefix("shop {lock}").is_err());
/// ```
pub fn validate_prefix(prefix: &str) -> Result<(), LockError> {
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

/// The key of a client's owner description: `P` + `client:` + its client id (32 hex digits).
///
/// It can never be the key of a lock, of any prefix: every lock key has a `{` (right after
/// its prefix), and this key has none (prefixes have no braces, client ids are hex digits).
pub(crate) fn client_key(prefix: &str, client_id: &str) -> String {
    format!("{prefix}{CLIENT}{client_id}")
}

/// The keys and channels of one lock name under one prefix, for every primitive. Cheap to
/// clone: one shared string, `P{N}`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Keys {
    base: Arc<str>,
    /// Where the name starts in `base` (after the prefix and `{`).
    name_at: usize,
}

impl Keys {
    /// The keys of `name` under `prefix` (a prefix the client checked), if `name` is valid.
    pub(crate) fn new(prefix: &str, name: &str) -> Result<Keys, LockError> {
        validate_name(name)?;
        let mut base = String::with_capacity(prefix.len() + name.len() + 2);
        base.push_str(prefix);
        base.push('{');
        base.push_str(name);
        base.push('}');
        Ok(Keys {
            base: base.into(),
            name_at: prefix.len() + 1,
        })
    }

    /// The lock's name.
    pub(crate) fn name(&self) -> &str {
        &self.base[self.name_at..self.base.len() - 1]
    }

    /// The mutex: a lock string `owner|count|token|released|waiters`.
    pub(crate) fn lock(&self) -> &str {
        &self.base
    }

    /// The mutex's key, shared (a call that keeps the key routes by it without a copy).
    pub(crate) fn lock_shared(&self) -> Arc<str> {
        self.base.clone()
    }

    /// `P{N}` + `suffix`, written straight into a command (no string of its own).
    pub(crate) fn with(&self, suffix: &'static str) -> Suffixed<'_> {
        Suffixed {
            base: &self.base,
            suffix,
        }
    }

    /// The key of `role`: `P{N}` + its suffix, written straight into a command.
    pub(crate) fn of(&self, role: KeyRole) -> Suffixed<'_> {
        self.with(role.suffix())
    }

    /// The channel of `role` (for [`ChannelRole::FairWake`], the prefix its waiters' owner
    /// ids follow).
    pub(crate) fn channel(&self, role: ChannelRole) -> Suffixed<'_> {
        self.with(role.suffix())
    }

    /// The key a hold of `kind` lives in (a mutex's is `P{N}` itself, borrowed).
    pub(crate) fn hold(&self, kind: HoldKind) -> Cow<'_, str> {
        match kind.role() {
            KeyRole::Mutex => Cow::Borrowed(&self.base),
            role => Cow::Owned(self.of(role).to_string()),
        }
    }

    /// The name's record (`crate::record`).
    pub(crate) fn record(&self) -> String {
        self.with(RECORD).to_string()
    }

    /// The name's update record (`crate::update`), written straight into a command.
    pub(crate) fn updated(&self) -> Suffixed<'_> {
        self.with(UPDATED)
    }

    /// The name's rate limit (`crate::rate_limit`).
    pub(crate) fn rate(&self) -> String {
        self.with(RATE).to_string()
    }
}

/// The lock name in `key` and what follows it, if `key` is `prefix` + `{name}` + anything with
/// a valid name: the inverse of [`Keys::new`]. A name has no braces, so the first `}` ends it.
pub(crate) fn split<'a>(prefix: &str, key: &'a str) -> Option<(&'a str, &'a str)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('{')?;
    let (name, after) = rest.split_once('}')?;
    validate_name(name).ok()?;
    Some((name, after))
}

/// The Redis glob (`SCAN MATCH`, `PSUBSCRIBE`) of every key and channel of the names that
/// match the glob `names` under `prefix`, the prefix matched literally.
pub(crate) fn glob(prefix: &str, names: &str) -> String {
    format!("{}{{{names}}}*", escape_glob(prefix))
}

/// `text` with Redis glob characters escaped, to match literally.
pub(crate) fn escape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A key or channel name, `base` + `suffix`, that writes itself into a command without a
/// string of its own.
#[derive(Clone, Copy)]
pub(crate) struct Suffixed<'a> {
    base: &'a str,
    suffix: &'static str,
}

impl fmt::Display for Suffixed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.base)?;
        f.write_str(self.suffix)
    }
}

impl ToRedisArgs for Suffixed<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        use std::io::Write;
        let mut arg = out.writer_for_next_arg();
        let _ = arg.write_all(self.base.as_bytes());
        let _ = arg.write_all(self.suffix.as_bytes());
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Keys").field(&self.base).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_shares_one_hash_tag() {
        let k = Keys::new("lock:", "order:42").unwrap();
        assert_eq!(k.name(), "order:42");
        assert_eq!(k.lock(), "lock:{order:42}");
        let roles = KeyRole::ALL.into_iter().filter(|r| *r != KeyRole::Mutex);
        let keys = roles.map(|r| k.of(r).to_string());
        let channels = ChannelRole::ALL.map(|r| k.channel(r).to_string());
        let updated = k.updated().to_string();
        for key in keys.chain(channels).chain([k.record(), k.rate(), updated]) {
            assert!(key.starts_with("lock:{order:42}:"), "{key}");
        }
        assert_eq!(Keys::new("", "a").unwrap().name(), "a");
    }

    #[test]
    fn suffixes_cannot_collide_with_other_names() {
        // `a` + ":released" must never equal the key of a lock named "a:released".
        let a = Keys::new("lock:", "a").unwrap();
        let b = Keys::new("lock:", "a:released").unwrap();
        let released = |k: &Keys| k.channel(ChannelRole::Released).to_string();
        assert_ne!(released(&a), b.lock());
        assert_ne!(released(&a), released(&b));
    }

    #[test]
    fn client_keys_are_never_lock_keys() {
        let key = client_key("lock:", "0123456789abcdef0123456789abcdef");
        assert_eq!(key, "lock:client:0123456789abcdef0123456789abcdef");
        assert!(!key.contains(['{', '}']));
        // A lock named like the client key, under the same or a longer prefix, has a brace.
        assert_ne!(
            Keys::new("lock:", "client:x").unwrap().lock(),
            "lock:client:x"
        );
        assert_ne!(
            Keys::new("lock:client:", "x").unwrap().lock(),
            "lock:client:x"
        );
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

    /// Hostile names and prefixes (issue 17 §3): arbitrary text against the documented rule.
    mod properties {
        use proptest::prelude::*;

        use super::*;
        use crate::util::arbitrary::config;

        /// The characters the rules are about, common ones, and any character at all.
        fn name_char() -> impl Strategy<Value = char> {
            prop_oneof![
                6 => prop::char::range('a', 'z'),
                2 => prop::sample::select(vec![':', '-', '_', '.', '*', '|', '/', '0', '9', '#']),
                3 => prop::sample::select(vec![
                    '{', '}', ' ', '\t', '\n', '\r', '\0', '\x0b', '\x0c', '\x1c', '\x1f', '\x7f',
                    '\u{85}', '\u{9f}', '\u{a0}', '\u{1680}', '\u{2000}', '\u{2028}', '\u{2029}',
                    '\u{3000}', '\u{200b}', '\u{feff}', '\u{ff5b}', '\u{ff5d}',
                ]),
                2 => prop::sample::select(vec!['é', '订', '单', '😀', 'ß', '\u{10ffff}', '\u{fffd}']),
                2 => any::<char>(),
            ]
        }

        /// A character every rule allows.
        fn safe_char() -> impl Strategy<Value = char> {
            prop_oneof![
                4 => prop::char::range('a', 'z'),
                2 => prop::sample::select(vec![':', '-', '_', '.', '*', '|', '/', '0', '#', '\u{200b}']),
                1 => prop::sample::select(vec!['é', '订', '😀', '\u{10ffff}', '\u{fffd}']),
                1 => any::<char>().prop_filter("allowed", |c| !forbidden(*c)),
            ]
        }

        /// Short names (mostly hostile, or made of allowed characters only), names around the 512-byte limit (with multi-byte characters on the
        /// edge), and arbitrary strings.
        fn name() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => prop::collection::vec(name_char(), 0..24).prop_map(String::from_iter),
                3 => prop::collection::vec(safe_char(), 1..24).prop_map(String::from_iter),
                2 => (505usize..=514, prop::collection::vec(name_char(), 0..3))
                    .prop_map(|(n, tail)| "x".repeat(n) + &String::from_iter(tail)),
                1 => any::<String>(),
            ]
        }

        fn prefix() -> impl Strategy<Value = String> {
            prop_oneof![
                3 => prop::collection::vec(name_char(), 0..12).prop_map(String::from_iter),
                3 => prop::collection::vec(safe_char(), 0..12).prop_map(String::from_iter),
                1 => (124usize..=130, prop::collection::vec(name_char(), 0..2))
                    .prop_map(|(n, tail)| "p".repeat(n) + &String::from_iter(tail)),
                1 => any::<String>(),
            ]
        }

        /// The rule as documented: 1 to 512 bytes, no braces, whitespace or control characters.
        fn documented_name_rule(name: &str) -> bool {
            (1..=MAX_NAME_LEN).contains(&name.len()) && !name.chars().any(forbidden)
        }

        fn forbidden(c: char) -> bool {
            c == '{' || c == '}' || c.is_whitespace() || c.is_control()
        }

        /// The Redis Cluster hash tag of `key`: what is between its first `{` and the first `}`
        /// after it, if that is not empty; else the whole key.
        fn hash_tag(key: &str) -> &str {
            if let Some(open) = key.find('{')
                && let Some(len) = key[open + 1..].find('}')
                && len > 0
            {
                return &key[open + 1..open + 1 + len];
            }
            key
        }

        fn every_key(keys: &Keys) -> Vec<String> {
            let keys_by_role = KeyRole::ALL.map(|role| keys.of(role).to_string());
            let channels = ChannelRole::ALL.map(|role| keys.channel(role).to_string());
            let mut every = vec![keys.lock().to_owned(), keys.record(), keys.rate()];
            every.extend(keys_by_role);
            every.extend(channels);
            every
        }

        proptest! {
            #![proptest_config(config(1000))]

            #[test]
            fn a_name_is_accepted_exactly_when_it_follows_the_documented_rule(name in name()) {
                match validate_name(&name) {
                    Ok(()) => prop_assert!(documented_name_rule(&name)),
                    Err(LockError::InvalidName { name: shown, reason }) => {
                        prop_assert!(!documented_name_rule(&name));
                        prop_assert_eq!(shown, shorten(&name));
                        // The reason names a rule the name really breaks.
                        let broken = match reason {
                            "it is empty" => name.is_empty(),
                            "it is longer than 512 bytes" => name.len() > MAX_NAME_LEN,
                            BRACES => name.contains(['{', '}']),
                            WHITESPACE => name.chars().any(char::is_whitespace),
                            CONTROL => name.chars().any(char::is_control),
                            other => return Err(TestCaseError::fail(format!("reason {other:?}"))),
                        };
                        prop_assert!(broken, "{:?} does not break {:?}", name, reason);
                    }
                    Err(other) => prop_assert!(false, "wrong error {:?}", other),
                }
            }

            #[test]
            fn a_prefix_is_accepted_exactly_when_it_follows_the_documented_rule(p in prefix()) {
                let rule = p.len() <= MAX_PREFIX_LEN && !p.chars().any(forbidden);
                match validate_prefix(&p) {
                    Ok(()) => prop_assert!(rule),
                    Err(LockError::InvalidOption { option, .. }) => {
                        prop_assert!(!rule);
                        prop_assert_eq!(option, "key_prefix");
                    }
                    Err(other) => prop_assert!(false, "wrong error {:?}", other),
                }
            }
        }

        /// Two names: unrelated, equal, or the second one is the first plus a key suffix.
        fn name_pair() -> impl Strategy<Value = (String, String)> {
            name().prop_flat_map(|a| {
                let mut suffixes: Vec<&'static str> =
                    KeyRole::ALL.iter().map(|r| r.suffix()).collect();
                suffixes.extend(ChannelRole::ALL.iter().map(|r| r.suffix()));
                suffixes.extend(["}", "}:", ":"]);
                let grown = a.clone();
                let b = prop_oneof![
                    2 => name(),
                    1 => Just(a.clone()),
                    3 => prop::sample::select(suffixes).prop_map(move |s| grown.clone() + s),
                ];
                (Just(a), b)
            })
        }

        proptest! {
            #![proptest_config(config(500))]

            #[test]
            fn every_key_of_an_accepted_name_shares_its_hash_tag(p in prefix(), name in name()) {
                let keys = Keys::new(&p, &name);
                prop_assert_eq!(keys.is_ok(), validate_name(&name).is_ok());
                let (Ok(keys), Ok(())) = (keys, validate_prefix(&p)) else {
                    return Ok(());
                };
                prop_assert_eq!(keys.name(), name.as_str());
                let base = format!("{p}{{{name}}}");
                for key in every_key(&keys) {
                    prop_assert!(key.starts_with(&base), "{:?} does not start with {:?}", key, base);
                    prop_assert_eq!(hash_tag(&key), name.as_str());
                }
            }

            #[test]
            fn two_accepted_names_never_share_a_key(p in prefix(), (a, b) in name_pair()) {
                let (Ok(()), Ok(ka), Ok(kb)) = (validate_prefix(&p), Keys::new(&p, &a), Keys::new(&p, &b)) else {
                    return Ok(());
                };
                let of_a = every_key(&ka);
                for key in every_key(&kb) {
                    prop_assert_eq!(of_a.contains(&key), a == b, "{:?} / {:?}: {:?}", a, b, key);
                }
            }
        }
    }
}
