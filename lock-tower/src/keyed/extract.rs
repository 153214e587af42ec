//! Where a request's lock key comes from: the [`KeyExtractor`] trait and the built-in
//! extractors.
//!
//! A key is the part of the lock name that comes from the request (an order id, a user id).
//! The layer checks it (length, control characters, the lock-name rules of
//! [`lock_core::validate_name`]) and puts the layer's prefix in front of it, so a client
//! can only ever lock names under that prefix. Extractors only find the value: they do not
//! need to validate it.
//!
//! **Use the same value the handler uses.** A lock serialises requests only if two requests
//! for the same resource produce the same key. The built-ins decode what they read the way
//! axum's own extractors do (percent-decoding for paths and queries) so that `/orders/42` and
//! `/orders/%34%32` lock the same name, but when a request carries the value twice (two
//! headers, a repeated query parameter) they take the first one: make sure the handler reads
//! the same one, or reject such requests.

use std::fmt;

use http::Request;
use http::header::{AsHeaderName, HeaderName};

/// Finds the lock key of a request.
///
/// Returning `None` means the request has no key; the layer then follows its
/// [`MissingKey`](crate::MissingKey) policy (by default: `400 Bad Request`). Any other value
/// is checked by the layer and answered with `400 Bad Request` if it cannot be a lock key.
///
/// The body type `B` is a parameter of the trait (not of the method) so that closures can be
/// extractors:
///
/// ```
/// use axum::http::Request;
/// use lock_tower::{KeyExtractor, header_value};
///
/// let by_user = |req: &Request<()>| header_value(req, "x-user-id");
/// let req = Request::builder().header("x-user-id", "u-7").body(()).unwrap();
/// assert_eq!(by_user.extract(&req).as_deref(), Some("u-7"));
/// ```
pub trait KeyExtractor<B> {
    /// The key of `request`, or `None` when it has none.
    fn extract(&self, request: &Request<B>) -> Option<String>;

    /// The same key, from a request lent mutably: what the layer calls, so that an extractor
    /// can move a part out and back instead of copying it (it must leave the request as it
    /// found it). By default, [`extract`](Self::extract).
    fn extract_mut(&self, request: &mut Request<B>) -> Option<String> {
        self.extract(request)
    }

    /// Called only when a request has no key: whether that is the server's fault rather than
    /// the request's, because this extractor looks for something the route the request
    /// matched can never have (a [`PathParam`] naming a parameter the route does not
    /// declare). The layer then answers `500` ([`RejectionKind::KeyNotInRoute`]) instead of
    /// `400`, and logs the mismatch at `error` once per route.
    ///
    /// By default `None`: a missing key is the request's (a header or query parameter it did
    /// not send).
    ///
    /// [`RejectionKind::KeyNotInRoute`]: crate::RejectionKind::KeyNotInRoute
    fn route_mismatch(&self, request: &Request<B>) -> Option<RouteMismatch> {
        let _ = request;
        None
    }
}

/// A key extractor that cannot work on the route a request matched: it looks for a route
/// parameter the route does not have (see [`KeyExtractor::route_mismatch`]). A server
/// misconfiguration, not a bad request.
///
/// ```
/// use lock_tower::RouteMismatch;
///
/// let mismatch = RouteMismatch::new("order_id", Some("/orders/{id}/pay".to_owned()));
/// assert_eq!(
///     mismatch.to_string(),
///     "the route `/orders/{id}/pay` has no parameter `order_id`"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteMismatch {
    parameter: String,
    route: Option<String>,
}

impl RouteMismatch {
    /// The extractor looks for `parameter`, which `route` (the matched route's pattern, as
    /// axum's `MatchedPath` gives it; `None` when the request matched no route) lacks.
    pub fn new(parameter: impl Into<String>, route: Option<String>) -> Self {
        Self {
            parameter: parameter.into(),
            route,
        }
    }

    /// The parameter the extractor looks for.
    pub fn parameter(&self) -> &str {
        &self.parameter
    }

    /// The pattern of the route the request matched, if it matched one.
    pub fn route(&self) -> Option<&str> {
        self.route.as_deref()
    }
}

impl fmt::Display for RouteMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.route {
            Some(route) => write!(
                f,
                "the route `{route}` has no parameter `{}`",
                self.parameter
            ),
            None => write!(
                f,
                "the request matched no route, so it has no parameter `{}` (add the layer \
                 with `route_layer`)",
                self.parameter
            ),
        }
    }
}

