//! The idempotency key and its scope: what is accepted, and the name a scoped key is kept
//! under (the name of its lock and of its record).

use crate::config::KeyRules;
use crate::key::lock_name;

/// The longest idempotency key accepted: 255 bytes.
pub const MAX_KEY_LEN: usize = 255;

/// The longest scope accepted (what the layer's scope extractor finds): 255 bytes.
pub const MAX_SCOPE_LEN: usize = 255;

/// The key of a request, from its header's bytes, or why it is not acceptable (a sentence
/// safe to show the client: it never repeats the key).
///
/// A key is 1 to [`MAX_KEY_LEN`] bytes of printable ASCII (space to `~`). It may be sent as a
/// structured-field string, in double quotes (`"8e03978e-40d5"`, as the IETF draft writes
/// it): the quotes are not part of the key, and a quoted key may not contain `"` or `\`.
pub(crate) fn parse_key(value: &[u8]) -> Result<String, &'static str> {
    let key = match value {
        [b'"', inner @ .., b'"'] => {
            if inner.iter().any(|&b| b == b'"' || b == b'\\') {
                return Err("a quoted key may not contain `\"` or `\\`");
            }
            inner
        }
        _ => value,
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
    String::from_utf8(key.to_vec()).map_err(|_| "it is not printable ASCII (space to `~`)")
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
pub(crate) fn record_name(prefix: &str, scope: Option<&str>, key: &str) -> Result<String, String> {
    let scope = scope.unwrap_or("").replace('%', "%25").replace(':', "%3A");
    let rules = KeyRules {
        prefix: prefix.to_owned(),
        max_key_len: MAX_PLAIN,
        hash_keys: true,
    };
    lock_name(&rules, &format!("{scope}:{key}"))
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
                let unquoted = match raw.as_slice() {
                    [b'"', inner @ .., b'"'] => inner,
                    other => other,
                };
                let printable = unquoted.iter().all(|b| (b' '..=b'~').contains(b));
                let quoted_ok = unquoted.len() == raw.len()
                    || !unquoted.iter().any(|&b| b == b'"' || b == b'\\');
                let ok = !unquoted.is_empty() && unquoted.len() <= MAX_KEY_LEN && printable && quoted_ok;
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
