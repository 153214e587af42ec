//! Rate limits next to the locks: at most `n` permits per `period` for one name, across every
//! process that uses the same Redis, decided on the server's clock.
//!
//! A lock lets one holder in at a time; a rate limit lets many in, at a rate. The flash sale
//! needs both: one purchase at a time per order (a lock), and at most so many purchase
//! attempts per buyer per second across the whole fleet (a rate limit), so three instances do
//! not let three times the rate through. [`LockClient::rate_limit`] makes a [`RateLimit`];
//! [`RateLimit::check`] takes one permit and answers a [`RateDecision`].
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//!
//! // 10 purchase attempts per second per buyer, up to 20 at once.
//! let limit = client
//!     .rate_limit("buyer:42")
//!     .per(Duration::from_secs(1), 10)
//!     .burst(20);
//! let decision = limit.check().await?;
//! if !decision.is_allowed() {
//!     println!("slow down: try again in {:?}", decision.retry_after());
//! }
//! # Ok(()) }
//! ```
//!
//! # The algorithm: GCRA
//!
//! The generic cell rate algorithm keeps one number per name, the *theoretical arrival time*
//! `tat`: when the limit would be back to empty if every permit taken so far had come at the
//! steady rate. With the emission interval `T = period / n` (rounded down to whole
//! microseconds) and the burst `b`, a request for `k` permits at time `now` is allowed when
//! `now >= max(tat, now) + k·T − b·T`, and then sets `tat = max(tat, now) + k·T`. So:
//!
//! * **at most `b` at once**: a name nobody used lately has `b` permits free;
//! * **then the rate**: one more permit every `T`; over any stretch of time `t`, at most
//!   `b + t / T` permits are allowed (the `+ 1` of a boundary included in `b`: a permit is
//!   allowed *at* the instant it is due);
//! * **no window edges**: unlike a fixed window (`INCR` + `EXPIRE`), which lets `2n` through
//!   around a window's boundary, the allowance is smooth;
//! * **a limited request takes nothing**: refused callers retrying in a loop do not push the
//!   limit further away.
//!
//! One decision is **one call of a script** (`rate_limit.lua`, through the crate's function
//! library like every lock operation): `TIME`, `GET`, and a `SET … PX` when permits are
//! taken. The clock is the server's, so clients' clocks may disagree; the answer says whether
//! the request was allowed, how many permits are left ([`RateDecision::remaining`]), when the
//! next one comes ([`RateDecision::retry_after`]) and when a full burst is free again
//! ([`RateDecision::reset_after`]).
//!
//! # Layout
//!
//! The state of name `N` under the client's key prefix `P` is the string key **`P{N}:rate`**
//! ([`RATE_LIMIT_SUFFIX`](crate::layout::RATE_LIMIT_SUFFIX)), in the name's hash slot on a Cluster (`{N}` is its hash tag), holding
//! `<tat>|<T>|<b>` (microseconds, microseconds, permits: at most 41 bytes), with a time to
//! live that runs out when a full burst is free again: an idle name costs nothing.
//! `lockctl status N` shows it; `redis-cli DEL 'P{N}:rate'` resets it.
//!
//! # Faults
//!
//! * **A restart or failover that loses the key** forgets what was taken: the name starts
//!   again with a full burst, so at most `b` permits more than the limit are allowed, once per
//!   loss. Nothing blocks: a decision never waits for anything but its one call.
//! * **A server that does not answer** is [`LockError::ResponseTimeout`] after the client's response
//!   timeout ([`LockClientBuilder::response_timeout`](crate::LockClientBuilder::response_timeout)),
//!   [`LockError::Unavailable`] when no connection can be had: the caller decides whether to
//!   let the request in (fail open) or not (fail closed; lock-tower's layer does that by
//!   default, answering `503`).
//! * **A server without scripting** (Valkey without Lua) is [`LockError::Unsupported`].
//!   A fixed-window mode on the server's own bounded counter (`INCREX`, Redis 8.8 and
//!   Valkey 9.2) is not built: no server this crate is tested on has it yet.
//!
//! An ACL user needs what the locks need (`+fcall +function|load`, or `+evalsha
//! +script|load`) on the keys' pattern.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::engine::Engine;
use crate::error::LockError;
use crate::metrics;
use crate::wire::rate::{self, Decided, decided};

