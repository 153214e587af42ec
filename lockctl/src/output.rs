//! What lockctl prints: tables of lock states, JSON documents, watch lines, and notices.
//!
//! Results go to standard output, as a table or (`--json`) as JSON; notices (what watch cannot
//! see, a truncated list, a question) go to standard error, so the output stays parseable.

use std::io::{self, Write};

use serde::Serialize;

use crate::state::LockState;

/// Standard output, as a table or JSON.
pub(crate) struct Output {
    json: bool,
    out: Box<dyn Write + Send>,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output").field("json", &self.json).finish()
    }
}

impl Output {
    /// Standard output; JSON with `json`.
    pub(crate) fn stdout(json: bool) -> Output {
        Output {
            json,
            out: Box::new(io::stdout()),
        }
    }

    /// Whether the output is JSON.
    pub(crate) fn is_json(&self) -> bool {
        self.json
    }

    /// `value` as one line of JSON.
    pub(crate) fn json_line(&mut self, value: &impl Serialize) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    /// A line of text.
    pub(crate) fn line(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.out, "{text}")?;
        self.out.flush()
    }

    /// Lock states as a table with a header.
    pub(crate) fn table(&mut self, states: &[LockState]) -> io::Result<()> {
        write_table(&mut self.out, states)?;
        self.out.flush()
    }
}

/// Lock states as a table with a header, columns aligned.
fn write_table(out: &mut dyn Write, states: &[LockState]) -> io::Result<()> {
    const HEADER: [&str; 9] = [
        "KIND",
        "NAME",
        "STATE",
        "OWNER",
        "HOLDS",
        "REMAINING",
        "TOKEN",
        "WAITERS",
        "DESCRIPTION",
    ];
    let rows: Vec<[String; 9]> = states.iter().map(cells).collect();
    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header = HEADER.map(str::to_owned);
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// The cells of one state. The owner's description comes last: it is the longest cell (up
/// to 128 bytes) and the only free text.
fn cells(s: &LockState) -> [String; 9] {
    let dash = || "-".to_owned();
    let state = match (s.held, s.mode) {
        (true, Some(mode)) => mode.to_owned(),
        (true, None) => "held".to_owned(),
        (false, _) => "free".to_owned(),
    };
    let holds = match (s.held, s.size, s.readers) {
        (false, _, _) => dash(),
        (true, Some(size), _) => format!("{}/{size}", s.hold_count),
        (true, None, Some(readers)) if s.mode == Some("read") => {
            format!("{} ({readers} readers)", s.hold_count)
        }
        _ => s.hold_count.to_string(),
    };
    let waiters = match (s.queued, s.waiting) {
        (Some(queued), _) => format!("{queued} queued"),
        (None, Some(true)) if s.readers.is_some() => "writer waiting".to_owned(),
        (None, Some(true)) => "yes".to_owned(),
        (None, Some(false)) => "no".to_owned(),
        (None, None) => "?".to_owned(),
    };
    [
        s.kind.to_string(),
        s.name.clone(),
        state,
        owners(&s.owners),
        holds,
        s.remaining_ms.map_or_else(dash, duration),
        token(s),
        waiters,
        s.owner_description.clone().unwrap_or_else(dash),
    ]
}

/// The TOKEN cell: the holder's token, or where only a bound is known (a native mutex held by
/// another client) `<=N`.
fn token(s: &LockState) -> String {
    match (s.fencing_token, s.fencing_token_at_most) {
        (Some(token), _) => token.to_string(),
        (None, Some(bound)) => format!("<={bound}"),
        (None, None) => "-".to_owned(),
    }
}

/// Owner ids for a table cell: the first, and how many more.
pub(crate) fn owners(owners: &[String]) -> String {
    match owners {
        [] => "-".to_owned(),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} (+{} more)", rest.len()),
    }
}

/// Milliseconds for people: `850ms`, `29.1s`, `4m05s`, `2h03m`.
pub(crate) fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// A notice on standard error, prefixed `lockctl: `. A failure to write it is ignored (there
/// is nowhere left to say so).
pub(crate) fn notice(text: &str) {
    let _ = writeln!(io::stderr(), "lockctl: {text}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Kind;

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(29_149), "29.1s");
        assert_eq!(duration(245_000), "4m05s");
        assert_eq!(duration(7_380_000), "2h03m");
    }

    #[test]
    fn a_table_aligns_its_columns() {
        let permits = LockState {
            name: "exports".to_owned(),
            kind: Kind::Semaphore,
            owners: vec!["c1:1".to_owned(), "c2:1".to_owned()],
            hold_count: 3,
            remaining_ms: Some(1500),
            fencing_token: None,
            fencing_token_at_most: None,
            waiting: None,
            size: Some(10),
            owner_description: None,
            ..sample()
        };
        let free = LockState {
            held: false,
            owners: Vec::new(),
            remaining_ms: None,
            fencing_token: None,
            fencing_token_at_most: None,
            ..sample()
        };
        let mut out = Vec::new();
        write_table(&mut out, &[sample(), permits, free]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(
            lines[0].starts_with("KIND       NAME     STATE  OWNER"),
            "{text}"
        );
        assert!(
            lines[1].contains("mutex      n        held   c:1"),
            "{text}"
        );
        assert!(lines[2].contains("c1:1 (+1 more)  3/10   1.5s"), "{text}");
        assert!(lines[1].ends_with("no       web-3 pid 7"), "{text}");
        assert!(lines[2].ends_with("?        -"), "{text}");
        assert!(lines[3].contains("free   -"), "{text}");
    }

    fn sample() -> LockState {
        LockState {
            name: "n".to_owned(),
            kind: Kind::Mutex,
            held: true,
            mode: None,
            owners: vec!["c:1".to_owned()],
            owner_description: Some("web-3 pid 7".to_owned()),
            hold_count: 1,
            remaining_ms: Some(10),
            fencing_token: Some(7),
            fencing_token_at_most: Some(7),
            waiting: Some(false),
            queued: None,
            readers: None,
            size: None,
        }
    }
}
