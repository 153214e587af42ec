//! The one error type of the crate, and [`ConnectError`], the cause of a connection that
//! could not be had.

use std::fmt;
use std::time::Duration;

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// Each failure is its own variant so callers can match on it, and each message names its
/// cause (what Redis said, or why no connection could be had), so a log line written with
/// `{}` is enough on its own. The underlying Redis error is a field of its variant, and
/// [`std::error::Error::source`] returns it for [`LockError::NoPrimary`] and
/// [`LockError::Tls`] (whose messages do not repeat it) and for [`LockError::Unavailable`]
/// (whose message ends with it); [`LockError::Redis`] says it in its message only.
///
/// # Printing it from `main`
///
/// `Debug` is the message followed by each cause it does not already say (`: caused by:
/// …`), as the redis crate's `RedisError` prints itself, rather than the variant's fields: so
/// `fn main() -> Result<(), Box<dyn std::error::Error>>` (which prints the error's `Debug`
/// when it returns one) shows a sentence, not `Unavailable { waited: .., source: .. }`. Match
/// the variants for the fields.
///
/// ```
/// use std::time::Duration;
/// use lock_core::LockClient;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // Port 1 on this host: nothing listens there.
/// let err = LockClient::builder("redis://127.0.0.1:1")
///     .connect_timeout(Duration::from_millis(500))
///     .build()
///     .await
///     .unwrap_err();
/// let printed = format!("{err:?}"); // what `main` prints after `Error: `
/// assert!(printed.starts_with("no Redis connection to 127.0.0.1:1 within"), "{printed}");
/// assert_eq!(err.address(), Some("127.0.0.1:1"));
/// # }
/// ```
#[derive(Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock stayed held by someone else until the caller's wait ran out.
    #[error("timed out after {waited:?} waiting for lock `{name}`")]
    Timeout {
        /// The lock's name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
        /// The holder's remaining lease when last seen, if it has one. `None` also when the
        /// wait ran out during a waiting request's first attempt, which on the native and
        /// hybrid protocols does not ask it (it subscribes and asks on its next attempt).
        holder_ttl: Option<Duration>,
    },

    /// The lock was held but is no longer: its lease ran out, it was deleted, or renewals
    /// failed for longer than the lease.
    #[error("lock `{name}` was lost")]
    Lost {
        /// The lock's name.
        name: String,
    },

    /// The lock name cannot be used.
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName {
        /// The offending name, shortened to at most 64 characters.
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },

    /// An option (a duration, a prefix, a URL) cannot be used.
    #[error("invalid option `{option}`: {reason}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// Why it was refused.
        reason: String,
    },

    /// No connection to Redis could be had in time (server down, unreachable, refused, a
    /// password refused, or the pool exhausted). The message names the address tried when it
    /// is known and ends with the last connection error (e.g. `no Redis connection to
    /// 10.0.0.5:6379 within 2.001s: Connection refused (os error 111)`), which is also the
    /// [`source`](std::error::Error::source). [`LockError::address`] returns the address.
    #[error("no Redis connection{} within {waited:?}{}", to(.source.as_ref()), cause(.source.as_ref()))]
    Unavailable {
        /// How long the client tried.
        waited: Duration,
        /// The last connection error, if one was seen, and the address it was to (a
        /// [`ConnectError`] derefs to the [`redis::RedisError`]). Every error lock-core's
        /// own connections report has one; the in-memory backend's and a Redlock's without
        /// an answering node may not.
        #[source]
        source: Option<ConnectError>,
    },

    /// Redis did not answer within the call's bound: its
    /// [`response_timeout`](crate::LockClientBuilder::response_timeout) (1 s by default),
    /// counted from when the call was asked, plus any time spent getting a connection (at
    /// most the [`connect_timeout`](crate::LockClientBuilder::connect_timeout)). The duration
    /// is how long the call really waited. The request may have been applied; it was not
    /// sent again.
    #[error("Redis did not answer within {0:?}")]
    ResponseTimeout(Duration),

    /// Redis answered with an error, or the connection failed mid-command. The message
    /// includes the Redis error (`Redis command failed: <what Redis or the connection
    /// said>`), so [`source`](std::error::Error::source) is `None`: a chain printer does not
    /// say it twice. Match the variant for the [`redis::RedisError`] itself.
    #[error("Redis command failed: {0}")]
    Redis(redis::RedisError),

    /// The client was shut down ([`LockClient::shutdown`](crate::LockClient::shutdown)):
    /// every call after it (and every acquisition that had not started when it began) is
    /// refused, before anything is sent.
    #[error("the lock client was shut down (LockClient::shutdown); nothing more is sent")]
    ShutDown,

    /// No client was given and none was installed with
    /// [`install_global`](crate::install_global).
    #[error("no lock client: pass one or call lock_core::install_global at startup")]
    NoClient,

    /// The lock was taken on the primary, but fewer replicas than
    /// [`min_replicas`](crate::LockClientBuilder::min_replicas) confirmed the write in time.
    /// The acquisition has been given back; nothing is held.
    #[error(
        "lock `{name}`: {acked} of {required} replicas confirmed the acquisition within {timeout:?}; it was given back"
    )]
    NotReplicated {
        /// The lock's name.
        name: String,
        /// How many replicas confirmed.
        acked: u32,
        /// How many were required.
        required: u32,
        /// How long the primary waited for them.
        timeout: Duration,
    },

    /// On a Redis Cluster, the locks of an [`atomic`](crate::MultiLock::atomic)
    /// multi-lock live in different hash slots, so no single script can take them together.
    #[error(
        "locks `{first}` and `{second}` are in different Redis Cluster slots; an atomic multi-lock must stay in one slot"
    )]
    CrossSlot {
        /// One lock's name.
        first: String,
        /// A lock of the same request in another slot.
        second: String,
    },

    /// No Sentinel could name a reachable primary for the service (all sentinels down, or a
    /// failover in progress).
    #[error("no primary known for Sentinel service `{service}`")]
    NoPrimary {
        /// The Sentinel service (master) name.
        service: String,
        /// The last error seen while asking the sentinels or checking the primary.
        #[source]
        source: Option<redis::RedisError>,
    },

    /// A semaphore was opened with another size than the one its current users gave, which
    /// Redis recorded at its first use (the record lasts while any permit of it is held).
    #[error("semaphore `{name}` has {recorded} permits, not {requested}")]
    SizeMismatch {
        /// The semaphore's name.
        name: String,
        /// The size this handle was made with.
        requested: u32,
        /// The size Redis recorded.
        recorded: u32,
    },

    /// Redis refused a command, key or channel to the client's ACL user (`NOPERM`). Nothing
    /// retries it: give the user the permission. The crate docs (*Production Redis*) list
    /// every permission a lock client needs, as one `ACL SETUSER` line.
    #[error("the Redis ACL user lacks a permission: {missing} (Redis said: {detail})")]
    NoPermission {
        /// What is missing, as an ACL rule: `+evalsha` for a command, `+script|load` for a
        /// subcommand, or which kind of key or channel pattern when Redis names no command.
        missing: String,
        /// Redis's own message.
        detail: String,
    },

    /// Redis asked the client to authenticate and it did not, or not successfully: the server
    /// has a password (`requirepass`, or ACL users without `nopass`) and the URL gave none
    /// (Redis says `NOAUTH Authentication required`), or the user and password the URL gave
    /// were refused (`WRONGPASS invalid username-password pair`). Nothing retries it: put the
    /// user and password in the URL that `option` names, as
    /// `redis://user:password@host:port` (`redis://:password@host:port` for the default
    /// user; `rediss://` for TLS).
    #[error("{}", auth_message(.option, *.refused, .detail))]
    AuthRequired {
        /// Where the credentials go, as the builder's option: `"url"` (a standalone server:
        /// [`LockClient::builder`](crate::LockClient::builder)), `"urls"` (a Cluster's
        /// nodes), `"sentinels"` (sentinels that require a login themselves) or
        /// `"sentinel_primary_url"` (the primary behind Sentinel:
        /// [`LockClientBuilder::sentinel_primary_url`](crate::LockClientBuilder::sentinel_primary_url)).
        option: &'static str,
        /// True when credentials were given and refused (a wrong user or password), false
        /// when none were given and the server requires them.
        refused: bool,
        /// What Redis (or the redis crate, for a refused `AUTH` at connect) said.
        detail: String,
    },

    /// A TLS connection to Redis could not be set up: the server's certificate is not trusted
    /// (an unknown CA, another host name) or the server refused the client's (none given, or
    /// one it does not trust). Nothing retries it: fix the certificates (see
    /// [`LockClientBuilder::tls_root_certificate`](crate::LockClientBuilder::tls_root_certificate)
    /// and [`tls_client_identity`](crate::LockClientBuilder::tls_client_identity)).
    #[error("TLS connection to Redis failed: {reason}")]
    Tls {
        /// What went wrong, and what to change.
        reason: String,
        /// The handshake's error.
        #[source]
        source: redis::RedisError,
    },

    /// A write whose reply was lost (the connection failed under it, or no answer came in
    /// time) was sent once more, and the second answer cannot tell whether the first was
    /// applied: a guarded update ([`update`](crate::update)) whose lock had passed to
    /// another holder by the repeat (the lock is lost: the guard knows it), or a fenced
    /// counter update ([`fenced::add`](crate::fenced::add), [`fenced::take`](crate::fenced::take))
    /// that another update of the counter had followed. Read the data to know; do not
    /// simply send it again (a take could then be applied twice).
    #[error("{what}: its reply was lost and its repeat cannot tell whether it was applied")]
    OutcomeUnknown {
        /// What was sent: `guarded update under lock `NAME``, `fenced counter `KEY``.
        what: String,
    },

    /// Redis answered something the lock scripts never return.
    #[error("unexpected reply from Redis: {0}")]
    UnexpectedReply(String),

    /// The server cannot do what this feature needs: it has no scripting (a Valkey built or
    /// started without Lua) and the feature runs scripts, or a command the native mutex
    /// protocol uses is gone (a failover to an older server). Nothing retries it; the lock
    /// is not touched (a held one expires with its lease). See
    /// [`LockClient::server_capabilities`](crate::LockClient::server_capabilities).
    #[error("{feature} needs {missing}, which the Redis server does not have{}", detail_of(.detail))]
    Unsupported {
        /// What could not run: `"fair lock"`, `"read-write lock"`, `"semaphore"`,
        /// `"multi-lock"`, `"mutex"`, `"the native mutex protocol"`.
        feature: &'static str,
        /// What the server lacks: `"scripting (EVAL/FCALL)"`, `"the DELIFEQ command"`, ...
        missing: &'static str,
        /// The server's own message, when it said one.
        detail: Option<String>,
    },
}