/// What follows `P{N}` in a rate limit's key: `:rate`.
#[deprecated(
    note = "use `lock_core::layout::RATE_LIMIT_SUFFIX`; `layout::parse_key` reads a rate limit's key"
)]
pub const SUFFIX: &str = crate::kind::RATE;

/// The longest a full burst may take to come back (`burst × period / rate`): 30 days. It is
/// also the longest the state of one name is kept.
pub const MAX_WINDOW: Duration = crate::util::MAX_LEASE;

/// How many permits per how long, and how many at once: a rate limit's quota.
///
/// Made with [`Quota::per`] (or [`per_second`](Quota::per_second),
/// [`per_minute`](Quota::per_minute)); the burst is the rate unless [`burst`](Quota::burst)
/// says otherwise. Checked when it is used ([`Quota::check`]): the rate and the burst at
/// least 1, at most one permit per microsecond, and a full burst back within [`MAX_WINDOW`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    period: Duration,
    rate: u32,
    burst: Option<u32>,
}

impl Quota {
    /// `rate` permits per `period`, up to `rate` at once.
    pub const fn per(period: Duration, rate: u32) -> Quota {
        Quota {
            period,
            rate,
            burst: None,
        }
    }

    /// `rate` permits per second, up to `rate` at once.
    pub const fn per_second(rate: u32) -> Quota {
        Quota::per(Duration::from_secs(1), rate)
    }

    /// `rate` permits per minute, up to `rate` at once.
    pub const fn per_minute(rate: u32) -> Quota {
        Quota::per(Duration::from_secs(60), rate)
    }

    /// Up to `burst` permits at once (default: the rate), then the rate.
    pub const fn burst(self, burst: u32) -> Quota {
        Quota {
            burst: Some(burst),
            ..self
        }
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The permits per period.
    pub const fn rate(&self) -> u32 {
        self.rate
    }

    /// How many permits may be taken at once.
    pub const fn burst_size(&self) -> u32 {
        match self.burst {
            Some(burst) => burst,
            None => self.rate,
        }
    }

    /// The time one permit takes to come back: the period divided by the rate, rounded down
    /// to whole microseconds.
    pub fn interval(&self) -> Duration {
        Duration::from_micros(self.interval_us())
    }

    fn interval_us(&self) -> u64 {
        let micros = u64::try_from(self.period.as_micros()).unwrap_or(u64::MAX);
        micros.checked_div(u64::from(self.rate)).unwrap_or(0)
    }

    /// Whether the quota can be used: [`LockError::InvalidOption`] naming the option that was
    /// written and its value: `rate` (0), `burst` (set to 0, or set so that a full burst
    /// would take longer than [`MAX_WINDOW`] to come back) or `period` (zero, less than one
    /// microsecond per permit, or, with the burst left at the rate, longer than
    /// [`MAX_WINDOW`]). A burst the quota was not given is never named.
    pub fn check(&self) -> Result<(), LockError> {
        let invalid = |option, reason: String| Err(LockError::InvalidOption { option, reason });
        let written = self.written();
        if self.rate == 0 {
            return invalid(
                "rate",
                format!("{written}: a rate of 0 allows nothing; the rate is at least 1"),
            );
        }
        if self.burst == Some(0) {
            return invalid(
                "burst",
                format!("{written}: a burst of 0 allows nothing; the burst is at least 1"),
            );
        }
        if self.period.is_zero() {
            return invalid(
                "period",
                format!("{written}: a period of zero leaves no time between permits"),
            );
        }
        let interval = self.interval_us();
        if interval == 0 {
            return invalid(
                "period",
                format!(
                    "{written}: more than one permit per microsecond (the finest step of the \
                     server's clock); the period is at least {} µs for a rate of {}",
                    self.rate, self.rate
                ),
            );
        }
        if interval.saturating_mul(u64::from(self.burst_size())) > micros(MAX_WINDOW) {
            return match self.burst {
                Some(burst) => invalid(
                    "burst",
                    format!(
                        "{written}: a burst of {burst} at one permit per {:?} takes longer than \
                         {MAX_WINDOW:?} (30 days) to come back",
                        self.interval()
                    ),
                ),
                None => invalid(
                    "period",
                    format!(
                        "{written}: a period longer than {MAX_WINDOW:?} (30 days, the longest a \
                         rate limit's state is kept)"
                    ),
                ),
            };
        }
        Ok(())
    }

    /// The quota as the user wrote it: `per(<period>, <rate>)`, then `.burst(<b>)` if set.
    fn written(&self) -> String {
        let per = format!("per({:?}, {})", self.period, self.rate);
        match self.burst {
            Some(burst) => format!("{per}.burst({burst})"),
            None => per,
        }
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per {:?}, burst {}",
            self.rate,
            self.period,
            self.burst_size()
        )
    }
}

