//! From a request to the name of the Redis object its keyed layer uses (`prefix + key`):
//! the one step the lock and rate-limit layers share before they call the store, with the
//! layer's answers for settings that cannot work, missing keys and bad keys.

use http::Request;
use tower::Service;
use tracing::Span;

use super::extract::{KeyExtractor, shorten};
use super::name::lock_name;
use super::settings::{KeySettings, Keyed};
use super::words::Words;
use crate::config::MissingKey;
use crate::deferred::Deferred;
use crate::rejection::Rejection;

/// The response future of a keyed layer, as the shared step makes it for a request that
/// never reaches the layer's store. `C` is the layer's settings, `R` its rejection handler.
pub(crate) trait KeyedFuture<S: Service<Request<B>>, B, C, R>: Sized {
    /// Answered by the layer itself.
    fn rejected(rejection: Rejection, kept: Deferred<S, Request<B>, C, R>) -> Self;

    /// The inner service runs without the layer (a request without a key, let through).
    fn passed(future: S::Future, kept: Deferred<S, Request<B>, C, R>) -> Self;
}

/// The one step every keyed layer's `call` starts with: names `request`'s object (see
/// [`name`]) and hands it, with the request, `inner` and what the response future keeps, to
/// `then` (the layer's own call to its store); or answers it with the layer's response
/// future `F`: rejected (with the outcome recorded on `kept`'s span), or passed to `inner`
/// without the layer.
pub(crate) fn name_request<K, S, B, C, R, F>(
    extractor: &K,
    inner: &mut S,
    mut request: Request<B>,
    kept: Deferred<S, Request<B>, C, R>,
    then: impl FnOnce(&mut S, String, Request<B>, Deferred<S, Request<B>, C, R>) -> F,
) -> F
where
    K: KeyExtractor<B> + ?Sized,
    S: Service<Request<B>>,
    C: Keyed,
    F: KeyedFuture<S, B, C, R>,
{
    let span = kept.span().clone();
    match name(
        kept.settings().keys(),
        extractor,
        &mut request,
        &span,
        &C::WORDS,
    ) {
        Named::Name(name) => then(inner, name, request, kept),
        Named::Reject(rejection, outcome) => {
            span.record("outcome", outcome);
            F::rejected(rejection.by_layer(C::WORDS.label), kept)
        }
        Named::PassThrough => {
            span.record("outcome", "no_key");
            let future = span.in_scope(|| inner.call(request));
            F::passed(future, kept)
        }
    }
}

/// What became of a request before its layer's call to the store.
enum Named {
    /// The name of the request's object.
    Name(String),
    /// The layer's answer, with the outcome for the request's span.
    Reject(Rejection, &'static str),
    /// No key, and the layer lets such requests through without it.
    PassThrough,
}

/// Names `request`'s object: the layer's prefix and the key `extractor` finds, by the
/// layer's key rules; or the layer's answer with the span's outcome, or `None` to let a
/// request without a key through. Records the name (or the bad key, shortened) as the span's
/// `key`; logs a layer whose settings cannot work at `error`, a key the route cannot have at
/// `error` once per route, and a bad key at `debug`.
fn name<K, B>(
    keys: &KeySettings,
    extractor: &K,
    request: &mut Request<B>,
    span: &Span,
    words: &Words,
) -> Named
where
    K: KeyExtractor<B> + ?Sized,
{
    if let Some(error) = keys.invalid() {
        tracing::error!(parent: span, %error, "the {} layer is misconfigured", words.layer);
        return Named::Reject(Rejection::misconfigured(error), "error");
    }
    let Some(key) = extractor.extract_mut(request) else {
        if keys.missing_key == MissingKey::PassThrough {
            return Named::PassThrough;
        }
        if let Some(mismatch) = extractor.route_mismatch(request) {
            if keys.mismatched_routes.first(mismatch.route()) {
                tracing::error!(
                    parent: span,
                    parameter = mismatch.parameter(),
                    route = mismatch.route(),
                    "the {} layer's key is not in this route: {mismatch}; every request of the \
                     route is answered 500 (logged once per route)",
                    words.layer,
                );
            }
            return Named::Reject(Rejection::key_not_in_route(), "error");
        }
        return Named::Reject(Rejection::missing_key(words.missing_key), "missing_key");
    };
    match lock_name(&keys.rules, &key) {
        Ok(name) => {
            span.record("key", tracing::field::display(shorten(&name)));
            Named::Name(name)
        }
        Err(reason) => {
            span.record("key", tracing::field::display(shorten(&key)));
            tracing::debug!(parent: span, reason, "invalid {} key", words.layer);
            Named::Reject(Rejection::invalid_key(&reason), "invalid_key")
        }
    }
}
