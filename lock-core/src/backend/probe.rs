//! What a deployment can do, read once at connect from every primary: the server's name and
//! version, the commands the native mutex protocol and the other features need, and the
//! server's clock. Capabilities are known by what the server has, never by its version
//! string (Valkey says `redis_version:7.2.4` whatever its own version is).

use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::Backend;
use super::errors::map_error;
use crate::error::{LockError, is_connection_error};

/// What every primary of a deployment has.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    /// `"valkey 9.1.2"`, `"redis 7.0.15"` (the first primary's).
    pub(crate) server: String,
    /// `DELIFEQ` (and so `SET … IFEQ`, which came before it) everywhere.
    pub(crate) native_compare: bool,
    /// `SET … NX GET` everywhere: known by `SINTERCARD`, which came in the same release
    /// (Redis 7.0; every Valkey has both).
    pub(crate) set_nx_get: bool,
    pub(crate) wait: bool,
    pub(crate) sharded_pubsub: bool,
    /// The ACL lets this user run a transaction (`EXEC`) on every primary: the native and
    /// the hybrid acquisition are one `MULTI` … `EXEC`.
    pub(crate) transactions: bool,
    /// The latest of the primaries' clocks, in microseconds since the Unix epoch, and when it
    /// was read here; None when no primary said (a proxy that does not pass `TIME` on).
    pub(crate) clock: Option<(u64, Instant)>,
}

/// The commands looked up, in order.
const COMMANDS: [&str; 4] = ["DELIFEQ", "SSUBSCRIBE", "WAIT", "SINTERCARD"];

/// What [`Probe::server`] says when `INFO` was refused.
const UNKNOWN: &str = "unknown (INFO refused)";

impl Backend {
    /// Reads what every primary can do (three keyless commands on each). An ACL user may be
    /// refused any of them (`INFO` is `@dangerous`): the probe goes on without it and says
    /// once what that costs. A connection error or a timeout fails it.
    pub(crate) async fn probe(&self) -> Result<Probe, LockError> {
        let mut refused = Refused::default();
        let mut info = redis::cmd("INFO");
        info.arg("server");
        let servers: Vec<Server> = match self.ask(&info, "INFO", &mut refused).await? {
            Some(infos) => infos.iter().map(Server::read).collect(),
            None => Vec::new(),
        };
        let mut lookup = redis::cmd("COMMAND");
        lookup.arg("INFO").arg(&COMMANDS[..]);
        // Without it (refused, or a reply not understood) nothing says the native protocol
        // is there, and the rest is judged by the version.
        let found: Option<Vec<[bool; 4]>> = self
            .ask(&lookup, "COMMAND INFO", &mut refused)
            .await?
            .and_then(|replies| replies.iter().map(known).collect());
        let clock = self.latest_clock(&mut refused).await?;
        let transactions = self.transactions_allowed(&mut refused).await?;
        refused.say();
        // No server said (INFO refused, or a proxy): what it lacks shows at first use.
        let all = |i: usize, by_version: fn(&Server) -> bool| match &found {
            Some(found) => found.iter().all(|known| known[i]),
            None => servers.iter().all(by_version),
        };
        Ok(Probe {
            server: match servers.first() {
                Some(server) => server.describe(),
                None if refused.has("INFO") => UNKNOWN.to_owned(),
                None => String::new(),
            },
            // Only COMMAND INFO says so (`all` of no server is true).
            native_compare: found.is_some() && all(0, |_| false),
            // A version not said (a proxy, say) is given the benefit of the doubt.
            sharded_pubsub: all(1, |s| s.valkey || s.major >= 7 || s.major == 0),
            wait: all(2, |_| true),
            // Known from COMMAND INFO, or from a version a server said.
            set_nx_get: (found.is_some() || !servers.is_empty())
                && all(3, |s| s.valkey || s.major >= 7),
            transactions,
            clock: clock.map(|us| (us, Instant::now())),
        })
    }

    /// Whether every primary lets this user run a transaction, known by `EXEC` alone: a user
    /// the ACL allows is answered `ERR EXEC without MULTI` (nothing happens), one it refuses
    /// `NOPERM` (Redis and Valkey wrap it: `EXECABORT … because of: NOPERM …`). A refused
    /// `MULTI` inside the native acquisition's pipeline is not answered as one error (the
    /// redis crate's connection task fails on it): found here, the protocol is not chosen.
    async fn transactions_allowed(&self, refused: &mut Refused) -> Result<bool, LockError> {
        match self
            .each_primary(&redis::cmd("EXEC"))
            .await
            .and_then(node_errors)
        {
            Ok(_) => Ok(true),
            Err(error @ LockError::NoPermission { .. }) => {
                refused.0.push(("EXEC", error));
                Ok(false)
            }
            Err(LockError::Redis(e)) if e.to_string().contains("NOPERM") => {
                refused.0.push(("EXEC", LockError::Redis(e)));
                Ok(false)
            }
            Err(LockError::Redis(e)) if !is_connection_error(&e) => Ok(true),
            Err(error) => Err(error),
        }
    }

