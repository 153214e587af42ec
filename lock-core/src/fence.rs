//! What every fenced write shares (`fenced::set`, the claims and fenced counters of
//! `fenced_update`): its answer [`Fenced`], and the largest token Lua compares exactly.

use crate::error::LockError;

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
