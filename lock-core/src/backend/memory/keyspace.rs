//! The in-memory server's keyspace: strings, hashes and sorted sets, each with an optional
//! expiry on tokio's clock, read and written as the Redis commands the lock code sends read
//! and write them (a key whose time has come is gone; a hash or sorted set that loses its
//! last member is gone; reading a key of another type is `WRONGTYPE`).

use std::collections::HashMap;

use tokio::time::{Duration, Instant};

/// A key holds a value of another type than the command reads (Redis's `WRONGTYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WrongType;

/// What a key holds.
#[derive(Debug, Clone)]
enum Data {
    Str(Vec<u8>),
    /// Fields in insertion order, as a small Redis hash (a listpack) keeps them.
    Hash(Vec<(String, String)>),
    /// Member → score.
    ZSet(HashMap<String, f64>),
}

#[derive(Debug, Clone)]
struct Entry {
    data: Data,
    expires: Option<Instant>,
}

/// The time to live a string write leaves: `SET … PX ms`, `SET … KEEPTTL`, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ttl {
    Px(u64),
    Keep,
    Forever,
}

/// Every key, and the instant the current command runs at.
#[derive(Debug)]
pub(super) struct Keyspace {
    entries: HashMap<String, Entry>,
    now: Instant,
    /// Calls until keys whose time has come are swept out (as Redis's active expiry does, so
    /// per-request names that are never read again do not pile up).
    until_sweep: u32,
}

/// Calls between two sweeps.
const SWEEP_EVERY: u32 = 1024;