/// A rate limit on one name: made by [`LockClient::rate_limit`], given its quota by
/// [`per`](RateLimit::per) (and [`burst`](RateLimit::burst)) or [`quota`](RateLimit::quota).
/// Cheap to clone. See the [module docs](self).
#[derive(Clone)]
pub struct RateLimit {
    engine: Arc<Engine>,
    name: String,
    quota: Quota,
    /// Whether a rate was given (`per` or `quota`): none is the default.
    rated: bool,
}

/// What a rate limit answered: allowed or limited, and when to come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateDecision {
    allowed: bool,
    remaining: u64,
    retry_after: Duration,
    reset_after: Duration,
    interval: Duration,
    burst: u64,
}

impl RateDecision {
    pub(crate) fn new(d: Decided) -> Self {
        RateDecision {
            allowed: d.allowed,
            remaining: d.remaining,
            retry_after: Duration::from_micros(d.retry_us),
            reset_after: Duration::from_micros(d.reset_us),
            interval: Duration::from_micros(d.interval_us),
            burst: d.burst,
        }
    }

    /// Whether the permits were taken ([`RateLimit::peek`]: whether one would be).
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// How many permits could be taken now, after this request: `0..=burst`.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How long until this request would be allowed: zero when it was.
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// How long until a full burst is free again (zero: it is).
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// How long until one more permit is free than [`remaining`](Self::remaining) says:
    /// zero when the full burst is free; for a limited request of one permit, its
    /// [`retry_after`](Self::retry_after). What lock-tower's `RateLimit` field says as `t`:
    /// when quota is available again.
    pub fn next_permit_after(&self) -> Duration {
        if self.reset_after.is_zero() || self.remaining >= self.burst {
            return Duration::ZERO;
        }
        // reset = tat − now; the permit after `remaining` comes back when tat − now is
        // down to (burst − remaining − 1) intervals.
        let still_taken = u32::try_from(self.burst - self.remaining - 1).unwrap_or(u32::MAX);
        self.reset_after
            .saturating_sub(self.interval.saturating_mul(still_taken))
    }

    /// The burst the decision was made with.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The emission interval the decision was made with (one permit comes back every this).
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

impl LockClient {
    /// A rate limit on `name` (a lock name: the same rules, [`validate_name`](crate::validate_name)),
    /// under this client's key prefix. It needs a rate before it is used:
    /// `.per(period, n)` (see [`rate_limit`](crate::rate_limit)).
    pub fn rate_limit(&self, name: impl Into<String>) -> RateLimit {
        RateLimit {
            engine: self.engine().clone(),
            name: name.into(),
            quota: Quota::per(Duration::from_secs(1), 0),
            rated: false,
        }
    }
}

impl RateLimit {
    /// `n` permits per `period`; the burst stays as set, or is `n`.
    pub fn per(mut self, period: Duration, n: u32) -> Self {
        self.quota = Quota {
            period,
            rate: n,
            burst: self.quota.burst,
        };
        self.rated = true;
        self
    }

    /// Up to `burst` permits at once (default: the rate).
    pub fn burst(mut self, burst: u32) -> Self {
        self.quota = self.quota.burst(burst);
        self
    }