impl<B, F> KeyExtractor<B> for F
where
    F: Fn(&Request<B>) -> Option<String>,
{
    fn extract(&self, request: &Request<B>) -> Option<String> {
        self(request)
    }
}

/// The value of the header `name`, if the request has one: the first one if it has several.
///
/// Bytes that are not UTF-8 (obsolete header text) are replaced by U+FFFD, so such values
/// still lock something (possibly more than needed) rather than nothing.
pub fn header_value<B>(request: &Request<B>, name: impl AsHeaderName) -> Option<String> {
    request
        .headers()
        .get(name)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// The key is a request header's value, e.g. `x-user-id`.
///
/// **Only trust a header your own infrastructure sets or checks.** A header that the client
/// chooses freely (a user id it claims) lets that client pick which lock its request takes:
/// fine for serialising one user's requests, not a security boundary. When the request
/// carries the header more than once, the first value is the key.
///
/// ```
/// use axum::http::{HeaderName, Request};
/// use lock_tower::{Header, KeyExtractor};
///
/// let key = Header::new(HeaderName::from_static("x-user-id"));
/// let req = Request::builder().header("x-user-id", "u-7").body(()).unwrap();
/// assert_eq!(key.extract(&req).as_deref(), Some("u-7"));
/// ```
#[derive(Debug, Clone)]
pub struct Header {
    name: HeaderName,
}

impl Header {
    /// The key is the value of the header `name`.
    pub const fn new(name: HeaderName) -> Self {
        Self { name }
    }
}

impl<B> KeyExtractor<B> for Header {
    fn extract(&self, request: &Request<B>) -> Option<String> {
        header_value(request, &self.name)
    }
}

/// The key is one segment of the request path, counted from 0 after the leading `/`:
/// in `/orders/42/pay`, segment 1 is `42`. The segment is percent-decoded.
///
/// **It counts on the path as this service sees it.** It assumes every request that reaches
/// it has the shape of its route: put it on that route only (axum's `route_layer`), and
/// remember that inside a router nested with axum's `nest` the path no longer has the nesting
/// prefix. With axum, [`PathParam`] names the parameter instead and cannot drift from the
/// route.
///
/// ```
/// use axum::http::Request;
/// use lock_tower::{KeyExtractor, PathSegment};
///
/// let req = Request::builder().uri("/orders/4%32/pay").body(()).unwrap();
/// assert_eq!(PathSegment::new(1).extract(&req).as_deref(), Some("42"));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct PathSegment {
    index: usize,
}

impl PathSegment {
    /// The key is path segment `index` (0-based, after the leading `/`).
    pub const fn new(index: usize) -> Self {
        Self { index }
    }
}

impl<B> KeyExtractor<B> for PathSegment {
    fn extract(&self, request: &Request<B>) -> Option<String> {
        let path = request.uri().path();
        let path = path.strip_prefix('/').unwrap_or(path);
        path.split('/')
            .nth(self.index)
            .map(|segment| percent_decode(segment, false))
    }
}

/// The key is a query parameter, e.g. `?order=42`, decoded like an HTML form
/// (`application/x-www-form-urlencoded`: percent-decoding, `+` for a space).
///
/// When the parameter appears more than once the first value is the key: a handler that
/// reads a different one (or all of them) is not protected by the lock. Make sure the handler
/// rejects repeated parameters, or reads the first.
///
/// ```
/// use axum::http::Request;
/// use lock_tower::{KeyExtractor, QueryParam};
///
/// let req = Request::builder().uri("/pay?order=42&x=1").body(()).unwrap();
/// assert_eq!(QueryParam::new("order").extract(&req).as_deref(), Some("42"));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct QueryParam {
    name: &'static str,
}

impl QueryParam {
    /// The key is the value of the query parameter `name`.
    pub const fn new(name: &'static str) -> Self {
        Self { name }
    }
}

impl<B> KeyExtractor<B> for QueryParam {
    fn extract(&self, request: &Request<B>) -> Option<String> {
        request.uri().query()?.split('&').find_map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name, true) == self.name).then(|| percent_decode(value, true))
        })
    }
}

