//! The crate's own plain commands every topology sends: loading the Lua code, `CONFIG GET
//! maxmemory-policy`, `WAIT` and its answer.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Value};

use super::errors::is_connection_error_kind;

use crate::error::LockError;
use crate::wire::convert;
use crate::wire::script::{Mode, Scripts};

/// Whether `e` says the function library is not loaded.
pub(crate) fn function_missing(e: &redis::RedisError) -> bool {
    e.to_string().contains("Function not found")
}

/// `FUNCTION LOAD REPLACE` of the library (on a Cluster, every primary).
pub(crate) async fn load_library(
    con: &mut (impl ConnectionLike + Send),
    scripts: &Scripts,
) -> RedisResult<()> {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD").arg("REPLACE").arg(scripts.library());
    cmd.query_async::<Value>(con).await.map(|_| ())
}

/// Loads the code on `con`: the function library, or, where the server refuses it (Redis
/// older than 7.0, an ACL user without `FUNCTION LOAD`), every script. Returns the mode
/// calls will use.
pub(crate) async fn load_code(
    con: &mut (impl ConnectionLike + Send),
    scripts: &'static Scripts,
) -> RedisResult<Mode> {
    match load_library(con, scripts).await {
        Ok(()) => Ok(Mode::Function),
        Err(e) if is_connection_error_kind(&e) => Err(e),
        Err(refused) => {
            tracing::info!(error = %refused, "Redis functions unavailable; using scripts (EVALSHA)");
            for script in scripts.scripts() {
                if let Err(e) = script.load_async(con).await {
                    // Neither works: the preferred way's refusal says what to grant.
                    return Err(if is_connection_error_kind(&e) {
                        e
                    } else {
                        refused
                    });
                }
            }
            Ok(Mode::Script)
        }
    }
}

/// `CONFIG GET maxmemory-policy`, for [`Topology::max_memory_policy`].
pub(crate) fn policy_cmd() -> redis::Cmd {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    cmd
}

/// The `WAIT` command for [`Topology::invoke_acked`].
pub(crate) fn wait_cmd(replicas: u32, timeout: Duration) -> redis::Cmd {
    let mut cmd = redis::cmd("WAIT");
    cmd.arg(replicas).arg(
        u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1),
    );
    cmd
}

/// Reads `WAIT`'s reply (a count of replicas).
pub(crate) fn acks(value: Value) -> Result<u32, LockError> {
    let n: i64 = convert(value)?;
    Ok(u32::try_from(n.max(0)).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use redis::FromRedisValue;

    use super::*;
    use crate::util::arbitrary::{config, value};

    /// Each type a caller of [`convert`] reads a script's reply as.
    fn every_conversion(reply: &Value) -> Vec<Result<(), LockError>> {
        fn one<T: FromRedisValue>(reply: &Value) -> Result<(), LockError> {
            convert::<T>(reply.clone()).map(drop)
        }
        vec![
            one::<i64>(reply),
            one::<u32>(reply),
            one::<String>(reply),
            one::<Option<u32>>(reply),
            one::<Option<String>>(reply),
            one::<Vec<i64>>(reply),
            one::<Vec<Value>>(reply),
            one::<(i64, Option<String>)>(reply),
            one::<(i64, Option<String>, u32, i64)>(reply),
        ]
    }

    proptest! {
        #![proptest_config(config(1000))]

        /// Any reply, to any type read from one: a value or a typed error, never a panic.
        #[test]
        fn any_reply_converts_or_is_an_unexpected_reply(reply in value()) {
            for result in every_conversion(&reply) {
                if let Err(e) = result {
                    prop_assert!(matches!(e, LockError::UnexpectedReply(_)), "{:?}", e);
                }
            }
        }

        /// `WAIT`'s reply: a count within `0..=u32::MAX`, or a typed error.
        #[test]
        fn a_wait_reply_is_a_count_or_an_unexpected_reply(reply in value()) {
            match (acks(reply.clone()), &reply) {
                (Ok(n), Value::Int(k)) => {
                    prop_assert_eq!(i64::from(n), (*k).clamp(0, i64::from(u32::MAX)));
                }
                (Ok(_), _) => {}
                (Err(e), _) => prop_assert!(matches!(e, LockError::UnexpectedReply(_)), "{:?}", e),
            }
        }
    }
}
