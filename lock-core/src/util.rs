//! Small helpers shared by every floor: durations in milliseconds, limits, shortened names for
//! messages, and a mutex lock that survives poisoning.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::error::LockError;

/// The shortest lease accepted: 10 ms.
pub(crate) const MIN_LEASE: Duration = Duration::from_millis(10);
/// The longest lease accepted: 30 days.
pub(crate) const MAX_LEASE: Duration = Duration::from_secs(30 * 24 * 3600);

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Checks that `value` is within `min..=max`; the error names `option`.
pub(crate) fn check_range(
    option: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), LockError> {
    if value < min || value > max {
        return Err(LockError::InvalidOption {
            option,
            reason: format!("{value:?} is outside {min:?}..={max:?}"),
        });
    }
    Ok(())
}

/// Checks a lease: 10 ms to 30 days.
pub(crate) fn check_lease(option: &'static str, lease: Duration) -> Result<(), LockError> {
    check_range(option, lease, MIN_LEASE, MAX_LEASE)
}

/// The part of a lease we count on: lease − (1 % of the lease + 2 ms) for clock drift and the
/// time the request spent on its way to Redis.
pub(crate) fn validity(lease: Duration) -> Duration {
    lease.saturating_sub(lease / 100 + Duration::from_millis(2))
}

/// `n` in decimal, without allocating.
pub(crate) fn decimal(mut n: u64) -> Decimal {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    Decimal { digits, at }
}

/// A number's decimal digits: [`decimal`].
pub(crate) struct Decimal {
    digits: [u8; 20],
    at: usize,
}

impl Decimal {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.digits[self.at..]
    }
}

/// A fast hasher (the Fx hash of rustc) for maps keyed by this process's own data, where
/// hash flooding is not a concern: the registry of holds is keyed by lock names the
/// application chose, and looked up on every acquisition.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher {
    hash: u64,
}

impl FxHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// Shortens a user-supplied string for an error message (64 characters).
pub(crate) fn shorten(s: &str) -> String {
    Short(s).to_string()
}

/// A user-supplied string shortened to 64 characters (and `…`) where it is shown: a log
/// line's or a span's field, with no string of its own.
#[derive(Clone, Copy)]
pub(crate) struct Short<'a>(pub(crate) &'a str);

impl std::fmt::Display for Short<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MAX: usize = 64;
        match self.0.char_indices().nth(MAX) {
            Some((i, _)) => write!(f, "{}…", &self.0[..i]),
            None => f.write_str(self.0),
        }
    }
}

/// Locks a std mutex, going on with the data if a panicking thread poisoned it (every
/// critical section of this crate leaves its data consistent at each step).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_outside_the_limits_are_refused() {
        assert!(check_lease("lease", Duration::from_millis(10)).is_ok());
        assert!(check_lease("lease", MAX_LEASE).is_ok());
        for bad in [Duration::ZERO, Duration::from_millis(9), MAX_LEASE * 2] {
            assert!(matches!(
                check_lease("lease", bad),
                Err(LockError::InvalidOption {
                    option: "lease",
                    ..
                })
            ));
        }
    }

    #[test]
    fn validity_keeps_a_drift_margin() {
        assert_eq!(
            validity(Duration::from_secs(30)),
            Duration::from_millis(29_698)
        );
        assert_eq!(validity(Duration::from_millis(1)), Duration::ZERO);
    }

    #[test]
    fn decimals_are_written_without_allocating() {
        for n in [0, 7, 10, 1_795_487_472_146_775, u64::MAX] {
            assert_eq!(decimal(n).as_bytes(), n.to_string().as_bytes());
        }
    }

    #[test]
    fn shortened_strings_keep_whole_characters() {
        let long = "é".repeat(600);
        assert!(shorten(&long).chars().count() <= 65);
        assert_eq!(shorten("short"), "short");
    }
}

/// Proptest strategies shared by the property tests of this crate (hostile input, issue 17
/// §3): Redis replies of every shape, well-formed or not, and a bounded test configuration.
#[cfg(test)]
pub(crate) mod arbitrary {
    use proptest::prelude::*;
    use proptest::test_runner::Config;
    use redis::{PushKind, Value, VerbatimFormat};

