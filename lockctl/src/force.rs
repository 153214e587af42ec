//! `lockctl force-unlock NAME`: frees what is held under NAME through lock-core's
//! `force_unlock()` of each kind, so it is freed exactly as the library frees it: a lock
//! string keeps its fencing counter (the next holder's token is greater), read shares and
//! permits are deleted, and the waiters are woken on the release channel. Asks first, on
//! standard error, unless `--yes`.

use lock_core::{LockClient, LockError, Semaphore};
use serde::Serialize;

use crate::cli::ForceUnlockArgs;
use crate::connect::Target;
use crate::exit::{Code, Failure};
use crate::kind::Kind;
use crate::output::{Output, duration, notice};
use crate::state::LockState;
use crate::status;

/// What was done to one lock.
#[derive(Debug, Serialize)]
struct Freed<'a> {
    kind: Kind,
    /// The holders just before, as stored.
    owners: &'a [String],
    /// The holder's fencing token just before (mutex, fair lock, writer).
    fencing_token: Option<u64>,
    hold_count: u32,
    /// Whether it was still held when freed (false: it was released meanwhile).
    freed: bool,
}

/// The JSON document of `force-unlock`.
#[derive(Debug, Serialize)]
struct Report<'a> {
    name: &'a str,
    prefix: &'a str,
    /// The operator did not confirm: nothing was changed.
    aborted: bool,
    locks: Vec<Freed<'a>>,
}

/// Frees the lock `name` of `kind`; returns whether it was held.
async fn force_unlock(client: &LockClient, name: &str, kind: Kind) -> Result<bool, LockError> {
    match kind {
        Kind::Mutex => client.mutex(name).force_unlock().await,
        Kind::Fair => client.fair_lock(name).force_unlock().await,
        Kind::Rw => client.read_write_lock(name).force_unlock().await,
        // The size plays no part in freeing permits.
        Kind::Semaphore => {
            client
                .semaphore(name, Semaphore::MAX_SIZE)
                .force_unlock()
                .await
        }
    }
}

/// One held lock, in words.
fn describe(s: &LockState) -> String {
    let owners = s.owners.join(", ");
    let mut text = match s.kind {
        Kind::Semaphore => format!(
            "semaphore {:?}: {} permit(s) held by {owners}",
            s.name, s.hold_count
        ),
        Kind::Rw if s.mode == Some("read") => format!(
            "rw {:?}: {} read share(s) held by {owners}",
            s.name, s.hold_count
        ),
        kind => format!(
            "{kind} {:?}{}: held by {owners}, {} hold(s)",
            s.name,
            s.mode.map(|m| format!(" ({m})")).unwrap_or_default(),
            s.hold_count
        ),
    };
    if let Some(token) = s.fencing_token {
        text.push_str(&format!(", fencing token {token}"));
    }
    if let Some(ms) = s.remaining_ms {
        text.push_str(&format!(", {} left", duration(ms)));
    }
    text
}

/// Asks on standard error whether to go on; reads the answer from standard input. Anything
/// but `y` or `yes` (and the end of the input) is a no.
async fn confirmed(held: &[LockState], prefix: &str) -> Result<bool, Failure> {
    notice(&format!("about to force-unlock (prefix {prefix:?}):"));
    for state in held {
        notice(&format!("  {}", describe(state)));
    }
    notice(
        "the holders are not told until their next renewal, release or extension finds the \
         lock gone; until then they may still act on it.",
    );
    notice("force-unlock? [y/N]");
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(|e| Failure::Usage(format!("cannot read the answer: {e}")))?
    .map_err(|e| Failure::Usage(format!("cannot read the answer from standard input: {e}")))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// Runs `force-unlock`: 0 when something was freed, 1 when nothing was held, 5 when not
/// confirmed.
pub(crate) async fn run(
    target: &Target,
    args: &ForceUnlockArgs,
    out: &mut Output,
) -> Result<Code, Failure> {
    let held: Vec<LockState> = status::read(target, &args.name, args.kind)
        .await?
        .into_iter()
        .filter(|s| s.held)
        .collect();
    let report = |aborted, locks| Report {
        name: &args.name,
        prefix: &target.prefix,
        aborted,
        locks,
    };
    if held.is_empty() {
        let written = if out.is_json() {
            out.json_line(&report(false, Vec::new()))
        } else {
            out.line(&format!(
                "nothing held under {:?} (prefix {:?}): nothing to free",
                args.name, target.prefix
            ))
        };
        written.map_err(Failure::Output)?;
        return Ok(Code::NotHeld);
    }
    if !args.yes && !confirmed(&held, &target.prefix).await? {
        if out.is_json() {
            out.json_line(&report(true, Vec::new()))
                .map_err(Failure::Output)?;
        }
        return Err(Failure::Aborted);
    }
    let mut done = Vec::new();
    for state in &held {
        let freed = force_unlock(&target.client, &state.name, state.kind)
            .await
            .map_err(|e| Failure::from_lock(e, &target.label))?;
        if !out.is_json() {
            let line = if freed {
                format!("freed {}", describe(state))
            } else {
                format!("{} {:?} was already free", state.kind, state.name)
            };
            out.line(&line).map_err(Failure::Output)?;
        }
        done.push(Freed {
            kind: state.kind,
            owners: &state.owners,
            fencing_token: state.fencing_token,
            hold_count: state.hold_count,
            freed,
        });
    }
    let any = done.iter().any(|f| f.freed);
    if out.is_json() {
        out.json_line(&report(false, done))
            .map_err(Failure::Output)?;
    }
    Ok(if any { Code::Done } else { Code::NotHeld })
}
