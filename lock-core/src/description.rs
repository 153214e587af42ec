//! A client's owner description (`LockClientBuilder::owner_description`): checking it,
//! recording it in Redis under the client's own key, and looking up another client's.
//!
//! It stays off the acquisition path: the description is written once at build and then once
//! per watchdog period by the watchdog task, with a time to live of [`TTL_LEASES`] watchdog
//! leases, so a client that is gone (dropped, crashed) leaves nothing behind for long.

use std::time::Duration;

use crate::engine::Engine;
use crate::error::LockError;
use crate::name::client_key;
use crate::util::{millis, shorten};
use crate::wire::convert;

/// The longest owner description accepted, in bytes.
pub(crate) const MAX_DESCRIPTION_LEN: usize = 128;

/// The description key's time to live, in watchdog leases. The watchdog refreshes it every
/// `lease / 3`, so up to eight refreshes in a row may fail before it expires.
pub(crate) const TTL_LEASES: u32 = 3;

/// Why `description` is not an acceptable owner description, if it is not: 1 to 128 bytes
/// without control characters.
fn problem(description: &str) -> Option<&'static str> {
    if description.is_empty() {
        Some("it is empty")
    } else if description.len() > MAX_DESCRIPTION_LEN {
        Some("it is longer than 128 bytes")
    } else if description.chars().any(char::is_control) {
        Some("it contains a control character")
    } else {
        None
    }
}

/// Checks an owner description: [`LockError::InvalidOption`] with option
/// `"owner_description"` unless it is 1 to 128 bytes without control characters.
pub(crate) fn validate(description: &str) -> Result<(), LockError> {
    match problem(description) {
        Some(reason) => Err(LockError::InvalidOption {
            option: "owner_description",
            reason: format!("{:?}: {reason}", shorten(description)),
        }),
        None => Ok(()),
    }
}

/// Writes (or refreshes) this client's description, if it has one: one `SET key desc PX ttl`.
pub(crate) async fn record(engine: &Engine) -> Result<(), LockError> {
    let Some(description) = &engine.config().owner_description else {
        return Ok(());
    };
    let ttl = engine.config().watchdog_lease * TTL_LEASES;
    let mut cmd = redis::cmd("SET");
    cmd.arg(client_key(&engine.config().prefix, engine.client_id()))
        .arg(description)
        .arg("PX")
        .arg(millis(ttl));
    engine.command(&cmd).await.map(drop)
}

/// [`record`], bounded by `limit`; a failure is logged at debug (the next period tries again).
pub(crate) async fn refresh(engine: &Engine, limit: Duration) {
    match tokio::time::timeout(limit, record(engine)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::debug!(%error, "recording the owner description failed"),
        Err(_) => tracing::debug!("recording the owner description timed out"),
    }
}

/// The client id of an owner id (`<client id>:<holder>`, or a permit id
/// `<client id>:<holder>:<k>`), if it has the shape of one: 32 lowercase hex digits.
fn client_id_of(owner: &str) -> Option<&str> {
    let id = owner.split(':').next()?;
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    (id.len() == 32 && id.bytes().all(hex)).then_some(id)
}

/// The description the client of `owner` recorded, if any: one `GET`. An owner without a
/// client id, and a stored value no client could have written (too long, control
/// characters), are `None`.
pub(crate) async fn look_up(engine: &Engine, owner: &str) -> Result<Option<String>, LockError> {
    let Some(id) = client_id_of(owner) else {
        return Ok(None);
    };
    let mut cmd = redis::cmd("GET");
    cmd.arg(client_key(&engine.config().prefix, id));
    let value: Option<Vec<u8>> = convert(engine.command(&cmd).await?)?;
    Ok(value
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|text| problem(text).is_none()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_are_bounded_and_printable() {
        let longest = "x".repeat(MAX_DESCRIPTION_LEN);
        for good in ["billing@web-3 pid 4242", "订单服务", longest.as_str()] {
            assert!(validate(good).is_ok(), "{good:?}");
        }
        let long = "x".repeat(MAX_DESCRIPTION_LEN + 1);
        for bad in ["", "a\nb", "\u{1b}[31mred", "a\0", "\u{85}", long.as_str()] {
            let err = validate(bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    LockError::InvalidOption {
                        option: "owner_description",
                        ..
                    }
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn owners_name_their_client() {
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(client_id_of(&format!("{id}:7")), Some(id));
        assert_eq!(client_id_of(&format!("{id}:7:2")), Some(id));
        assert_eq!(client_id_of(id), Some(id));
        for bad in ["", "c:1", "0123456789ABCDEF0123456789ABCDEF:1", "x:y:z"] {
            assert_eq!(client_id_of(bad), None, "{bad:?}");
        }
    }

    /// Hostile descriptions: arbitrary text is accepted exactly when it follows the rule,
    /// and checking it never panics.
    mod properties {
        use proptest::prelude::*;

        use super::*;
        use crate::util::arbitrary::config;

        proptest! {
            #![proptest_config(config(256))]

            #[test]
            fn any_text_is_accepted_exactly_by_the_rule(text in any::<String>()) {
                let ok = !text.is_empty()
                    && text.len() <= MAX_DESCRIPTION_LEN
                    && !text.chars().any(char::is_control);
                prop_assert_eq!(validate(&text).is_ok(), ok);
            }

            #[test]
            fn any_owner_is_read_without_panicking(owner in any::<String>()) {
                if let Some(id) = client_id_of(&owner) {
                    prop_assert!(owner.starts_with(id));
                    prop_assert_eq!(id.len(), 32);
                }
            }
        }
    }
}
