//! Hostile input, property-tested (issue 17 §3), where it needs a server:
//!
//! - names and key prefixes from anywhere, against a real `redis-server`: an accepted name
//!   locks exactly its own key, a refused one is refused before anything is sent, a refused
//!   prefix before anything connects;
//! - the tower layer over arbitrary queries, header values and path parameters, against a real
//!   `redis-server`: every request runs under a valid lock name or is answered `400`;
//! - every script reply, malformed ones included, from a fake server that speaks just enough
//!   RESP to host a client and answers each script call with a generated reply: every
//!   primitive's take, release, extension, re-entry, inspection and renewal ends in a value or
//!   a typed error, never a panic or a hang.
//!
//! The pure parts (name rules, key templates, key extraction, each decoder on `redis::Value`
//! trees) are property-tested in the crates' own unit tests. Each property here runs a fixed
//! number of cases and writes no regression file.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::routing::get;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::BodyExt;
use lock_core::{Guard, HeldLock, LockClient, LockError, validate_name};
use lock_tests::fixtures::abort_if_hung;
use lock_tests::{RedisServer, Reply};
use lock_tower::{DistributedLockLayer, Header, KeyExtractor, PathParam, QueryParam};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tower::ServiceExt;

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// The runtime the properties block on (a proptest case is a plain closure); its threads
/// are named `name`.
/// How long one of these tests may take before it is taken for a deadlock (they take
/// seconds): the process aborts instead of holding CI.
const HANG_LIMIT: Duration = Duration::from_secs(120);

fn runtime(name: &str) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn forbidden(c: char) -> bool {
    c == '{' || c == '}' || c.is_whitespace() || c.is_control()
}

/// The characters the name rules are about, common ones, and any character.
fn hostile_char() -> impl Strategy<Value = char> {
    prop_oneof![
        6 => prop::char::range('a', 'z'),
        2 => prop::sample::select(vec![':', '-', '_', '.', '*', '?', '[', '|', '/', '%', '"', '\\']),
        3 => prop::sample::select(vec![
            '{', '}', ' ', '\t', '\n', '\r', '\0', '\x1b', '\x7f', '\u{85}', '\u{a0}', '\u{2028}',
            '\u{3000}', '\u{200b}', '\u{feff}', '\u{fffd}', 'é', '订', '😀', '\u{10ffff}',
        ]),
        1 => any::<char>(),
    ]
}

/// Names: short and hostile, made of allowed characters only, or around the 512-byte limit.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::collection::vec(hostile_char(), 0..16).prop_map(String::from_iter),
        3 => prop::collection::vec(
            hostile_char().prop_filter("allowed", |c| !forbidden(*c)),
            1..16,
        )
        .prop_map(String::from_iter),
        1 => (508usize..=514, prop::collection::vec(hostile_char(), 0..2))
            .prop_map(|(n, tail)| "n".repeat(n) + &String::from_iter(tail)),
    ]
}

