//! [`convert`]: a reply read as a Rust type.

use redis::{FromRedisValue, Value};

use crate::error::LockError;

/// Converts a reply into `T`; a reply of another shape is [`LockError::UnexpectedReply`].
pub(crate) fn convert<T: FromRedisValue>(value: Value) -> Result<T, LockError> {
    T::from_redis_value(value).map_err(|e| LockError::UnexpectedReply(e.to_string()))
}
