//! What every fenced write shares (`fenced::set`, the claims and fenced counters of
//! `fenced_update`): its answer [`Fenced`], the largest token Lua compares exactly, and when
//! a command is sent once more.

use crate::error::{LockError, is_connection_error};

/// The largest token Lua compares exactly: 2^53.
pub const MAX_TOKEN: u64 = 1 << 53;

/// What [`set`](crate::fenced::set) (or [`write_claimed`](crate::fenced::write_claimed)) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// The value was written with the token (the key was missing, or its fence was not
    /// greater than the token).
    Written,
    /// Refused: the key holds a write of a newer holder, whose token is `stored`.
    Refused {
        /// The fence stored with the current value.
        stored: u64,
    },
}

/// A token Lua compares exactly ([`MAX_TOKEN`] at most), or [`LockError::InvalidOption`].
pub(crate) fn check(token: u64) -> Result<(), LockError> {
    if token > MAX_TOKEN {
        return Err(LockError::InvalidOption {
            option: "token",
            reason: format!("{token} is above 2^53, which Lua numbers cannot compare exactly"),
        });
    }
    Ok(())
}

/// Whether a fenced command whose send failed with `e` is sent once more. Every fenced
/// command is safe to repeat, so it is sent again when its connection broke under it (a
/// connection that heals, [`Connection`](crate::Connection) or the redis crate's
/// `ConnectionManager`, then takes the second try). After a timeout only when `after_timeout`:
/// the claims and fenced counters, whose caller could not otherwise tell whether a counter
/// moved (a counter update carries its id, so only the resend recognises it); DESIGN.md's
/// resend rule names this exception. `fenced::set` and `get` are not: a second try would
/// double the wait on a frozen server, and writing the whole value again is the caller's
/// own safe retry.
pub(crate) fn send_again(e: &redis::RedisError, after_timeout: bool) -> bool {
    if e.is_timeout() {
        after_timeout
    } else {
        is_connection_error(e)
    }
}

/// Evaluates `$send` (a fenced command's send), and once more when [`send_again`] says so.
macro_rules! once_more {
    ($after_timeout:expr, $send:expr) => {
        match $send {
            Err(e) if crate::fence::send_again(&e, $after_timeout) => {
                tracing::debug!(error = %e, "a fenced command got no answer; sending it once more");
                $send
            }
            reply => reply,
        }
    };
}
pub(crate) use once_more;