/// The message of [`LockError::AuthRequired`].
fn auth_message(option: &str, refused: bool, detail: &str) -> String {
    let url = match option {
        "urls" => "every node's URL (`urls`)",
        "sentinels" => "the sentinels' URLs (`sentinels`)",
        "sentinel_primary_url" => "the primary's URL (`sentinel_primary_url`)",
        _ => "the URL",
    };
    let what = if refused {
        "Redis refused the user and password given: check them in"
    } else {
        "Redis requires authentication and no password was given: put the user and password in"
    };
    format!(
        "{what} {url}, as redis://user:password@host:port (redis://:password@host:port for \
         the default user) (Redis said: {detail})"
    )
}

fn detail_of(detail: &Option<String>) -> String {
    detail
        .as_deref()
        .map(|d| format!(" (Redis said: {d})"))
        .unwrap_or_default()
}

impl LockError {
    /// The address of the Redis server (`host:port`, a Unix socket's path, or a Cluster's
    /// comma-separated seeds; never a password) that a [`LockError::Unavailable`] could not
    /// connect to, when it is known; `None` for every other error.
    pub fn address(&self) -> Option<&str> {
        match self {
            LockError::Unavailable {
                source: Some(cause),
                ..
            } => cause.address(),
            _ => None,
        }
    }