    /// The whole quota at once.
    pub fn quota(mut self, quota: Quota) -> Self {
        self.quota = quota;
        self.rated = true;
        self
    }

    /// Whether the limit can be used, without sending anything: its name
    /// ([`LockError::InvalidName`]), whether it was given a rate
    /// ([`LockError::InvalidOption`] naming `per` when neither [`per`](Self::per) nor
    /// [`quota`](Self::quota) was called) and its quota ([`Quota::check`]). Every
    /// [`check`](Self::check) and [`peek`](Self::peek) checks this first; call it when the
    /// service starts, so a mistake stops the start-up instead of failing each request.
    pub fn validate(&self) -> Result<(), LockError> {
        self.engine.keys(&self.name)?;
        self.check_quota()
    }

    /// That a rate was given, and [`Quota::check`]. (The name is checked when the key is
    /// made, before anything is sent.)
    fn check_quota(&self) -> Result<(), LockError> {
        if !self.rated {
            return Err(LockError::InvalidOption {
                option: "per",
                reason: format!(
                    "the rate limit {:?} was given no rate: call `.per(period, n)` or \
                     `.quota(quota)` before using it",
                    self.name
                ),
            });
        }
        self.quota.check()
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The quota as set.
    pub fn current_quota(&self) -> Quota {
        self.quota
    }

    /// The Redis key of the limit's state: `P{name}:rate`. [`LockError::InvalidName`] if the
    /// name is not a valid lock name.
    pub fn key(&self) -> Result<String, LockError> {
        Ok(self.engine.keys(&self.name)?.rate())
    }

    /// Takes one permit, if one is free: one call to Redis.
    ///
    /// Checked before anything is sent ([`validate`](Self::validate)): the name
    /// ([`LockError::InvalidName`]), that a rate was given and the quota ([`Quota::check`],
    /// [`LockError::InvalidOption`]). Redis's errors are as for a lock's
    /// ([`LockError::Unavailable`], [`LockError::ResponseTimeout`],
    /// [`LockError::NoPermission`], ...); a key of the limit's that holds something else is
    /// [`LockError::Redis`] (`WRONGTYPE`), and the key is left as it was.
    pub async fn check(&self) -> Result<RateDecision, LockError> {
        self.check_n(1).await
    }

    /// Takes `n` permits at once, if that many are free (nothing is taken otherwise). `n`
    /// over the burst could never be allowed: [`LockError::InvalidOption`] naming `n`; `n`
    /// of 0 too (use [`peek`](Self::peek)).
    ///
    /// Counted in `lock_rate_limit_decisions_total` (see [`crate::metrics`]).
    pub async fn check_n(&self, n: u32) -> Result<RateDecision, LockError> {
        let decision = self.take(n).await;
        let outcome = match &decision {
            Ok(d) if d.allowed => "allowed",
            Ok(_) => "limited",
            Err(e) if e.is_unavailable() => "unavailable",
            Err(_) => "invalid",
        };
        let labels = self.engine.labels("rate_limit", &self.name);
        metrics::rate_limit_decision(labels, outcome);
        decision
    }

    async fn take(&self, n: u32) -> Result<RateDecision, LockError> {
        self.check_quota()?;
        if n == 0 || n > self.quota.burst_size() {
            return Err(LockError::InvalidOption {
                option: "n",
                reason: format!(
                    "{n} permits at once: a request takes 1..={} (the burst)",
                    self.quota.burst_size()
                ),
            });
        }
        self.decide(n).await
    }

    /// Whether one permit would be allowed now, and how many are free, without taking any.
    pub async fn peek(&self) -> Result<RateDecision, LockError> {
        self.check_quota()?;
        self.decide(0).await
    }

    /// The limit's state as the last request wrote it, read with the quota it was written
    /// with (not this handle's, which need not be set): None when there is none (nobody
    /// took a permit lately, and a full burst is free). Takes nothing. The verb every handle
    /// reads its state with ([`Mutex::info`](crate::Mutex::info),
    /// [`Semaphore::info`](crate::Semaphore::info), …).
    pub async fn info(&self) -> Result<Option<RateDecision>, LockError> {
        let reply = self.engine.invoke_raw(&rate::inspect(&self.key()?)).await?;
        Ok(decided(reply)?.map(RateDecision::new))
    }

    /// The old name of [`info`](Self::info), kept for one release.
    #[deprecated(note = "renamed `info`, the verb every handle reads its state with")]
    pub async fn inspect(&self) -> Result<Option<RateDecision>, LockError> {
        self.info().await
    }

    /// A decision on `n` permits with the checked quota: batched with other calls when
    /// calls are already in flight (see the engine's batching), else sent alone.
    async fn decide(&self, n: u32) -> Result<RateDecision, LockError> {
        let (interval, burst) = (self.quota.interval_us(), self.quota.burst_size());
        let call = rate::decide(&self.key()?, interval, burst, n);
        let decided = decided(self.engine.invoke_batched(call).await?.reply)?;
        let decided =
            decided.ok_or_else(|| LockError::UnexpectedReply("rate_limit answered nil".into()))?;
        Ok(RateDecision::new(decided))
    }
}

impl fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("name", &self.name)
            .field("quota", &self.quota)
            .finish()
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option(q: Quota) -> &'static str {
        match q.check() {
            Err(LockError::InvalidOption { option, .. }) => option,
            other => panic!("{q:?} was {other:?}"),
        }
    }

