//! [`KeySettings`]: what every keyed layer (one that names a Redis object `prefix + key`
//! after a key from each request: the lock layer, the rate-limit layer) is told about its
//! keys and about Redis being unavailable, and the builder setters of those settings,
//! written once for every such layer ([`key_setters!`]).

use std::sync::Arc;
use std::time::Duration;

use lock_core::LockError;

use super::validate::{Problems, prefix_problem};
use super::words::Words;
use crate::config::{FailMode, KeyRules, LoggedRoutes, MissingKey};

/// The settings a keyed layer shares with the others, embedded in its own settings as
/// `keys`.
#[derive(Debug, Clone)]
pub(crate) struct KeySettings {
    /// How a request's key becomes a name.
    pub(crate) rules: KeyRules,
    pub(crate) missing_key: MissingKey,
    pub(crate) fail_mode: FailMode,
    /// The `Retry-After` of a `503`.
    pub(crate) unavailable_retry_after: Duration,
    /// Settings that cannot work, reported on every request.
    pub(crate) invalid: Problems,
    /// The routes whose key mismatch this layer has logged.
    pub(crate) mismatched_routes: Arc<LoggedRoutes>,
}

impl KeySettings {
    /// The defaults under `prefix`: keys of at most 128 bytes, not hashed, `400` for a
    /// request without a key, fail closed, `Retry-After: 1` on a `503`.
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            rules: KeyRules {
                prefix: prefix.to_owned(),
                max_key_len: 128,
                hash_keys: false,
            },
            missing_key: MissingKey::Reject,
            fail_mode: FailMode::Closed,
            unavailable_retry_after: Duration::from_secs(1),
            invalid: Problems::default(),
            mismatched_routes: Arc::default(),
        }
    }

    /// Sets the prefix, recording whether it can work.
    pub(crate) fn set_prefix(&mut self, prefix: String) {
        self.check("prefix", prefix_problem(&prefix));
        self.rules.prefix = prefix;
    }

    /// Records whether `option` can work: `Some(reason)` if not.
    pub(crate) fn check(&mut self, option: &'static str, problem: Option<String>) {
        self.invalid.check(option, problem);
    }

    /// The error of a setting that cannot work, if there is one.
    pub(crate) fn invalid(&self) -> Option<LockError> {
        self.invalid.error()
    }
}

/// A keyed layer's settings, as the steps every keyed layer shares read them.
pub(crate) trait Keyed {
    /// How the layer names itself in those steps.
    const WORDS: Words;

    /// The layer's key settings.
    fn keys(&self) -> &KeySettings;
}

/// The builder setters of [`KeySettings`] (`max_key_len`, `hash_keys`, `missing_key`,
/// `fail_mode`, `fail_open`, `unavailable_retry_after`), for an `impl` block of a layer whose field
/// `settings` has a field `keys: KeySettings`. The words that differ between layers come as
/// arguments: `store` names what can be unavailable, `bound` what bounds a call to it,
/// `without` says how a request goes through without the layer, `unavailable` lists what a
/// `503` answers.
macro_rules! key_setters {
    (
        store: $store:literal,
        bound: $bound:literal,
        without: $without:literal,
        unavailable: $unavailable:literal $(,)?
    ) => {
        /// The longest key accepted, in bytes, not counting the prefix; longer keys get `400`
        /// (or are hashed, with [`hash_keys`](Self::hash_keys)). Default 128. Prefix and key
        /// together can never exceed the name limit of 512 bytes.
        pub fn max_key_len(mut self, max: usize) -> Self {
            self.settings.keys.rules.max_key_len = max;
            self
        }

        /// Hashes keys that break the name rules instead of answering `400`: a key that is
        /// longer than [`max_key_len`](Self::max_key_len) or has whitespace, braces or
        /// control characters is named `prefix + "sha256:" + hex(SHA-256(key))` instead (as
        /// is a key that starts with `sha256:`, so no other key can take a hashed key's
        /// name). Two keys then share a name only if they are equal or their SHA-256 digests
        /// collide, which nobody knows how to make happen. Use it for ids you do not control
        /// (a payment provider's); empty keys are still refused. Default off.
        pub fn hash_keys(mut self, hash: bool) -> Self {
            self.settings.keys.rules.hash_keys = hash;
            self
        }

        #[doc = concat!(
            "What to do with requests without a key. Default ",
            "[`MissingKey::Reject`](crate::MissingKey::Reject) (`400`); ",
            "[`MissingKey::PassThrough`](crate::MissingKey::PassThrough) lets them through ",
            $without,
            "."
        )]
        pub fn missing_key(mut self, policy: $crate::config::MissingKey) -> Self {
            self.settings.keys.missing_key = policy;
            self
        }

        #[doc = concat!(
            "What to do when ",
            $store,
            " cannot be reached, does not answer (",
            $bound,
            ") or fails. Default [`FailMode::Closed`](crate::FailMode::Closed): `503` with ",
            "`Retry-After`. [`FailMode::Open`](crate::FailMode::Open) lets the request ",
            "through ",
            $without,
            ", logging a warning."
        )]
        pub fn fail_mode(mut self, mode: $crate::config::FailMode) -> Self {
            self.settings.keys.fail_mode = mode;
            self
        }

        #[doc = concat!(
            "Shorthand for [`fail_mode(FailMode::Open)`](Self::fail_mode): an unavailable ",
            $store,
            " lets requests through ",
            $without,
            "."
        )]
        pub fn fail_open(self) -> Self {
            self.fail_mode($crate::config::FailMode::Open)
        }

        #[doc = concat!("The `Retry-After` of a `503` (", $unavailable, "). Default 1 s.")]
        pub fn unavailable_retry_after(mut self, retry_after: std::time::Duration) -> Self {
            self.settings.keys.unavailable_retry_after = retry_after;
            self
        }
    };
}

pub(crate) use key_setters;
