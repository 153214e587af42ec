//! The runner of one job on one instance: period after period, it waits for the job's lock
//! until the period ends, reads the job's record under it, runs what the plan says with
//! retries, writes the record fenced by its token, and gives the lock back.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::attempt::{Body, attempt};
use super::clock::ServerClock;
use super::context::RunContext;
use super::event::JobEvent;
use super::policy::{Missed, Plan};
use super::record::{JobRecord, RunOutcome};
use super::schedule::Schedule;
use crate::client::LockClient;
use crate::error::LockError;
use crate::fenced::Fenced;
use crate::held_lock::HeldLock;
use crate::metrics;
use crate::record::MAX_TTL;
use crate::run::{OnLost, locked};

/// How long the runner waits before it tries again after Redis could not be reached: 1 s.
pub(crate) const RETRY: Duration = Duration::from_secs(1);

/// The shortest pause between two looks at the clock (a period just done, a server clock that
/// has not reached the next start yet): 10 ms.
const MIN_PAUSE: Duration = Duration::from_millis(10);

/// How a job runs, as its builder set it.
pub(crate) struct Settings {
    pub(crate) schedule: Schedule,
    pub(crate) missed: Missed,
    pub(crate) retries: u32,
    pub(crate) backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) instance: String,
}

/// One job's runner on this instance.
pub(crate) struct Runner {
    pub(crate) client: LockClient,
    pub(crate) job: Arc<str>,
    pub(crate) lock: String,
    pub(crate) settings: Settings,
    pub(crate) clock: ServerClock,
    pub(crate) body: Body,
    pub(crate) events: broadcast::Sender<JobEvent>,
    pub(crate) stop: watch::Receiver<bool>,
    /// The period running under the lock, until its record is written.
    running: Option<(u64, Instant)>,
}

/// What waiting for the job's lock came to.
enum Taken {
    Lock(crate::mutex::LockGuard),
    /// The period ended while another instance held the lock.
    PeriodOver,
    Stopped,
    Failed(LockError),
}

