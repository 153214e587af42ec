//! The idempotency key and its scope: what is accepted, and the name a scoped key is kept
//! under (the name of its lock and of its record).

use crate::config::KeyRules;
use crate::keyed::name::lock_name;

/// The longest idempotency key accepted: 255 bytes.
pub const MAX_KEY_LEN: usize = 255;

/// The longest scope accepted (what the layer's scope extractor finds): 255 bytes.
pub const MAX_SCOPE_LEN: usize = 255;

/// The key of a request, from its header's bytes, or why it is not acceptable (a sentence
/// safe to show the client: it never repeats the key).
///
/// A key is 1 to [`MAX_KEY_LEN`] bytes of printable ASCII (space to `~`). It may be sent bare
/// (`8e03978e-40d5`) or as a structured-field string (RFC 8941 §3.3.3, the form the IETF
/// draft gives: `"8e03978e-40d5"`): the quotes are not part of the key, and inside them `\"`
/// and `\\` stand for `"` and `\` (any other `\` or a lone `"` is refused). Both forms of the
/// same key are the same key.
pub(crate) fn parse_key(value: &[u8]) -> Result<String, &'static str> {
    let key = match value {
        [b'"', inner @ .., b'"'] => unescape(inner)?,
        _ => value.to_vec(),
    };
    if key.is_empty() {
        return Err("it is empty");
    }
    if key.len() > MAX_KEY_LEN {
        return Err("it is longer than 255 bytes");
    }
    if !key.iter().all(|b| (b' '..=b'~').contains(b)) {
        return Err("it is not printable ASCII (space to `~`)");
    }
    // Printable ASCII is UTF-8.
    String::from_utf8(key).map_err(|_| "it is not printable ASCII (space to `~`)")
}

/// The content of a structured-field string (between its quotes), unescaped.
fn unescape(inner: &[u8]) -> Result<Vec<u8>, &'static str> {
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => out.push(escaped),
                _ => return Err("a quoted key may escape only `\"` and `\\` (as `\\\"`, `\\\\`)"),
            },
            b'"' => return Err("a quoted key may not contain an unescaped `\"`"),
            _ => out.push(b),
        }
    }
    Ok(out)
}

/// Why `scope` is not an acceptable scope, if it is not: 1 to [`MAX_SCOPE_LEN`] bytes
/// without control characters.
pub(crate) fn scope_problem(scope: &str) -> Option<&'static str> {
    if scope.is_empty() {
        Some("it is empty")
    } else if scope.len() > MAX_SCOPE_LEN {
        Some("it is longer than 255 bytes")
    } else if scope.chars().any(char::is_control) {
        Some("it contains a control character")
    } else {
        None
    }
}

/// The longest scoped key kept as it is in a name: longer ones are hashed.
const MAX_PLAIN: usize = 384;

/// The name of `key` in `scope` under `prefix`: `prefix + scope + ":" + key`, with `%` and `:`
/// in the scope written `%25` and `%3A` (so the first `:` ends the scope, and no two
/// (scope, key) pairs share a name); an unscoped key has an empty scope (`prefix + ":" + key`).
/// When that is not a valid lock name (whitespace or braces in it, or longer than 384 bytes
/// after the prefix), it is `prefix + "sha256:" + hex(SHA-256(scope ":" key))` instead (see
/// [`hash_keys`](crate::DistributedLockLayer::hash_keys)).
///
/// Public as [`record_key`](crate::idempotency::record_key).
pub(crate) fn record_name(prefix: &str, scope: Option<&str>, key: &str) -> Result<String, String> {
    let scope = scope.unwrap_or("").replace('%', "%25").replace(':', "%3A");
    let rules = KeyRules {
        prefix: prefix.to_owned(),
        max_key_len: MAX_PLAIN,
        hash_keys: true,
    };
    lock_name(&rules, &format!("{scope}:{key}"))
}

