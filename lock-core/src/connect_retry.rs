//! [`ConnectRetry`]: how [`build`](crate::LockClientBuilder::build) retries connecting to a
//! Redis that is not up yet ([`connect_retry`](crate::LockClientBuilder::connect_retry)):
//! which failures are worth another try, and how long to pause between tries.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::error::LockError;

/// The pause after the first failed try.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// The longest `max_wait` [`connect_retry`](crate::LockClientBuilder::connect_retry) takes.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// The tries of one build: started at `started`, given up at `deadline`.
#[derive(Debug)]
pub(crate) struct ConnectRetry {
    started: Instant,
    deadline: Instant,
    /// The next pause, before jitter: doubles after each try up to [`MAX_PAUSE`].
    pause: Duration,
    tries: u32,
}

impl ConnectRetry {
    /// Tries until `max_wait` from now (at most [`MAX_WAIT`], checked by the builder).
    pub(crate) fn new(max_wait: Duration) -> Self {
        let started = Instant::now();
        Self {
            started,
            deadline: started + max_wait.min(MAX_WAIT),
            pause: FIRST_PAUSE,
            tries: 0,
        }
    }

    /// After a try failed with `error`: how long to pause before the next one, or `None` to
    /// give up (the error is not one time can fix, or the time is up). The pause doubles
    /// from 100 ms up to 2 s, each with ±20 % jitter (so instances that started together do
    /// not knock in step), and never runs past the deadline.
    pub(crate) fn pause_after(&mut self, error: &LockError) -> Option<Duration> {
        self.tries += 1;
        let now = Instant::now();
        if !worth_retrying(error) || now >= self.deadline {
            return None;
        }
        let pause = jitter(self.pause).min(self.deadline - now);
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        tracing::info!(error = %error, address = error.address(), tries = self.tries,
            next_in = ?pause, left = ?(self.deadline - now),
            "Redis not reachable yet; trying again");
        Some(pause)
    }

    /// The error to return once the tries are over: the last one, and for
    /// [`LockError::Unavailable`] with `waited` the whole time tried, so the message says
    /// how long and the last cause.
    pub(crate) fn give_up(&self, error: LockError) -> LockError {
        match error {
            LockError::Unavailable { source, .. } => LockError::Unavailable {
                waited: self.started.elapsed(),
                source,
            },
            other => other,
        }
    }
}

/// Whether time may fix `error`: Redis not reachable or not answering
/// ([`LockError::is_unavailable`]), or still loading its data set (`LOADING`). A refusal
/// (a password, a permission, a certificate), a bad option or a server that lacks a
/// feature is returned at once.
pub(crate) fn worth_retrying(error: &LockError) -> bool {
    error.is_unavailable() || matches!(error, LockError::Redis(e) if e.code() == Some("LOADING"))
}

/// `d`, give or take 20 %.
fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::rng().random_range(0.8..=1.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> LockError {
        LockError::Unavailable {
            waited: Duration::from_millis(1),
            source: Some(crate::error::ConnectError::new(
                "127.0.0.1:1",
                std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
            )),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn pauses_grow_up_to_a_cap_and_stop_at_the_deadline() {
        let mut retry = ConnectRetry::new(Duration::from_secs(10));
        let mut pauses = Vec::new();
        while let Some(pause) = retry.pause_after(&refused()) {
            pauses.push(pause);
            tokio::time::sleep(pause).await;
        }
        let ms = Duration::from_millis;
        assert!(pauses[0] >= ms(80) && pauses[0] <= ms(120), "{pauses:?}");
        assert!(pauses[1] > pauses[0], "{pauses:?}");
        assert!(pauses.iter().all(|p| *p <= ms(2400)), "{pauses:?}");
        // The last pause ends at the deadline (the paused clock sleeps in whole ms).
        let tried = retry.started.elapsed();
        assert!(
            tried >= Duration::from_secs(10) && tried < ms(10_050),
            "{tried:?}"
        );
        let LockError::Unavailable { waited, source } = retry.give_up(refused()) else {
            panic!("still Unavailable");
        };
        assert_eq!(waited, tried, "the whole time tried");
        assert!(
            source.is_some_and(|e| e.is_connection_refusal()),
            "the last cause"
        );
    }

    /// A buffer the log is written to.
    #[derive(Clone, Default)]
    struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Log {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_retry_log_names_the_address() {
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let pause = tracing::subscriber::with_default(subscriber, || {
            ConnectRetry::new(Duration::from_secs(10)).pause_after(&refused())
        });
        assert!(pause.is_some());
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains("Redis not reachable yet") && text.contains("address=\"127.0.0.1:1\""),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_not_retried_a_loading_server_is() {
        let mut retry = ConnectRetry::new(Duration::from_secs(10));
        let auth = LockError::AuthRequired {
            option: "url",
            refused: false,
            detail: "NOAUTH".to_owned(),
        };
        assert_eq!(retry.pause_after(&auth), None);
        let loading = LockError::Redis(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading),
            "Redis is loading the dataset in memory",
        )));
        assert!(
            retry.pause_after(&loading).is_some(),
            "a server still loading is waited for"
        );
    }
}