    /// `cases` cases per property, and no regression files written (CI runs a fixed number of
    /// cases; a real failure is kept as a plain unit test instead).
    pub(crate) fn config(cases: u32) -> Config {
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        }
    }

    /// Integers where decoders have edges: around 0, the `i64`/`u32`/`i32` limits, 2^53.
    pub(crate) fn int() -> impl Strategy<Value = i64> {
        prop_oneof![
            3 => -3i64..=4,
            3 => any::<i64>(),
            2 => prop::sample::select(vec![
                i64::MIN,
                i64::MIN + 1,
                i64::MIN + 2,
                i64::MAX,
                i64::MAX - 1,
                i64::from(u32::MAX),
                i64::from(u32::MAX) + 1,
                i64::from(i32::MIN),
                i64::from(i32::MAX),
                1 << 53,
                -(1 << 53),
            ]),
            1 => -100_000i64..100_000,
        ]
    }

    /// Text a decoder may try to read: numbers (in and out of range, signed, floats), lock
    /// strings and read shares with arbitrary fields, permit ids, arbitrary bytes.
    pub(crate) fn text() -> impl Strategy<Value = Vec<u8>> {
        let field = prop_oneof![
            int().prop_map(|n| n.to_string()),
            "[0-9a-z:|-]{0,12}",
            Just(String::new()),
        ];
        prop_oneof![
            3 => int().prop_map(|n| n.to_string().into_bytes()),
            1 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
            1 => "-?[0-9]{19,40}".prop_map(String::into_bytes),
            1 => any::<f64>().prop_map(|f| f.to_string().into_bytes()),
            1 => " ?[+-]?[0-9]{1,4}(\\.[0-9]*)?(e[0-9]+)? ?".prop_map(String::into_bytes),
            2 => prop::collection::vec(field.clone(), 0..7)
                .prop_map(|fields| fields.join("|").into_bytes()),
            2 => (field.clone(), field).prop_map(|(a, b)| format!("{a}|{b}").into_bytes()),
            1 => "[0-9a-f-]{0,36}:[0-9]{0,5}(:[0-9]{0,5})?".prop_map(String::into_bytes),
            2 => prop::collection::vec(any::<u8>(), 0..40),
            1 => any::<String>().prop_map(String::into_bytes),
        ]
    }

    /// A reply without nesting: every RESP2 and RESP3 scalar, server errors included.
    pub(crate) fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            2 => Just(Value::Nil),
            1 => Just(Value::Okay),
            4 => int().prop_map(Value::Int),
            4 => text().prop_map(Value::BulkString),
            1 => text().prop_map(|t| Value::SimpleString(String::from_utf8_lossy(&t).into_owned())),
            1 => any::<f64>().prop_map(Value::Double),
            1 => prop::sample::select(vec![0.0, -0.0, 1.0, 1.5, -1.0, f64::NAN, f64::INFINITY, 1e300])
                .prop_map(Value::Double),
            1 => any::<bool>().prop_map(Value::Boolean),
            1 => text().prop_map(|t| Value::VerbatimString {
                format: VerbatimFormat::Text,
                text: String::from_utf8_lossy(&t).into_owned(),
            }),
            1 => "-?[0-9]{1,40}".prop_map(|n| Value::BigNumber(n.into_bytes())),
            1 => "(ERR|WRONGTYPE|NOSCRIPT|BUSY|OOM|NOPERM|X)( [ -~]{0,20})?".prop_map(|line| {
                match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
                    Ok(error @ Value::ServerError(_)) => error,
                    other => unreachable!("an error line parses as an error: {other:?}"),
                }
            }),
        ]
    }

    /// A reply a Lua script can give over RESP2, the protocol of the client's command
    /// connections: nil, integers, bulk and status strings, errors, and arrays of them.
    pub(crate) fn resp2_value() -> impl Strategy<Value = Value> {
        scalar()
            .prop_filter("a RESP2 type", |v| {
                matches!(
                    v,
                    Value::Nil
                        | Value::Okay
                        | Value::Int(_)
                        | Value::BulkString(_)
                        | Value::SimpleString(_)
                        | Value::ServerError(_)
                )
            })
            .prop_recursive(3, 24, 6, |inner| {
                prop::collection::vec(inner, 0..6).prop_map(Value::Array)
            })
    }

    /// Any reply: scalars, and arrays, sets, maps, attributes and pushes of replies, nested
    /// up to four levels.
    pub(crate) fn value() -> impl Strategy<Value = Value> {
        scalar().prop_recursive(4, 48, 8, |inner| {
            prop_oneof![
                6 => prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                1 => prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Set),
                1 => prop::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Value::Map),
                1 => (inner.clone(), prop::collection::vec((inner.clone(), inner.clone()), 0..2))
                    .prop_map(|(data, attributes)| Value::Attribute {
                        data: Box::new(data),
                        attributes,
                    }),
                1 => prop::collection::vec(inner, 0..3).prop_map(|data| Value::Push {
                    kind: PushKind::Message,
                    data,
                }),
            ]
        })
    }

    /// An array whose elements are each drawn from `element` (replies of about the right
    /// shape, so decoders get past their first checks).
    pub(crate) fn array_of(
        element: impl Strategy<Value = Value> + Clone,
        len: std::ops::Range<usize>,
    ) -> impl Strategy<Value = Value> {
        prop::collection::vec(element, len).prop_map(Value::Array)
    }

    /// A scalar that is mostly an integer or a number as text, sometimes anything.
    pub(crate) fn numberish() -> impl Strategy<Value = Value> {
        prop_oneof![
            4 => int().prop_map(Value::Int),
            2 => int().prop_map(|n| Value::BulkString(n.to_string().into_bytes())),
            1 => scalar(),
        ]
    }
}
