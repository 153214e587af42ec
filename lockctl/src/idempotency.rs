//! What `status --idempotency-key KEY` says of the key's request: in progress (its lock held,
//! nothing stored yet), completed (the stored response's status code, or completed but not
//! replayable), or unknown here; with the stored record's time to live and age.

use std::time::Duration;

use lock_core::redis;
use serde::Serialize;

use crate::connect::Target;
use crate::exit::Failure;

/// The state of an idempotency key, as `status` reports it.
#[derive(Debug, Serialize)]
pub(crate) struct KeyState {
    /// `in_progress`, `completed`, `completed_not_replayable`, or `unknown` (nothing under
    /// the name: never used, or its record expired).
    state: &'static str,
    /// The stored response's status code (completed only).
    status: Option<u16>,
    /// How long the record is kept still, in ms (null without one).
    ttl_ms: Option<u64>,
    /// How long ago the record was stored, in ms: the layer's time to live
    /// (`--idempotency-ttl`) less what is left of it (null without a record).
    age_ms: Option<u64>,
}

impl KeyState {
    /// For the table: `completed (201), stored 3m ago, kept 23h 57m more`.
    pub(crate) fn describe(&self) -> String {
        let state = match (self.state, self.status) {
            ("completed", Some(status)) => format!("completed ({status})"),
            ("completed_not_replayable", Some(status)) => {
                format!("completed ({status}), not replayable")
            }
            ("in_progress", _) => "in progress (its first request runs)".to_owned(),
            (state, _) => state.to_owned(),
        };
        match (self.age_ms, self.ttl_ms) {
            (Some(age), Some(ttl)) => format!(
                "{state}, stored {} ago, kept {} more",
                human(Duration::from_millis(age)),
                human(Duration::from_millis(ttl))
            ),
            _ => state,
        }
    }
}

/// A duration as `1h 2m`, `3m 4s`, `5s` or `120ms`.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, s % 3600 / 60),
    }
}

/// The state of the key whose lock and record live under `name`: `held` (its lock), its
/// stored record `value` (if any) and `layer_ttl`, the layer's records' time to live.
pub(crate) async fn read(
    target: &Target,
    name: &str,
    held: bool,
    value: Option<&[u8]>,
    layer_ttl: Duration,
) -> Result<KeyState, Failure> {
    let Some(value) = value else {
        let state = if held { "in_progress" } else { "unknown" };
        return Ok(KeyState {
            state,
            status: None,
            ttl_ms: None,
            age_ms: None,
        });
    };
    let key = target
        .client
        .records()
        .key(name)
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut target.primaries.keyed_connection())
        .await
        .map_err(|e| Failure::from_redis(e, &target.label))?;
    let ttl_ms = u64::try_from(pttl).ok();
    let layer_ms = u64::try_from(layer_ttl.as_millis()).unwrap_or(u64::MAX);
    let age_ms = ttl_ms.map(|ttl| layer_ms.saturating_sub(ttl));
    let (state, status) = match lock_tower::Record::from_bytes(value) {
        Ok(record) if record.is_replayable() => ("completed", Some(record.status().as_u16())),
        Ok(record) => ("completed_not_replayable", Some(record.status().as_u16())),
        // A record the layer did not write: its size and token are all there is to say.
        Err(_) => ("unknown", None),
    };
    Ok(KeyState {
        state,
        status,
        ttl_ms,
        age_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(human(Duration::from_millis(120)), "120ms");
        assert_eq!(human(Duration::from_secs(5)), "5s");
        assert_eq!(human(Duration::from_secs(184)), "3m 4s");
        assert_eq!(human(Duration::from_secs(3720)), "1h 2m");
    }
}
