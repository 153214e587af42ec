//! `lockctl watch [PATTERN]`: acquisitions and releases as they happen.
//!
//! With keyspace notifications (`K` and at least `$` in `notify-keyspace-events`, on every
//! primary), each change of a lock key is an event; watch then reads the lock's state through
//! lock-core's `info()` and compares it with what it saw before: a new owner is `acquired`, an
//! owner gone is `released` (`expired` when its lease ran out), a hold count up or down is
//! `re-entered` / `released-hold`, a new waiter is `waiting`. The state of the locks held when
//! it starts is read first, so they are not reported as acquired at their first change. A
//! hold shorter than one round trip may show only as its release.
//!
//! Without them it subscribes to the release channels lock-core publishes on, which carry
//! only some releases (see [`CHANNELS_SEE`]); on a Cluster those channels are sharded and
//! cannot be subscribed by pattern, so there watch needs keyspace notifications.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use futures_util::stream::{BoxStream, select_all};
use lock_core::layout::{self, KeyRole, ParsedKey};
use lock_core::redis::Msg;
use serde::Serialize;
use tokio::time::Instant;

use crate::cli::{Source, WatchArgs};
use crate::connect::Target;
use crate::exit::{Cause, Code, Failure, is_broken_pipe};
use crate::glob::Glob;
use crate::glob::check_pattern;
use crate::kind::Kind;
use crate::notify::{self, Setting};
use crate::output::{Output, duration, notice};
use crate::scan::Scan;
use crate::state::{LockState, read_many};

/// What the release channels show and do not show.
const CHANNELS_SEE: &str = "the release channels carry only mutex releases that a waiter \
     waited for, fair-lock hand-overs to the head of the queue, read-write releases (writer out, \
     last reader out, a waiting writer giving up), semaphore releases, and force-unlocks; \
     acquisitions, renewals, leases that run out and releases nobody waited for are not seen";

/// At most this many locks are read when watch starts; the others count as free until their
/// first change.
const PRIME_LIMIT: usize = 10_000;

/// What watch listens to, once chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listen {
    Keyspace,
    Channels,
}

/// One event, as printed.
#[derive(Debug, Clone, Serialize)]
struct Event {
    /// When lockctl saw it, in Unix milliseconds.
    at_ms: u64,
    /// `acquired`, `re-entered`, `released-hold`, `released`, `expired` or `waiting`.
    event: &'static str,
    kind: Kind,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
    /// The owner id concerned, as stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hold_count: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fencing_token: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    remaining_ms: Option<u64>,
    /// A fair lock's live waiters.
    #[serde(skip_serializing_if = "Option::is_none")]
    queued: Option<u32>,
    /// On a fair lock's wake channel: the waiter woken.
    #[serde(skip_serializing_if = "Option::is_none")]
    woken: Option<String>,
    /// `keyspace` or `channel`.
    source: &'static str,
}

impl Event {
    fn new(event: &'static str, kind: Kind, name: &str, source: &'static str) -> Event {
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or_default();
        Event {
            at_ms,
            event,
            kind,
            name: name.to_owned(),
            mode: None,
            owner: None,
            hold_count: None,
            fencing_token: None,
            remaining_ms: None,
            queued: None,
            woken: None,
            source,
        }
    }

    /// An event about `owner` of the lock in `state`.
    fn of(event: &'static str, state: &LockState, owner: Option<&String>) -> Event {
        Event {
            mode: state.mode,
            owner: owner.cloned(),
            hold_count: Some(state.hold_count),
            fencing_token: state.fencing_token,
            remaining_ms: state.remaining_ms,
            queued: state.queued,
            ..Event::new(event, state.kind, &state.name, "keyspace")
        }
    }

    /// The event as one line of text.
    fn line(&self) -> String {
        let at = UNIX_EPOCH + std::time::Duration::from_millis(self.at_ms);
        let mut line = format!(
            "{}  {:<13}  {:<9}  {}",
            humantime::format_rfc3339_millis(at),
            self.event,
            self.kind,
            self.name
        );
        let mut field = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                line.push_str(&format!("  {key}={value}"));
            }
        };
        field("mode", self.mode.map(str::to_owned));
        field("owner", self.owner.clone());
        field("holds", self.hold_count.map(|c| c.to_string()));
        field("token", self.fencing_token.map(|t| t.to_string()));
        field("remaining", self.remaining_ms.map(duration));
        field("queued", self.queued.map(|q| q.to_string()));
        field("woken", self.woken.clone());
        line
    }
}