/// The key is a parameter of the matched axum route, by name: `PathParam::new("order_id")`
/// on `/orders/{order_id}/pay`. The value is percent-decoded, exactly as axum's `Path` gives
/// it to the handler.
///
/// **Add the layer with `Router::route_layer`**, not `Router::layer`: route parameters exist
/// only once a route has matched. A parameter that is not valid UTF-8 once decoded counts as
/// missing (`400`, the request's fault), as it is for axum's `Path<String>`.
///
/// A name the route does not declare (`PathParam::new("order_id")` on `/orders/{id}`), or a
/// request that matched no route (the layer added with `Router::layer`, reached by the
/// fallback), is the server's fault: with [`MissingKey::Reject`](crate::MissingKey::Reject),
/// the default, such requests are answered `500` with the code `lock_key_not_in_route`, and
/// the layer logs the parameter and the route at `error`, once per route (see
/// [`KeyExtractor::route_mismatch`]). With [`MissingKey::PassThrough`](crate::MissingKey::PassThrough)
/// they run without the lock, as every request without a key does.
///
/// ```
/// use axum::{Router, routing::post};
/// use lock_tower::{DistributedLockLayer, PathParam};
///
/// # fn app(client: lock_core::LockClient) -> Router {
/// Router::new()
///     .route("/orders/{order_id}/pay", post(|| async { "paid" }))
///     .route_layer(DistributedLockLayer::new(client, PathParam::new("order_id")).prefix("order:"))
/// # }
/// ```
///
/// The name may be a literal or an owned string, such as one read from configuration (no
/// `Box::leak` needed):
///
/// ```
/// use lock_tower::PathParam;
///
/// let from_config: String = "order_id".to_owned();
/// let _ = PathParam::new(from_config);
/// let _ = PathParam::new("order_id");
/// ```
#[cfg(feature = "axum")]
#[derive(Debug, Clone)]
pub struct PathParam {
    name: std::borrow::Cow<'static, str>,
}

#[cfg(feature = "axum")]
impl PathParam {
    /// The key is the route parameter `name` (without braces): a `&'static str`, a `String`
    /// or a `Cow<'static, str>`.
    pub fn new(name: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        Self { name: name.into() }
    }
}

#[cfg(feature = "axum")]
impl<B> KeyExtractor<B> for PathParam {
    // axum 0.8 keeps the parameters in a private request extension and reads them only
    // through `FromRequestParts`, which needs owned parts: the extensions are copied over
    // from a shared request, and moved over and back from a lent one.
    fn extract(&self, request: &Request<B>) -> Option<String> {
        self.read_parts(&mut parts_with(request))
    }

    fn extract_mut(&self, request: &mut Request<B>) -> Option<String> {
        let (mut parts, ()) = Request::new(()).into_parts();
        parts.extensions = std::mem::take(request.extensions_mut());
        let key = self.read_parts(&mut parts);
        *request.extensions_mut() = parts.extensions;
        key
    }

    fn route_mismatch(&self, request: &Request<B>) -> Option<RouteMismatch> {
        use axum::extract::MatchedPath;
        use axum::extract::rejection::RawPathParamsRejection;

        let lacks = match route_params(&mut parts_with(request)) {
            Some(Ok(params)) => !params.iter().any(|(name, _)| name == self.name.as_ref()),
            // Routing found no parameters at all: no route matched.
            Some(Err(RawPathParamsRejection::MissingPathParams(_))) => true,
            // A parameter that is not UTF-8: the request's fault.
            Some(Err(_)) | None => false,
        };
        lacks.then(|| {
            let route = request.extensions().get::<MatchedPath>();
            RouteMismatch::new(self.name.clone(), route.map(|r| r.as_str().to_owned()))
        })
    }
}

/// Parts carrying a copy of `request`'s extensions.
#[cfg(feature = "axum")]
fn parts_with<B>(request: &Request<B>) -> http::request::Parts {
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.extensions = request.extensions().clone();
    parts
}

/// The route's parameters, from parts carrying the request's extensions: `None` if axum's
/// extractor is not ready at once (it always is).
#[cfg(feature = "axum")]
fn route_params(
    parts: &mut http::request::Parts,
) -> Option<Result<axum::extract::RawPathParams, axum::extract::rejection::RawPathParamsRejection>>
{
    use axum::extract::{FromRequestParts, RawPathParams};

    now_or_never(RawPathParams::from_request_parts(parts, &()))
}

#[cfg(feature = "axum")]
impl PathParam {
    /// The parameter's value, from parts carrying the request's extensions.
    fn read_parts(&self, parts: &mut http::request::Parts) -> Option<String> {
        let params = route_params(parts)?.ok()?;
        params
            .iter()
            .find(|(name, _)| *name == self.name.as_ref())
            .map(|(_, value)| value.to_owned())
    }
}

/// Polls a future once; `None` if it is not ready at once.
#[cfg(feature = "axum")]
fn now_or_never<F: Future>(future: F) -> Option<F::Output> {
    use std::task::{Context, Poll, Waker};

    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}

