//! `lottery job`: the draw as a scheduled job ([`lock_core::scheduled`]): every instance starts
//! the same job and the runner runs each period once, on the server's clock, fenced by the
//! job lock's token, catching up on periods missed while no instance could run them.
//!
//! The body draws [`WINNERS`](crate::draw::WINNERS) winners and stores them at
//! [`job_result_key`] with [`fenced::set`] and the run's token. The write is sent from a task
//! of its own, so a write already on its way when the run was dropped (its lock lost) still
//! reaches Redis, where the fence judges it, and its outcome is still said.
//!
//! Lines (see [`crate::line`]): `READY`; per run `RUNNING` (the body started), `RAN ...
//! written=true|false stored=<token>` (the fenced write's outcome), `FAILED`/`LOST` (the
//! runner's events); `STALLING` before a test's stall; `DONE` at the end.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::LockClient;
use lock_core::fenced::{self, Fenced};
use lock_core::scheduled::{JobEvent, Missed, Schedule};

use crate::BoxError;
use crate::draw::draw_winners;
use crate::line::{emit, now_ms};

/// The job's name (its lock is `job:lottery`, its record `P{job:lottery}:record`).
pub const JOB: &str = "lottery";

/// Where the draw of the period named `period` (RFC 3339) is stored: a fenced value.
pub fn job_result_key(period: &str) -> String {
    format!("lottery:job:{period}:winners")
}

/// What `lottery job` does.
#[derive(Debug, Clone)]
pub struct JobOptions {
    /// The Redis URL.
    pub url: String,
    /// The period: whole seconds.
    pub period: Duration,
    /// Until when (Unix milliseconds) to take part; then the job is stopped.
    pub until_ms: u64,
    /// The watchdog lease of the job's lock.
    pub lease: Duration,
    /// How many missed periods to run after a gap.
    pub catch_up: u32,
    /// How long each run takes (before its write).
    pub work: Duration,
    /// This instance's name.
    pub instance: String,
    /// Tests: in runs of periods at or after this one (Unix seconds), block the runtime's
    /// thread for `stall` between the draw and the write, once (a test freezes the process
    /// then).
    pub stall_from: Option<u64>,
    /// See `stall_from`.
    pub stall: Duration,
}

/// Runs `lottery job` until `until_ms`.
pub async fn run(options: JobOptions) -> Result<(), BoxError> {
    let client = LockClient::builder(&options.url)
        .watchdog_lease(options.lease)
        .build()
        .await?;
    let schedule = Schedule::every(options.period)?;
    let conn = client.connection();
    let (instance, work, stall) = (options.instance.clone(), options.work, options.stall);
    let stall_from = options.stall_from;
    let stalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let job = client
        .job(JOB, schedule)
        .missed(Missed::Each {
            up_to: options.catch_up,
        })
        .retries(0)
        .instance(instance.clone())
        .start(move |run| {
            let (mut conn, instance, stalled) = (conn.clone(), instance.clone(), stalled.clone());
            async move {
                let token = run.fencing_token();
                let base = [
                    ("instance", instance.clone()),
                    ("period", run.period_secs().to_string()),
                    ("token", token.to_string()),
                ];
                emit("RUNNING", &base);
                tokio::time::sleep(work).await;
                let winners = draw_winners();
                let stall_now = stall_from.is_some_and(|from| run.period_secs() >= from)
                    && !stalled.swap(true, std::sync::atomic::Ordering::SeqCst);
                if stall_now {
                    // A pause between the draw and the write that nothing in the process
                    // sees (a GC pause, a frozen VM): the runtime's thread is blocked, and a
                    // test freezes the process meanwhile. Only the fence can refuse the write
                    // that follows.
                    emit("STALLING", &base);
                    std::thread::sleep(stall);
                }
                let key = job_result_key(&run.period_name());
                let value = format!("instance={instance} winners={winners}");
                // The write goes out from a task of its own: once sent, it lands whatever
                // becomes of the run.
                let write = tokio::spawn(async move {
                    let outcome = fenced::set(&mut conn, &key, value, token).await;
                    let (written, stored) = match &outcome {
                        Ok(Fenced::Written) => (true, token),
                        Ok(Fenced::Refused { stored }) => (false, *stored),
                        Err(_) => (false, 0),
                    };
                    let mut fields = base.to_vec();
                    fields.extend([
                        ("key", key),
                        ("written", written.to_string()),
                        ("stored", stored.to_string()),
                        ("at_ms", now_ms().to_string()),
                    ]);
                    emit("RAN", &fields);
                    outcome.map(|_| ())
                });
                match write.await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }
        })?;
    let mut events = job.events();
    emit("READY", &[("instance", options.instance.clone())]);
    let until = UNIX_EPOCH + Duration::from_millis(options.until_ms);
    let left = until.duration_since(SystemTime::now()).unwrap_or_default();
    let deadline = tokio::time::sleep(left);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut deadline => break,
            event = events.recv() => match event {
                Ok(JobEvent::Lost { period }) => emit("LOST", &[
                    ("instance", options.instance.clone()),
                    ("period", secs(period).to_string()),
                ]),
                Ok(JobEvent::AttemptFailed { period, error, .. }) => emit("FAILED", &[
                    ("instance", options.instance.clone()),
                    ("period", secs(period).to_string()),
                    ("error", error.replace(' ', "_")),
                ]),
                Ok(JobEvent::Missed { count, skipped }) => emit("MISSED", &[
                    ("instance", options.instance.clone()),
                    ("count", count.to_string()),
                    ("skipped", skipped.to_string()),
                ]),
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
        }
    }
    job.stop().await;
    client.shutdown().await;
    emit("DONE", &[("instance", options.instance)]);
    Ok(())
}

fn secs(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}
