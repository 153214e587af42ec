//! What can go wrong, what each failure says, and the exit code of every outcome (see
//! [`EXIT_CODES`](crate::cli::EXIT_CODES)).

use std::fmt;
use std::io;

use lock_core::LockError;
use lock_core::redis::{ErrorKind, RedisError};

/// The exit code of an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// 0: done.
    Done = 0,
    /// 1: nothing held (status), nothing to free (force-unlock).
    NotHeld = 1,
    /// 2: bad usage.
    Usage = 2,
    /// 3: no connection.
    Connection = 3,
    /// 4: Redis refused or failed a command, or the output failed.
    Refused = 4,
    /// 5: force-unlock not confirmed.
    Aborted = 5,
}

/// Why a connection failed, in the words an operator needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Nothing listens there.
    Refused,
    /// The server requires a password and none was given; the option it goes in.
    NoPassword(&'static str),
    /// The user or password was refused.
    Auth,
    /// The TLS handshake failed.
    Tls,
    /// No answer in time.
    Timeout,
    /// Unreachable, or the connection dropped.
    Unreachable,
    /// The sentinels know no reachable primary.
    NoPrimary,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cause::Refused => "connection refused (is Redis running on that host and port?)",
            Cause::NoPassword(option) => {
                return write!(
                    f,
                    "the server requires authentication and no password was given (put the user \
                     and password in {option}: redis://user:password@host:port, or \
                     redis://:password@host:port for the default user)"
                );
            }
            Cause::Auth => "authentication failed (check the user and password in the URL)",
            Cause::Tls => "TLS failed (rediss:// needs --tls-ca for a private CA, --tls-cert/--tls-key if the server asks for a client certificate)",
            Cause::Timeout => "no answer in time (see --timeout)",
            Cause::Unreachable => "unreachable",
            Cause::NoPrimary => "no primary known (check --sentinel-master and the sentinels)",
        })
    }
}

/// A failure of a subcommand.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// Bad usage: an option, URL, file, name, prefix or pattern.
    #[error("{0}")]
    Usage(String),
    /// No connection to `target`.
    #[error("cannot connect to {target}: {cause}\n  ({detail})")]
    Connection {
        /// The URL or node, without its password.
        target: String,
        /// Why, in words.
        cause: Cause,
        /// What the client library said.
        detail: String,
    },
    /// Redis refused or failed a command, or the deployment cannot do what was asked.
    #[error("{0}")]
    Refused(String),
    /// The operator did not confirm.
    #[error("not confirmed: nothing was changed")]
    Aborted,
    /// The output could not be written.
    #[error("cannot write the output: {0}")]
    Output(io::Error),
}

impl Failure {
    /// The exit code of this failure.
    pub(crate) fn code(&self) -> Code {
        match self {
            Failure::Usage(_) => Code::Usage,
            Failure::Connection { .. } => Code::Connection,
            Failure::Refused(_) | Failure::Output(_) => Code::Refused,
            Failure::Aborted => Code::Aborted,
        }
    }

    /// A failure of lock-core talking to `target`.
    pub(crate) fn from_lock(e: LockError, target: &str) -> Failure {
        let connection = |cause| Failure::Connection {
            target: target.to_owned(),
            cause,
            detail: e.to_string(),
        };
        match &e {
            LockError::InvalidName { .. } | LockError::InvalidOption { .. } => {
                Failure::Usage(e.to_string())
            }
            LockError::Unavailable { source, .. } => connection(
                source
                    .as_deref()
                    .and_then(cause)
                    .unwrap_or(Cause::Unreachable),
            ),
            LockError::Tls { .. } => connection(Cause::Tls),
            LockError::AuthRequired { refused: true, .. } => connection(Cause::Auth),
            LockError::AuthRequired { option, .. } => {
                connection(Cause::NoPassword(if *option == "sentinel_primary_url" {
                    "--sentinel-primary-url"
                } else {
                    "the URL (--url)"
                }))
            }
            LockError::ResponseTimeout(_) => connection(Cause::Timeout),
            LockError::NoPrimary { .. } => connection(Cause::NoPrimary),
            LockError::Redis(r) => match cause(r) {
                Some(c) => connection(c),
                None => Failure::Refused(e.to_string()),
            },
            _ => Failure::Refused(e.to_string()),
        }
    }