    /// True for [`LockError::Timeout`]: the lock is busy, Redis is fine.
    pub fn is_timeout(&self) -> bool {
        matches!(self, LockError::Timeout { .. })
    }

    /// True for [`LockError::Lost`]: a lock that was held is no longer (its lease ran out, it
    /// was deleted, or renewals failed for longer than the lease), or a grant came too late to
    /// be trusted.
    pub fn is_lost(&self) -> bool {
        matches!(self, LockError::Lost { .. })
    }

    /// True when Redis could not be reached or did not answer: retrying later may help.
    pub fn is_unavailable(&self) -> bool {
        match self {
            LockError::Unavailable { .. }
            | LockError::ResponseTimeout(_)
            | LockError::NoPrimary { .. }
            | LockError::NotReplicated { .. } => true,
            LockError::Redis(e) => is_connection_error(e),
            _ => false,
        }
    }
}

impl LockError {
    /// True for errors raised before a command was sent, so nothing can have been applied.
    pub(crate) fn never_sent(&self) -> bool {
        matches!(
            self,
            LockError::Unavailable { .. }
                | LockError::NoPrimary { .. }
                | LockError::CrossSlot { .. }
                | LockError::Tls { .. }
                | LockError::ShutDown
        )
    }

    /// An [`AuthRequired`](LockError::AuthRequired) said of the URLs of `option` (a backend
    /// that knows where its connection's credentials come from); any other error as it is.
    pub(crate) fn auth_in(self, option: &'static str) -> Self {
        match self {
            LockError::AuthRequired {
                refused, detail, ..
            } => LockError::AuthRequired {
                option,
                refused,
                detail,
            },
            other => other,
        }
    }
}