fn fcall_count(server: &RedisServer) -> u64 {
    let stats = server.cmd(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_fcall:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a count"))
}

fn exists(server: &RedisServer, key: &str) -> bool {
    matches!(server.query(&["EXISTS", key]), Reply::Integer(1))
}

/// What became of one take of an arbitrary name.
#[derive(Debug)]
enum Taken {
    Refused(LockError),
    /// Held under this name, the key existed while held, and `unlock` said it was still held.
    HeldAndGivenBack {
        name: String,
        key_existed: bool,
        unlocked: Result<bool, LockError>,
    },
    Busy,
}

async fn take_and_give_back<G: Guard>(
    taken: Result<Option<G>, LockError>,
    server: &RedisServer,
    key: &str,
) -> Taken {
    match taken {
        Err(e) => Taken::Refused(e),
        Ok(None) => Taken::Busy,
        Ok(Some(guard)) => Taken::HeldAndGivenBack {
            name: guard.name().to_owned(),
            key_existed: exists(server, key),
            unlocked: guard.unlock().await,
        },
    }
}

/// Any name: an accepted one takes and gives back each kind of lock on exactly its key
/// (`lock:{N}`, `lock:{N}:fair`, ...); a refused one is `InvalidName` before any script is
/// sent.
#[test]
fn any_name_locks_its_own_key_or_is_refused_before_anything_is_sent() {
    let _hang = abort_if_hung(
        "any_name_locks_its_own_key_or_is_refused_before_anything_is_sent",
        HANG_LIMIT,
    );
    let server = RedisServer::start();
    let rt = runtime("names");
    // The calls are counted as calls of the scripts.
    let client = rt
        .block_on(
            LockClient::builder(&server.url())
                .mutex_protocol(lock_core::MutexProtocol::Scripted)
                .build(),
        )
        .expect("a client");
    let mut runner = TestRunner::new(config(64));
    let result = runner.run(&(name(), 0u8..4), |(name, kind)| {
        let calls = fcall_count(&server);
        let suffix = ["", ":fair", ":rw", ":permits"][usize::from(kind)];
        let key = format!("lock:{{{name}}}{suffix}");
        let taken = rt.block_on(async {
            let server = &server;
            match kind {
                0 => take_and_give_back(client.try_lock(&name).await, server, &key).await,
                1 => {
                    take_and_give_back(client.fair_lock(&name).try_lock().await, server, &key).await
                }
                2 => {
                    let rw = client.read_write_lock(&name);
                    take_and_give_back(rw.try_write().await, server, &key).await
                }
                _ => {
                    let permits = client.semaphore(&name, 2);
                    take_and_give_back(permits.try_acquire(1).await, server, &key).await
                }
            }
        });
        if validate_name(&name).is_ok() {
            let Taken::HeldAndGivenBack {
                name: held,
                key_existed,
                unlocked,
            } = taken
            else {
                return Err(TestCaseError::fail(format!("{name:?}: {taken:?}")));
            };
            prop_assert_eq!(held, name.clone());
            prop_assert!(key_existed, "{:?}: no key {:?}", name, key);
            prop_assert_eq!(unlocked.ok(), Some(true), "{:?}", name);
            prop_assert!(fcall_count(&server) > calls);
        } else {
            prop_assert!(
                matches!(taken, Taken::Refused(LockError::InvalidName { .. })),
                "{:?}: {:?}",
                name,
                taken
            );
            prop_assert_eq!(fcall_count(&server), calls, "{:?} sent a script", name);
        }
        Ok(())
    });
    rt.block_on(async move { drop(client) });
    if let Err(e) = result {
        panic!("{e}");
    }
}

fn total_connections(server: &RedisServer) -> u64 {
    server
        .cmd(&["INFO", "stats"])
        .lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .map(|n| n.trim().parse().expect("a count"))
        .expect("total_connections_received")
}

/// Any key prefix: an accepted one builds a client whose locks live under it; a refused one
/// is `InvalidOption("key_prefix")` before anything connects.
#[test]
fn any_key_prefix_builds_a_client_that_locks_under_it_or_is_refused_before_connecting() {
    let _hang = abort_if_hung(
        "any_key_prefix_builds_a_client_that_locks_under_it_or_is_refused_before_connecting",
        HANG_LIMIT,
    );
    let server = RedisServer::start();
    // Refused builds aim here: no other client ever connects to it, so its connection count
    // moves only if a refused build connected (a dropped client of an earlier case may still
    // be opening a background connection to `server`).
    let untouched = RedisServer::start();
    let rt = runtime("prefixes");
    let prefix = prop_oneof![
        3 => prop::collection::vec(hostile_char(), 0..10).prop_map(String::from_iter),
        3 => prop::collection::vec(hostile_char().prop_filter("allowed", |c| !forbidden(*c)), 0..10)
            .prop_map(String::from_iter),
        1 => (126usize..=130).prop_map(|n| "p".repeat(n)),
    ];
    let mut runner = TestRunner::new(config(48));
    let result = runner.run(&prefix, |prefix| {
        let before = total_connections(&untouched);
        let rule = prefix.len() <= 128 && !prefix.chars().any(forbidden);
        let url = if rule { server.url() } else { untouched.url() };
        let outcome = rt.block_on(async {
            let client = LockClient::builder(&url)
                .key_prefix(prefix.clone())
                .build()
                .await?;
            let taken = client.try_lock("n").await;
            let key_existed = exists(&server, &format!("{prefix}{{n}}"));
            let unlocked = match taken? {
                Some(guard) => guard.unlock().await?,
                None => false,
            };
            drop(client);
            Ok::<_, LockError>((key_existed, unlocked))
        });
        if rule {
            prop_assert_eq!(outcome.ok(), Some((true, true)), "{:?}", prefix);
        } else {
            prop_assert!(
                matches!(
                    outcome,
                    Err(LockError::InvalidOption {
                        option: "key_prefix",
                        ..
                    })
                ),
                "{:?}: {:?}",
                prefix,
                outcome
            );
            // Only the connection that asked for the count came in since.
            prop_assert_eq!(
                total_connections(&untouched),
                before + 1,
                "{:?} connected",
                prefix
            );
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Any owner description: an accepted one (1–128 bytes, no control characters) is read back
/// exactly by another client; a refused one is `InvalidOption("owner_description")` before
/// anything connects.
#[test]
fn any_owner_description_is_read_back_exactly_or_is_refused_before_connecting() {
    let _hang = abort_if_hung(
        "any_owner_description_is_read_back_exactly_or_is_refused_before_connecting",
        HANG_LIMIT,
    );
    let server = RedisServer::start();
    // As above: refused builds aim at a server nothing else connects to.
    let untouched = RedisServer::start();
    let rt = runtime("descriptions");
    let reader = rt.block_on(LockClient::connect(&server.url())).unwrap();
    let description = prop_oneof![
        3 => prop::collection::vec(hostile_char(), 0..16).prop_map(String::from_iter),
        3 => prop::collection::vec(hostile_char().prop_filter("printable", |c| !c.is_control()), 1..16)
            .prop_map(String::from_iter),
        1 => (126usize..=130).prop_map(|n| "d".repeat(n)),
    ];
    let mut runner = TestRunner::new(config(48));
    let result = runner.run(&description, |description| {
        let before = total_connections(&untouched);
        let rule = !description.is_empty()
            && description.len() <= 128
            && !description.chars().any(char::is_control);
        let url = if rule { server.url() } else { untouched.url() };
        let outcome = rt.block_on(async {
            let client = LockClient::builder(&url)
                .owner_description(description.clone())
                .build()
                .await?;
            let read = reader.owner_description(client.client_id()).await;
            drop(client);
            read
        });
        if rule {
            prop_assert_eq!(outcome.ok(), Some(Some(description.clone())));
        } else {
            prop_assert!(
                matches!(
                    outcome,
                    Err(LockError::InvalidOption {
                        option: "owner_description",
                        ..
                    })
                ),
                "{:?}: {:?}",
                description,
                outcome
            );
            // Only the connection that asked for the count came in since.
            prop_assert_eq!(
                total_connections(&untouched),
                before + 1,
                "{:?} connected",
                description
            );
        }
        Ok(())
    });
    rt.block_on(async move { drop(reader) });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A piece of a hostile query or path text, as it goes on the wire.
fn uri_piece(raw: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(
            prop_oneof![
                4 => prop::sample::select(raw.chars().collect::<Vec<_>>()),
                1 => any::<char>().prop_filter("non-ASCII", |c| !c.is_ascii()),
            ],
            1..5,
        )
        .prop_map(String::from_iter),
        3 => (any::<u8>(), any::<bool>()).prop_map(|(b, upper)| {
            if upper { format!("%{b:02X}") } else { format!("%{b:02x}") }
        }),
        1 => prop::sample::select(vec!["%", "%z", "%4", "%zz", "+", "%2B", "%25", "%7B", "%7D", "%00", "%0A", "%C3", "%E2%80%A8"])
            .prop_map(str::to_owned),
    ]
}

/// Text for a query value or a path segment: pieces of hostile percent-encoding.
fn uri_text(raw: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::collection::vec(uri_piece(raw), 0..8).prop_map(|p| p.concat()),
        1 => (120usize..140).prop_map(|n| "k".repeat(n)),
    ]
}

/// Characters `http` takes as they are in a query, less `#`, `&` and `%`.
const QUERY_RAW: &str = "!$'()*+,-./:;=?@AZ[\\]^_`az{|}~09";
/// Characters `http` takes as they are in a path, less `/`, `?`, `#` and `%`.
const PATH_RAW: &str = "!$&'()*+,-.:;=@AZ[\\]^_az|~\"{}09";

/// What the layer must answer for `key` (None: the request has none).
fn check_answer(
    prefix: &str,
    hash_keys: bool,
    max_key_len: usize,
    key: Option<&str>,
    status: StatusCode,
    body: &str,
) -> Result<(), TestCaseError> {
    let code = || {
        serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["code"].as_str().map(str::to_owned))
    };
    let Some(key) = key else {
        prop_assert_eq!(status, StatusCode::BAD_REQUEST);
        let code = code();
        prop_assert_eq!(code.as_deref(), Some("missing_lock_key"));
        return Ok(());
    };
    let plain = format!("{prefix}{key}");
    let acceptable = !key.is_empty() && key.len() <= max_key_len && validate_name(&plain).is_ok();
    if acceptable && !(hash_keys && key.starts_with("sha256:")) {
        prop_assert_eq!(
            (status, body),
            (StatusCode::OK, plain.as_str()),
            "{:?}",
            key
        );
    } else if hash_keys && !key.is_empty() {
        prop_assert_eq!(status, StatusCode::OK, "{:?}: {}", key, body);
        let digest = body
            .strip_prefix(prefix)
            .and_then(|b| b.strip_prefix("sha256:"));
        prop_assert!(
            digest.is_some_and(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit())),
            "{:?} locked {:?}",
            key,
            body
        );
        prop_assert!(validate_name(body).is_ok());
    } else {
        prop_assert_eq!(status, StatusCode::BAD_REQUEST, "{:?}: {}", key, body);
        let code = code();
        prop_assert_eq!(code.as_deref(), Some("invalid_lock_key"), "{:?}", key);
    }
    Ok(())
}

/// axum's decoding of a path parameter: `%XX` escapes, nothing else; None if not UTF-8.
fn axum_decoded(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

async fn answer(app: &Router, request: Request<Body>) -> (StatusCode, String) {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Any query, header value or path parameter: the handler runs under the lock named prefix +
/// key (or its hash, with `hash_keys`), or the layer answers `400` with `missing_lock_key` or
/// `invalid_lock_key`; never a `500` for a name lock-core refuses.
#[test]
fn any_request_key_runs_under_a_valid_lock_name_or_is_answered_400() {
    let _hang = abort_if_hung(
        "any_request_key_runs_under_a_valid_lock_name_or_is_answered_400",
        HANG_LIMIT,
    );
    let server = RedisServer::start();
    let rt = runtime("requests");
    let client = rt
        .block_on(LockClient::builder(&server.url()).build())
        .expect("a client");
    let held = |lock: axum::Extension<HeldLock>| async move { lock.name().to_owned() };
    let x_key = HeaderName::from_static("x-key");
    let app = {
        let layer_q = |prefix: &str, hash: bool| {
            DistributedLockLayer::new(client.clone(), QueryParam::new("k"))
                .prefix(prefix)
                .hash_keys(hash)
                .max_key_len(if hash { 16 } else { 128 })
        };
        let layer_h = |prefix: &str, hash: bool| {
            DistributedLockLayer::new(
                client.clone(),
                Header::new(HeaderName::from_static("x-key")),
            )
            .prefix(prefix)
            .hash_keys(hash)
            .max_key_len(if hash { 16 } else { 128 })
        };
        let layer_p = |prefix: &str, hash: bool| {
            DistributedLockLayer::new(client.clone(), PathParam::new("id"))
                .prefix(prefix)
                .hash_keys(hash)
                .max_key_len(if hash { 16 } else { 128 })
        };
        // The handler of a path route also reads the parameter itself: the layer must have
        // locked the same value.
        let held_path = |lock: axum::Extension<HeldLock>, Path(id): Path<String>| async move {
            format!("{}\n{id}", lock.name())
        };
        Router::new()
            .route("/q", get(held).route_layer(layer_q("q:", false)))
            .route("/qh", get(held).route_layer(layer_q("qh:", true)))
            .route("/h", get(held).route_layer(layer_h("h:", false)))
            .route("/hh", get(held).route_layer(layer_h("hh:", true)))
            .route("/p/{id}", get(held_path).route_layer(layer_p("p:", false)))
            .route("/ph/{id}", get(held_path).route_layer(layer_p("ph:", true)))
    };
    let routes = |hash: bool| if hash { (16, "h") } else { (128, "") };

    // Queries: the first `k` of several, in any encoding.
    let query = prop::collection::vec(
        (
            prop_oneof![3 => Just("k".to_owned()), 1 => Just("%6B".to_owned()), 1 => uri_text(QUERY_RAW)],
            prop::option::weighted(0.9, uri_text(QUERY_RAW)),
        ),
        0..4,
    );
    let mut runner = TestRunner::new(config(128));
    let result = runner.run(&(query, any::<bool>()), |(pairs, hash)| {
        let query: Vec<String> = pairs
            .iter()
            .map(|(name, value)| match value {
                Some(value) => format!("{name}={value}"),
                None => name.clone(),
            })
            .collect();
        let uri = format!("/q{}?{}", routes(hash).1, query.join("&"));
        let request = Request::builder().uri(&uri).body(Body::empty());
        let request = request.map_err(|e| TestCaseError::fail(format!("{uri:?}: {e}")))?;
        let key = QueryParam::new("k").extract(&request);
        let (status, body) = rt.block_on(answer(&app, request));
        let prefix = if hash { "qh:" } else { "q:" };
        check_answer(prefix, hash, routes(hash).0, key.as_deref(), status, &body)
    });
    if let Err(e) = result {
        panic!("query: {e}");
    }

    // Header values: any bytes `http` lets through, obsolete text included; the first of
    // several.
    let value = prop::collection::vec(
        prop_oneof![6 => 0x20u8..0x7f, 2 => 0x80u8..=0xff, 1 => Just(b'\t')],
        0..40,
    );
    let mut runner = TestRunner::new(config(128));
    let result = runner.run(
        &(prop::collection::vec(value, 0..3), any::<bool>()),
        |(values, hash)| {
            let mut request = Request::builder().uri(if hash { "/hh" } else { "/h" });
            for value in &values {
                let value = HeaderValue::from_bytes(value).expect("a header value http accepts");
                request = request.header(x_key.clone(), value);
            }
            let request = request.body(Body::empty()).expect("a request");
            let key = Header::new(x_key.clone()).extract(&request);
            let (status, body) = rt.block_on(answer(&app, request));
            let prefix = if hash { "hh:" } else { "h:" };
            check_answer(prefix, hash, routes(hash).0, key.as_deref(), status, &body)
        },
    );
    if let Err(e) = result {
        panic!("header: {e}");
    }

    // Path parameters: one hostile segment, as axum decodes it (not UTF-8: missing).
    let segment = uri_text(PATH_RAW).prop_filter("a segment", |s| !s.is_empty());
    let mut runner = TestRunner::new(config(128));
    let result = runner.run(&(segment, any::<bool>()), |(segment, hash)| {
        let uri = format!("/p{}/{segment}", routes(hash).1);
        let request = Request::builder().uri(&uri).body(Body::empty());
        let request = request.map_err(|e| TestCaseError::fail(format!("{uri:?}: {e}")))?;
        let key = axum_decoded(&segment);
        let (status, body) = rt.block_on(answer(&app, request));
        let prefix = if hash { "ph:" } else { "p:" };
        // The handler answers the lock's name, then the parameter it read itself.
        let (name, param) = body.split_once('\n').unwrap_or((&body, ""));
        if status == StatusCode::OK {
            prop_assert_eq!(Some(param), key.as_deref(), "{:?}", uri);
        }
        check_answer(
            prefix,
            hash,
            routes(hash).0,
            key.as_deref(),
            status,
            if status == StatusCode::OK {
                name
            } else {
                &body
            },
        )
    });
    if let Err(e) = result {
        panic!("path: {e}");
    }
    rt.block_on(async move { drop(client) });
}

/// A reply on the wire: RESP2 and RESP3 frames, well-formed or not.
#[derive(Debug, Clone)]
enum Resp {
    Int(i64),
    Bulk(Vec<u8>),
    /// `$-1`, `*-1` or RESP3 `_`.
    Nil(u8),
    Simple(String),
    Error(String),
    Double(String),
    Bool(bool),
    Big(String),
    Verbatim(String),
    Array(Vec<Resp>),
    Set(Vec<Resp>),
    Map(Vec<(Resp, Resp)>),
    Attribute(Vec<(Resp, Resp)>, Box<Resp>),
    /// Bytes that are not RESP at all (the connection cannot go on after them).
    Garbage(&'static str),
}

impl Resp {
    fn encode(&self, out: &mut Vec<u8>) {
        let line = |out: &mut Vec<u8>, tag: char, text: &str| {
            out.extend(format!("{tag}{text}\r\n").as_bytes());
        };
        match self {
            Resp::Int(n) => line(out, ':', &n.to_string()),
            Resp::Bulk(bytes) => {
                line(out, '$', &bytes.len().to_string());
                out.extend(bytes);
                out.extend(b"\r\n");
            }
            Resp::Nil(0) => out.extend(b"$-1\r\n"),
            Resp::Nil(1) => out.extend(b"*-1\r\n"),
            Resp::Nil(_) => out.extend(b"_\r\n"),
            Resp::Simple(text) => line(out, '+', text),
            Resp::Error(text) => line(out, '-', text),
            Resp::Double(text) => line(out, ',', text),
            Resp::Bool(b) => line(out, '#', if *b { "t" } else { "f" }),
            Resp::Big(digits) => line(out, '(', digits),
            Resp::Verbatim(text) => {
                line(out, '=', &(text.len() + 4).to_string());
                out.extend(format!("txt:{text}\r\n").as_bytes());
            }
            Resp::Array(items) | Resp::Set(items) => {
                line(
                    out,
                    if matches!(self, Resp::Array(_)) {
                        '*'
                    } else {
                        '~'
                    },
                    &items.len().to_string(),
                );
                for item in items {
                    item.encode(out);
                }
            }
            Resp::Map(pairs) | Resp::Attribute(pairs, _) => {
                line(
                    out,
                    if matches!(self, Resp::Map(_)) {
                        '%'
                    } else {
                        '|'
                    },
                    &pairs.len().to_string(),
                );
                for (k, v) in pairs {
                    k.encode(out);
                    v.encode(out);
                }
                if let Resp::Attribute(_, data) = self {
                    data.encode(out);
                }
            }
            Resp::Garbage(bytes) => out.extend(bytes.as_bytes()),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Integers where decoders have edges.
fn int() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => -3i64..=4,
        2 => any::<i64>(),
        2 => prop::sample::select(vec![
            i64::MIN, i64::MIN + 1, i64::MAX, i64::from(u32::MAX), i64::from(u32::MAX) + 1, 1 << 53,
        ]),
    ]
}

/// A frame without nesting: mostly integers and numbers as text, also every other type.
fn scalar() -> impl Strategy<Value = Resp> {
    let text = prop_oneof![
        3 => int().prop_map(|n| n.to_string().into_bytes()),
        1 => "-?[0-9]{19,30}".prop_map(String::into_bytes),
        1 => "[0-9a-z:|-]{0,10}(\\|[0-9-]{0,6}){0,4}".prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..24),
    ];
    let line = "[ -~]{0,16}"; // a RESP line: no CR or LF
    prop_oneof![
        8 => int().prop_map(Resp::Int),
        4 => text.prop_map(Resp::Bulk),
        2 => (0u8..3).prop_map(Resp::Nil),
        1 => line.prop_map(Resp::Simple),
        1 => "(ERR|WRONGTYPE|NOPERM|OOM|BUSY|X)( [ -~]{0,12})?".prop_map(Resp::Error),
        1 => prop::sample::select(vec!["1.5", "-0", "inf", "-inf", "nan", "1e300", "7"])
            .prop_map(|d| Resp::Double(d.to_owned())),
        1 => any::<bool>().prop_map(Resp::Bool),
        1 => "-?[0-9]{1,30}".prop_map(Resp::Big),
        1 => line.prop_map(Resp::Verbatim),
    ]
}

/// Any reply: scalars, and arrays (mostly), sets, maps and attributes of replies; now and
/// then bytes that are not RESP.
fn reply() -> impl Strategy<Value = Resp> {
    let tree = scalar().prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            8 => prop::collection::vec(inner.clone(), 0..5).prop_map(Resp::Array),
            1 => prop::collection::vec(inner.clone(), 0..3).prop_map(Resp::Set),
            1 => prop::collection::vec((inner.clone(), inner.clone()), 0..3).prop_map(Resp::Map),
            1 => (prop::collection::vec((inner.clone(), inner.clone()), 0..2), inner)
                .prop_map(|(pairs, data)| Resp::Attribute(pairs, Box::new(data))),
        ]
    });
    prop_oneof![
        12 => scalar(),
        12 => tree,
        // Arrays of small integers: the shapes the acquisition scripts answer.
        12 => prop::collection::vec(prop_oneof![4 => (-2i64..4).prop_map(Resp::Int), 1 => scalar()], 0..5)
            .prop_map(Resp::Array),
        1 => prop::sample::select(vec!["?what\r\n", ":12a\r\n", "*2\r\n:1\r\n!x\r\n", "$-7\r\n"])
            .prop_map(Resp::Garbage),
    ]
}

/// A fake server: answers the connection handshake, `FUNCTION LOAD`, `PING` and
/// subscriptions as Redis does, and each `FCALL` with the replies queued for its operation
/// (the function name's suffix: `acquire`, `release`, `renew`, ...; the last one repeats).
struct Fake {
    addr: SocketAddr,
    replies: Arc<Replies>,
    calls: Arc<Mutex<HashMap<String, usize>>>,
    /// Notified after each `FCALL`.
    served: Arc<tokio::sync::Notify>,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

/// The replies queued for each operation.
type Replies = Mutex<HashMap<&'static str, VecDeque<Vec<u8>>>>;

/// What an operation's script answers when a case does not say.
fn sane(op: &str) -> &'static [u8] {
    match op {
        "acquire" | "fair_acquire" | "rw_write" => b":7\r\n",
        "sem_acquire" => b"*1\r\n:1\r\n",
        "multi_acquire" => b"*3\r\n:1\r\n:7\r\n:8\r\n",
        "renew" | "rw_read_renew" | "sem_renew" | "batch" => b"*1\r\n:1\r\n",
        "inspect" => b"*2\r\n:-2\r\n$-1\r\n",
        "fair_inspect" => b"*4\r\n:-2\r\n$-1\r\n:0\r\n:0\r\n",
        "rw_inspect" => b"*4\r\n:-2\r\n$-1\r\n:-2\r\n:0\r\n",
        "sem_inspect" => b"*2\r\n:0\r\n$-1\r\n",
        _ => b":1\r\n",
    }
}

impl Fake {
    async fn start() -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let fake = Fake {
            addr: listener.local_addr().expect("an address"),
            replies: Arc::default(),
            calls: Arc::default(),
            served: Arc::default(),
            tasks: Arc::default(),
        };
        let (replies, calls, tasks) =
            (fake.replies.clone(), fake.calls.clone(), fake.tasks.clone());
        let served = fake.served.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (replies, calls, served) = (replies.clone(), calls.clone(), served.clone());
                let task = tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut read = BufReader::new(read);
                    while let Some(command) = read_command(&mut read).await {
                        let answer = respond(&command, &replies, &calls);
                        if write.write_all(&answer).await.is_err() {
                            return;
                        }
                        served.notify_waiters();
                    }
                });
                lock(&tasks).push(task.abort_handle());
            }
        });
        lock(&fake.tasks).push(accept.abort_handle());
        fake
    }

    fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Answers `op`'s calls with `replies` in turn, the last one from then on.
    fn answer(&self, op: &'static str, replies: Vec<Vec<u8>>) {
        lock(&self.replies).insert(op, replies.into());
    }

    fn calls(&self, op: &str) -> usize {
        lock(&self.calls).get(op).copied().unwrap_or(0)
    }

    /// Waits until `op` has been called `n` times.
    async fn called(&self, op: &str, n: usize) {
        loop {
            let served = self.served.notified();
            tokio::pin!(served);
            served.as_mut().enable();
            if self.calls(op) >= n {
                return;
            }
            served.await;
        }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads one command (an array of bulk strings); None at the end of the stream.
async fn read_command<R: tokio::io::AsyncBufRead + Unpin>(read: &mut R) -> Option<Vec<Vec<u8>>> {
    let mut line = String::new();
    read.read_line(&mut line).await.ok().filter(|n| *n > 0)?;
    let count: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        read.read_line(&mut line).await.ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0; len + 2];
        read.read_exact(&mut arg).await.ok()?;
        arg.truncate(len);
        args.push(arg);
    }
    Some(args)
}