/// The name an [`IdempotencyLayer`](crate::IdempotencyLayer) with `prefix` (its
/// [`prefix`](crate::IdempotencyLayer::prefix), default `"idem:"`) keeps `key` under, for a
/// request in `scope` (`None` for an unscoped layer): the name of the key's lock **and** of its
/// record, what `lockctl status NAME` takes (and what
/// [`Idempotency::record_key`](crate::Idempotency::record_key) says inside a handler).
///
/// It is `prefix + scope + ":" + key`: an unscoped layer's is `idem::<key>` (an empty scope
/// between the two colons), a scoped one's `idem:<scope>:<key>`, with `%` and `:` in the scope
/// written `%25` and `%3A`. A name that cannot be a lock name as it is (whitespace or braces
/// in it, or over 384 bytes after the prefix) is `prefix + "sha256:" + hex(SHA-256(scope ":"
/// key))` instead. `key` is the key itself, without the quotes of its structured-field form.
/// `Err` (with the reason) when `prefix` cannot be a lock prefix.
///
/// ```
/// use lock_tower::idempotency::record_key;
///
/// assert_eq!(record_key("idem:", None, "8e03978e").unwrap(), "idem::8e03978e");
/// assert_eq!(record_key("idem:", Some("client-7"), "k1").unwrap(), "idem:client-7:k1");
/// assert!(record_key("idem:", None, "a key with spaces").unwrap().starts_with("idem:sha256:"));
/// ```
pub fn record_key(prefix: &str, scope: Option<&str>, key: &str) -> Result<String, String> {
    record_name(prefix, scope, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_printable_ascii_of_1_to_255_bytes() {
        for (raw, key) in [
            (&b"8e03978e-40d5-43e8"[..], "8e03978e-40d5-43e8"),
            (b"\"8e03978e\"", "8e03978e"),
            (b"a b~!", "a b~!"),
            (b"\"", "\""),
            (br#""a\"b\\c""#, r#"a"b\c"#),
        ] {
            assert_eq!(parse_key(raw).as_deref(), Ok(key), "{raw:?}");
        }
        let longest = vec![b'k'; MAX_KEY_LEN];
        assert!(parse_key(&longest).is_ok());
        let long = vec![b'k'; MAX_KEY_LEN + 1];
        for (raw, reason) in [
            (&b""[..], "empty"),
            (b"\"\"", "empty"),
            (&long, "longer"),
            (b"a\tb", "printable"),
            (b"caf\xc3\xa9", "printable"),
            (b"a\x7f", "printable"),
            (b"\"a\"b\"", "quoted"),
            (b"\"a\\b\"", "quoted"),
        ] {
            let err = parse_key(raw).unwrap_err();
            assert!(err.contains(reason), "{raw:?}: {err}");
        }
    }

    #[test]
    fn scopes_are_1_to_255_bytes_without_control_characters() {
        assert_eq!(scope_problem("client-7"), None);
        assert_eq!(scope_problem("订单"), None);
        assert!(scope_problem("").is_some());
        assert!(scope_problem("a\nb").is_some());
        assert!(scope_problem(&"s".repeat(MAX_SCOPE_LEN + 1)).is_some());
    }

    #[test]
    fn names_keep_scope_and_key_apart() {
        let name = |scope, key| record_name("idem:", scope, key).unwrap();
        assert_eq!(name(None, "k1"), "idem::k1");
        assert_eq!(name(Some("alice"), "k1"), "idem:alice:k1");
        assert_ne!(name(Some("a:b"), "c"), name(Some("a"), "b:c"));
        assert_eq!(name(Some("a:b%"), "c"), "idem:a%3Ab%25:c");
        // What a lock name cannot hold is hashed, the same way every time.
        let spaced = name(Some("alice"), "a b");
        assert!(spaced.starts_with("idem:sha256:"), "{spaced}");
        assert_eq!(spaced, name(Some("alice"), "a b"));
        assert_ne!(spaced, name(Some("bob"), "a b"));
        let long = name(Some(&"s".repeat(255)), &"k".repeat(255));
        assert!(lock_core::validate_name(&long).is_ok(), "{long}");
    }

    /// Hostile header bytes and scopes: a key is accepted exactly by the rule, and every
    /// accepted (scope, key) has a valid lock name; nothing panics.
    mod properties {
        use proptest::prelude::*;
        use proptest::test_runner::Config;

        use super::*;

        proptest! {
            #![proptest_config(Config { cases: 1000, failure_persistence: None, ..Config::default() })]

            #[test]
            fn any_bytes_are_a_key_by_the_rule_or_refused(
                raw in prop::collection::vec(any::<u8>(), 0..300),
                scope in prop::option::of(any::<String>()),
            ) {
                // RFC 8941's sf-string, read another way: split at escapes.
                let unquoted = match raw.as_slice() {
                    [b'"', inner @ .., b'"'] => {
                        let mut key = Vec::new();
                        let mut i = 0;
                        let mut valid = true;
                        while i < inner.len() {
                            match (inner[i], inner.get(i + 1)) {
                                (b'\\', Some(&c)) if c == b'"' || c == b'\\' => { key.push(c); i += 2; }
                                (b'\\' | b'"', _) => { valid = false; break; }
                                (c, _) => { key.push(c); i += 1; }
                            }
                        }
                        valid.then_some(key)
                    }
                    other => Some(other.to_vec()),
                };
                let ok = unquoted.as_ref().is_some_and(|k| {
                    !k.is_empty() && k.len() <= MAX_KEY_LEN && k.iter().all(|b| (b' '..=b'~').contains(b))
                });
                match parse_key(&raw) {
                    Ok(key) => {
                        prop_assert!(ok, "{:?} accepted", raw);
                        let scope = scope.filter(|s| scope_problem(s).is_none());
                        let name = record_name("idem:", scope.as_deref(), &key).unwrap();
                        prop_assert!(lock_core::validate_name(&name).is_ok(), "{}", name);
                    }
                    Err(_) => prop_assert!(!ok, "{:?} refused", raw),
                }
            }
        }
    }
}