impl LockError {
    /// The error as the redis crate would say it, for [`Connection`](crate::Connection):
    /// the redis error inside where there is one (a refused connection's cause, a server's
    /// reply), else an I/O error of the same meaning (a timeout, an unreachable server).
    pub(crate) fn into_redis(self) -> redis::RedisError {
        use std::io::{Error, ErrorKind};
        match self {
            LockError::Redis(e) | LockError::Tls { source: e, .. } => e,
            LockError::Unavailable {
                source: Some(e), ..
            } => e.into_redis_error(),
            LockError::ResponseTimeout(_) | LockError::Timeout { .. } => {
                Error::new(ErrorKind::TimedOut, self.to_string()).into()
            }
            other => Error::new(ErrorKind::NotConnected, other.to_string()).into(),
        }
    }
}

impl From<redis::RedisError> for LockError {
    fn from(e: redis::RedisError) -> Self {
        LockError::Redis(e)
    }
}

/// `": <error>"` for an error, nothing for none.
fn cause(source: Option<&ConnectError>) -> String {
    source.map(|e| format!(": {e}")).unwrap_or_default()
}

/// `" to <address>"` for an error that knows it, nothing otherwise.
fn to(source: Option<&ConnectError>) -> String {
    source
        .and_then(ConnectError::address)
        .map(|a| format!(" to {a}"))
        .unwrap_or_default()
}

/// The message, then each cause in the chain that the text so far does not already say
/// (`LockError::Unavailable` ends with its cause: it is not said twice).
impl fmt::Debug for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut said = self.to_string();
        let mut next = std::error::Error::source(self);
        while let Some(cause) = next {
            let text = cause.to_string();
            if !said.contains(&text) {
                said.push_str(": caused by: ");
                said.push_str(&text);
            }
            next = cause.source();
        }
        f.write_str(&said)
    }
}

/// Why a connection to Redis could not be had, and where to: the
/// [`source`](LockError::Unavailable::source) of [`LockError::Unavailable`].
///
/// It derefs to the [`redis::RedisError`] (`cause.is_connection_refusal()`,
/// `cause.kind()`), prints as it (the address is said by the [`LockError`] around it), and
/// converts from a [`redis::RedisError`] or an [`std::io::Error`] (without an address).
#[derive(Clone)]
pub struct ConnectError {
    address: Option<String>,
    error: redis::RedisError,
}