fn respond(
    command: &[Vec<u8>],
    replies: &Replies,
    calls: &Mutex<HashMap<String, usize>>,
) -> Vec<u8> {
    let word = |i: usize| {
        command
            .get(i)
            .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
    };
    match word(0).as_deref() {
        Some("PING") => b"+PONG\r\n".to_vec(),
        Some("FUNCTION") => b"$8\r\nlockcore\r\n".to_vec(),
        Some("WAIT") => b":0\r\n".to_vec(),
        Some(kind @ ("SUBSCRIBE" | "SSUBSCRIBE" | "UNSUBSCRIBE" | "SUNSUBSCRIBE")) => {
            let kind = kind.to_ascii_lowercase();
            let mut out = Vec::new();
            for (i, channel) in command[1..].iter().enumerate() {
                out.extend(
                    format!("*3\r\n${}\r\n{kind}\r\n${}\r\n", kind.len(), channel.len()).as_bytes(),
                );
                out.extend(channel);
                out.extend(format!("\r\n:{}\r\n", i + 1).as_bytes());
            }
            out
        }
        Some("FCALL" | "FCALL_RO") => {
            let function = String::from_utf8_lossy(&command[1]).into_owned();
            // `lockcore_<12 hex>_<op>`
            let op = function
                .get("lockcore_".len() + 13..)
                .unwrap_or("")
                .to_owned();
            *lock(calls).entry(op.clone()).or_default() += 1;
            let mut replies = lock(replies);
            match replies.iter_mut().find(|(name, _)| **name == op) {
                Some((_, queue)) if queue.len() > 1 => queue.pop_front().expect("a reply"),
                Some((_, queue)) if !queue.is_empty() => queue[0].clone(),
                _ => sane(&op).to_vec(),
            }
        }
        Some("EVALSHA" | "EVAL" | "SCRIPT") => {
            b"-ERR the fake server runs functions only\r\n".to_vec()
        }
        _ => b"+OK\r\n".to_vec(),
    }
}

