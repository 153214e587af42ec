//! [`JobBuilder`]: a job's name, schedule and options, and [`JobBuilder::start`].

use std::fmt::Display;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use super::attempt::body;
use super::clock::ServerClock;
use super::context::RunContext;
use super::handle::JobHandle;
use super::policy::Missed;
use super::record::lock_name;
use super::runner::{Runner, Settings};
use super::schedule::Schedule;
use crate::client::LockClient;
use crate::error::LockError;
use crate::name::validate_name;

/// A job's options, made by [`LockClient::job`]; [`start`](Self::start) runs it.
#[derive(Debug, Clone)]
#[must_use = "a job runs only once started"]
pub struct JobBuilder {
    client: LockClient,
    name: String,
    schedule: Schedule,
    missed: Missed,
    retries: u32,
    backoff: Duration,
    stop_grace: Duration,
    instance: Option<String>,
    skew_ms: i64,
}

impl JobBuilder {
    /// Retries after a failed attempt, by default: 2 (three attempts in all).
    pub const DEFAULT_RETRIES: u32 = 2;
    /// The most retries: 100.
    pub const MAX_RETRIES: u32 = 100;
    /// The first retry's backoff, by default: 1 s (then doubled each time).
    pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);
    /// The longest backoff between two attempts: 60 s.
    pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
    /// How long [`JobHandle::stop`] lets a running body finish, by default: 30 s.
    pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(30);

    /// What to do about periods that passed without a run (default [`Missed::Skip`]).
    pub fn missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }

    /// Retries after an attempt that returned an error or panicked (default 2, at most
    /// [`MAX_RETRIES`](Self::MAX_RETRIES)): each after a backoff that starts at
    /// [`backoff`](Self::backoff) and doubles up to 60 s, and only while the current period
    /// has time for it (a retry never starts after the period's end). When the last fails, the
    /// record says the run failed; the period is not run again.
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// The first retry's backoff (default 1 s, at most 60 s).
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// How long [`JobHandle::stop`] waits for a running body (default 30 s).
    pub fn stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = grace;
        self
    }

    /// This instance's name in the job's record (what `lockctl jobs` shows): by default the
    /// client's id.
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }

    /// Tests: this runner's local clock is `ms` milliseconds ahead (or behind, if negative)
    /// of the host's. The period is the server's, so this changes nothing the job does: the
    /// hook lets a test prove it. Only with the `testing` feature.
    #[cfg(feature = "testing")]
    pub fn local_clock_skew_ms(mut self, ms: i64) -> Self {
        self.skew_ms = ms;
        self
    }

    /// Starts the job on this instance (a task on the current tokio runtime) and returns its
    /// handle.
    ///
    /// `body` runs once per period on one instance, with the run's [`RunContext`]; an `Err`
    /// or a panic is a failed attempt (see [`retries`](Self::retries)). A name that makes an
    /// invalid lock name (`job:{name}`) is [`LockError::InvalidName`]; retries above
    /// [`MAX_RETRIES`](Self::MAX_RETRIES), a zero or over-60 s backoff are
    /// [`LockError::InvalidOption`]. Must be called within a tokio runtime.
    pub fn start<F, Fut, E>(self, body_fn: F) -> Result<JobHandle, LockError>
    where
        F: Fn(RunContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + 'static,
    {
        let lock = lock_name(&self.name);
        validate_name(&lock)?;
        if self.retries > Self::MAX_RETRIES {
            return Err(LockError::InvalidOption {
                option: "retries",
                reason: format!("{} is more than {}", self.retries, Self::MAX_RETRIES),
            });
        }
        if self.backoff.is_zero() || self.backoff > Self::MAX_BACKOFF {
            return Err(LockError::InvalidOption {
                option: "backoff",
                reason: format!("{:?} is outside (0, 60 s]", self.backoff),
            });
        }
        let engine = self.client.engine().clone();
        let instance = self
            .instance
            .unwrap_or_else(|| engine.client_id().to_owned());
        let (stop, stopped) = watch::channel(false);
        let (events, first) = broadcast::channel(1024);
        let runner = Runner::new(
            self.client,
            Arc::from(self.name.as_str()),
            lock,
            Settings {
                schedule: self.schedule,
                missed: self.missed,
                retries: self.retries,
                backoff: self.backoff,
                max_backoff: Self::MAX_BACKOFF,
                instance,
            },
            ServerClock::new(engine.clone(), self.skew_ms),
            body(body_fn),
            events.clone(),
            stopped,
        );
        let task = tokio::spawn(runner.run());
        engine.add_task(task.abort_handle());
        Ok(JobHandle {
            name: self.name,
            stop,
            task: Some(task),
            events,
            first: Mutex::new(Some(first)),
            grace: self.stop_grace,
        })
    }
}

impl LockClient {
    /// A scheduled job named `name` on `schedule`: run once per period across every instance
    /// that starts it (see [`scheduled`](crate::scheduled)). Nothing runs until
    /// [`start`](JobBuilder::start).
    pub fn job(&self, name: impl Into<String>, schedule: Schedule) -> JobBuilder {
        JobBuilder {
            client: self.clone(),
            name: name.into(),
            schedule,
            missed: Missed::default(),
            retries: JobBuilder::DEFAULT_RETRIES,
            backoff: JobBuilder::DEFAULT_BACKOFF,
            stop_grace: JobBuilder::DEFAULT_STOP_GRACE,
            instance: None,
            skew_ms: 0,
        }
    }
}
