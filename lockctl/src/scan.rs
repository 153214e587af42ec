//! Finding locks with `SCAN` (never `KEYS`): every primary in turn, page by page, each lock
//! name and kind reported once.

use std::collections::HashSet;

use lock_core::layout::{self, ParsedKey};
use lock_core::redis::{self, aio::MultiplexedConnection};

use crate::connect::Target;
use crate::exit::Failure;
use crate::kind::Kind;

/// Keys asked for per `SCAN` call.
const PAGE: usize = 1000;

/// A scan of the locks whose names match a glob, over every primary of a deployment.
pub(crate) struct Scan<'a> {
    target: &'a Target,
    glob: String,
    kind: Option<Kind>,
    /// The primary being scanned, its connection and cursor.
    node: usize,
    conn: Option<MultiplexedConnection>,
    cursor: u64,
    seen: HashSet<(String, Kind)>,
}

impl std::fmt::Debug for Scan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scan")
            .field("glob", &self.glob)
            .field("node", &self.node)
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}

impl<'a> Scan<'a> {
    /// A scan of the locks (of `kind`, or every kind) whose names match `pattern` (checked
    /// with [`check_pattern`](crate::glob::check_pattern)).
    pub(crate) fn new(target: &'a Target, pattern: &str, kind: Option<Kind>) -> Scan<'a> {
        Scan {
            target,
            glob: layout::key_glob(&target.prefix, pattern),
            kind,
            node: 0,
            conn: None,
            cursor: 0,
            seen: HashSet::new(),
        }
    }

    /// The locks first seen on the next page (maybe none), or None once every primary has
    /// been scanned to its end.
    pub(crate) async fn next_page(&mut self) -> Result<Option<Vec<(String, Kind)>>, Failure> {
        let Some(keys) = self.next_keys().await? else {
            return Ok(None);
        };
        let mut page = Vec::new();
        for key in keys {
            let Some(ParsedKey::Lock { name, role }) = layout::parse_key(&self.target.prefix, &key)
            else {
                continue;
            };
            let Some(kind) = Kind::of(role.kind()) else {
                continue;
            };
            if self.kind.is_some_and(|k| k != kind) {
                continue;
            }
            if self.seen.insert((name.to_owned(), kind)) {
                page.push((name.to_owned(), kind));
            }
        }
        Ok(Some(page))
    }

    /// The keys of the next page that match the glob (UTF-8 ones: lock-core's are), or None
    /// once every primary has been scanned to its end.
    pub(crate) async fn next_keys(&mut self) -> Result<Option<Vec<String>>, Failure> {
        let Some(node) = self.target.primaries.as_slice().get(self.node) else {
            return Ok(None);
        };
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => self.conn.insert(self.target.connection(node).await?),
        };
        let (cursor, found): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(self.cursor)
            .arg("MATCH")
            .arg(&self.glob)
            .arg("COUNT")
            .arg(PAGE)
            .query_async(conn)
            .await
            .map_err(|e| Failure::from_redis(e, node.address()))?;
        if cursor == 0 {
            self.node += 1;
            self.conn = None;
        }
        self.cursor = cursor;
        Ok(Some(
            found
                .into_iter()
                .filter_map(|key| String::from_utf8(key).ok())
                .collect(),
        ))
    }
}