/// Every panic of this test binary, with the name of its thread: a panic in a task the
/// client spawned does not reach the test, only this hook.
static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn record_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current().name().unwrap_or("").to_owned();
            lock(&PANICS).push((thread, info.to_string()));
            previous(info);
        }));
    });
}

/// The panics so far on the threads named `thread` (a runtime's workers), taken.
fn panics_in(thread: &str) -> Vec<String> {
    let mut panics = lock(&PANICS);
    let (mine, others) = std::mem::take(&mut *panics)
        .into_iter()
        .partition(|(t, _)| t == thread);
    *panics = others;
    mine.into_iter().map(|(_, message)| message).collect()
}

/// One call of the client whose script reply is the generated one.
#[derive(Debug, Clone, Copy)]
enum Target {
    MutexTry,
    FairTry,
    WriteTry,
    ReadTry,
    SemaphoreTry,
    MultiTry,
    MutexInfo,
    FairInfo,
    ReadWriteInfo,
    SemaphoreInfo,
    ForceUnlock,
    Unlock,
    UnlockPermit,
    Extend,
    Reenter,
}

const TARGETS: [Target; 15] = [
    Target::MutexTry,
    Target::FairTry,
    Target::WriteTry,
    Target::ReadTry,
    Target::SemaphoreTry,
    Target::MultiTry,
    Target::MutexInfo,
    Target::FairInfo,
    Target::ReadWriteInfo,
    Target::SemaphoreInfo,
    Target::ForceUnlock,
    Target::Unlock,
    Target::UnlockPermit,
    Target::Extend,
    Target::Reenter,
];

