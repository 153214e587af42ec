//! `lockctl jobs [PATTERN]`: the scheduled jobs under the prefix (lock-core's
//! `lock_core::scheduled`), from their records: the last period run, by which instance, how it
//! ended and how long it took, and the next period.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::layout::{self, ParsedKey};
use lock_core::scheduled::{JobRecord, LOCK_PREFIX, RunOutcome};
use serde::Serialize;

use crate::cli::JobsArgs;
use crate::connect::Target;
use crate::exit::{Code, Failure};
use crate::glob::check_pattern;
use crate::output::Output;
use crate::scan::Scan;

/// One job as `jobs` shows it.
#[derive(Debug, Serialize)]
struct Job {
    job: String,
    /// The last period run: its start, RFC 3339.
    period: String,
    instance: String,
    /// `done` or `failed`.
    outcome: &'static str,
    /// The failed run's error.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    duration_ms: u128,
    schedule: String,
    /// The next period's start (RFC 3339), if the schedule has one.
    next: Option<String>,
}

/// The JSON document of `jobs`.
#[derive(Debug, Serialize)]
struct Jobs<'a> {
    prefix: &'a str,
    pattern: &'a str,
    jobs: &'a [Job],
}

/// Runs `jobs`: 0 whether or not any job is found.
pub(crate) async fn run(
    target: &Target,
    args: &JobsArgs,
    out: &mut Output,
) -> Result<Code, Failure> {
    check_pattern(&args.pattern).map_err(Failure::Usage)?;
    let mut scan = Scan::new(target, &format!("{LOCK_PREFIX}{}", args.pattern), None);
    let mut names = Vec::new();
    while let Some(keys) = scan.next_keys().await? {
        names.extend(keys.iter().filter_map(|key| record_of(&target.prefix, key)));
    }
    names.sort_unstable();
    names.dedup();
    let records = target.client.records();
    let mut jobs = Vec::new();
    for name in names {
        let stored = records
            .get(&name)
            .await
            .map_err(|e| Failure::from_lock(e, &target.label))?;
        let Some(record) = stored.and_then(|s| JobRecord::decode(s.value())) else {
            continue; // gone meanwhile, or not a job's record
        };
        jobs.push(job(&name[LOCK_PREFIX.len()..], &record, SystemTime::now()));
    }
    let written = if out.is_json() {
        out.json_line(&Jobs {
            prefix: &target.prefix,
            pattern: &args.pattern,
            jobs: &jobs,
        })
    } else if jobs.is_empty() {
        out.line(&format!(
            "no job matches {:?} under prefix {:?}",
            args.pattern, target.prefix
        ))
    } else {
        out.line(&table(&jobs))
    };
    written.map_err(Failure::Output)?;
    Ok(Code::Done)
}

/// The job's lock name if `key` is the record of a job's lock (`P{job:NAME}:record`).
fn record_of(prefix: &str, key: &str) -> Option<String> {
    match layout::parse_key(prefix, key)? {
        ParsedKey::Record { name } if name.starts_with(LOCK_PREFIX) => Some(name.to_owned()),
        _ => None,
    }
}

/// What `jobs` shows of `record`; the next period of an `every` schedule is the first start
/// after `now` (this machine's clock), else the one after the last run.
fn job(name: &str, record: &JobRecord, now: SystemTime) -> Job {
    let (outcome, error) = match record.outcome() {
        RunOutcome::Done => ("done", None),
        RunOutcome::Failed(error) => ("failed", Some(error.clone())),
    };
    let every = record
        .schedule()
        .strip_prefix("every ")
        .and_then(|s| s.strip_suffix('s'))
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&s| s > 0);
    let next = match every {
        Some(length) => {
            let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
            Some(UNIX_EPOCH + Duration::from_secs((now / length + 1) * length))
        }
        None => record.next(),
    };
    Job {
        job: name.to_owned(),
        period: record.period_name(),
        instance: record.instance().to_owned(),
        outcome,
        error,
        duration_ms: record.duration().as_millis(),
        schedule: record.schedule().to_owned(),
        next: next.map(|t| humantime::format_rfc3339_seconds(t).to_string()),
    }
}

/// The jobs as a table with a header, columns aligned.
fn table(jobs: &[Job]) -> String {
    let header = [
        "JOB",
        "LAST PERIOD",
        "INSTANCE",
        "OUTCOME",
        "DURATION",
        "NEXT PERIOD",
        "SCHEDULE",
    ];
    let rows: Vec<[String; 7]> = jobs
        .iter()
        .map(|j| {
            let outcome = match &j.error {
                Some(error) => format!("{} ({error})", j.outcome),
                None => j.outcome.to_owned(),
            };
            [
                j.job.clone(),
                j.period.clone(),
                j.instance.clone(),
                outcome,
                format!("{}ms", j.duration_ms),
                j.next.clone().unwrap_or_else(|| "-".to_owned()),
                j.schedule.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_owned()
    };
    let mut text = line(header.to_vec());
    for row in &rows {
        text.push('\n');
        text.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_records_of_jobs_locks_are_jobs() {
        assert_eq!(
            record_of("lock:", "lock:{job:nightly}:record").as_deref(),
            Some("job:nightly")
        );
        for other in [
            "lock:{job:nightly}",
            "lock:{order:1}:record",
            "x:{job:a}:record",
            "lock:{job:a}:rate",
        ] {
            assert_eq!(record_of("lock:", other), None, "{other}");
        }
    }
}
