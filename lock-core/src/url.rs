//! Redis URLs: which forms are accepted, and what a URL that is not one says.

use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::error::LockError;

/// The accepted form, for messages.
const FORM: &str = "redis://[user:password@]host[:port][/db], or rediss://… for TLS";

/// Checks a Redis URL the way [`LockClient::builder`](crate::LockClient::builder) and its
/// siblings do, without connecting: `redis://[user:password@]host[:port][/db]`, or
/// `rediss://` (the same, over TLS). Returns [`LockError::InvalidOption`] with option `"url"`
/// otherwise, whose reason names the accepted schemes and never repeats the URL (it may hold
/// a password).
///
/// ```
/// assert!(lock_core::validate_url("redis://:secret@10.0.0.1:6379/2").is_ok());
/// assert!(lock_core::validate_url("rediss://redis.internal").is_ok());
/// let e = lock_core::validate_url("http://redis.internal:6379").unwrap_err();
/// assert!(e.to_string().contains("redis://") && e.to_string().contains("rediss://"));
/// ```
pub fn validate_url(url: &str) -> Result<(), LockError> {
    parse(url, "url").map(drop)
}

/// Parses a URL; a bad one is [`LockError::InvalidOption`] naming `option`, with a reason
/// that names the accepted form (and the scheme given, never the rest: URLs may carry a
/// password).
pub(crate) fn parse(url: &str, option: &'static str) -> Result<ConnectionInfo, LockError> {
    url.into_connection_info()
        .map_err(|e| LockError::InvalidOption {
            option,
            reason: reason(url, &e),
        })
}

/// Why `url` is not a Redis URL, in words that say what is.
fn reason(url: &str, e: &redis::RedisError) -> String {
    match url.split_once("://") {
        None => format!("not a URL: expected {FORM}"),
        // The redis crate also takes `valkey://`, `valkeys://` and Unix sockets.
        Some((scheme, _))
            if !matches!(
                scheme,
                "redis" | "rediss" | "valkey" | "valkeys" | "unix" | "redis+unix" | "valkey+unix"
            ) =>
        {
            let shown = if scheme.len() <= 16
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            {
                format!("`{scheme}://`")
            } else {
                "its scheme".to_owned()
            };
            format!("{shown} is not a Redis URL scheme: expected {FORM}")
        }
        Some(_) => {
            // The redis crate's words ("Missing hostname", "Invalid database number"), never
            // the URL.
            let said = e.to_string();
            let said = said.trim_end_matches("- InvalidClientConfig").trim();
            format!("{said} (expected {FORM})")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_that_is_not_redis_names_the_accepted_schemes() {
        for bad in ["http://h:6379", "redis:/h", "h:6379", "rediss://h:notaport"] {
            let e = validate_url(bad).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("redis://") && text.contains("rediss://"),
                "{bad}: {text}"
            );
            assert!(matches!(e, LockError::InvalidOption { option: "url", .. }));
        }
        let text = validate_url("http://h").unwrap_err().to_string();
        assert!(
            text.contains("`http://` is not a Redis URL scheme"),
            "{text}"
        );
    }

    #[test]
    fn a_password_is_never_repeated() {
        for bad in [
            "http://user:secret@h:1",
            "redis://user:secret@h:notaport",
            "secret",
            "user:secret@h:1",
        ] {
            let text = validate_url(bad).unwrap_err().to_string();
            assert!(!text.contains("secret"), "{bad}: {text}");
        }
    }
}
