//! [`Acquire`]: taking a request's lock, of the kind the layer takes, bounded by the layer's
//! acquire timeout.

use std::pin::Pin;
use std::time::Duration;

use http::Method;
use lock_core::{Guard, LockError, LockRequest};
use tokio::time::Instant;
use tracing::{Instrument, Span};

use super::guard::AnyGuard;
use super::settings::{Kind, Settings};
use crate::config::Side;

/// The acquisition of a request's lock.
pub(crate) struct Acquire {
    future: Pin<Box<dyn Future<Output = Acquired> + Send>>,
}

/// How an acquisition ended.
pub(crate) struct Acquired {
    /// `None`: cut off by the acquire timeout.
    pub(crate) outcome: Option<Result<AnyGuard, LockError>>,
    pub(crate) waited: Duration,
}

impl Acquire {
    /// Starts taking the lock `name` for a request with `method`.
    pub(crate) fn start(settings: &Settings, name: String, method: &Method, span: &Span) -> Self {
        let client = &settings.client;
        let future = match settings.kind {
            Kind::Mutex => bounded(settings, client.lock(name), span),
            Kind::Fair => bounded(settings, client.fair_lock(name).lock(), span),
            Kind::ReadWrite(side) => {
                let lock = client.read_write_lock(name);
                match side(method) {
                    Side::Read => bounded(settings, lock.read(), span),
                    Side::Write => bounded(settings, lock.write(), span),
                }
            }
            Kind::Permits(n) => {
                let permit = client.semaphore(name, n).acquire(1);
                bounded(settings, permit, span)
            }
        };
        Self { future }
    }
}

impl Future for Acquire {
    type Output = Acquired;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Acquired> {
        self.future.as_mut().poll(cx)
    }
}

/// `request` with the layer's wait and lease, cut off by its acquire timeout.
fn bounded<G: Guard + 'static>(
    settings: &Settings,
    request: LockRequest<G>,
    span: &Span,
) -> Pin<Box<dyn Future<Output = Acquired> + Send>> {
    let timeout = settings.acquire_timeout();
    let mut request = request.wait(settings.wait.min(timeout));
    if let Some(lease) = settings.fixed_lease {
        request = request.lease(lease);
    }
    let acquire = async move {
        let start = Instant::now();
        let outcome = tokio::time::timeout(timeout, request)
            .await
            .ok()
            .map(|result| result.map(AnyGuard::new));
        Acquired {
            outcome,
            waited: start.elapsed(),
        }
    };
    Box::pin(acquire.instrument(span.clone()))
}
