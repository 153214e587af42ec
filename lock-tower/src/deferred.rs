//! [`Deferred`]: what a layer's response future keeps beside its state: the call of the inner
//! service it makes once the layer has decided, and what it answers with.

use std::sync::Arc;

use tracing::Span;

/// The inner service `S` and the request `Q` for a call made later (`None` once made, or for
/// a future that never makes one), the layer's settings `C`, its rejection handler `R` and
/// the request's span.
pub(crate) struct Deferred<S, Q, C, R> {
    call: Option<(S, Q)>,
    settings: Arc<C>,
    on_rejection: Arc<R>,
    span: Span,
}

impl<S, Q, C, R> Deferred<S, Q, C, R> {
    /// Without a call to make.
    pub(crate) fn new(settings: Arc<C>, on_rejection: Arc<R>, span: Span) -> Self {
        Self {
            call: None,
            settings,
            on_rejection,
            span,
        }
    }

    /// With `service` to call with `request` later.
    pub(crate) fn calling(self, service: S, request: Q) -> Self {
        Self {
            call: Some((service, request)),
            ..self
        }
    }

    /// The layer's settings.
    pub(crate) fn settings(&self) -> &C {
        &self.settings
    }

    /// The request's span.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// Each part, borrowed apart: the call (to take), the settings, the rejection handler
    /// and the span.
    pub(crate) fn parts(&mut self) -> (&mut Option<(S, Q)>, &C, &R, &Span) {
        (
            &mut self.call,
            &self.settings,
            &self.on_rejection,
            &self.span,
        )
    }
}
