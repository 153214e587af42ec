//! Keyspace notifications: the classes of `notify-keyspace-events` that `watch` needs, what it
//! cannot see without each, and reading a server's setting (which managed services may refuse).
//!
//! lock-core's scripts change lock state with `SET` (lock strings: `$`), `HSET`/`HDEL` (read
//! shares: `h`), `ZADD`/`ZREM` (permits, fair queues: `z`) and `DEL` (force-unlocked read
//! shares and permits: `g`); a lease that runs out is an `expired` event (`x`). `K` sends them
//! on `__keyspace@<db>__:<key>`, the channels `watch` subscribes to. `E` (key-event channels)
//! is not used.

use std::collections::HashMap;

use lock_core::Primary;
use lock_core::redis::{self, aio::MultiplexedConnection};

use crate::exit::{Failure, cause};

/// The classes watch uses, and what it does not see without each.
const NEEDED: [(char, &str); 5] = [
    ('$', "mutex, fair-lock and writer acquisitions and releases"),
    ('h', "read shares"),
    ('z', "semaphore permits and fair-lock queues"),
    ('x', "leases that run out"),
    ('g', "force-unlocked read shares and permits"),
];

/// The classes `A` stands for.
const ALL: &str = "g$lshzxetd";

/// The classes a `notify-keyspace-events` value turns on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Classes {
    /// The value as the server gave it.
    pub(crate) value: String,
    flags: String,
}

impl Classes {
    /// Reads a value such as `"AKE"` or `"Kx$"`.
    pub(crate) fn parse(value: &str) -> Classes {
        let flags = value
            .chars()
            .flat_map(|c| match c {
                'A' => ALL.chars().collect::<Vec<_>>(),
                c => vec![c],
            })
            .collect();
        Classes {
            value: value.to_owned(),
            flags,
        }
    }

    /// Whether watch can use these notifications at all: keyspace channels (`K`) with lock
    /// strings (`$`).
    pub(crate) fn usable(&self) -> bool {
        self.flags.contains('K') && self.flags.contains('$')
    }

    /// The needed classes that are off, with what is not seen without each.
    pub(crate) fn missing(&self) -> Vec<(char, &'static str)> {
        NEEDED
            .into_iter()
            .filter(|(c, _)| !self.flags.contains(*c))
            .collect()
    }

    /// The `CONFIG SET` that turns on what is missing and keeps what is on.
    pub(crate) fn suggestion(&self) -> String {
        let mut value = self.value.clone();
        for c in "K$hzxg".chars() {
            if !self.flags.contains(c) {
                value.push(c);
            }
        }
        format!("CONFIG SET notify-keyspace-events {value}")
    }
}

/// What a server says about its `notify-keyspace-events`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Setting {
    /// Its value.
    Read(Classes),
    /// `CONFIG GET` was refused (an ACL user without it, a managed service): why.
    Refused(String),
}

/// Reads `node`'s setting. A refused `CONFIG GET` is [`Setting::Refused`], not a failure;
/// a lost connection is one.
pub(crate) async fn read(
    node: &Primary,
    conn: &mut MultiplexedConnection,
) -> Result<Setting, Failure> {
    let reply: Result<HashMap<String, String>, _> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query_async(conn)
        .await;
    match reply {
        Ok(values) => match values.get("notify-keyspace-events") {
            Some(value) => Ok(Setting::Read(Classes::parse(value))),
            None => Ok(Setting::Refused(
                "CONFIG GET did not return notify-keyspace-events".to_owned(),
            )),
        },
        Err(e) if cause(&e).is_none() => Ok(Setting::Refused(e.to_string())),
        Err(e) => Err(Failure::from_redis(e, node.address())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_read_with_their_alias() {
        let off = Classes::parse("");
        assert!(!off.usable());
        assert_eq!(off.missing().len(), 5);
        assert_eq!(off.suggestion(), "CONFIG SET notify-keyspace-events K$hzxg");
        let all = Classes::parse("AKE");
        assert!(all.usable() && all.missing().is_empty());
        let some = Classes::parse("K$x");
        assert!(some.usable());
        let missing: Vec<char> = some.missing().iter().map(|(c, _)| *c).collect();
        assert_eq!(missing, ['h', 'z', 'g']);
        assert_eq!(
            some.suggestion(),
            "CONFIG SET notify-keyspace-events K$xhzg"
        );
        assert!(!Classes::parse("E$").usable(), "no keyspace channels");
    }
}