    /// `cmd`'s replies from every primary, or None when it failed in a way the probe goes on
    /// without (see [`goes_on`]; noted in `refused`).
    async fn ask(
        &self,
        cmd: &redis::Cmd,
        name: &'static str,
        refused: &mut Refused,
    ) -> Result<Option<Vec<Value>>, LockError> {
        match self.each_primary(cmd).await.and_then(node_errors) {
            Ok(replies) => Ok(Some(replies)),
            Err(error) if goes_on(&error, name == "INFO") => {
                refused.0.push((name, error));
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// The latest of the primaries' `TIME`, in microseconds.
    async fn latest_clock(&self, refused: &mut Refused) -> Result<Option<u64>, LockError> {
        let time = redis::cmd("TIME");
        let Some(times) = self.ask(&time, "TIME", refused).await? else {
            return Ok(None);
        };
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
        Ok(times.iter().filter_map(micros).max())
    }
}

/// The replies, or the first that is an error: on a Cluster each primary's reply comes as
/// it is, a refusal among them too.
fn node_errors(replies: Vec<Value>) -> Result<Vec<Value>, LockError> {
    replies
        .into_iter()
        .map(|reply| match reply {
            // Never a timeout, which is all the duration is for.
            Value::ServerError(e) => Err(map_error(e.into(), Duration::ZERO)),
            reply => Ok(reply),
        })
        .collect()
}

/// Whether the probe goes on without a command that failed with `error`: a refusal by the
/// ACL, and for `COMMAND INFO` and `TIME` (not `acl_only`) any error the server answered
/// with (a proxy that does not pass them on). A connection error or a timeout fails it.
fn goes_on(error: &LockError, acl_only: bool) -> bool {
    match error {
        LockError::NoPermission { .. } => true,
        LockError::Redis(e) => !acl_only && !is_connection_error(e),
        _ => false,
    }
}

/// The probe's commands that were refused, with their errors.
#[derive(Default)]
struct Refused(Vec<(&'static str, LockError)>);

impl Refused {
    fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(refused, _)| *refused == name)
    }

    /// Says in one `info` line what was refused and what it costs, if anything was.
    fn say(&self) {
        let Some(line) = self.line() else {
            return;
        };
        let errors: Vec<String> = self.0.iter().map(|(_, e)| e.to_string()).collect();
        tracing::info!(errors = %errors.join(" / "), "{line}");
    }

    fn line(&self) -> Option<String> {
        let (info, lookup) = (self.has("INFO"), self.has("COMMAND INFO"));
        let mut parts = Vec::new();
        if info {
            parts.push("INFO refused by the ACL: server reported as unknown");
        }
        parts.push(match (info, lookup) {
            (true, false) => "capabilities read from COMMAND INFO",
            (true, true) => {
                "COMMAND INFO refused too: the native protocol is off, scripts are used; \
                 WAIT and sharded pub/sub assumed present"
            }
            (false, true) => {
                "COMMAND INFO refused: the native protocol is off, scripts are used; WAIT \
                 and sharded pub/sub judged by the server's version"
            }
            (false, false) => "",
        });
        if self.has("TIME") {
            parts.push("TIME refused: no server clock, so no native protocol");
        }
        if self.has("EXEC") {
            parts.push(
                "EXEC refused: no transactions, so the mutex speaks the scripts (the ACL \
                 line for the native and hybrid protocols adds +multi +exec)",
            );
        }
        parts.retain(|part| !part.is_empty());
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// Which of [`COMMANDS`] a `COMMAND INFO` reply says the server has (nil: unknown command);
/// None for a reply that is not one entry per command.
fn known(reply: &Value) -> Option<[bool; 4]> {
    let Value::Array(entries) = reply else {
        return None;
    };
    if entries.len() != COMMANDS.len() {
        return None;
    }
    let mut known = [false; 4];
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
        let entry = || Value::Array(vec![]);
        let reply = Value::Array(vec![Value::Nil, entry(), entry(), entry()]);
        assert_eq!(known(&reply), Some([false, true, true, true]));
        assert_eq!(known(&Value::Nil), None);
        assert_eq!(known(&Value::Array(vec![Value::Nil])), None);
    }

    fn refused(names: &[&'static str]) -> Refused {
        let error = || LockError::NoPermission {
            missing: "+info".into(),
            detail: String::new(),
        };
        Refused(names.iter().map(|name| (*name, error())).collect())
    }

    #[test]
    fn one_line_says_what_was_refused_and_what_it_costs() {
        assert_eq!(refused(&[]).line(), None);
        assert_eq!(
            refused(&["INFO"]).line().unwrap(),
            "INFO refused by the ACL: server reported as unknown; capabilities read from \
             COMMAND INFO"
        );
        let both = refused(&["INFO", "COMMAND INFO"]).line().unwrap();
        assert!(both.contains(
            "; COMMAND INFO refused too: the native protocol is off, \
             scripts are used; WAIT and sharded pub/sub assumed present"
        ));
        let lookup = refused(&["COMMAND INFO", "TIME"]).line().unwrap();
        assert!(lookup.starts_with("COMMAND INFO refused: "), "{lookup}");
        assert!(lookup.ends_with("; TIME refused: no server clock, so no native protocol"));
    }

    #[test]
    fn only_refusals_are_gone_without_and_outages_fail_the_probe() {
        let denied = LockError::NoPermission {
            missing: "+info".into(),
            detail: String::new(),
        };
        assert!(goes_on(&denied, true) && goes_on(&denied, false));
        let unknown = LockError::Redis(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "unknown command",
        )));
        assert!(!goes_on(&unknown, true) && goes_on(&unknown, false));
        let reset = LockError::Redis(redis::RedisError::from((
            redis::ErrorKind::Io,
            "connection reset",
        )));
        let timeout = LockError::ResponseTimeout(std::time::Duration::from_secs(1));
        let down = LockError::Unavailable {
            waited: std::time::Duration::from_secs(1),
            source: None,
        };
        for outage in [reset, timeout, down] {
            assert!(
                !goes_on(&outage, true) && !goes_on(&outage, false),
                "{outage:?}"
            );
        }
    }
}
