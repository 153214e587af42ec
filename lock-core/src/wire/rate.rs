//! The calls of a rate limit (`P{N}:rate`, see [`rate_limit`](crate::rate_limit)): a GCRA
//! decision on the server's clock (`rate_limit.lua`, or one operation of `batch.lua`) and a
//! read of the state (`rate_inspect.lua`), their replies read into a [`Decided`].

use redis::Value;

use super::command::Command;
use super::convert::convert;
use super::script::{Call, Op};
use crate::error::LockError;

/// One decision as the server answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decided {
    /// Whether the permits were taken.
    pub(crate) allowed: bool,
    /// Permits that could be taken now, after this request.
    pub(crate) remaining: u64,
    /// Microseconds until the request would be allowed (0 when it was).
    pub(crate) retry_us: u64,
    /// Microseconds until a full burst is free again.
    pub(crate) reset_us: u64,
    /// The emission interval in microseconds the decision was made with.
    pub(crate) interval_us: u64,
    /// The burst the decision was made with.
    pub(crate) burst: u64,
}

/// Takes `n` permits (0: only reads whether one would be allowed) of the limit at `key`, whose
/// emission interval is `interval_us` (>= 1) microseconds and burst `burst`. It may go out in
/// a batch with other calls (`batch.lua`). Read by [`decided`].
pub(crate) fn decide(key: &str, interval_us: u64, burst: u32, n: u32) -> Command {
    let mut call = Call::new(Op::RateLimit);
    call.key(key).arg(interval_us).arg(burst).arg(n);
    call.into()
}

/// Reads the limit at `key` with the interval and burst it was written with; takes nothing.
/// Read by [`decided`] (None: no state).
pub(crate) fn inspect(key: &str) -> Command {
    let mut call = Call::new(Op::RateInspect);
    call.key(key);
    call.into()
}

/// The reply of [`decide`]: None when only the state was to be read and there is none.
pub(crate) fn decided(reply: Value) -> Result<Option<Decided>, LockError> {
    let unexpected =
        |reply: &[i64]| LockError::UnexpectedReply(format!("rate_limit answered {reply:?}"));
    let Some(reply) = convert::<Option<Vec<i64>>>(reply)? else {
        return Ok(None);
    };
    let &[allowed @ (0 | 1), remaining, retry, reset, interval, burst] = reply.as_slice() else {
        return Err(unexpected(&reply));
    };
    let non_negative = |v: i64| u64::try_from(v).map_err(|_| unexpected(&reply));
    Ok(Some(Decided {
        allowed: allowed == 1,
        remaining: non_negative(remaining)?,
        retry_us: non_negative(retry)?,
        reset_us: non_negative(reset)?,
        interval_us: non_negative(interval)?,
        burst: non_negative(burst)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_read_into_decisions() {
        let int = |v: &[i64]| Value::Array(v.iter().map(|&n| Value::Int(n)).collect());
        assert_eq!(
            decided(int(&[1, 4, 0, 200, 100, 5])).unwrap(),
            Some(Decided {
                allowed: true,
                remaining: 4,
                retry_us: 0,
                reset_us: 200,
                interval_us: 100,
                burst: 5,
            })
        );
        assert!(
            !decided(int(&[0, 0, 100, 900, 100, 5]))
                .unwrap()
                .unwrap()
                .allowed
        );
        assert_eq!(decided(Value::Nil).unwrap(), None);
        for bad in [
            &[2, 0, 0, 0, 1, 1][..],
            &[1, -1, 0, 0, 1, 1],
            &[1, 0, 0, 1, 1],
        ] {
            assert!(matches!(
                decided(int(bad)),
                Err(LockError::UnexpectedReply(_))
            ));
        }
    }
}