/// What changed between two reads of one lock (`prev` None: not known, taken as free).
/// `expired`: the key's lease ran out.
fn diff(prev: Option<&LockState>, now: &LockState, expired: bool) -> Vec<Event> {
    let before: &[String] = match prev {
        Some(p) if p.held => &p.owners,
        _ => &[],
    };
    let after: &[String] = if now.held { &now.owners } else { &[] };
    let mut events = Vec::new();
    for owner in before.iter().filter(|o| !after.contains(o)) {
        let gone = if expired { "expired" } else { "released" };
        // `prev` is Some: `before` is not empty. Its lease is over: not shown.
        if let Some(p) = prev {
            events.push(Event {
                remaining_ms: None,
                ..Event::of(gone, p, Some(owner))
            });
        }
    }
    for owner in after.iter().filter(|o| !before.contains(o)) {
        events.push(Event::of("acquired", now, Some(owner)));
    }
    if let Some(p) = prev.filter(|p| p.held && now.held && events.is_empty()) {
        if now.hold_count > p.hold_count {
            events.push(Event::of("re-entered", now, now.owners.first()));
        } else if now.hold_count < p.hold_count {
            events.push(Event::of("released-hold", now, now.owners.first()));
        }
    }
    let queued_before = prev.and_then(|p| p.queued).unwrap_or(0);
    let waited_before = prev.and_then(|p| p.waiting) == Some(true);
    let more_queued = now.queued.is_some_and(|q| q > queued_before);
    let newly_waiting = now.queued.is_none() && now.waiting == Some(true) && !waited_before;
    if more_queued || newly_waiting {
        events.push(Event::of("waiting", now, None));
    }
    events
}

/// The last state seen of each lock that is held or waited for.
struct Watcher<'a> {
    target: &'a Target,
    /// The names watched.
    names: Glob,
    seen: HashMap<(String, Kind), LockState>,
}

impl Watcher<'_> {
    fn remember(&mut self, state: LockState) -> Option<LockState> {
        let key = (state.name.clone(), state.kind);
        if state.held || state.waiting == Some(true) {
            self.seen.insert(key, state)
        } else {
            // A free lock is what an unknown one is taken for: nothing to keep.
            self.seen.remove(&key)
        }
    }

    /// Reads the state of the locks matching `pattern` held now.
    async fn prime(&mut self, pattern: &str) -> Result<(), Failure> {
        let mut scan = Scan::new(self.target, pattern, None);
        let mut read = 0;
        while let Some(page) = scan.next_page().await? {
            read += page.len();
            let states = read_many(&self.target.client, page)
                .await
                .map_err(|e| Failure::from_lock(e, &self.target.label))?;
            for state in states {
                self.remember(state);
            }
            if read >= PRIME_LIMIT {
                notice(&format!(
                    "more than {PRIME_LIMIT} locks match: the others count as free until their \
                     first change"
                ));
                break;
            }
        }
        Ok(())
    }

    /// The events of a keyspace notification: `event` happened to `key`.
    async fn keyspace(&mut self, key: &str, event: &str) -> Result<Vec<Event>, Failure> {
        // `expire`: a renewal, or the lease set with a `SET`, whose own event comes too.
        if event == "expire" {
            return Ok(Vec::new());
        }
        let Some(ParsedKey::Lock { name, role }) = layout::parse_key(&self.target.prefix, key)
        else {
            return Ok(Vec::new());
        };
        // The fair lock's deadlines and the semaphore's recorded size change together with
        // another key of theirs: their changes show nothing new.
        let shown = !matches!(role, KeyRole::FairDeadlines | KeyRole::PermitsSize);
        let Some(kind) = Kind::of(role.kind()) else {
            return Ok(Vec::new());
        };
        if !shown || !self.names.matches(name) {
            return Ok(Vec::new());
        }
        let now = LockState::read(&self.target.client, name, kind)
            .await
            .map_err(|e| Failure::from_lock(e, &self.target.label))?;
        let prev = self.seen.get(&(name.to_owned(), kind)).cloned();
        let events = diff(prev.as_ref(), &now, event == "expired");
        self.remember(now);
        Ok(events)
    }

    /// The event of a message on a release channel.
    fn channel(&self, channel: &str, payload: &str) -> Vec<Event> {
        let Some(parsed) = layout::parse_channel(&self.target.prefix, channel) else {
            return Vec::new();
        };
        let Some(kind) = Kind::of(parsed.role.kind()) else {
            return Vec::new();
        };
        if !self.names.matches(parsed.name) {
            return Vec::new();
        }
        let mut event = Event::new("released", kind, parsed.name, "channel");
        event.woken = parsed.waiter.map(str::to_owned);
        // A release publishes its fencing token; `0` (a force-unlock, a waiter leaving) and
        // `1` (a read share, a permit) are not tokens.
        event.fencing_token = payload.parse().ok().filter(|t| *t > 1);
        vec![event]
    }
}

