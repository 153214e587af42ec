//! The resource the locks protect: a fenced store, one Redis hash per lock name on the
//! *check* server (a redis-server of its own that the nemesis never touches).
//!
//! A write carries the holder's fencing token and its section id. The compare-and-set script
//! accepts it only if the token is above the highest one accepted so far, or equal to it from
//! the same section (a holder may write twice); otherwise the store keeps its value and
//! answers with the token and section that fenced the write out. This is what a database
//! does with a `WHERE token < $1` condition.

use std::time::Duration;

use lock_core::LockClient;
use lock_core::fenced::{self, Fenced};
use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};

use super::event::now_us;

const CAS: &str = r"
local cur = redis.call('HMGET', KEYS[1], 'tok', 'sec')
local tok = tonumber(ARGV[1])
local ctok = tonumber(cur[1])
if ctok == nil or tok > ctok or (tok == ctok and cur[2] == ARGV[2]) then
  redis.call('HSET', KEYS[1], 'tok', ARGV[1], 'sec', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'writes', 1)
  return {1, ARGV[1], ARGV[2]}
end
redis.call('HINCRBY', KEYS[1], 'refused', 1)
return {0, cur[1], cur[2] or ''}
";

/// One write at the fenced store, as the history keeps it.
#[derive(Debug, Clone)]
pub(crate) struct Write {
    pub(crate) name: String,
    pub(crate) token: u64,
    /// When it was sent and when its answer came.
    pub(crate) t0: i64,
    pub(crate) t1: i64,
    /// Accepted, refused (`Some(false)`), or failed (`None`: the check server did not answer).
    pub(crate) accepted: Option<bool>,
    /// The highest token the store had after the write, and whose it is.
    pub(crate) max: u64,
    pub(crate) by: String,
}

impl Write {
    /// A write with no answer (its effect unknown), sent at `t0`, given up at `t1`: `why`.
    pub(crate) fn unanswered(name: &str, token: u64, t0: i64, t1: i64, why: String) -> Write {
        Write {
            name: name.to_owned(),
            token,
            t0,
            t1,
            accepted: None,
            max: 0,
            by: why,
        }
    }

    pub(crate) fn to_json(&self) -> Value {
        json!([
            self.name,
            self.token,
            self.t0,
            self.t1,
            match self.accepted {
                Some(true) => 1,
                Some(false) => 0,
                None => -1,
            },
            self.max,
            self.by
        ])
    }

    pub(crate) fn from_json(v: &Value) -> Option<Write> {
        let a = v.as_array()?;
        Some(Write {
            name: a.first()?.as_str()?.to_owned(),
            token: a.get(1)?.as_u64()?,
            t0: a.get(2)?.as_i64()?,
            t1: a.get(3)?.as_i64()?,
            accepted: match a.get(4)?.as_i64()? {
                1 => Some(true),
                0 => Some(false),
                _ => None,
            },
            max: a.get(5)?.as_u64()?,
            by: a.get(6)?.as_str()?.to_owned(),
        })
    }
}

/// A connection to the fenced store.
#[derive(Clone)]
pub(crate) struct Fence {
    conn: MultiplexedConnection,
    script: redis::Script,
}

impl Fence {
    pub(crate) async fn connect(url: &str) -> Result<Fence, redis::RedisError> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        Ok(Fence {
            conn,
            script: redis::Script::new(CAS),
        })
    }

    /// The store's key for lock `name` of family `family`.
    pub(crate) fn key(family: &str, name: &str) -> String {
        format!("fence:{family}:{name}")
    }

    /// Writes with `token` on behalf of section `section`.
    pub(crate) async fn write(&self, family: &str, name: &str, token: u64, section: &str) -> Write {
        let t0 = now_us();
        let mut conn = self.conn.clone();
        let mut invocation = self.script.key(Fence::key(family, name));
        invocation.arg(token.to_string()).arg(section);
        let reply: Result<(i64, String, String), String> = match tokio::time::timeout(
            std::time::Duration::from_secs(5),
            invocation.invoke_async(&mut conn),
        )
        .await
        {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the check server did not answer in 5 s".to_owned()),
        };
        let t1 = now_us();
        match reply {
            Ok((ok, max, by)) => Write {
                name: name.to_owned(),
                token,
                t0,
                t1,
                accepted: Some(ok == 1),
                max: max.parse().unwrap_or_default(),
                by,
            },
            Err(e) => Write::unanswered(name, token, t0, t1, e),
        }
    }
}

/// A fenced store on the lock server, reached through the lock client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientStore {
    /// `fenced::set` on `LockClient::connection()`, at `chaos-conn:<family>:<name>`.
    Connection,
    /// The lock's record, `records().put(name, …)`.
    Record,
}

/// How long a record written by a section is kept.
const RECORD_TTL: Duration = Duration::from_secs(60);

impl ClientStore {
    pub(crate) const ALL: [ClientStore; 2] = [ClientStore::Connection, ClientStore::Record];

    /// What its keys start with.
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            ClientStore::Connection => "chaos-conn:",
            ClientStore::Record => "record:",
        }
    }

    /// The history's key of the store's value for lock `name` of family `family` (the
    /// connection's store: its Redis key too).
    pub(crate) fn key(self, family: &str, name: &str) -> String {
        format!("{}{family}:{name}", self.prefix())
    }

    /// Whether `key` is one of [`ClientStore::key`]'s.
    pub(crate) fn is_key(key: &str) -> bool {
        ClientStore::ALL.iter().any(|s| key.starts_with(s.prefix()))
    }

    /// Writes the section id `section` with `token`, through `client`.
    pub(crate) async fn write(
        self,
        client: &LockClient,
        family: &str,
        name: &str,
        token: u64,
        section: &str,
    ) -> Write {
        let key = self.key(family, name);
        let t0 = now_us();
        let put = async {
            match self {
                ClientStore::Connection => {
                    fenced::set(&mut client.connection(), &key, section, token).await
                }
                ClientStore::Record => {
                    let value = section.as_bytes();
                    client.records().put(name, value, token, RECORD_TTL).await
                }
            }
        };
        let reply = tokio::time::timeout(Duration::from_secs(5), put).await;
        let t1 = now_us();
        let (accepted, max, by) = match reply {
            Ok(Ok(Fenced::Written)) => (true, token, section.to_owned()),
            Ok(Ok(Fenced::Refused { stored })) => (false, stored, String::new()),
            Ok(Err(e)) => return Write::unanswered(&key, token, t0, t1, e.to_string()),
            Err(_) => {
                let why = "the lock server did not answer in 5 s".to_owned();
                return Write::unanswered(&key, token, t0, t1, why);
            }
        };
        Write {
            name: key,
            token,
            t0,
            t1,
            accepted: Some(accepted),
            max,
            by,
        }
    }
}