    #[test]
    fn quotas_are_checked() {
        assert!(Quota::per_second(10).check().is_ok());
        assert_eq!(Quota::per_second(10).burst_size(), 10);
        assert_eq!(Quota::per_second(10).burst(3).burst_size(), 3);
        assert_eq!(Quota::per_second(4).interval(), Duration::from_millis(250));
        assert_eq!(option(Quota::per_second(0)), "rate");
        assert_eq!(option(Quota::per_second(1).burst(0)), "burst");
        assert_eq!(
            option(Quota::per(Duration::from_micros(999), 1000)),
            "period"
        );
        assert_eq!(option(Quota::per(Duration::ZERO, 1)), "period");
        assert_eq!(option(Quota::per(MAX_WINDOW, 1).burst(2)), "burst");
        assert!(Quota::per(MAX_WINDOW, 1).check().is_ok());
        assert!(Quota::per_second(1_000_000).check().is_ok());
    }

    fn reason(q: Quota) -> String {
        match q.check() {
            Err(LockError::InvalidOption { reason, .. }) => reason,
            other => panic!("{q:?} was {other:?}"),
        }
    }

    /// Every refusal names the option the user wrote, with its value, and never a burst the
    /// user did not set.
    #[test]
    fn refusals_name_what_was_written() {
        let forever = Quota::per(Duration::MAX, 1);
        assert_eq!(option(forever), "period");
        let why = reason(forever);
        assert!(why.contains("per(") && why.contains(", 1)"), "{why}");
        assert!(!why.contains("burst"), "{why}");
        let zero = Quota::per(Duration::ZERO, 1);
        assert_eq!(option(zero), "period");
        assert_eq!(
            reason(zero),
            "per(0ns, 1): a period of zero leaves no time between permits"
        );
        assert!(!reason(zero).contains("permits per"));
        let fast = Quota::per(Duration::from_micros(999), 1000);
        assert!(reason(fast).starts_with("per(999µs, 1000): more than one permit per"));
        assert!(
            reason(fast).contains("at least 1000 µs"),
            "{}",
            reason(fast)
        );
        assert_eq!(
            reason(Quota::per_second(0)),
            "per(1s, 0): a rate of 0 allows nothing; the rate is at least 1"
        );
        assert_eq!(
            reason(Quota::per_second(1).burst(0)),
            "per(1s, 1).burst(0): a burst of 0 allows nothing; the burst is at least 1"
        );
        let long = Quota::per(MAX_WINDOW, 1).burst(2);
        assert_eq!(option(long), "burst");
        assert!(reason(long).starts_with("per(2592000s, 1).burst(2): a burst of 2"));
        // Unset, the burst is the rate: a long period is the period's fault.
        assert_eq!(option(Quota::per(MAX_WINDOW * 2, 2)), "period");
    }
}