impl Keyspace {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            entries: HashMap::new(),
            now,
            until_sweep: SWEEP_EVERY,
        }
    }

    /// Sets the instant the next commands run at (one per call, as a script sees it).
    pub(super) fn at(&mut self, now: Instant) {
        self.now = now;
        self.until_sweep -= 1;
        if self.until_sweep == 0 {
            self.sweep();
        }
    }

    /// Drops every key whose time has come.
    fn sweep(&mut self) {
        let now = self.now;
        self.until_sweep = SWEEP_EVERY;
        self.entries
            .retain(|_, e| e.expires.is_none_or(|t| t > now));
    }

    /// The live entry at `key`; one whose time has come is dropped first.
    fn entry(&mut self, key: &str) -> Option<&mut Entry> {
        let now = self.now;
        let expired = self
            .entries
            .get(key)
            .is_some_and(|e| e.expires.is_some_and(|t| t <= now));
        if expired {
            self.entries.remove(key);
        }
        self.entries.get_mut(key)
    }

    /// Every live key, sorted.
    pub(super) fn keys(&mut self) -> Vec<String> {
        self.sweep();
        let mut keys: Vec<String> = self.entries.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Every live key, sorted, with its type (`TYPE`), its value (a string's bytes, a hash's
    /// fields and values, a sorted set's members and scores in order) and its `PTTL`.
    pub(super) fn dump(&mut self) -> Vec<(String, &'static str, Vec<Vec<u8>>, i64)> {
        let mut out = Vec::new();
        for key in self.keys() {
            let pttl = self.pttl(&key);
            let (kind, parts) = match self.entry(&key).map(|e| e.data.clone()) {
                None => continue,
                Some(Data::Str(value)) => ("string", vec![value]),
                Some(Data::Hash(hash)) => {
                    let parts = hash.into_iter().flat_map(|(f, v)| [f, v]);
                    ("hash", parts.map(String::into_bytes).collect())
                }
                Some(Data::ZSet(_)) => {
                    let members = self.zrange(&key).unwrap_or_default();
                    let parts = members.into_iter().flat_map(|(m, s)| [m, score_text(s)]);
                    ("zset", parts.map(String::into_bytes).collect())
                }
            };
            out.push((key, kind, parts, pttl));
        }
        out
    }

    /// `TYPE`: `string`, `hash`, `zset`, or `none` without a key.
    pub(super) fn kind(&mut self, key: &str) -> &'static str {
        match self.entry(key).map(|e| &e.data) {
            None => "none",
            Some(Data::Str(_)) => "string",
            Some(Data::Hash(_)) => "hash",
            Some(Data::ZSet(_)) => "zset",
        }
    }

    pub(super) fn exists(&mut self, key: &str) -> bool {
        self.entry(key).is_some()
    }

    /// `DEL`: whether there was a key.
    pub(super) fn del(&mut self, key: &str) -> bool {
        self.entry(key).is_some() && self.entries.remove(key).is_some()
    }

    /// `PTTL`: ms left, -1 without an expiry, -2 without a key.
    pub(super) fn pttl(&mut self, key: &str) -> i64 {
        let now = self.now;
        match self.entry(key) {
            None => -2,
            Some(Entry { expires: None, .. }) => -1,
            Some(Entry {
                expires: Some(at), ..
            }) => i64::try_from(at.saturating_duration_since(now).as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// `PEXPIRE`: whether there was a key. A time of zero or less deletes it.
    pub(super) fn pexpire(&mut self, key: &str, ms: i64) -> bool {
        let now = self.now;
        let Some(entry) = self.entry(key) else {
            return false;
        };
        match u64::try_from(ms) {
            Ok(ms) if ms > 0 => entry.expires = Some(later(now, ms)),
            _ => {
                self.entries.remove(key);
            }
        }
        true
    }

    /// `GET`.
    pub(super) fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, WrongType> {
        let value = self.typed(key, |data| match data {
            Data::Str(value) => Some(value),
            _ => None,
        })?;
        Ok(value.cloned())
    }

    /// Writes a string (whatever the key held), with `ttl`.
    pub(super) fn set(&mut self, key: &str, value: Vec<u8>, ttl: Ttl) {
        let now = self.now;
        let kept = self.entry(key).and_then(|e| e.expires);
        let expires = match ttl {
            Ttl::Px(ms) => Some(later(now, ms)),
            Ttl::Keep => kept,
            Ttl::Forever => None,
        };
        self.entries.insert(
            key.to_owned(),
            Entry {
                data: Data::Str(value),
                expires,
            },
        );
    }

    /// The value at `key` as `pick` reads it (None: no key), or `WRONGTYPE` when it is of
    /// another type.
    fn typed<T>(
        &mut self,
        key: &str,
        pick: fn(&mut Data) -> Option<&mut T>,
    ) -> Result<Option<&mut T>, WrongType> {
        match self.entry(key) {
            None => Ok(None),
            Some(entry) => pick(&mut entry.data).map(Some).ok_or(WrongType),
        }
    }

    /// The hash at `key` (None: no key), or `WRONGTYPE`.
    fn hash(&mut self, key: &str) -> Result<Option<&mut Vec<(String, String)>>, WrongType> {
        self.typed(key, |data| match data {
            Data::Hash(hash) => Some(hash),
            _ => None,
        })
    }

    pub(super) fn hget(&mut self, key: &str, field: &str) -> Result<Option<String>, WrongType> {
        let hash = self.hash(key)?;
        Ok(hash.and_then(|h| h.iter().find(|(f, _)| f == field).map(|(_, v)| v.clone())))
    }

    pub(super) fn hset(&mut self, key: &str, field: &str, value: String) -> Result<(), WrongType> {
        match self.hash(key)? {
            Some(hash) => match hash.iter_mut().find(|(f, _)| f == field) {
                Some((_, v)) => *v = value,
                None => hash.push((field.to_owned(), value)),
            },
            None => self.insert(key, Data::Hash(vec![(field.to_owned(), value)])),
        }
        Ok(())
    }

    /// `HDEL`: whether the field was there. A hash left empty is gone.
    pub(super) fn hdel(&mut self, key: &str, field: &str) -> Result<bool, WrongType> {
        let Some(hash) = self.hash(key)? else {
            return Ok(false);
        };
        let before = hash.len();
        hash.retain(|(f, _)| f != field);
        let removed = hash.len() < before;
        if hash.is_empty() {
            self.entries.remove(key);
        }
        Ok(removed)
    }

    /// `HGETALL`: every field and value.
    pub(super) fn hgetall(&mut self, key: &str) -> Result<Vec<(String, String)>, WrongType> {
        Ok(self.hash(key)?.map(|h| h.clone()).unwrap_or_default())
    }

    /// The sorted set at `key` (None: no key), or `WRONGTYPE`.
    fn zset(&mut self, key: &str) -> Result<Option<&mut HashMap<String, f64>>, WrongType> {
        self.typed(key, |data| match data {
            Data::ZSet(set) => Some(set),
            _ => None,
        })
    }

    pub(super) fn zscore(&mut self, key: &str, member: &str) -> Result<Option<f64>, WrongType> {
        Ok(self.zset(key)?.and_then(|z| z.get(member).copied()))
    }

    /// `ZADD` of one member; `only_new` is `NX`, `only_existing` `XX`. Returns whether the
    /// member was added, and whether it was added or its score changed (`CH`).
    pub(super) fn zadd(
        &mut self,
        key: &str,
        score: f64,
        member: &str,
        (only_new, only_existing): (bool, bool),
    ) -> Result<(bool, bool), WrongType> {
        match self.zset(key)? {
            Some(set) => match set.get_mut(member) {
                Some(old) if !only_new => {
                    let changed = *old != score;
                    *old = score;
                    Ok((false, changed))
                }
                Some(_) => Ok((false, false)),
                None if !only_existing => {
                    set.insert(member.to_owned(), score);
                    Ok((true, true))
                }
                None => Ok((false, false)),
            },
            None if !only_existing => {
                let set = HashMap::from([(member.to_owned(), score)]);
                self.insert(key, Data::ZSet(set));
                Ok((true, true))
            }
            None => Ok((false, false)),
        }
    }

    /// `ZREM` of one member: whether it was there. A set left empty is gone.
    pub(super) fn zrem(&mut self, key: &str, member: &str) -> Result<bool, WrongType> {
        let Some(set) = self.zset(key)? else {
            return Ok(false);
        };
        let removed = set.remove(member).is_some();
        if set.is_empty() {
            self.entries.remove(key);
        }
        Ok(removed)
    }

    pub(super) fn zcard(&mut self, key: &str) -> Result<usize, WrongType> {
        Ok(self.zset(key)?.map_or(0, |z| z.len()))
    }

    /// Every member with its score, in Redis's order: by score, then by member.
    pub(super) fn zrange(&mut self, key: &str) -> Result<Vec<(String, f64)>, WrongType> {
        let mut all: Vec<(String, f64)> = self
            .zset(key)?
            .map(|z| z.iter().map(|(m, s)| (m.clone(), *s)).collect())
            .unwrap_or_default();
        all.sort_by(|(m1, s1), (m2, s2)| s1.total_cmp(s2).then_with(|| m1.cmp(m2)));
        Ok(all)
    }

    /// A new key without an expiry.
    fn insert(&mut self, key: &str, data: Data) {
        self.entries.insert(
            key.to_owned(),
            Entry {
                data,
                expires: None,
            },
        );
    }
}

/// A score as `ZSCORE` and `ZRANGE … WITHSCORES` write it: the shortest text that reads back
/// as the same number, whole numbers without decimals, `inf` and `-inf` as Redis spells them.
pub(super) fn score_text(score: f64) -> String {
    if score.is_infinite() {
        return if score > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if score.fract() == 0.0 && score.abs() < 1.0e17 {
        format!("{score:.0}")
    } else {
        format!("{score}")
    }
}

/// `now` + `ms`, saturating far in the future.
fn later(now: Instant, ms: u64) -> Instant {
    now.checked_add(Duration::from_millis(ms))
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn keys_expire_on_tokios_clock() {
        let mut ks = Keyspace::new(Instant::now());
        ks.set("a", b"1".to_vec(), Ttl::Px(100));
        ks.set("b", b"2".to_vec(), Ttl::Forever);
        assert_eq!(ks.pttl("a"), 100);
        assert_eq!(ks.pttl("b"), -1);
        assert_eq!(ks.pttl("c"), -2);
        tokio::time::advance(Duration::from_millis(100)).await;
        ks.at(Instant::now());
        assert_eq!(ks.get("a"), Ok(None));
        assert_eq!(ks.keys(), ["b"]);
        ks.set("b", b"3".to_vec(), Ttl::Keep);
        assert_eq!(ks.pttl("b"), -1);
        assert!(ks.pexpire("b", 0));
        assert!(!ks.exists("b"));
    }

    #[test]
    fn hashes_and_sorted_sets_go_with_their_last_member_and_are_typed() {
        let mut ks = Keyspace::new(Instant::now());
        ks.hset("h", "f", "v".into()).unwrap();
        assert_eq!(ks.get("h"), Err(WrongType));
        assert!(ks.hdel("h", "f").unwrap());
        assert!(!ks.exists("h"));
        assert_eq!(ks.zadd("z", 2.0, "b", (false, false)), Ok((true, true)));
        assert_eq!(ks.zadd("z", 2.0, "a", (false, false)), Ok((true, true)));
        assert_eq!(ks.zadd("z", 1.0, "a", (true, false)), Ok((false, false)));
        assert_eq!(ks.zadd("z", 9.0, "c", (false, true)), Ok((false, false)));
        assert_eq!(ks.zrange("z").unwrap()[0], ("a".into(), 2.0));
        assert_eq!(ks.zcard("z").unwrap(), 2);
        assert_eq!(ks.hget("z", "a"), Err(WrongType));
        assert_eq!(ks.kind("z"), "zset");
        assert!(ks.zrem("z", "a").unwrap() && ks.zrem("z", "b").unwrap());
        assert!(!ks.exists("z"));
        assert_eq!(ks.kind("z"), "none");
    }
}
