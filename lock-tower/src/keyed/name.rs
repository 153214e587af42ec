//! From a request's key to its lock name: the checks, and the opt-in hashing of keys that
//! break the lock-name rules.

use sha2::{Digest, Sha256};

use crate::config::KeyRules;

/// What a hashed key starts with.
const HASHED: &str = "sha256:";

/// The lock name for `key`: the prefix and the key, if the key is acceptable; else why it is
/// not (a sentence safe to show the client: it never repeats the key).
///
/// With [`hash_keys`](crate::DistributedLockLayer::hash_keys) a key that breaks the rules
/// (too long, control characters, whitespace, braces) is replaced by `sha256:` and the
/// SHA-256 of its bytes in hex, and so is a key that starts with `sha256:` itself, so no
/// acceptable key can equal the hashed form of another one: two keys lock the same name only
/// if they are equal or their SHA-256 digests collide. An empty key is always refused.
pub(crate) fn lock_name(rules: &KeyRules, key: &str) -> Result<String, String> {
    if key.is_empty() {
        return Err("it is empty".to_owned());
    }
    let problem = if key.len() > rules.max_key_len {
        format!("it is longer than {} bytes", rules.max_key_len)
    } else if key.chars().any(char::is_control) {
        "it contains a control character".to_owned()
    } else {
        let name = format!("{}{key}", rules.prefix);
        match lock_core::validate_name(&name) {
            Ok(()) if !(rules.hash_keys && key.starts_with(HASHED)) => return Ok(name),
            Ok(()) => String::new(),
            Err(lock_core::LockError::InvalidName { reason, .. }) => reason.to_owned(),
            Err(_) => "it is not a valid lock name".to_owned(),
        }
    };
    if rules.hash_keys {
        Ok(format!("{}{HASHED}{:x}", rules.prefix, Sha256::digest(key)))
    } else {
        Err(problem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(hash_keys: bool) -> KeyRules {
        KeyRules {
            prefix: "pay:".to_owned(),
            max_key_len: 16,
            hash_keys,
        }
    }

    #[test]
    fn valid_keys_pass_unchanged() {
        for hash in [false, true] {
            assert_eq!(lock_name(&rules(hash), "42").unwrap(), "pay:42");
        }
    }

    #[test]
    fn bad_keys_are_refused_with_a_reason_that_does_not_repeat_them() {
        let rules = rules(false);
        for (key, reason) in [
            ("", "empty"),
            ("a b", "whitespace"),
            ("a{b}", "`{`"),
            ("a\u{7}", "control"),
            ("0123456789abcdefX", "longer than 16"),
        ] {
            let err = lock_name(&rules, key).unwrap_err();
            assert!(err.contains(reason), "{key:?}: {err}");
        }
    }

    #[test]
    fn with_hashing_bad_keys_get_a_stable_hashed_name() {
        let rules = rules(true);
        let a = lock_name(&rules, "txn 7/{a}").unwrap();
        assert_eq!(a, lock_name(&rules, "txn 7/{a}").unwrap());
        assert!(a.starts_with("pay:sha256:") && a.len() == "pay:sha256:".len() + 64);
        assert!(lock_core::validate_name(&a).is_ok());
        assert_ne!(a, lock_name(&rules, "txn 7/{b}").unwrap());
        let long = "x".repeat(10_000);
        assert!(lock_name(&rules, &long).unwrap().starts_with("pay:sha256:"));
        // A key that looks hashed is hashed again, so it cannot take another key's name.
        let lookalike = a.trim_start_matches("pay:");
        assert_ne!(lock_name(&rules, lookalike).unwrap(), a);
        assert!(
            lock_name(&rules, "").is_err(),
            "an empty key is still refused"
        );
    }

    /// Hostile keys (issue 17 §3): arbitrary paths, queries and header values, through the
    /// built-in extractors and [`lock_name`]. A key becomes a lock name lock-core accepts, or
    /// the request is refused (`400 invalid_lock_key`) with a reason from a fixed set, never
    /// a panic and never a name lock-core would refuse later.
    mod properties {
        use http::{HeaderName, HeaderValue, Request};
        use proptest::prelude::*;
        use proptest::test_runner::Config;

        use super::*;
        use crate::keyed::extract::{Header, KeyExtractor, PathSegment, QueryParam};

        fn config(cases: u32) -> Config {
            Config {
                cases,
                failure_persistence: None,
                ..Config::default()
            }
        }

        /// A prefix the layer accepts (1 to 128 bytes, no braces, whitespace or control).
        fn prefix() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => "[a-z:_./-]{1,12}",
                1 => Just("p".repeat(128)),
                1 => "[a-zé订😀:]{1,20}".prop_filter("at most 128 bytes", |p| p.len() <= 128),
            ]
        }

        fn rules() -> impl Strategy<Value = KeyRules> {
            (
                prefix(),
                prop::sample::select(vec![0, 1, 8, 16, 128, 384, 512, 10_000, usize::MAX]),
                any::<bool>(),
            )
                .prop_map(|(prefix, max_key_len, hash_keys)| KeyRules {
                    prefix,
                    max_key_len,
                    hash_keys,
                })
        }

        fn key_char() -> impl Strategy<Value = char> {
            prop_oneof![
                6 => prop::char::range('a', 'z'),
                2 => prop::sample::select(vec![':', '-', '_', '.', '/', '%', '+', '=', '&', '0']),
                3 => prop::sample::select(vec![
                    '{', '}', ' ', '\t', '\n', '\r', '\0', '\x1b', '\x7f', '\u{85}', '\u{a0}',
                    '\u{2028}', '\u{3000}', '\u{200b}', '\u{feff}', '\u{fffd}', 'é', '😀',
                ]),
                1 => any::<char>(),
            ]
        }

        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                6 => prop::collection::vec(key_char(), 0..24).prop_map(String::from_iter),
                1 => "[a-z]{0,8}".prop_map(|k| format!("sha256:{k}")),
                1 => (0usize..600).prop_map(|n| "k".repeat(n)),
                1 => (120usize..140, prop::collection::vec(key_char(), 0..3))
                    .prop_map(|(n, tail)| "é".repeat(n) + &String::from_iter(tail)),
                1 => any::<String>(),
            ]
        }

        /// What a refusal may say: these sentences only, none repeating the key.
        fn known_reason(reason: &str, rules: &KeyRules) -> bool {
            let known = [
                "it is empty",
                "it contains a control character",
                "it is longer than 512 bytes",
                "it contains whitespace",
                "it contains `{` or `}`, which would break the Redis Cluster hash tag",
                "it is not a valid lock name",
            ];
            known.contains(&reason)
                || reason == format!("it is longer than {} bytes", rules.max_key_len)
        }

        /// The whole contract of [`lock_name`] for one key.
        fn check(rules: &KeyRules, key: &str) -> Result<(), TestCaseError> {
            let plain = format!("{}{key}", rules.prefix);
            let acceptable = !key.is_empty()
                && key.len() <= rules.max_key_len
                && lock_core::validate_name(&plain).is_ok();
            match lock_name(rules, key) {
                Ok(name) => {
                    prop_assert!(
                        lock_core::validate_name(&name).is_ok(),
                        "{:?} gave {:?}, which lock-core refuses",
                        key,
                        name
                    );
                    if acceptable && !(rules.hash_keys && key.starts_with(HASHED)) {
                        prop_assert_eq!(name, plain);
                    } else {
                        prop_assert!(rules.hash_keys, "{:?} accepted unhashed", key);
                        let hashed = format!("{}{HASHED}{:x}", rules.prefix, Sha256::digest(key));
                        prop_assert_eq!(name, hashed);
                    }
                }
                Err(reason) => {
                    prop_assert!(!acceptable, "{:?} refused: {}", key, reason);
                    prop_assert!(
                        !rules.hash_keys || key.is_empty(),
                        "{:?} refused: {}",
                        key,
                        reason
                    );
                    prop_assert!(known_reason(&reason, rules), "{:?}: {:?}", key, reason);
                }
            }
            Ok(())
        }

        /// A piece of a percent-encoded path or query and the bytes it decodes to.
        #[derive(Debug, Clone)]
        enum Piece {
            /// Characters sent as they are.
            Raw(String),
            /// `%XX` (upper or lower case hex) for any byte.
            Escape(u8, bool),
            /// A `%` that starts no escape (`%zz`, `%4z`, `%z4`): kept as it is.
            Broken(&'static str),
            /// `+`: a space in a query, itself in a path.
            Plus,
        }

        impl Piece {
            fn encoded(&self) -> String {
                match self {
                    Piece::Raw(s) => s.clone(),
                    Piece::Escape(b, true) => format!("%{b:02X}"),
                    Piece::Escape(b, false) => format!("%{b:02x}"),
                    Piece::Broken(s) => (*s).to_owned(),
                    Piece::Plus => "+".to_owned(),
                }
            }

            fn decoded(&self, form: bool, out: &mut Vec<u8>) {
                match self {
                    Piece::Raw(s) => out.extend(s.as_bytes()),
                    Piece::Escape(b, _) => out.push(*b),
                    Piece::Broken(s) => out.extend(s.as_bytes()),
                    Piece::Plus => out.push(if form { b' ' } else { b'+' }),
                }
            }
        }

        /// Characters `http` takes unencoded in a path (minus `/`, `%`, `+`): ASCII ones,
        /// braces and quotes it tolerates, and any non-ASCII character (sent as UTF-8).
        fn path_raw() -> impl Strategy<Value = String> {
            let ascii = prop::sample::select(
                "!$&'()*,-.:;=@ABZ[\\]^_az|~\"{}019"
                    .chars()
                    .collect::<Vec<_>>(),
            );
            prop::collection::vec(
                prop_oneof![4 => ascii, 1 => any::<char>().prop_filter("non-ASCII", |c| !c.is_ascii())],
                1..6,
            )
            .prop_map(String::from_iter)
        }

        /// Characters `http` takes unencoded in a query (minus `&`, `=`, `%`, `+`, `#`).
        fn query_raw() -> impl Strategy<Value = String> {
            let ascii = prop::sample::select(
                "!$'()*,-./:;?@AZ[\\]^_`az{|}~019"
                    .chars()
                    .collect::<Vec<_>>(),
            );
            prop::collection::vec(
                prop_oneof![4 => ascii, 1 => any::<char>().prop_filter("non-ASCII", |c| !c.is_ascii())],
                1..6,
            )
            .prop_map(String::from_iter)
        }

        fn pieces(raw: impl Strategy<Value = String>) -> impl Strategy<Value = Vec<Piece>> {
            prop::collection::vec(
                prop_oneof![
                    4 => raw.prop_map(Piece::Raw),
                    3 => (any::<u8>(), any::<bool>()).prop_map(|(b, upper)| Piece::Escape(b, upper)),
                    1 => prop::sample::select(vec!["%zz", "%4z", "%z4", "%g0", "%-1", "%%zz"])
                        .prop_map(Piece::Broken),
                    1 => Just(Piece::Plus),
                ],
                0..6,
            )
        }

        fn encode(pieces: &[Piece]) -> String {
            pieces.iter().map(Piece::encoded).collect()
        }

        /// What a decoder must make of `pieces`: their bytes, `+` a space in a form, a `%` at
        /// the very end kept, invalid UTF-8 replaced.
        fn decode(pieces: &[Piece], form: bool, trailing: &str) -> String {
            let mut bytes = Vec::new();
            for piece in pieces {
                piece.decoded(form, &mut bytes);
            }
            bytes.extend(trailing.as_bytes());
            String::from_utf8_lossy(&bytes).into_owned()
        }

        /// A segment may end in `%` or `%4` (an escape cut short).
        fn trailing() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec!["", "", "", "%", "%4", "%A"])
        }

        fn request(uri: &str) -> Result<Request<()>, TestCaseError> {
            Request::builder()
                .uri(uri)
                .body(())
                .map_err(|e| TestCaseError::fail(format!("{uri:?} is not a URI: {e}")))
        }

        proptest! {
            #![proptest_config(config(2000))]

            #[test]
            fn any_key_becomes_a_valid_lock_name_or_a_typed_refusal(rules in rules(), key in key()) {
                check(&rules, &key)?;
            }
        }

        proptest! {
            #![proptest_config(config(1000))]

            /// Path segment `index` of an arbitrary percent-encoded path decodes to exactly
            /// its bytes, and then follows the key contract.
            #[test]
            fn a_path_segment_decodes_exactly_and_locks_safely(
                segments in prop::collection::vec((pieces(path_raw()), trailing()), 1..5),
                index in 0usize..6,
                rules in rules(),
            ) {
                let path: String = segments
                    .iter()
                    .map(|(p, end)| format!("/{}{end}", encode(p)))
                    .collect();
                let req = request(&path)?;
                prop_assert_eq!(req.uri().path(), path.as_str());
                let key = PathSegment::new(index).extract(&req);
                let expected = segments.get(index).map(|(p, end)| decode(p, false, end));
                prop_assert_eq!(&key, &expected, "{}", path);
                if let Some(key) = key {
                    check(&rules, &key)?;
                }
            }

            /// The first pair of an arbitrary query whose decoded name is `k` gives the key,
            /// decoded like a form (`+` a space); pairs without `=` have an empty value.
            #[test]
            fn a_query_parameter_decodes_exactly_and_locks_safely(
                pairs in prop::collection::vec(
                    (
                        prop_oneof![
                            3 => Just(vec![Piece::Raw("k".to_owned())]),
                            1 => Just(vec![Piece::Escape(b'k', false)]),
                            2 => pieces(query_raw()),
                        ],
                        prop::option::weighted(0.8, (pieces(query_raw()), trailing())),
                    ),
                    0..5,
                ),
                rules in rules(),
            ) {
                let query: Vec<String> = pairs
                    .iter()
                    .map(|(name, value)| match value {
                        Some((value, end)) => format!("{}={}{end}", encode(name), encode(value)),
                        None => encode(name),
                    })
                    .collect();
                let uri = format!("/p?{}", query.join("&"));
                let req = request(&uri)?;
                let key = QueryParam::new("k").extract(&req);
                let expected = pairs.iter().find_map(|(name, value)| {
                    (decode(name, true, "") == "k").then(|| match value {
                        Some((value, end)) => decode(value, true, end),
                        None => String::new(),
                    })
                });
                prop_assert_eq!(&key, &expected, "{}", uri);
                if let Some(key) = key {
                    check(&rules, &key)?;
                }
            }

            /// Any header value `http` lets through (obsolete text and all) gives the first
            /// value's text, invalid UTF-8 replaced, and then follows the key contract.
            #[test]
            fn a_header_value_is_read_lossily_and_locks_safely(
                values in prop::collection::vec(
                    prop_oneof![
                        prop::collection::vec(any::<u8>(), 0..40),
                        prop::collection::vec(prop_oneof![0x20u8..0x7f, 0x80u8..=0xff, Just(b'\t')], 0..40),
                    ],
                    0..3,
                ),
                rules in rules(),
            ) {
                let name = HeaderName::from_static("x-key");
                let mut req = request("/")?;
                let mut sent = Vec::new();
                for bytes in &values {
                    // What `http` refuses (control bytes) never reaches a layer.
                    if let Ok(value) = HeaderValue::from_bytes(bytes) {
                        req.headers_mut().append(name.clone(), value);
                        sent.push(bytes);
                    }
                }
                let key = Header::new(name).extract(&req);
                let expected = sent.first().map(|b| String::from_utf8_lossy(b).into_owned());
                prop_assert_eq!(&key, &expected);
                if let Some(key) = key {
                    check(&rules, &key)?;
                }
            }
        }
    }
}
