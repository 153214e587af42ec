//! Redis's errors read as the crate's: a timeout, a refused password or permission, a missing
//! command, a connection that could not be made.

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo};
use tokio::time::Instant;

use super::tls;
use crate::error::{ConnectError, LockError};

/// Whether `e` is a connection failure (the command may not have reached the server).
pub(crate) fn is_connection_error_kind(e: &redis::RedisError) -> bool {
    crate::error::is_connection_error(e)
}

/// Maps a Redis error: a timeout is a [`LockError::ResponseTimeout`] of `waited` (how long
/// the call waited), a refused permission a [`LockError::NoPermission`], a server that wants a
/// password [`LockError::AuthRequired`].
pub(crate) fn map_error(e: redis::RedisError, waited: Duration) -> LockError {
    if e.is_timeout() {
        LockError::ResponseTimeout(waited)
    } else if let Some(refused) = auth_required(&e).or_else(|| no_permission(&e)) {
        refused
    } else if let Some(missing) = unsupported(&e) {
        missing
    } else {
        LockError::Redis(e)
    }
}

/// The error for a connection that could not be had, tried for since `started`: a failed TLS
/// handshake is [`LockError::Tls`], a refused or missing password
/// [`LockError::AuthRequired`] and a refused permission [`LockError::NoPermission`] (waiting
/// longer would not help); anything else is [`LockError::Unavailable`], with the time it
/// really took (a refused connection fails in milliseconds, not after the connect timeout).
///
/// `address` is where it tried (`host:port`, or the seeds of a Cluster: never a password);
/// the error names it. With no error seen (the connect timeout ran out first) the cause is a
/// timed-out I/O error, so the address is still said.
pub(crate) fn connect_error(
    started: Instant,
    address: String,
    source: Option<redis::RedisError>,
) -> LockError {
    let waited = started.elapsed();
    let source = source.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no connection within the connect timeout",
        )
        .into()
    });
    refusal(&source).unwrap_or(LockError::Unavailable {
        waited,
        source: Some(ConnectError::new(address, source)),
    })
}

/// A TLS, authentication or ACL refusal in `e`, which no retry can fix.
pub(crate) fn refusal(e: &redis::RedisError) -> Option<LockError> {
    if let Some(reason) = tls::failure(e) {
        return Some(LockError::Tls {
            reason,
            source: e.clone(),
        });
    }
    auth_required(e).or_else(|| no_permission(e))
}

/// A server that wants credentials the client did not give (`NOAUTH Authentication
/// required`, or the "unauthenticated bulk length" with which a server without them closes
/// the connection on a long command), or that refused the ones it gave (`WRONGPASS
/// invalid username-password pair`; the redis crate's `AuthenticationFailed` when `AUTH`
/// fails while connecting). Said of the `url` option: a backend whose credentials come from
/// elsewhere says so with [`LockError::auth_in`].
fn auth_required(e: &redis::RedisError) -> Option<LockError> {
    // A pipeline's error carries its commands' errors in its text only.
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    let refused = if e.kind() == redis::ErrorKind::AuthenticationFailed
        || e.code() == Some("WRONGPASS")
        || lower.contains("wrongpass")
        || lower.contains("invalid username-password pair")
    {
        true
    } else if e.code() == Some("NOAUTH")
        || lower.contains("noauth")
        || lower.contains("authentication required")
        || lower.contains("unauthenticated")
    {
        false
    } else {
        return None;
    };
    Some(LockError::AuthRequired {
        option: "url",
        refused,
        detail: text.trim().to_owned(),
    })
}

/// A command, key or channel the client's ACL user may not use: `NOPERM` for a command the
/// client sent, and the error of a lock script whose `redis.call` was refused (Redis 7.0 says
/// `ERR The user executing the script can't …` without naming the command; 7.2 and later say
/// `ERR ACL failure in script: …` and name it).
fn no_permission(e: &redis::RedisError) -> Option<LockError> {
    let detail = e.detail().unwrap_or_default();
    let in_script = detail.starts_with("The user executing the script can't")
        || detail.starts_with("ACL failure in script");
    if e.code() != Some("NOPERM") && !in_script {
        return None;
    }
    let detail = detail.trim().to_owned();
    let lower = detail.to_ascii_lowercase();
    let missing = if let Some(command) = lower
        .split_once("to run the '")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(command, _)| command)
    {
        format!("+{command}")
    } else if lower.contains("key") {
        "~<key prefix>* (a key pattern covering the client's key prefix)".to_owned()
    } else if lower.contains("channel") {
        "&<key prefix>* (a channel pattern covering the client's key prefix)".to_owned()
    } else if in_script {
        "+<a command a lock script calls> (Redis 7.0 does not say which; its ACL LOG does)"
            .to_owned()
    } else {
        "a permission Redis did not name".to_owned()
    };
    Some(LockError::NoPermission { missing, detail })
}

/// A command or a scripting engine the server does not have (`ERR unknown command
/// 'DELIFEQ'`, `ERR Could not find scripting engine 'lua'`, `ERR Engine 'lua' not found`).
pub(crate) fn unsupported(e: &redis::RedisError) -> Option<LockError> {
    // A pipeline's error carries its commands' errors in its text.
    let detail = e.to_string();
    let lower = detail.to_ascii_lowercase();
    let (feature, missing) = if lower.contains("unknown command 'delifeq'") {
        ("the native mutex protocol", "the DELIFEQ command")
    } else if lower.contains("scripting engine") || lower.contains("engine 'lua' not found") {
        ("this lock", "scripting (EVAL/FCALL)")
    } else {
        return None;
    };
    Some(LockError::Unsupported {
        feature,
        missing,
        detail: Some(detail.trim().to_owned()),
    })
}

/// `host:port` of an address, for messages (never the password).
pub(crate) fn address(info: &ConnectionInfo) -> String {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        other => other.to_string(),
    }
}
