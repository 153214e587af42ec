//! The machine-readable lines the commands print: a word, then `key=value` fields without
//! spaces (`RAN period=29925360 token=1795... written=true`).

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, by this machine's clock: the `at_ms` of every line, so
/// lines of several processes on one machine can be put on one time line.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

/// Prints one line on stdout and flushes it at once (a test reads it while the process
/// runs). A closed stdout is ignored: the instance goes on with its work.
pub fn emit(kind: &str, fields: &[(&str, String)]) {
    let mut text = kind.to_owned();
    for (key, value) in fields {
        text.push(' ');
        text.push_str(key);
        text.push('=');
        // Values never contain spaces: a line stays one word per field.
        text.push_str(&value.replace(char::is_whitespace, "_"));
    }
    text.push('\n');
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The first word: `RAN`, `SKIPPED`, `ELECTED`, ...
    pub kind: String,
    /// The `key=value` fields.
    pub fields: BTreeMap<String, String>,
}

impl Line {
    /// Parses `KIND key=value ...`; `None` for an empty line or a word without `=` after the
    /// first (a line that is not one of ours).
    pub fn parse(text: &str) -> Option<Line> {
        let mut words = text.split_whitespace();
        let kind = words.next()?.to_owned();
        let mut fields = BTreeMap::new();
        for word in words {
            let (key, value) = word.split_once('=')?;
            fields.insert(key.to_owned(), value.to_owned());
        }
        Some(Line { kind, fields })
    }

    /// The field `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// The field `key` as a number.
    pub fn num(&self, key: &str) -> Option<u64> {
        self.get(key)?.parse().ok()
    }

    /// The field `key` as `true`/`false`.
    pub fn flag(&self, key: &str) -> Option<bool> {
        self.get(key)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_emit_writes() {
        let line = Line::parse("RAN period=7 token=12 written=true\n").unwrap();
        assert_eq!(line.kind, "RAN");
        assert_eq!(line.num("period"), Some(7));
        assert_eq!(line.flag("written"), Some(true));
        assert_eq!(line.get("missing"), None);
        assert_eq!(Line::parse("   "), None);
        assert_eq!(Line::parse("thread 'main' panicked"), None);
    }
}