/// Chooses what to listen to, and says what will not be seen.
async fn choose(target: &Target, asked: Source) -> Result<Listen, Failure> {
    match asked {
        Source::Keyspace => {
            notice(
                "using keyspace notifications without checking notify-keyspace-events: if the \
                 server does not send them (K$hzxg), nothing will show",
            );
            return Ok(Listen::Keyspace);
        }
        Source::Channels => return Ok(Listen::Channels),
        Source::Auto => {}
    }
    for node in &target.primaries {
        let mut conn = target.connection(node).await?;
        match notify::read(node, &mut conn).await? {
            Setting::Refused(why) => {
                notice(&format!(
                    "cannot read notify-keyspace-events on {}: CONFIG GET was refused ({why}); \
                     managed services often refuse CONFIG. Taking keyspace notifications for \
                     off; if they are on (K$hzxg), run watch --source keyspace",
                    node.address()
                ));
                return Ok(Listen::Channels);
            }
            Setting::Read(classes) if !classes.usable() => {
                notice(&format!(
                    "keyspace notifications are off on {} (notify-keyspace-events is {:?}); to \
                     see acquisitions and releases: {}",
                    node.address(),
                    classes.value,
                    classes.suggestion()
                ));
                return Ok(Listen::Channels);
            }
            Setting::Read(classes) => {
                let missing = classes.missing();
                if !missing.is_empty() {
                    let unseen: Vec<String> = missing
                        .iter()
                        .map(|(class, unseen)| format!("{unseen} (`{class}`)"))
                        .collect();
                    notice(&format!(
                        "notify-keyspace-events on {} is {:?}, so these are not seen: {}; to \
                         see them: {}",
                        node.address(),
                        classes.value,
                        unseen.join(", "),
                        classes.suggestion()
                    ));
                }
            }
        }
    }
    Ok(Listen::Keyspace)
}

/// Subscribes on every primary: the stream of their messages.
async fn subscribe(target: &Target, pattern: &str) -> Result<BoxStream<'static, Msg>, Failure> {
    let mut streams = Vec::new();
    for node in &target.primaries {
        let mut pubsub = target.pubsub(node).await?;
        pubsub.psubscribe(pattern).await.map_err(|e| {
            match Failure::from_redis(e, node.address()) {
                Failure::Refused(why) => Failure::Refused(format!(
                    "{why} (PSUBSCRIBE {pattern}: an ACL user needs exactly this channel \
                     pattern, &{pattern})"
                )),
                other => other,
            }
        })?;
        streams.push(pubsub.into_on_message().boxed());
    }
    Ok(select_all(streams).boxed())
}

/// Prints one event; false once the reader has gone away (a closed pipe).
fn print(out: &mut Output, event: &Event) -> Result<bool, Failure> {
    let written = if out.is_json() {
        out.json_line(event)
    } else {
        out.line(&event.line())
    };
    match written {
        Ok(()) => Ok(true),
        Err(e) if is_broken_pipe(&e) => Ok(false),
        Err(e) => Err(Failure::Output(e)),
    }
}

/// The pattern to subscribe to for `listen`: everything under the prefix (what an ACL grant
/// like `&lock:*` allows); the names are matched here.
fn pattern(target: &Target, listen: Listen) -> Result<String, Failure> {
    Ok(match listen {
        Listen::Keyspace => format!(
            "__keyspace@{}__:{}",
            target.db,
            layout::prefix_glob(&target.prefix)
        ),
        Listen::Channels if target.primaries.is_cluster() => {
            return Err(Failure::Refused(
                "on a Redis Cluster the release channels are sharded (SPUBLISH), which cannot be \
                 subscribed by pattern: enable keyspace notifications on every primary \
                 (CONFIG SET notify-keyspace-events K$hzxg) and run watch again"
                    .to_owned(),
            ));
        }
        Listen::Channels => layout::prefix_glob(&target.prefix),
    })
}

