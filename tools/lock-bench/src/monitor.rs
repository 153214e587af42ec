//! Counting the requests clients send, with `MONITOR`.
//!
//! `INFO commandstats` counts a command the same whether a client sent it or a Lua script
//! called it (and a script's time already includes the time of the commands it calls), so it
//! cannot say how many requests went over the network. `MONITOR` can: it tags the commands a
//! script runs with `[db lua]`. Watching costs the server a little per command, so it is only
//! switched on for short counting passes that run after the timed ones; the timed runs use
//! `INFO commandstats`, split with what the counting pass learned ([`Counts::share`]).
//!
//! A transaction is the same: `INFO commandstats` times `EXEC` including the commands it runs,
//! and times those again. `MONITOR` shows them as the client's (they did go over the network,
//! so they are requests), between the client's `MULTI` and `EXEC`; they are counted apart
//! ([`Counts::queued`]), so that their time is taken once, in `EXEC`'s.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;

use crate::sys::mono_ns;

/// Commands seen, by who sent them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Counts {
    pub(crate) client: BTreeMap<String, u64>,
    pub(crate) lua: BTreeMap<String, u64>,
    /// The bench's own coordination traffic (W3x), not counted as requests; it still takes
    /// its part of a command's calls in [`Counts::share`].
    pub(crate) excluded: BTreeMap<String, u64>,
    /// Commands a client sent inside `MULTI` … `EXEC`: requests, whose time `EXEC`'s
    /// includes.
    pub(crate) queued: BTreeMap<String, u64>,
}

impl Counts {
    /// Requests clients sent.
    pub(crate) fn requests(&self) -> u64 {
        self.client.values().sum::<u64>() + self.queued.values().sum::<u64>()
    }

    /// The fraction of calls of `cmd` whose time is the lock's and is not already in another
    /// command's: those clients sent for the lock outside a transaction (the rest came from
    /// scripts or ran inside `EXEC`, whose time includes theirs, or were the bench's
    /// coordination traffic), if `cmd` was seen.
    pub(crate) fn share(&self, cmd: &str) -> Option<f64> {
        let get = |m: &BTreeMap<String, u64>| m.get(cmd).copied().unwrap_or(0);
        let (c, l, x, q) = (
            get(&self.client),
            get(&self.lua),
            get(&self.excluded),
            get(&self.queued),
        );
        (c + l + x + q > 0).then(|| c as f64 / (c + l + x + q) as f64)
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "client": self.client,
            "lua": self.lua,
            "excluded": self.excluded,
            "queued": self.queued,
        })
    }
}

/// One line of `MONITOR` output.
struct Line {
    unix_us: u64,
    /// Who ran it: the client's address, or `lua`.
    source: String,
    lua: bool,
    cmd: String,
    args: String,
}

/// Parses `1700000000.123456 [0 127.0.0.1:5555] "evalsha" "..." ...`.
fn parse(line: &str) -> Option<Line> {
    let (ts, rest) = line.split_once(' ')?;
    let (secs, micros) = ts.split_once('.')?;
    let unix_us = secs.parse::<u64>().ok()? * 1_000_000 + micros.parse::<u64>().ok()?;
    let rest = rest.strip_prefix('[')?;
    let (source, args) = rest.split_once("] ")?;
    let source = source.split_once(' ').map_or(source, |(_db, who)| who);
    let lua = source == "lua";
    let mut words = args.split('"').skip(1).step_by(2);
    let mut cmd = words.next()?.to_ascii_lowercase();
    if matches!(
        cmd.as_str(),
        "client" | "script" | "config" | "function" | "pubsub"
    ) && let Some(sub) = words.next()
    {
        cmd = format!("{cmd}|{}", sub.to_ascii_lowercase());
    }
    Some(Line {
        unix_us,
        source: source.to_owned(),
        lua,
        cmd,
        args: args.to_owned(),
    })
}

/// `CLOCK_MONOTONIC` nanoseconds → Unix microseconds (the clock `MONITOR` stamps lines with),
/// through an offset sampled now.
pub(crate) fn mono_to_unix_us(mono: u64) -> u64 {
    let a = mono_ns();
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let b = mono_ns();
    let offset = unix as i128 - ((a as i128 + b as i128) / 2);
    ((mono as i128 + offset) / 1000) as u64
}

/// A running `MONITOR` connection.
pub(crate) struct Watch {
    task: tokio::task::JoinHandle<Vec<Line>>,
    marker: String,
}