/// What a call ended in, in a form to compare with what the reply says it must be.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Taken, with this fencing token (None: a kind without one).
    Held(Option<u64>),
    Busy,
    /// A boolean answer (unlock, force-unlock).
    Said(bool),
    /// Any other success (an inspection, an extension, a re-entry).
    Done,
    Failed(String),
}

impl Target {
    /// The operation whose script answers with the generated reply.
    fn op(self) -> &'static str {
        match self {
            Target::MutexTry | Target::Reenter => "acquire",
            Target::FairTry => "fair_acquire",
            Target::WriteTry => "rw_write",
            Target::ReadTry => "rw_read",
            Target::SemaphoreTry => "sem_acquire",
            Target::MultiTry => "multi_acquire",
            Target::MutexInfo => "inspect",
            Target::FairInfo => "fair_inspect",
            Target::ReadWriteInfo => "rw_inspect",
            Target::SemaphoreInfo => "sem_inspect",
            Target::ForceUnlock => "force_unlock",
            Target::Unlock => "release",
            Target::UnlockPermit => "sem_release",
            Target::Extend => "renew",
        }
    }

    async fn run(self, client: &LockClient) -> Result<Outcome, LockError> {
        fn taken<G>(guard: Option<G>, token: impl Fn(&G) -> Option<u64>) -> Outcome {
            guard.map_or(Outcome::Busy, |g| Outcome::Held(token(&g)))
        }
        let held = |what: &str| {
            LockError::UnexpectedReply(format!("the fake's default {what} was not a grant"))
        };
        Ok(match self {
            Target::MutexTry => taken(client.try_lock("n").await?, |g| Some(g.fencing_token())),
            Target::FairTry => taken(client.fair_lock("n").try_lock().await?, |g| {
                Some(g.fencing_token())
            }),
            Target::WriteTry => taken(client.read_write_lock("n").try_write().await?, |g| {
                Some(g.fencing_token())
            }),
            Target::ReadTry => taken(client.read_write_lock("n").try_read().await?, |_| None),
            Target::SemaphoreTry => taken(client.semaphore("n", 3).try_acquire(1).await?, |_| None),
            Target::MultiTry => taken(
                client.multi_lock(["a", "b"]).atomic().try_lock().await?,
                |_| None,
            ),
            Target::MutexInfo => client.mutex("n").info().await.map(|_| Outcome::Done)?,
            Target::FairInfo => client.fair_lock("n").info().await.map(|_| Outcome::Done)?,
            Target::ReadWriteInfo => client
                .read_write_lock("n")
                .info()
                .await
                .map(|_| Outcome::Done)?,
            Target::SemaphoreInfo => client
                .semaphore("n", 3)
                .info()
                .await
                .map(|_| Outcome::Done)?,
            Target::ForceUnlock => Outcome::Said(client.mutex("n").force_unlock().await?),
            Target::Unlock => {
                let guard = client.try_lock("n").await?.ok_or_else(|| held("acquire"))?;
                Outcome::Said(guard.unlock().await?)
            }
            Target::UnlockPermit => {
                let guard = client
                    .semaphore("n", 3)
                    .try_acquire(1)
                    .await?
                    .ok_or_else(|| held("sem_acquire"))?;
                Outcome::Said(guard.unlock().await?)
            }
            Target::Extend => {
                let guard = client.try_lock("n").await?.ok_or_else(|| held("acquire"))?;
                guard
                    .extend(Duration::from_secs(5))
                    .await
                    .map(|()| Outcome::Done)?
            }
            Target::Reenter => {
                let guard = client.try_lock("n").await?.ok_or_else(|| held("acquire"))?;
                let again = guard.reenter().await?;
                Outcome::Held(Some(again.fencing_token()))
            }
        })
    }
}

