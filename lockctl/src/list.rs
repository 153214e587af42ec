//! `lockctl list [PATTERN]`: the held locks under the prefix, sorted by remaining lease.

use serde::Serialize;

use crate::cli::ListArgs;
use crate::connect::Target;
use crate::exit::{Code, Failure};
use crate::glob::check_pattern;
use crate::output::{Output, notice};
use crate::scan::Scan;
use crate::state::{LockState, describe, read_many};

/// The JSON document of `list`.
#[derive(Debug, Serialize)]
struct List<'a> {
    prefix: &'a str,
    pattern: &'a str,
    limit: u64,
    /// More locks are held than `limit`: `locks` are the first found.
    truncated: bool,
    locks: &'a [LockState],
}

/// The held locks whose names match `pattern`: at most `limit` of them (the first found)
/// and whether there were more.
pub(crate) async fn held(
    target: &Target,
    args: &ListArgs,
) -> Result<(Vec<LockState>, bool), Failure> {
    check_pattern(&args.pattern).map_err(Failure::Usage)?;
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    let mut scan = Scan::new(target, &args.pattern, args.kind);
    let mut held = Vec::new();
    while let Some(page) = scan.next_page().await? {
        let states = read_many(&target.client, page)
            .await
            .map_err(|e| Failure::from_lock(e, &target.label))?;
        held.extend(states.into_iter().filter(|s| s.held));
        if held.len() > limit {
            break;
        }
    }
    // Soonest to expire first; a lock without an expiry last.
    held.sort_by(|a, b| {
        (a.remaining_ms.is_none(), a.remaining_ms, &a.name, a.kind).cmp(&(
            b.remaining_ms.is_none(),
            b.remaining_ms,
            &b.name,
            b.kind,
        ))
    });
    let truncated = held.len() > limit;
    held.truncate(limit);
    Ok((held, truncated))
}

/// Runs `list`: 0 whether or not anything is held.
pub(crate) async fn run(
    target: &Target,
    args: &ListArgs,
    out: &mut Output,
) -> Result<Code, Failure> {
    let (mut locks, truncated) = held(target, args).await?;
    describe(&target.client, &mut locks)
        .await
        .map_err(|e| Failure::from_lock(e, &target.label))?;
    let written = if out.is_json() {
        out.json_line(&List {
            prefix: &target.prefix,
            pattern: &args.pattern,
            limit: args.limit,
            truncated,
            locks: &locks,
        })
    } else if locks.is_empty() {
        out.line(&format!(
            "no held lock matches {:?} under prefix {:?}",
            args.pattern, target.prefix
        ))
    } else {
        out.table(&locks)
    };
    written.map_err(Failure::Output)?;
    if truncated && !out.is_json() {
        notice(&format!(
            "truncated: more than {} locks are held; these are the first found, sorted \
             (narrow PATTERN or raise --limit)",
            args.limit
        ));
    }
    Ok(Code::Done)
}
