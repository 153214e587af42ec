//! What a deployment can do, read once at connect from every primary: the server's name and
//! version, the commands the native mutex protocol and the other features need, and the
//! server's clock. Capabilities are known by what the server has, never by its version
//! string (Valkey says `redis_version:7.2.4` whatever its own version is).

use redis::Value;
use tokio::time::Instant;

use super::Backend;
use crate::error::LockError;

/// What every primary of a deployment has.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    /// `"valkey 9.1.2"`, `"redis 7.0.15"` (the first primary's).
    pub(crate) server: String,
    /// `DELIFEQ` (and so `SET … IFEQ`, which came before it) everywhere.
    pub(crate) native_compare: bool,
    pub(crate) wait: bool,
    pub(crate) sharded_pubsub: bool,
    /// The latest of the primaries' clocks, in microseconds since the Unix epoch, and when it
    /// was read here; None when no primary said (a proxy that does not pass `TIME` on).
    pub(crate) clock: Option<(u64, Instant)>,
}

/// The commands looked up, in order.
const COMMANDS: [&str; 3] = ["DELIFEQ", "SSUBSCRIBE", "WAIT"];

impl Backend {
    /// Reads what every primary can do (three keyless commands on each).
    pub(crate) async fn probe(&self) -> Result<Probe, LockError> {
        let mut info = redis::cmd("INFO");
        info.arg("server");
        let infos = self.each_primary(&info).await?;
        let servers: Vec<Server> = infos.iter().map(Server::read).collect();
        let mut lookup = redis::cmd("COMMAND");
        lookup.arg("INFO").arg(&COMMANDS[..]);
        // An ACL user without `+command|info` learns nothing here: no native protocol, and
        // the rest is judged by the version.
        let found: Option<Vec<[bool; 3]>> = match self.each_primary(&lookup).await {
            Ok(replies) => replies.iter().map(known).collect(),
            Err(error) => {
                tracing::info!(%error, "COMMAND INFO refused: capabilities judged by version");
                None
            }
        };
        let clock = self.latest_clock().await.map(|us| (us, Instant::now()));
        let all = |i: usize, by_version: fn(&Server) -> bool| match &found {
            Some(found) => found.iter().all(|known| known[i]),
            None => servers.iter().all(by_version),
        };
        Ok(Probe {
            server: servers.first().map(Server::describe).unwrap_or_default(),
            native_compare: all(0, |_| false),
            // A version not said (a proxy, say) is given the benefit of the doubt.
            sharded_pubsub: all(1, |s| s.valkey || s.major >= 7 || s.major == 0),
            wait: all(2, |_| true),
            clock,
        })
    }

    /// The latest of the primaries' `TIME`, in microseconds.
    async fn latest_clock(&self) -> Option<u64> {
        let times = self
            .each_primary(&redis::cmd("TIME"))
            .await
            .unwrap_or_default();
        let micros = |time: &Value| -> Option<u64> {
            let Value::Array(parts) = time else {
                return None;
            };
            let number = |v: Option<&Value>| match v {
                Some(Value::BulkString(b)) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
                Some(Value::Int(n)) => u64::try_from(*n).ok(),
                _ => None,
            };
            Some(number(parts.first())? * 1_000_000 + number(parts.get(1))?)
        };
        times.iter().filter_map(micros).max()
    }
}

/// Which of [`COMMANDS`] a `COMMAND INFO` reply says the server has (nil: unknown command);
/// None for a reply that is not one entry per command.
fn known(reply: &Value) -> Option<[bool; 3]> {
    let Value::Array(entries) = reply else {
        return None;
    };
    if entries.len() != COMMANDS.len() {
        return None;
    }
    let mut known = [false; 3];
    for (slot, entry) in known.iter_mut().zip(entries) {
        *slot = !matches!(entry, Value::Nil);
    }
    Some(known)
}

/// A server's name and version, from `INFO server`.
struct Server {
    valkey: bool,
    /// What the server calls itself where it says (`server_name`), else `redis`.
    name: String,
    version: String,
    major: u32,
}

impl Server {
    fn read(info: &Value) -> Server {
        let text = match info {
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Value::VerbatimString { text, .. } => text.clone(),
            Value::SimpleString(text) => text.clone(),
            _ => String::new(),
        };
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let valkey_version = field("valkey_version");
        let named = field("server_name");
        let valkey = valkey_version.is_some() || named.as_deref() == Some("valkey");
        let name = match (valkey, named) {
            (true, _) => "valkey".to_owned(),
            (false, named) => named.unwrap_or_else(|| "redis".to_owned()),
        };
        let version = valkey_version
            .or_else(|| field("redis_version"))
            .unwrap_or_else(|| "unknown".to_owned());
        let major = version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        Server {
            valkey,
            name,
            version,
            major,
        }
    }

    fn describe(&self) -> String {
        format!("{} {}", self.name, self.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn valkey_is_known_by_its_own_version_not_its_redis_version() {
        let valkey = Server::read(&info(
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n",
        ));
        assert_eq!(valkey.describe(), "valkey 9.1.2");
        let redis = Server::read(&info("# Server\r\nredis_version:7.0.15\r\n"));
        assert_eq!((redis.describe(), redis.major), ("redis 7.0.15".into(), 7));
    }

    #[test]
    fn command_info_says_which_commands_exist() {
        let reply = Value::Array(vec![Value::Nil, Value::Array(vec![]), Value::Array(vec![])]);
        assert_eq!(known(&reply), Some([false, true, true]));
        assert_eq!(known(&Value::Nil), None);
        assert_eq!(known(&Value::Array(vec![Value::Nil])), None);
    }
}