    /// A failure of a command lockctl sent itself to `target`.
    pub(crate) fn from_redis(e: RedisError, target: &str) -> Failure {
        match cause(&e) {
            Some(cause) => Failure::Connection {
                target: target.to_owned(),
                cause,
                detail: e.to_string(),
            },
            None => Failure::Refused(format!("{target}: {e}")),
        }
    }

    /// A failure to talk to `target` within `timeout`.
    pub(crate) fn timed_out(target: &str, what: &str) -> Failure {
        Failure::Connection {
            target: target.to_owned(),
            cause: Cause::Timeout,
            detail: format!("{what} took longer than the timeout"),
        }
    }
}

/// Why a Redis error is a connection failure, if it is one (else Redis answered: a refused
/// or failed command).
pub(crate) fn cause(e: &RedisError) -> Option<Cause> {
    let code = e.code().unwrap_or("");
    let detail = e.detail().unwrap_or("");
    if e.is_connection_refusal() {
        Some(Cause::Refused)
    } else if code == "NOAUTH" {
        Some(Cause::NoPassword("the URL (--url)"))
    } else if e.kind() == ErrorKind::AuthenticationFailed
        || code == "WRONGPASS"
        || (code == "ERR" && detail.contains("AUTH"))
    {
        Some(Cause::Auth)
    } else if looks_like_tls(e) {
        Some(Cause::Tls)
    } else if e.is_timeout() {
        Some(Cause::Timeout)
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
        Some(Cause::Unreachable)
    } else {
        None
    }
}

/// Whether a connection error came from TLS: the redis crate wraps rustls's error in an I/O
/// error, whose text names the certificate or the handshake.
fn looks_like_tls(e: &RedisError) -> bool {
    if !(e.is_io_error() || e.is_unrecoverable_error()) {
        return false;
    }
    let mut text = format!("{e} {e:?}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&s.to_string());
        source = s.source();
    }
    let text = text.to_lowercase();
    ["certificate", "tls", "handshake", "invalidmessage", "alert"]
        .iter()
        .any(|word| text.contains(word))
}

/// Whether an output error means the reader went away (`lockctl watch | head`): then lockctl
/// stops quietly.
pub(crate) fn is_broken_pipe(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

/// `url` without its password (and user), to be shown.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL (a usage error shows it): still never the part before an `@`.
        return match url.rfind('@') {
            Some(at) => format!("***@{}", &url[at + 1..]),
            None => url.to_owned(),
        };
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_never_shown() {
        assert_eq!(
            redact("redis://user:secret@host:6379/2"),
            "redis://***@host:6379/2"
        );
        assert_eq!(redact("rediss://:p@ss@h:1"), "rediss://***@h:1");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact("host"), "host");
        assert_eq!(redact("user:secret@host:1"), "***@host:1");
    }

    #[test]
    fn errors_are_sorted_into_causes() {
        let refused = RedisError::from(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(cause(&refused), Some(Cause::Refused));
        let auth = RedisError::from((ErrorKind::AuthenticationFailed, "bad password"));
        assert_eq!(cause(&auth), Some(Cause::Auth));
        let missing = Failure::from_lock(
            LockError::AuthRequired {
                option: "sentinel_primary_url",
                refused: false,
                detail: "NOAUTH Authentication required.".to_owned(),
            },
            "t",
        );
        assert_eq!(missing.code(), Code::Connection);
        let text = missing.to_string();
        assert!(
            text.contains("requires authentication")
                && text.contains("--sentinel-primary-url")
                && text.contains("redis://user:password@host:port"),
            "{text}"
        );
        let failure = Failure::from_redis(refused, "redis://h:1");
        assert_eq!(failure.code(), Code::Connection);
        assert!(failure.to_string().contains("connection refused"));
        let usage = Failure::from_lock(
            LockError::InvalidOption {
                option: "x",
                reason: "y".to_owned(),
            },
            "t",
        );
        assert_eq!(usage.code(), Code::Usage);
    }
}