/// The integer redis-rs reads from `reply`, where that is clear: an integer, or a bulk
/// string of one.
fn integer(reply: &Resp) -> Option<i64> {
    match reply {
        Resp::Int(n) => Some(*n),
        Resp::Bulk(text) => std::str::from_utf8(text).ok()?.parse().ok(),
        _ => None,
    }
}

/// The integers of an array of integers.
fn integers(reply: &Resp) -> Option<Vec<i64>> {
    match reply {
        Resp::Array(items) => items
            .iter()
            .map(|i| match i {
                Resp::Int(n) => Some(*n),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// What the documented contract says `target` must end in when its script answers `reply`,
/// where the reply is clear enough to say; None otherwise.
fn expected(target: Target, reply: &Resp) -> Option<Outcome> {
    let unexpected = || Outcome::Failed("UnexpectedReply".to_owned());
    let lost = || Outcome::Failed("Lost".to_owned());
    match target {
        Target::MutexTry
        | Target::FairTry
        | Target::WriteTry
        | Target::ReadTry
        | Target::Reenter => {
            let n = integer(reply)?;
            let token = || match target {
                Target::ReadTry => None,
                _ => Some(n.unsigned_abs()),
            };
            Some(match n {
                1.. => Outcome::Held(token()),
                0 => lost(),
                // A re-entry that finds the lock busy has lost it.
                _ if matches!(target, Target::Reenter) => lost(),
                _ => Outcome::Busy,
            })
        }
        // Table answers (lock-core's engine/answer.rs): {1, tokens…} taken, {0, i, ms} busy,
        // {2, recorded} another size, {3, i} lost.
        Target::SemaphoreTry => Some(match integers(reply)?.as_slice() {
            // A grant of one hold, with or without a token (permits have none: it is ignored).
            [1] => Outcome::Held(None),
            [1, t] if *t >= 0 => Outcome::Held(None),
            [0, 1, _] => Outcome::Busy,
            [2, _] => Outcome::Failed("SizeMismatch".to_owned()),
            // The semaphore's script never says it, but one decoder reads every table answer,
            // and `{3, 1}` is "the first hold was lost" to each of them.
            [3, 1] => lost(),
            _ => unexpected(),
        }),
        Target::MultiTry => Some(match integers(reply)?.as_slice() {
            [1, t1, t2] if *t1 >= 0 && *t2 >= 0 => Outcome::Held(None),
            [0, 1 | 2, _] => Outcome::Busy,
            [3, 1 | 2] => lost(),
            _ => unexpected(),
        }),
        Target::ForceUnlock => Some(Outcome::Said(integer(reply)? == 1)),
        Target::Unlock => Some(match integer(reply)? {
            1..=3 => Outcome::Said(true),
            0 => Outcome::Said(false),
            _ => unexpected(),
        }),
        Target::UnlockPermit => Some(Outcome::Said(integer(reply)? == 1)),
        Target::Extend => Some(match integers(reply)?.first() {
            Some(1) => Outcome::Done,
            _ => lost(),
        }),
        Target::MutexInfo | Target::FairInfo | Target::ReadWriteInfo | Target::SemaphoreInfo => {
            None
        }
    }
}

/// Whether `reply` carries an error reply anywhere (redis-rs reports a nested one too).
fn has_error(reply: &Resp) -> bool {
    match reply {
        Resp::Error(_) => true,
        Resp::Array(items) | Resp::Set(items) => items.iter().any(has_error),
        Resp::Map(pairs) => pairs.iter().any(|(k, v)| has_error(k) || has_error(v)),
        Resp::Attribute(pairs, data) => {
            has_error(data) || pairs.iter().any(|(k, v)| has_error(k) || has_error(v))
        }
        _ => false,
    }
}

/// The variant of an error, for comparing with [`expected`].
fn variant(e: &LockError) -> String {
    // By matching: `Debug` is the message, not the variant.
    match e {
        LockError::Timeout { .. } => "Timeout",
        LockError::Lost { .. } => "Lost",
        LockError::InvalidName { .. } => "InvalidName",
        LockError::InvalidOption { .. } => "InvalidOption",
        LockError::Unavailable { .. } => "Unavailable",
        LockError::ResponseTimeout(_) => "ResponseTimeout",
        LockError::Redis(_) => "Redis",
        LockError::NoClient => "NoClient",
        LockError::NotReplicated { .. } => "NotReplicated",
        LockError::CrossSlot { .. } => "CrossSlot",
        LockError::NoPrimary { .. } => "NoPrimary",
        LockError::SizeMismatch { .. } => "SizeMismatch",
        LockError::NoPermission { .. } => "NoPermission",
        LockError::AuthRequired { .. } => "AuthRequired",
        LockError::Tls { .. } => "Tls",
        LockError::OutcomeUnknown { .. } => "OutcomeUnknown",
        LockError::UnexpectedReply(_) => "UnexpectedReply",
        LockError::Unsupported { .. } => "Unsupported",
        _ => "another variant",
    }
    .to_owned()
}

/// Every script reply, malformed ones included, to every call that reads one: the documented
/// outcome where the reply is clear, else a value or a typed error; never a panic or a hang.
#[test]
fn any_script_reply_ends_every_call_in_a_value_or_a_typed_error() {
    let _hang = abort_if_hung(
        "any_script_reply_ends_every_call_in_a_value_or_a_typed_error",
        HANG_LIMIT,
    );
    record_panics();
    let rt = runtime("script-replies");
    let mut runner = TestRunner::new(config(480));
    let result = runner.run(
        &(prop::sample::select(TARGETS.to_vec()), reply()),
        |(target, reply)| {
            let outcome = rt.block_on(async {
                let fake = Fake::start().await;
                match target {
                    Target::Reenter => {
                        fake.answer("acquire", vec![sane("acquire").to_vec(), reply.bytes()])
                    }
                    _ => fake.answer(target.op(), vec![reply.bytes()]),
                }
                let client = LockClient::builder(&fake.url())
                    .connect_timeout(Duration::from_secs(2))
                    .response_timeout(Duration::from_secs(2))
                    .build()
                    .await
                    .map_err(|e| TestCaseError::fail(format!("the fake refused a client: {e}")))?;
                let outcome =
                    tokio::time::timeout(Duration::from_secs(20), target.run(&client)).await;
                drop(client);
                outcome.map_err(|_| TestCaseError::fail(format!("{target:?} hangs on {reply:?}")))
            })?;
            let panics = panics_in("script-replies");
            prop_assert!(
                panics.is_empty(),
                "{:?} on {:?} panicked: {:?}",
                target,
                reply,
                panics
            );
            let outcome = outcome.unwrap_or_else(|e| Outcome::Failed(variant(&e)));
            if let Some(expected) = expected(target, &reply) {
                prop_assert_eq!(&outcome, &expected, "{:?} on {:?}", target, reply);
            }
            // Whatever the reply, an error is one the caller can act on.
            if let Outcome::Failed(variant) = &outcome {
                let allowed = match reply {
                    // Bytes that are not RESP break the connection (or read as something else).
                    Resp::Garbage(_) => &[variant.as_str()][..],
                    _ if has_error(&reply) => &[
                        "Redis",
                        "NoPermission",
                        "UnexpectedReply",
                        "Lost",
                        "SizeMismatch",
                    ][..],
                    _ => &["UnexpectedReply", "Lost", "SizeMismatch"][..],
                };
                prop_assert!(
                    allowed.contains(&variant.as_str()),
                    "{:?} on {:?}: {}",
                    target,
                    reply,
                    variant
                );
            }
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A multi-lock attempt told that one of its names is no longer held (`[3, i]`, i from 1) reports
/// [`LockError::Lost`]. It used to deadlock on the hold's own state lock, taking the client's
/// watchdog with it (found by the property test above). The attempt runs on a worker task, so
/// a deadlock there fails this test instead of hanging it.
#[test]
fn a_multi_lock_told_a_name_is_gone_reports_it_without_deadlocking() {
    let _hang = abort_if_hung(
        "a_multi_lock_told_a_name_is_gone_reports_it_without_deadlocking",
        HANG_LIMIT,
    );
    let rt = runtime("multi-gone");
    let outcome = rt.block_on(async {
        let fake = Fake::start().await;
        let gone = Resp::Array(vec![Resp::Int(3), Resp::Int(1)]);
        fake.answer("multi_acquire", vec![gone.bytes()]);
        let client = LockClient::builder(&fake.url())
            .build()
            .await
            .expect("the fake takes a client");
        let attempt = tokio::spawn(async move {
            let taken = client.multi_lock(["a", "b"]).atomic().try_lock().await;
            taken.map(|guard| guard.is_some())
        });
        tokio::time::timeout(Duration::from_secs(10), attempt).await
    });
    // A deadlocked worker would keep a plain drop of the runtime waiting.
    rt.shutdown_background();
    let result = outcome
        .expect("the attempt deadlocked")
        .expect("the task ended");
    assert!(matches!(result, Err(LockError::Lost { .. })), "{result:?}");
}

/// Any reply to the watchdog's renewal (a 120 ms lease, renewed every 40 ms): the hold is
/// renewed or reported lost, never a panic; a reply that clearly renews nothing (an array of
/// integers other than `[1]`, nil, an error, bytes that are not RESP) makes `lost()` fire.
#[test]
fn any_renewal_reply_keeps_or_loses_the_lock_without_a_panic() {
    let _hang = abort_if_hung(
        "any_renewal_reply_keeps_or_loses_the_lock_without_a_panic",
        HANG_LIMIT,
    );
    record_panics();
    let rt = runtime("renewal-replies");
    let mut runner = TestRunner::new(config(20));
    let result = runner.run(&reply(), |reply| {
        let not_renewed = match &reply {
            Resp::Nil(_) | Resp::Error(_) | Resp::Garbage(_) => true,
            Resp::Array(_) => integers(&reply).is_some_and(|n| n != [1]),
            _ => false,
        };
        let lost = rt.block_on(async {
            let fake = Fake::start().await;
            let client = LockClient::builder(&fake.url())
                .watchdog_lease(Duration::from_millis(120))
                .response_timeout(Duration::from_secs(1))
                .build()
                .await
                .map_err(|e| TestCaseError::fail(format!("the fake refused a client: {e}")))?;
            let guard = client
                .try_lock("n")
                .await
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let guard = guard.ok_or_else(|| TestCaseError::fail("the fake's grant was busy"))?;
            fake.answer("renew", vec![reply.bytes()]);
            let watched = tokio::time::timeout(Duration::from_secs(10), async {
                if not_renewed {
                    guard.lost().await;
                    return true;
                }
                // Either way is fine: wait until it is lost or renewed a few times.
                tokio::select! {
                    () = guard.lost() => true,
                    () = fake.called("renew", 4) => false,
                }
            });
            let lost = watched
                .await
                .map_err(|_| TestCaseError::fail("not lost within 10 s"))?;
            drop(guard);
            drop(client);
            Ok::<_, TestCaseError>(lost)
        })?;
        prop_assert!(lost || !not_renewed);
        let panics = panics_in("renewal-replies");
        prop_assert!(panics.is_empty(), "{:?} panicked: {:?}", reply, panics);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
