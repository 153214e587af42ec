//! lock-core's Redis key layout (DESIGN.md, "Keys"), as lockctl reads it: a lock `N` under the
//! prefix `P` owns keys and channels that all start with `P{N}`; what follows says which kind
//! of lock it is. lockctl turns names into keys and keys back into names here only.

use std::fmt;

use clap::ValueEnum;
use serde::Serialize;

/// A kind of lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    /// The reentrant mutex: a lock string `P{N}`.
    Mutex,
    /// The fair lock: a lock string `P{N}:fair` and its queue.
    Fair,
    /// The read-write lock: the writer `P{N}:rw`, the readers, a waiting writer's mark.
    #[value(alias = "read-write")]
    Rw,
    /// The semaphore: permits `P{N}:permits` and the recorded size.
    #[value(alias = "sem")]
    Semaphore,
}

impl Kind {
    /// Every kind, in the order lockctl shows them.
    pub(crate) const ALL: [Kind; 4] = [Kind::Mutex, Kind::Fair, Kind::Rw, Kind::Semaphore];

    /// The kind's name in output and on the command line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Fair => "fair",
            Kind::Rw => "rw",
            Kind::Semaphore => "semaphore",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Every key suffix after `P{N}`, with the kind it belongs to and whether a change of it
/// changes what lockctl shows (the semaphore's recorded size and the fair lock's deadlines
/// change together with another key of theirs).
const KEYS: [(&str, Kind, bool); 9] = [
    ("", Kind::Mutex, true),
    (":fair", Kind::Fair, true),
    (":fair:queue", Kind::Fair, true),
    (":fair:deadlines", Kind::Fair, false),
    (":rw", Kind::Rw, true),
    (":rw:readers", Kind::Rw, true),
    (":rw:writer-waiting", Kind::Rw, true),
    (":permits", Kind::Semaphore, true),
    (":permits:size", Kind::Semaphore, false),
];

/// The release channels after `P{N}`: the fair lock's is a prefix, followed by the owner id
/// of the waiter it wakes.
const CHANNELS: [(&str, Kind); 4] = [
    (":released", Kind::Mutex),
    (":fair:wake:", Kind::Fair),
    (":rw:released", Kind::Rw),
    (":permits:released", Kind::Semaphore),
];

/// `P{N}`.
fn base(prefix: &str, name: &str) -> String {
    format!("{prefix}{{{name}}}")
}

/// The keys of `kind` for the lock `name`.
pub(crate) fn keys_of(prefix: &str, name: &str, kind: Kind) -> Vec<String> {
    let base = base(prefix, name);
    KEYS.iter()
        .filter(|(_, k, _)| *k == kind)
        .map(|(suffix, _, _)| format!("{base}{suffix}"))
        .collect()
}

/// The lock name and what follows it, if `key` is `P{N}…`.
fn split<'a>(prefix: &str, key: &'a str) -> Option<(&'a str, &'a str)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('{')?;
    let end = rest.find('}')?;
    let name = &rest[..end];
    (!name.is_empty()).then(|| (name, &rest[end + 1..]))
}

/// What a key of lock-core is: the lock's name and kind, and whether its changes matter
/// (see [`KEYS`]). None for a key lock-core does not write.
pub(crate) fn parse_key<'a>(prefix: &str, key: &'a str) -> Option<(&'a str, Kind, bool)> {
    let (name, suffix) = split(prefix, key)?;
    KEYS.iter()
        .find(|(s, _, _)| *s == suffix)
        .map(|(_, kind, shown)| (name, *kind, *shown))
}

/// What a release channel of lock-core is: the lock's name and kind, and for a fair lock the
/// owner id of the waiter it wakes. None for another channel.
pub(crate) fn parse_channel<'a>(
    prefix: &str,
    channel: &'a str,
) -> Option<(&'a str, Kind, Option<&'a str>)> {
    let (name, suffix) = split(prefix, channel)?;
    CHANNELS.iter().find_map(|(s, kind)| match kind {
        Kind::Fair => suffix
            .strip_prefix(s)
            .filter(|owner| !owner.is_empty())
            .map(|owner| (name, *kind, Some(owner))),
        _ => (suffix == *s).then_some((name, *kind, None)),
    })
}

/// The glob (for `SCAN MATCH` and `PSUBSCRIBE`) of every key of lock-core whose name matches
/// `pattern`; the prefix is matched literally.
pub(crate) fn key_glob(prefix: &str, pattern: &str) -> String {
    format!("{}{{{pattern}}}*", escape_glob(prefix))
}

/// The subscription pattern of every channel under the prefix (`lock:*`). Redis's ACL allows
/// a `PSUBSCRIBE` only for exactly a granted pattern, so lockctl subscribes to this one (which
/// `&lock:*` grants) and matches names itself.
pub(crate) fn prefix_glob(prefix: &str) -> String {
    format!("{}*", escape_glob(prefix))
}

/// `text` with Redis glob characters escaped, to match literally.
pub(crate) fn escape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Why `pattern` cannot be a glob over lock names, if it cannot: names never contain braces,
/// whitespace or control characters, so a pattern with them would match nothing lock-core
/// wrote (or, with a brace, another part of the key).
pub(crate) fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err("the pattern is empty (use * for every name)".to_owned());
    }
    if pattern.contains(['{', '}']) || pattern.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "pattern {pattern:?}: lock names never contain braces, whitespace or control characters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_names_go_both_ways() {
        for kind in Kind::ALL {
            for key in keys_of("lock:", "order:42", kind) {
                let (name, k, _) = parse_key("lock:", &key).unwrap();
                assert_eq!((name, k), ("order:42", kind), "{key}");
            }
        }
        assert_eq!(keys_of("app:", "a", Kind::Mutex), ["app:{a}"]);
        assert!(!parse_key("lock:", "lock:{a}:permits:size").unwrap().2);
        // Not lock-core's: another prefix, an unknown suffix, an empty name.
        assert!(parse_key("lock:", "other:{a}").is_none());
        assert!(parse_key("lock:", "lock:{a}:junk").is_none());
        assert!(parse_key("lock:", "lock:{a}b}:rw").is_none());
        assert!(parse_key("lock:", "lock:{}").is_none());
    }

    #[test]
    fn channels_name_their_lock() {
        assert_eq!(
            parse_channel("lock:", "lock:{a}:released"),
            Some(("a", Kind::Mutex, None))
        );
        assert_eq!(
            parse_channel("lock:", "lock:{a}:fair:wake:c1:7"),
            Some(("a", Kind::Fair, Some("c1:7")))
        );
        assert_eq!(
            parse_channel("lock:", "lock:{a}:rw:released").map(|c| c.1),
            Some(Kind::Rw)
        );
        assert!(parse_channel("lock:", "lock:{a}:fair:wake:").is_none());
        assert!(parse_channel("lock:", "lock:{a}").is_none());
    }

    #[test]
    fn globs_match_the_prefix_literally() {
        assert_eq!(key_glob("lock:", "*"), "lock:{*}*");
        assert_eq!(key_glob("a*[b]:", "x?"), "a\\*\\[b\\]:{x?}*");
        assert_eq!(prefix_glob("lock:"), "lock:*");
        assert!(check_pattern("order:*").is_ok());
        for bad in ["", "a{b", "a b", "a}"] {
            assert!(check_pattern(bad).is_err(), "{bad:?}");
        }
    }
}