impl Runner {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        client: LockClient,
        job: Arc<str>,
        lock: String,
        settings: Settings,
        clock: ServerClock,
        body: Body,
        events: broadcast::Sender<JobEvent>,
        stop: watch::Receiver<bool>,
    ) -> Self {
        Runner {
            client,
            job,
            lock,
            settings,
            clock,
            body,
            events,
            stop,
            running: None,
        }
    }

    /// Runs until stopped (or the client shuts down).
    pub(crate) async fn run(mut self) {
        // The latest period this instance saw run (here or elsewhere).
        let mut seen: Option<u64> = None;
        while !self.stopping() {
            let now = match self.clock.refresh().await {
                Ok(now) => now,
                Err(LockError::ShutDown) => break,
                Err(error) => {
                    self.unavailable(&error);
                    self.pause(RETRY).await;
                    continue;
                }
            };
            let Some(current) = self.settings.schedule.period_at(now) else {
                // Before the schedule's first start.
                match self.settings.schedule.next_after(now) {
                    Some(first) => self.pause(self.clock.until(first).max(MIN_PAUSE)).await,
                    None => break,
                }
                continue;
            };
            let end = self.settings.schedule.next_after(current);
            if seen.is_some_and(|seen| seen >= current) {
                match end {
                    Some(end) => self.pause(self.clock.until(end).max(MIN_PAUSE)).await,
                    None => break,
                }
                continue;
            }
            match self.take(end).await {
                Taken::Lock(guard) => match self.under_lock(guard).await {
                    Ok(handled) => seen = handled.max(seen),
                    Err(LockError::ShutDown) => break,
                    Err(error) => {
                        self.unavailable(&error);
                        self.pause(RETRY).await;
                    }
                },
                Taken::PeriodOver => {}
                Taken::Stopped => break,
                Taken::Failed(LockError::ShutDown) => break,
                Taken::Failed(error) => {
                    self.unavailable(&error);
                    self.pause(RETRY).await;
                }
            }
        }
        let _ = self.events.send(JobEvent::Stopped);
    }

    /// Waits for the job's lock until the period ends at `end` (on the server's clock).
    async fn take(&mut self, end: Option<u64>) -> Taken {
        let mut request = self.client.lock(self.lock.clone());
        if let Some(end) = end {
            request = request.wait(self.clock.until(end));
        }
        let mut stop = self.stop.clone();
        tokio::select! {
            taken = request => match taken {
                Ok(guard) => Taken::Lock(guard),
                Err(error) if error.is_timeout() => Taken::PeriodOver,
                Err(error) => Taken::Failed(error),
            },
            _ = stop.wait_for(|stop| *stop) => Taken::Stopped,
        }
    }

    /// Under the job's lock: the plan, its runs, their records. The latest period the record
    /// has when it is done (None if nothing was read).
    async fn under_lock(
        &mut self,
        guard: crate::mutex::LockGuard,
    ) -> Result<Option<u64>, LockError> {
        let token = guard.fencing_token();
        let name = self.lock.clone();
        let result = locked(guard, OnLost::Abort, |held| self.planned(held, token)).await;
        if let Some((period, started)) = self.running.take() {
            // The lock was lost (or a newer holder's record refused ours) while it ran.
            tracing::warn!(job = %self.job, period = %crate::period::rfc3339(period),
                "job's lock was lost during its run: the run is not done");
            metrics::job_run(&self.job, "lost", started.elapsed());
            let _ = self.events.send(JobEvent::Lost {
                period: epoch(period),
            });
            return Ok(None);
        }
        match result {
            Ok(handled) => handled,
            // Lost after the last record was written: the release found the lease run out.
            Err(LockError::Lost { name: lost }) if lost == name => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Reads the record, makes the plan and runs it.
    async fn planned(&mut self, held: HeldLock, token: u64) -> Result<Option<u64>, LockError> {
        let last = self.record().await?;
        let now = self.clock.refresh().await?;
        let Some(current) = self.settings.schedule.period_at(now) else {
            return Ok(None);
        };
        let plan = Plan::make(
            &self.settings.schedule,
            self.settings.missed,
            last.as_ref().map(|r| r.period),
            current,
        );
        if plan.missed > 0 {
            tracing::warn!(job = %self.job, missed = plan.missed, skipped = plan.skipped,
                policy = ?self.settings.missed, "periods passed without a run of this job");
            metrics::job_missed(&self.job, plan.missed, plan.skipped);
            let _ = self.events.send(JobEvent::Missed {
                count: plan.missed,
                skipped: plan.skipped,
            });
        }
        let deadline = self.settings.schedule.next_after(current);
        let mut handled = last.map(|r| r.period);
        for period in plan.run {
            if self.stopping() {
                break;
            }
            self.run_one(period, token, &held, deadline).await?;
            handled = Some(period);
        }
        Ok(handled)
    }

    /// Runs `period` (with its retries, until the current period's end `deadline`) and writes
    /// its record.
    async fn run_one(
        &mut self,
        period: u64,
        token: u64,
        held: &HeldLock,
        deadline: Option<u64>,
    ) -> Result<(), LockError> {
        let started = Instant::now();
        self.running = Some((period, started));
        let _ = self.events.send(JobEvent::Started {
            period: epoch(period),
            token,
        });
        let outcome = self.attempts(period, token, held, deadline).await;
        let duration = started.elapsed();
        let finished = self.clock.now_us() / 1_000_000;
        let record = JobRecord {
            period,
            outcome: outcome.clone(),
            instance: self.settings.instance.clone(),
            duration,
            finished,
            schedule: self.settings.schedule.describe(),
            next: self.settings.schedule.next_after(period),
        };
        let records = self.client.records();
        let stored = record.encode();
        let put = records.put(&self.lock, &stored, token, MAX_TTL);
        if let Fenced::Refused { stored } = put.await? {
            tracing::warn!(job = %self.job, token, stored, "a newer run recorded first");
            return Err(LockError::Lost {
                name: self.lock.clone(),
            });
        }
        self.running = None;
        match outcome {
            RunOutcome::Done => {
                metrics::job_run(&self.job, "done", duration);
                let _ = self.events.send(JobEvent::Done {
                    period: epoch(period),
                    token,
                    duration,
                });
            }
            RunOutcome::Failed(error) => {
                metrics::job_run(&self.job, "failed", duration);
                let _ = self.events.send(JobEvent::Failed {
                    period: epoch(period),
                    token,
                    error,
                });
            }
        }
        Ok(())
    }

    /// The attempts of one run: the first, then a retry after each failure with a doubling
    /// backoff, while retries are left, the runner is not stopping and the retry can start
    /// before `deadline`.
    async fn attempts(
        &mut self,
        period: u64,
        token: u64,
        held: &HeldLock,
        deadline: Option<u64>,
    ) -> RunOutcome {
        let mut backoff = self.settings.backoff;
        let mut attempt_no = 1;
        loop {
            let ctx = RunContext {
                job: self.job.clone(),
                period,
                token,
                attempt: attempt_no,
                held: held.clone(),
                stop: self.stop.clone(),
            };
            let error = match attempt(&self.body, ctx).await {
                Ok(()) => return RunOutcome::Done,
                Err(error) => error,
            };
            let out_of_time = deadline.is_some_and(|end| self.clock.until(end) <= backoff);
            let last = attempt_no > self.settings.retries || self.stopping() || out_of_time;
            tracing::warn!(job = %self.job, period = %crate::period::rfc3339(period),
                attempt = attempt_no, last, %error, "job's body failed");
            metrics::job_attempt_failed(&self.job);
            let _ = self.events.send(JobEvent::AttemptFailed {
                period: epoch(period),
                attempt: attempt_no,
                error: error.clone(),
                last,
            });
            if last {
                return RunOutcome::Failed(error);
            }
            self.pause(backoff).await;
            backoff = (backoff * 2).min(self.settings.max_backoff);
            attempt_no += 1;
        }
    }

    /// The record's last period, if it has a readable one.
    async fn record(&self) -> Result<Option<JobRecord>, LockError> {
        let Some(stored) = self.client.records().get(&self.lock).await? else {
            return Ok(None);
        };
        let record = JobRecord::decode(stored.value());
        if record.is_none() {
            tracing::warn!(job = %self.job, "the job's record is not one this version reads; starting afresh");
        }
        Ok(record)
    }

    fn unavailable(&self, error: &LockError) {
        tracing::warn!(job = %self.job, %error, "job runner could not reach Redis; trying again");
        let _ = self.events.send(JobEvent::Unavailable {
            error: error.to_string(),
        });
    }

    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleeps for `time`, or until asked to stop.
    async fn pause(&self, time: Duration) {
        let mut stop = self.stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(time) => {}
            _ = stop.wait_for(|stop| *stop) => {}
        }
    }
}

fn epoch(secs: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_secs(secs)
}
