//! [`LockClient::last_update`]: the record of a lock's last guarded update
//! ([`update`](crate::update)), for operators' tools (`lockctl status` shows it).

use redis::Value;

use crate::client::LockClient;
use crate::error::LockError;

/// The last guarded update applied under a lock, as recorded beside it (`P{N}:updated`) to
/// recognise a resend: which hold made it (its fencing token, the fence of the update), its
/// sequence number and each operation's value. Kept for the lease its holder had left plus
/// [`RECORD_TTL`](crate::update::RECORD_TTL) (60 s); gone after that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastUpdate {
    token: u64,
    seq: u64,
    values: Vec<i64>,
}

impl LastUpdate {
    /// The fencing token of the hold that applied it.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Its sequence number (increasing over the updates of one process).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Each operation's value, as [`Updated::Applied`](crate::Updated::Applied) gave them.
    pub fn values(&self) -> &[i64] {
        &self.values
    }

    /// Reads a record `owner|token|seq|v1,v2,…` (the owner id is left out).
    fn parse(text: &str) -> Option<LastUpdate> {
        let mut parts = text.rsplitn(4, '|');
        let values = parts.next()?;
        let seq = parts.next()?.parse().ok()?;
        let token = parts.next()?.parse().ok()?;
        parts.next()?;
        let values = match values {
            "" => Vec::new(),
            v => v
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?,
        };
        Some(LastUpdate { token, seq, values })
    }
}

impl LockClient {
    /// The record of the last guarded update under the lock `name` (of any kind with an
    /// owner), if one is kept. [`LockError::InvalidName`] for a name that is not valid,
    /// [`LockError::UnexpectedReply`] for a key that holds something else.
    pub async fn last_update(&self, name: &str) -> Result<Option<LastUpdate>, LockError> {
        let keys = self.engine().keys(name)?;
        let mut get = redis::cmd("GET");
        get.arg(keys.updated());
        match self.engine().command(&get).await? {
            Value::Nil => Ok(None),
            Value::BulkString(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(LastUpdate::parse)
                .map(Some)
                .ok_or_else(|| {
                    LockError::UnexpectedReply(format!(
                        "the update record of `{name}` is not one lock-core wrote"
                    ))
                }),
            other => Err(LockError::UnexpectedReply(format!(
                "the update record of `{name}`: {other:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_as_the_script_writes_them() {
        let r = LastUpdate::parse("c0ffee:3|1767225600000001|7|4,-1,1").unwrap();
        assert_eq!(
            (r.token(), r.seq(), r.values()),
            (1767225600000001, 7, &[4, -1, 1][..])
        );
        assert_eq!(
            LastUpdate::parse("o:1|5|1|").unwrap().values(),
            &[] as &[i64]
        );
        for bad in ["", "x", "o|a|1|", "o|1|1|x", "1|1|"] {
            assert_eq!(LastUpdate::parse(bad), None, "{bad:?}");
        }
    }
}