/// Runs `watch` until `--count` events, `--for` has passed, or Ctrl-C: 0.
pub(crate) async fn run(
    target: &Target,
    args: &WatchArgs,
    out: &mut Output,
) -> Result<Code, Failure> {
    check_pattern(&args.pattern).map_err(Failure::Usage)?;
    let deadline = args.duration.map(|d| Instant::now() + d);
    let listen = choose(target, args.source).await?;
    let mut messages = subscribe(target, &pattern(target, listen)?).await?;
    let mut watcher = Watcher {
        target,
        names: Glob::new(&args.pattern),
        seen: HashMap::new(),
    };
    let how = match listen {
        Listen::Keyspace => {
            watcher.prime(&args.pattern).await?;
            "keyspace notifications".to_owned()
        }
        Listen::Channels => {
            notice(&format!(
                "{CHANNELS_SEE}; to see them: CONFIG SET notify-keyspace-events K$hzxg"
            ));
            "the release channels".to_owned()
        }
    };
    notice(&format!(
        "watching {} on {} node(s) through {how}; Ctrl-C stops",
        layout::key_glob(&target.prefix, &args.pattern),
        target.primaries.as_slice().len()
    ));
    let mut printed: u64 = 0;
    loop {
        if args.count.is_some_and(|n| printed >= n) {
            return Ok(Code::Done);
        }
        let message = tokio::select! {
            message = messages.next() => message,
            () = until(deadline) => return Ok(Code::Done),
        };
        let Some(message) = message else {
            return Err(Failure::Connection {
                target: target.label.clone(),
                cause: Cause::Unreachable,
                detail: "the subscription's connection closed".to_owned(),
            });
        };
        let channel = message.get_channel_name();
        let payload: String = message.get_payload().unwrap_or_default();
        let events = match listen {
            Listen::Keyspace => {
                let key = channel.split_once("__:").map_or("", |(_, key)| key);
                watcher.keyspace(key, &payload).await?
            }
            Listen::Channels => watcher.channel(channel, &payload),
        };
        for event in events {
            if args.count.is_some_and(|n| printed >= n) {
                break;
            }
            if !print(out, &event)? {
                return Ok(Code::Done);
            }
            printed += 1;
        }
    }
}

/// Resolves at `deadline`, never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(owners: &[&str], count: u32) -> LockState {
        LockState {
            name: "n".to_owned(),
            kind: Kind::Mutex,
            held: !owners.is_empty(),
            mode: None,
            owners: owners.iter().map(|o| (*o).to_owned()).collect(),
            owner_description: None,
            hold_count: count,
            remaining_ms: Some(100),
            fencing_token: Some(5),
            fencing_token_at_most: Some(5),
            waiting: Some(false),
            queued: None,
            readers: None,
            size: None,
        }
    }

    fn names(events: &[Event]) -> Vec<&str> {
        events.iter().map(|e| e.event).collect()
    }

    #[test]
    fn changes_become_events() {
        let free = held(&[], 0);
        assert_eq!(names(&diff(None, &held(&["a"], 1), false)), ["acquired"]);
        assert_eq!(
            names(&diff(Some(&held(&["a"], 1)), &free, false)),
            ["released"]
        );
        assert_eq!(
            names(&diff(Some(&held(&["a"], 1)), &free, true)),
            ["expired"]
        );
        assert_eq!(
            names(&diff(Some(&held(&["a"], 1)), &held(&["b"], 1), false)),
            ["released", "acquired"]
        );
        assert_eq!(
            names(&diff(Some(&held(&["a"], 1)), &held(&["a"], 2), false)),
            ["re-entered"]
        );
        assert_eq!(
            names(&diff(Some(&held(&["a"], 2)), &held(&["a"], 1), false)),
            ["released-hold"]
        );
        assert!(diff(Some(&held(&["a"], 1)), &held(&["a"], 1), false).is_empty());
        assert!(diff(None, &free, false).is_empty());
        let contended = LockState {
            waiting: Some(true),
            ..held(&["a"], 1)
        };
        assert_eq!(
            names(&diff(Some(&held(&["a"], 1)), &contended, false)),
            ["waiting"]
        );
        assert!(diff(Some(&contended), &contended, false).is_empty());
        // The released event carries the released holder's token.
        let after = LockState {
            fencing_token: None,
            ..free
        };
        assert_eq!(
            diff(Some(&held(&["a"], 1)), &after, false)[0].fencing_token,
            Some(5)
        );
    }

    #[test]
    fn an_event_reads_as_one_line() {
        let event = Event::of("acquired", &held(&["c:1"], 1), Some(&"c:1".to_owned()));
        let line = event.line();
        assert!(line.contains("acquired"), "{line}");
        assert!(
            line.contains("mutex      n  owner=c:1  holds=1  token=5  remaining=100ms"),
            "{line}"
        );
    }
}
