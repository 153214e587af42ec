//! From a request to the name of the Redis object its keyed layer uses (`prefix + key`):
//! the one step the lock and rate-limit layers share before they call the store, with the
//! layer's answers for settings that cannot work, missing keys and bad keys.

use http::Request;
use tracing::Span;

use super::extract::{KeyExtractor, shorten};
use super::name::lock_name;
use super::settings::KeySettings;
use super::words::Words;
use crate::config::MissingKey;
use crate::rejection::Rejection;

/// What became of a request before its layer's call to the store.
pub(crate) enum Named {
    /// The name of the request's object.
    Name(String),
    /// The layer's answer, with the outcome for the request's span.
    Reject(Rejection, &'static str),
    /// No key, and the layer lets such requests through without it (the outcome `no_key` is
    /// recorded).
    PassThrough,
}

/// Names `request`'s object: the layer's prefix and the key `extractor` finds, by the
/// layer's key rules. Records the name (or the bad key, shortened) as the span's `key`;
/// logs a layer whose settings cannot work at `error`, a key the route cannot have at
/// `error` once per route, and a bad key at `debug`.
pub(crate) fn name_request<K, B>(
    keys: &KeySettings,
    extractor: &K,
    request: &mut Request<B>,
    span: &Span,
    words: &Words,
) -> Named
where
    K: KeyExtractor<B> + ?Sized,
{
    let reject =
        |rejection: Rejection, outcome| Named::Reject(rejection.by_layer(words.label), outcome);
    if let Some(error) = keys.invalid() {
        tracing::error!(parent: span, %error, "the {} layer is misconfigured", words.layer);
        return reject(Rejection::misconfigured(error), "error");
    }
    let Some(key) = extractor.extract_mut(request) else {
        if keys.missing_key == MissingKey::PassThrough {
            span.record("outcome", "no_key");
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
            return reject(Rejection::key_not_in_route(), "error");
        }
        return reject(Rejection::missing_key(words.missing_key), "missing_key");
    };
    match lock_name(&keys.rules, &key) {
        Ok(name) => {
            span.record("key", tracing::field::display(shorten(&name)));
            Named::Name(name)
        }
        Err(reason) => {
            span.record("key", tracing::field::display(shorten(&key)));
            tracing::debug!(parent: span, reason, "invalid {} key", words.layer);
            reject(Rejection::invalid_key(&reason), "invalid_key")
        }
    }
}