/// Percent-decodes `input` (and `+` as a space for form encoding). Invalid escapes stay as
/// they are; bytes that are not UTF-8 once decoded become U+FFFD.
fn percent_decode(input: &str, plus_as_space: bool) -> String {
    fn hex(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    if !input.contains(['%', '+']) {
        return input.to_owned();
    }
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => match (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus_as_space => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// Shortens a key for a log line or a span field.
pub(crate) fn shorten(key: &str) -> impl fmt::Display + '_ {
    struct Short<'a>(&'a str);
    impl fmt::Display for Short<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            const MAX: usize = 64;
            match self.0.char_indices().nth(MAX) {
                Some((i, _)) => write!(f, "{}…", self.0[..i].escape_debug()),
                None => write!(f, "{}", self.0.escape_debug()),
            }
        }
    }
    Short(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "axum")]
    #[tokio::test]
    async fn a_path_param_read_from_a_lent_request_leaves_its_extensions_in_place() {
        use axum::Router;
        use axum::body::Body;
        use axum::extract::Path;
        use axum::middleware::{self, Next};
        use axum::routing::get;
        use tower::ServiceExt;

        async fn check(mut request: Request<Body>, next: Next) -> axum::response::Response {
            let key = PathParam::new("id");
            let lent = key.extract_mut(&mut request);
            assert_eq!(lent.as_deref(), Some("4 2"));
            assert_eq!(key.extract(&request), lent, "the extensions went back");
            next.run(request).await
        }
        let app = Router::new()
            .route(
                "/orders/{id}",
                get(|Path(id): Path<String>| async move { id }),
            )
            .route_layer(middleware::from_fn(check));
        let request = Request::builder().uri("/orders/4%202").body(Body::empty());
        let response = app.oneshot(request.unwrap()).await.unwrap();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(&body[..], b"4 2", "the handler still reads the parameter");
    }

    fn req(uri: &str) -> Request<()> {
        Request::builder().uri(uri).body(()).unwrap()
    }

    #[test]
    fn path_segment_counts_after_the_leading_slash_and_decodes() {
        assert_eq!(
            PathSegment::new(0)
                .extract(&req("/orders/42/pay"))
                .as_deref(),
            Some("orders")
        );
        assert_eq!(
            PathSegment::new(1)
                .extract(&req("/orders/42/pay"))
                .as_deref(),
            Some("42")
        );
        assert_eq!(
            PathSegment::new(1)
                .extract(&req("/orders/%34%32"))
                .as_deref(),
            Some("42")
        );
        assert_eq!(
            PathSegment::new(1).extract(&req("/orders/a+b")).as_deref(),
            Some("a+b")
        );
        assert_eq!(
            PathSegment::new(1).extract(&req("/orders//pay")).as_deref(),
            Some("")
        );
        assert_eq!(PathSegment::new(3).extract(&req("/orders/42/pay")), None);
        assert_eq!(
            PathSegment::new(1).extract(&req("/orders/%0A")).as_deref(),
            Some("\n")
        );
    }

    #[test]
    fn query_param_takes_the_first_and_decodes_like_a_form() {
        let key = QueryParam::new("order");
        assert_eq!(key.extract(&req("/p?order=42")).as_deref(), Some("42"));
        assert_eq!(
            key.extract(&req("/p?x=1&order=4%32&order=7")).as_deref(),
            Some("42")
        );
        assert_eq!(key.extract(&req("/p?ord%65r=a+b")).as_deref(), Some("a b"));
        assert_eq!(key.extract(&req("/p?order")).as_deref(), Some(""));
        assert_eq!(key.extract(&req("/p?orders=1")), None);
        assert_eq!(key.extract(&req("/p")), None);
    }

    #[test]
    fn header_takes_the_first_value_and_keeps_odd_bytes_lossily() {
        let key = Header::new(HeaderName::from_static("x-user-id"));
        let r = Request::builder()
            .header("x-user-id", "u1")
            .header("x-user-id", "u2")
            .body(())
            .unwrap();
        assert_eq!(key.extract(&r).as_deref(), Some("u1"));
        assert_eq!(key.extract(&req("/")), None);
        let odd = Request::builder()
            .header(
                "x-user-id",
                http::HeaderValue::from_bytes(b"u\xff").unwrap(),
            )
            .body(())
            .unwrap();
        assert_eq!(key.extract(&odd).as_deref(), Some("u\u{fffd}"));
    }

    #[test]
    fn closures_are_extractors() {
        let key = |r: &Request<()>| r.uri().path().strip_prefix("/users/").map(str::to_owned);
        assert_eq!(key.extract(&req("/users/7")).as_deref(), Some("7"));
        assert_eq!(key.extract(&req("/teams/7")), None);
    }

    #[test]
    fn percent_decoding_keeps_invalid_escapes_and_replaces_invalid_utf8() {
        assert_eq!(percent_decode("100%", false), "100%");
        assert_eq!(percent_decode("%zz%4", false), "%zz%4");
        assert_eq!(percent_decode("%C3%A9", false), "é");
        assert_eq!(percent_decode("%ff", false), "\u{fffd}");
    }

    #[test]
    fn shorten_cuts_long_keys_and_escapes() {
        assert_eq!(shorten("a\nb").to_string(), "a\\nb");
        let long = "x".repeat(100);
        assert_eq!(shorten(&long).to_string(), format!("{}…", "x".repeat(64)));
    }

    #[cfg(feature = "axum")]
    mod axum_path_param {
        use axum::Router;
        use axum::body::Body;
        use axum::routing::get;
        use http_body_util::BodyExt;
        use tower::ServiceExt;

        use super::super::*;

        async fn extracted(router: Router, uri: &str) -> (u16, String) {
            let res = router
                .oneshot(Request::builder().uri(uri).body(Body::empty()).unwrap())
                .await
                .unwrap();
            let status = res.status().as_u16();
            let body = res.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8(body.to_vec()).unwrap())
        }

        /// `handler` on a route with a parameter and on one without.
        fn two_routes<H, T>(handler: H) -> Router
        where
            H: axum::handler::Handler<T, ()>,
            T: 'static,
        {
            Router::new()
                .route("/orders/{order_id}/pay", get(handler.clone()))
                .route("/plain", get(handler))
        }

        fn router(name: &'static str) -> Router {
            // The handler sees the request exactly as a route layer does.
            let handler = move |req: Request<Body>| async move {
                format!("{:?}", PathParam::new(name).extract(&req))
            };
            two_routes(handler)
        }

        /// What `route_mismatch` says of a request, as a route layer sees it.
        fn mismatch_router(name: &'static str) -> Router {
            let handler = move |req: Request<Body>| async move {
                match PathParam::new(name).route_mismatch(&req) {
                    Some(m) => format!("{:?} {:?}", m.parameter(), m.route()),
                    None => "fits".to_owned(),
                }
            };
            two_routes(handler)
        }

        #[tokio::test]
        async fn path_param_reads_the_matched_route_parameter_decoded() {
            let (status, body) = extracted(router("order_id"), "/orders/4%32/pay").await;
            assert_eq!((status, body.as_str()), (200, "Some(\"42\")"));
            let (_, body) = extracted(router("order_id"), "/orders/a%0Ab/pay").await;
            assert_eq!(body, "Some(\"a\\nb\")");
        }

        #[tokio::test]
        async fn path_param_is_missing_for_another_name_or_no_parameters() {
            assert_eq!(extracted(router("id"), "/orders/42/pay").await.1, "None");
            assert_eq!(extracted(router("order_id"), "/plain").await.1, "None");
            let bare = Request::builder().uri("/orders/42/pay").body(()).unwrap();
            assert_eq!(PathParam::new("order_id").extract(&bare), None);
        }

        #[tokio::test]
        async fn a_parameter_the_route_lacks_is_a_route_mismatch() {
            let (_, body) = extracted(mismatch_router("id"), "/orders/42/pay").await;
            assert_eq!(body, r#""id" Some("/orders/{order_id}/pay")"#);
            let (_, body) = extracted(mismatch_router("order_id"), "/plain").await;
            assert_eq!(body, r#""order_id" Some("/plain")"#);
            let (_, body) = extracted(mismatch_router("order_id"), "/orders/42/pay").await;
            assert_eq!(body, "fits");
            // Not a UTF-8 value: the request's fault, not the route's.
            let (_, body) = extracted(mismatch_router("order_id"), "/orders/%ff/pay").await;
            assert_eq!(body, "fits");
            // No routing at all: no route to name.
            let bare = Request::builder().uri("/orders/42/pay").body(()).unwrap();
            let mismatch = PathParam::new("order_id").route_mismatch(&bare).unwrap();
            assert_eq!((mismatch.parameter(), mismatch.route()), ("order_id", None));
            assert!(mismatch.to_string().contains("route_layer"), "{mismatch}");
        }

        #[tokio::test]
        async fn path_param_with_invalid_utf8_counts_as_missing() {
            assert_eq!(
                extracted(router("order_id"), "/orders/%ff/pay").await.1,
                "None"
            );
        }
    }
}