impl Watch {
    pub(crate) async fn start(url: &str) -> Result<Watch, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let monitor = client
            .get_async_monitor()
            .await
            .map_err(|e| format!("MONITOR: {e}"))?;
        let marker = format!("lock-bench-monitor-end-{}", uuid::Uuid::new_v4().simple());
        let m = marker.clone();
        let task = tokio::spawn(async move {
            let mut lines = Vec::new();
            let mut stream = monitor.into_on_message::<String>();
            // Bounded: the marker ends it; the caller also bounds how long it waits.
            while let Some(text) = stream.next().await {
                if text.contains(&m) {
                    break;
                }
                if let Some(line) = parse(&text) {
                    lines.push(line);
                }
            }
            lines
        });
        Ok(Watch { task, marker })
    }

    /// Stops watching and counts the lines stamped within `[from, to]` (Unix µs; `None`: no
    /// bound) whose arguments contain none of `exclude` (the bench's own coordination keys).
    pub(crate) async fn stop(
        self,
        admin: &mut MultiplexedConnection,
        from: Option<u64>,
        to: Option<u64>,
        exclude: &[String],
    ) -> Result<Counts, String> {
        let _: String = redis::cmd("ECHO")
            .arg(&self.marker)
            .query_async(admin)
            .await
            .map_err(|e| e.to_string())?;
        let mut task = self.task;
        let lines = match tokio::time::timeout(Duration::from_secs(10), &mut task).await {
            Ok(Ok(lines)) => lines,
            _ => {
                task.abort();
                return Err("MONITOR did not see its end marker".into());
            }
        };
        Ok(count(lines, from, to, exclude))
    }
}

/// Counts `lines` stamped within `[from, to]`, by who sent them (see [`Watch::stop`]).
fn count(lines: Vec<Line>, from: Option<u64>, to: Option<u64>, exclude: &[String]) -> Counts {
    let mut counts = Counts::default();
    // Clients inside MULTI … EXEC (MONITOR shows their commands as EXEC runs them).
    let mut open: std::collections::HashSet<String> = Default::default();
    for l in lines {
        let in_transaction = !l.lua && open.contains(&l.source);
        match l.cmd.as_str() {
            "multi" if !l.lua => drop(open.insert(l.source.clone())),
            "exec" | "discard" => drop(open.remove(&l.source)),
            _ => {}
        }
        if from.is_some_and(|f| l.unix_us < f) || to.is_some_and(|t| l.unix_us > t) {
            continue;
        }
        if matches!(l.cmd.as_str(), "info" | "echo" | "monitor") {
            continue;
        }
        let map = if exclude.iter().any(|x| l.args.contains(x.as_str())) {
            &mut counts.excluded
        } else if l.lua {
            &mut counts.lua
        } else if in_transaction && !matches!(l.cmd.as_str(), "exec" | "discard") {
            &mut counts.queued
        } else {
            &mut counts.client
        };
        *map.entry(l.cmd).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_monitor_lines() {
        let l = parse(r#"1700000000.000123 [0 127.0.0.1:5555] "EVALSHA" "abc" "1" "k""#).unwrap();
        assert_eq!(
            (l.unix_us, l.lua, l.cmd.as_str()),
            (1_700_000_000_000_123, false, "evalsha")
        );
        let l = parse(r#"1700000000.5 [0 lua] "hget" "k" "o""#).unwrap();
        assert!(l.lua);
        assert_eq!(l.cmd, "hget");
        let l = parse(r#"1.000001 [0 unix:/tmp/s] "client" "setinfo" "lib-name" "x""#).unwrap();
        assert_eq!(l.cmd, "client|setinfo");
    }

    #[test]
    fn a_transactions_commands_are_requests_whose_time_is_execs() {
        let lines = [
            r#"1.000001 [0 127.0.0.1:1] "MULTI""#,
            r#"1.000002 [0 127.0.0.1:2] "SET" "other" "v""#,
            r#"1.000003 [0 127.0.0.1:1] "INCR" "f""#,
            r#"1.000004 [0 127.0.0.1:1] "SET" "k" "v" "NX""#,
            r#"1.000005 [0 127.0.0.1:1] "EXEC""#,
            r#"1.000006 [0 127.0.0.1:1] "EVAL" "return 1" "0""#,
            r#"1.000007 [0 lua] "GET" "k""#,
        ];
        let counts = count(
            lines.iter().filter_map(|l| parse(l)).collect(),
            None,
            None,
            &[],
        );
        assert_eq!(counts.requests(), 6);
        assert_eq!(counts.share("set"), Some(0.5));
        assert_eq!(counts.share("incr"), Some(0.0));
        assert_eq!(counts.share("exec"), Some(1.0));
        assert_eq!(counts.share("get"), Some(0.0));
        assert_eq!(counts.share("eval"), Some(1.0));
    }

    #[test]
    fn share_leaves_out_scripts_and_coordination() {
        let mut counts = Counts::default();
        counts.client.insert("publish".into(), 3);
        counts.lua.insert("get".into(), 2);
        counts.excluded.insert("publish".into(), 1);
        counts.excluded.insert("hincrby".into(), 4);
        assert_eq!(counts.share("publish"), Some(0.75));
        assert_eq!(counts.share("get"), Some(0.0));
        assert_eq!(counts.share("hincrby"), Some(0.0));
        assert_eq!(counts.share("set"), None);
        assert_eq!(counts.requests(), 3);
    }
}
