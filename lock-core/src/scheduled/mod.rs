//! Scheduled jobs: work that must happen once per period across every instance of a service,
//! with a policy for the periods nobody could run.
//!
//! Every instance starts the same job ([`LockClient::job`](crate::LockClient::job), then
//! [`JobBuilder::start`]); each period, one of them runs the body, with the period and a
//! fencing token in its [`RunContext`].
//!
//! ```no_run
//! # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::fenced;
//! use lock_core::scheduled::{Missed, Schedule};
//!
//! let mut conn = client.connection();
//! let job = client
//!     .job("daily-report", Schedule::every(Duration::from_secs(86_400))?)
//!     .missed(Missed::Latest)
//!     .start(move |run| {
//!         let mut conn = conn.clone();
//!         async move {
//!             let report = format!("report for {}", run.period_name());
//!             // Fenced: a run that lost the lock cannot overwrite a newer run's report.
//!             fenced::set(&mut conn, "report:daily", report, run.fencing_token()).await?;
//!             Ok::<_, lock_core::LockError>(())
//!         }
//!     })?;
//! // ... at shutdown: let a running report finish, give the lock back.
//! job.stop().await;
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//!
//! * **At most once per period, across every instance**, and exactly once while at least one
//!   instance is up and Redis answers. The job's lock (`job:{name}`, a watchdog-renewed mutex)
//!   lets one instance at a time in; under it the instance reads the job's record (the last
//!   period run, [`JobRecord`]), runs the periods the record does not have yet, and writes the
//!   record, fenced by its token. An instance that finds the lock held waits for it (until the
//!   period ends), then finds the period in the record and does nothing: so a run that dies
//!   with its process (its lease runs out) is taken up by another instance in the same period.
//! * **The server's clock decides the period** (Redis `TIME`, read before every decision), not
//!   the instance's: an instance whose clock is minutes off runs the right period, and never
//!   a second time. A period is named by its start ([`RunContext::period`]).
//! * **Fenced.** A run whose lock is lost (its lease ran out: a frozen process, Redis
//!   unreachable past the lease) is dropped at its next `.await` ([`RunContext::cancelled`]
//!   says so first when it can) and is never reported done: its record write carries its token
//!   and is refused once a newer run recorded. Writes the body made before its last `.await`
//!   cannot be undone: give them [`RunContext::fencing_token`] and let the resource refuse
//!   stale ones ([`fenced`](crate::fenced)); the next holder's token is greater.
//! * **What it cannot promise**: a run whose body finished but whose record could not be
//!   written (Redis went away in between) is not recorded, so the period may run again on
//!   another instance; fence the body's writes.
//!
//! # Missed periods, overruns, failures
//!
//! * **Missed periods** are those after the record's last period and before the current one:
//!   nobody could run them (Redis down, every instance stopped) or a run overran them. The
//!   [`Missed`] policy says which run: none ([`Missed::Skip`], the default: logged, counted),
//!   the latest once ([`Missed::Latest`]), or each up to a bound ([`Missed::Each`]); then the
//!   current period runs. A job without a record (new, or its record expired after 30 days
//!   unwritten) starts at the current period.
//! * **Overruns**: runs of one job never overlap. A run still going when the next period
//!   starts keeps the lock; the next period runs when it ends (late, in its period, on whichever
//!   instance gets the lock first), and periods that passed entirely during the run are missed
//!   periods, handled by the policy. Why not overlap: two runs of one job at once would have to
//!   exclude each other themselves, and the later one's token would fence the earlier one's
//!   writes while it still ran.
//! * **Failures**: a body that returns `Err` or panics is tried again
//!   ([`JobBuilder::retries`], default 2, with a backoff from 1 s doubling to at most 60 s),
//!   never after the current period's end; when the last attempt fails, the record says the run
//!   failed ([`RunOutcome::Failed`]) and the period is not run again.
//!
//! # Stopping
//!
//! [`JobHandle::stop`] starts no new period, tells a running body ([`RunContext::cancelled`])
//! and waits for it up to [`JobBuilder::stop_grace`] (default 30 s); its record is written and
//! the lock given back. The client's [`shutdown`](crate::LockClient::shutdown) stops every
//! job's runner at once.
//!
//! # Seen from outside
//!
//! Events ([`JobHandle::events`], [`JobEvent`]), log lines (`tracing`, target `lock_core`),
//! metrics with the `metrics` feature (`lock_job_runs_total`, `lock_job_run_duration_seconds`,
//! `lock_job_attempts_failed_total`, `lock_job_missed_periods_total`,
//! `lock_job_skipped_periods_total`: see [`metrics`](crate::metrics)), and the record,
//! `P{job:NAME}:record` under the client's key prefix `P` ([`record`](crate::record)), which
//! `lockctl jobs` lists: the last period, the instance, the outcome, the duration, the next
//! period.

mod attempt;
mod builder;
mod clock;
mod context;
#[cfg(feature = "cron")]
mod cron;
mod event;
mod handle;
mod policy;
mod record;
mod runner;
mod schedule;
#[cfg(all(test, feature = "testing"))]
mod tests;

pub use builder::JobBuilder;
pub use context::RunContext;
pub use event::JobEvent;
pub use handle::JobHandle;
pub use policy::{MAX_CATCH_UP, Missed};
pub use record::{JobRecord, LOCK_PREFIX, MAX_ERROR_LEN, RunOutcome, lock_name};
pub use schedule::Schedule;
