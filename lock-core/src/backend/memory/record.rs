//! The records' Lua operation in Rust: `record_put` (as its `.lua` file).

use redis::Value;

use super::keyspace::Ttl;
use super::prelude::px;
use super::script::{Args, Res, error_value, int, number};
use super::server::Ctx;

/// `record_put.lua`: `-1` written, or the stored (greater) token: refused.
pub(super) fn put(ctx: &mut Ctx<'_>, a: &Args<'_>) -> Res<Value> {
    let key = a.key(1)?;
    if let Some(stored) = ctx.ks.get(key)? {
        let digits = stored.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || stored.get(digits) != Some(&b':') {
            return Ok(error_value(
                "WRONGTYPE the key does not hold a lock-core record",
            ));
        }
        let token = number(&String::from_utf8_lossy(&stored[..digits]))?;
        if token > a.num(2)? {
            return Ok(int(token));
        }
    }
    let ttl = px(a.arg(3)?)?;
    ctx.ks.set(key, a.raw(1)?.to_vec(), Ttl::Px(ttl));
    Ok(int(-1))
}