impl ConnectError {
    /// `error`, seen connecting to `address` (`host:port`; never put a password in it).
    pub fn new(address: impl Into<String>, error: redis::RedisError) -> Self {
        Self {
            address: Some(address.into()),
            error,
        }
    }

    /// The address tried, when it is known: `host:port`, a Unix socket's path, or a
    /// Cluster's seeds, comma separated.
    pub fn address(&self) -> Option<&str> {
        self.address.as_deref()
    }

    /// The redis crate's error.
    pub fn redis_error(&self) -> &redis::RedisError {
        &self.error
    }

    /// The redis crate's error, by value.
    pub fn into_redis_error(self) -> redis::RedisError {
        self.error
    }
}

impl std::ops::Deref for ConnectError {
    type Target = redis::RedisError;

    fn deref(&self) -> &redis::RedisError {
        &self.error
    }
}

impl From<redis::RedisError> for ConnectError {
    fn from(error: redis::RedisError) -> Self {
        Self {
            address: None,
            error,
        }
    }
}

impl From<std::io::Error> for ConnectError {
    fn from(error: std::io::Error) -> Self {
        redis::RedisError::from(error).into()
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl fmt::Debug for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.address {
            Some(address) => write!(f, "{address}: {}", self.error),
            None => fmt::Display::fmt(&self.error, f),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// Errors after which the connection that saw them should not be used again.
pub(crate) fn is_connection_error(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redis_error_says_its_cause_once() {
        let e = LockError::from(redis::RedisError::from((
            redis::ErrorKind::Io,
            "connection closed",
            "broken pipe".to_owned(),
        )));
        let text = e.to_string();
        assert!(
            text.starts_with("Redis command failed: ") && text.contains("broken pipe"),
            "{text}"
        );
        assert!(std::error::Error::source(&e).is_none(), "said once");
    }

    #[test]
    fn an_unavailable_error_names_its_address_and_prints_as_a_sentence() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = LockError::Unavailable {
            waited: Duration::from_millis(3),
            source: Some(ConnectError::new("10.0.0.5:6379", refused.into())),
        };
        assert_eq!(e.address(), Some("10.0.0.5:6379"));
        let text = e.to_string();
        assert!(
            text.starts_with("no Redis connection to 10.0.0.5:6379 within 3ms: "),
            "{text}"
        );
        // What `main() -> Result<(), Box<dyn Error>>` prints: the sentence, the cause once.
        let debug = format!("{e:?}");
        assert!(
            debug.starts_with(&text) && !debug.contains("Unavailable {"),
            "{debug}"
        );
        assert!(
            matches!(&e, LockError::Unavailable { source: Some(c), .. } if c.is_connection_refusal())
        );
        // From the in-memory backend (an I/O error): no address, still a sentence.
        let memory = LockError::Unavailable {
            waited: Duration::from_millis(3),
            source: Some(std::io::Error::other("unreachable").into()),
        };
        assert_eq!(memory.address(), None);
        assert!(
            memory
                .to_string()
                .starts_with("no Redis connection within 3ms")
        );
        // A cause the message does not say is appended.
        let e = LockError::NoPrimary {
            service: "mymaster".to_owned(),
            source: Some(redis::RedisError::from((
                redis::ErrorKind::Io,
                "sentinel down",
            ))),
        };
        let debug = format!("{e:?}");
        assert!(
            debug.starts_with("no primary known for Sentinel service `mymaster`: caused by: ")
                && debug.contains("sentinel down"),
            "{debug}"
        );
    }

    #[test]
    fn an_auth_error_names_the_option_its_password_goes_in() {
        let missing = LockError::AuthRequired {
            option: "url",
            refused: false,
            detail: "NOAUTH Authentication required.".to_owned(),
        };
        let primary = missing.clone().auth_in("sentinel_primary_url");
        assert!(
            missing
                .to_string()
                .contains("put the user and password in the URL")
        );
        assert!(
            primary.to_string().contains("`sentinel_primary_url`"),
            "{primary}"
        );
        assert!(!missing.is_unavailable());
    }
}
