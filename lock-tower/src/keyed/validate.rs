//! Settings that cannot work, found once for every layer: the record of them a layer keeps
//! ([`Problems`]), the checks more than one layer makes ([`prefix_problem`],
//! [`fixed_lease_problem`]), and each layer's `validate` method ([`validate_method!`]), which
//! gives at start-up the error every request would otherwise be answered `500` with.

use std::time::Duration;

use lock_core::{LockClient, LockError};

/// The settings of a layer that cannot work: (option, reason), the latest word on each.
#[derive(Debug, Clone, Default)]
pub(crate) struct Problems(Vec<(&'static str, String)>);

impl Problems {
    /// Records whether `option` can work: `Some(reason)` if not.
    pub(crate) fn check(&mut self, option: &'static str, problem: Option<String>) {
        self.0.retain(|(o, _)| *o != option);
        if let Some(reason) = problem {
            self.0.push((option, reason));
        }
    }

    /// The error of the first setting that cannot work, if there is one.
    pub(crate) fn error(&self) -> Option<LockError> {
        self.0
            .first()
            .map(|(option, reason)| LockError::InvalidOption {
                option,
                reason: reason.clone(),
            })
    }
}

/// Why `prefix` cannot be a layer's prefix, if it cannot: it must not be empty, and follows
/// lock-core's rule for prefixes.
pub(crate) fn prefix_problem(prefix: &str) -> Option<String> {
    let valid = !prefix.is_empty() && lock_core::validate_prefix(prefix).is_ok();
    (!valid).then(|| {
        format!(
            "the prefix {prefix:?} must be 1 to 128 bytes without braces, whitespace or control \
             characters"
        )
    })
}

/// Why `lease` cannot be a layer's `fixed_lease`, if it cannot: it must be within lock-core's
/// bounds of a lease, [`LockClient::MIN_LEASE`] (10 ms) to [`LockClient::MAX_LEASE`] (30
/// days). Recorded under the option name `lease`, lock-core's.
pub(crate) fn fixed_lease_problem(lease: Duration) -> Option<String> {
    let valid = (LockClient::MIN_LEASE..=LockClient::MAX_LEASE).contains(&lease);
    (!valid).then(|| format!("{lease:?} is outside 10ms..=30 days"))
}

/// A layer's `fixed_lease` (with `$doc`, which says what losing the lock does on that
/// layer) and its deprecated former name `lease`: the lease is checked by
/// [`fixed_lease_problem`], recorded in `$problems` (a path under `self` to something with
/// `check(option, problem)`) and kept in `$lease` (an `Option<Duration>` under `self`).
macro_rules! fixed_lease_setters {
    ($($problems:ident).+, $($lease:ident).+, $doc:literal) => {
        #[doc = $doc]
        pub fn fixed_lease(mut self, lease: std::time::Duration) -> Self {
            let problem = $crate::keyed::validate::fixed_lease_problem(lease);
            self.$($problems).+.check("lease", problem);
            self.$($lease).+ = Some(lease);
            self
        }

        /// The former name of [`fixed_lease`](Self::fixed_lease), the name every layer gives
        /// it: a fixed lease, never renewed (not the watchdog lease).
        #[deprecated(
            since = "0.1.0",
            note = "renamed `fixed_lease`: this lease is never renewed"
        )]
        pub fn lease(self, lease: std::time::Duration) -> Self {
            self.fixed_lease(lease)
        }
    };
}

pub(crate) use fixed_lease_setters;

/// A layer's `validate`: the first setting recorded as one that cannot work (`$settings`, a
/// path under `self` to something with `invalid() -> Option<LockError>`), as an error.
macro_rules! validate_method {
    ($($settings:ident).+, $also:literal) => {
        /// Whether every setting given to the layer can work: `Ok(())`, or the
        /// [`LockError::InvalidOption`](lock_core::LockError::InvalidOption) naming the first
        /// option that cannot (with the reason), the error each request would otherwise be
        /// answered `500` with. Builder methods never fail, so call this once when the
        /// service starts (`layer.validate()?`, before serving) and a mistake stops the
        /// start-up instead of failing every request.
        ///
        #[doc = $also]
        pub fn validate(&self) -> Result<(), lock_core::LockError> {
            match self.$($settings).+.invalid() {
                Some(error) => Err(error),
                None => Ok(()),
            }
        }
    };
}

pub(crate) use validate_method;
