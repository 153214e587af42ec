//! The one clock every process of a run shares, and the line protocol from a worker to the
//! coordinator.
//!
//! Times are microseconds of the system clock (`CLOCK_REALTIME`): all processes of a run are
//! on one machine, so they read the same clock. The coordinator measures how far it moved
//! against the monotonic clock over the run and reports a step (an NTP jump would make the
//! history's order unreliable).
//!
//! A worker writes one event per line on its standard output, `@chaos ` followed by a JSON
//! object with an `ev` field. Each line is written and flushed with one `write` to the pipe
//! before the worker goes on: an event written before a release is sent survives a `SIGKILL`
//! that comes after it. Other output (a test harness's own) is ignored.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// What starts every event line.
pub(crate) const PREFIX: &str = "@chaos ";

/// Microseconds since the Unix epoch, on the system clock.
pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

/// Writes one event line to standard output and flushes it. Never panics: a coordinator that
/// went away is noticed on standard input instead.
pub(crate) fn emit(event: &Value) {
    let mut line = String::with_capacity(256);
    line.push_str(PREFIX);
    line.push_str(&event.to_string());
    line.push('\n');
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
}

/// The event in `line`, if it is one. (The prefix may come after other output on the same
/// line: a test harness prints `test name ... ` without a newline.)
pub(crate) fn parse(line: &str) -> Option<(Value, &str)> {
    let at = line.find(PREFIX)?;
    let json = &line[at + PREFIX.len()..];
    serde_json::from_str(json).ok().map(|v| (v, json))
}

/// A field of an event as a string ("" when absent).
pub(crate) fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A field of an event as an integer (0 when absent).
pub(crate) fn i(v: &Value, key: &str) -> i64 {
    v.get(key).and_then(Value::as_i64).unwrap_or(0)
}

/// A field of an event as an optional integer.
pub(crate) fn oi(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

/// A field of an event as an optional unsigned integer.
pub(crate) fn ou(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}
