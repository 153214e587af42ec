//! A lost lock never reports success. `run`/`try_run`, `#[distributed_lock]` (`on_lost =
//! "abort"`, the default) and `DistributedLockLayer` (`LeaseLost::Abort`, the default) promise
//! to stop a body when its lock is lost. Here the body or handler waits at an `.await` while
//! what runs it stalls past the lease, so that it is ready in the very first step after the
//! stall:
//!
//! - a stalled runtime: a task blocks the only thread of a current-thread runtime for longer
//!   than the lease while the body sleeps (its sleep ends during the stall);
//! - a frozen process: a child process (`src/bin/frozen_body.rs`) is stopped with `SIGSTOP`
//!   while its body waits for a line on standard input; this test takes the lock with a client
//!   of its own (which proves the child's lease ran out in Redis), writes the line and resumes
//!   the child with `SIGCONT`.
//!
//! Each wrapper must answer with the loss (`Err(Lost)`, `503`, a cut-off body), never with
//! success, in every one of several runs; a control run of the same body without the stall
//! succeeds, so each test can fail.

use std::convert::Infallible;
use std::process::Stdio;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::routing::post;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use lock_core::{LockClient, LockError, distributed_lock};
use lock_tests::RedisServer;
use lock_tests::fixtures::{assert_clean, client, client_with_lease};
use lock_tests::send_signal;
use lock_tower::{DistributedLockLayer, PathParam};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::time::timeout;
use tower::ServiceExt;

/// The watchdog lease of the stalled clients.
const LEASE: Duration = Duration::from_millis(500);
/// How long a stalled runtime is blocked: three leases.
const STALL: Duration = Duration::from_millis(1500);
/// How long a body waits at its `.await`: past the lease, and ending during the stall.
const BODY_WAIT: Duration = Duration::from_millis(700);
/// Runs of each stalled case.
const RUNS: usize = 3;

// ---------------------------------------------------------------------------------------------
// A stalled runtime

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Blocks the runtime's only thread for [`STALL`] from a task of its own (as a blocking call
/// in some other task would), starting at the caller's next `.await`.
fn stall_runtime() {
    tokio::spawn(async { std::thread::sleep(STALL) });
}

/// The body of the stalled cases: waits past the lease at an `.await`, stalled or not, and
/// returns whether the lock was still held when it finished.
async fn wait_at_an_await(held: lock_core::HeldLock, stall: bool) -> bool {
    if stall {
        stall_runtime();
    }
    tokio::time::sleep(BODY_WAIT).await;
    held.is_held()
}

#[test]
fn run_reports_a_body_that_finished_after_a_runtime_stall_as_lost() {
    let server = RedisServer::start();
    current_thread().block_on(async {
        let client = client_with_lease(&server.url(), LEASE).await;
        for run in 0..RUNS {
            let outcome = client
                .lock("run")
                .run(|held| wait_at_an_await(held, true))
                .await;
            assert!(
                matches!(outcome, Err(LockError::Lost { .. })),
                "run {run}: {outcome:?}"
            );
        }
        let control = client
            .lock("run")
            .run(|held| wait_at_an_await(held, false))
            .await;
        assert!(
            control.unwrap(),
            "without the stall the body runs under the lock"
        );
        assert_clean(&server).await;
    });
}

#[test]
fn a_single_try_with_a_fixed_lease_reports_a_body_that_finished_after_a_stall_as_lost() {
    let server = RedisServer::start();
    current_thread().block_on(async {
        let client = client_with_lease(&server.url(), LEASE).await;
        for run in 0..RUNS {
            let outcome = client
                .try_lock("try-run")
                .lease(LEASE)
                .run(|held| wait_at_an_await(held, true))
                .await;
            assert!(
                matches!(outcome, Err(LockError::Lost { .. })),
                "run {run}: {outcome:?}"
            );
        }
        let control = client
            .try_lock("try-run")
            .lease(Duration::from_secs(5))
            .run(|held| wait_at_an_await(held, false))
            .await;
        assert_eq!(control.unwrap(), Some(true));
        assert_clean(&server).await;
    });
}

#[distributed_lock(key = "macro:{name}", client = client, held = held)]
async fn stalled_body(client: &LockClient, name: &str, stall: bool) -> Result<bool, LockError> {
    Ok(wait_at_an_await(held, stall).await)
}

#[test]
fn the_macro_reports_a_body_that_finished_after_a_runtime_stall_as_lost() {
    let server = RedisServer::start();
    current_thread().block_on(async {
        let client = client_with_lease(&server.url(), LEASE).await;
        for run in 0..RUNS {
            let outcome = stalled_body(&client, "stalled", true).await;
            assert!(
                matches!(outcome, Err(LockError::Lost { .. })),
                "run {run}: {outcome:?}"
            );
        }
        assert!(stalled_body(&client, "stalled", false).await.unwrap());
        assert_clean(&server).await;
    });
}

/// `POST /orders/{id}/{mode}` behind the layer: `stall` stalls the runtime while the handler
/// waits; `stream` answers with a streaming body whose last frame comes after such a wait
/// (stalled or not: `stream-stall`).
fn app(client: LockClient) -> Router {
    let handler = |Path((_, mode)): Path<(String, String)>| async move {
        match mode.as_str() {
            "stream" | "stream-stall" => {
                let stall = mode == "stream-stall";
                let frames = futures_util::stream::unfold(0, move |n| async move {
                    let frame = match n {
                        0 => Bytes::from_static(b"first,"),
                        1 => {
                            if stall {
                                stall_runtime();
                            }
                            tokio::time::sleep(BODY_WAIT).await;
                            Bytes::from_static(b"last")
                        }
                        _ => return None,
                    };
                    Some((Ok::<_, Infallible>(frame), n + 1))
                });
                Body::from_stream(frames)
            }
            _ => {
                if mode == "stall" {
                    stall_runtime();
                }
                tokio::time::sleep(BODY_WAIT).await;
                Body::from("done")
            }
        }
    };
    Router::new().route(
        "/orders/{id}/{mode}",
        post(handler).route_layer(DistributedLockLayer::new(client, PathParam::new("id"))),
    )
}

fn post_to(path: &str) -> Request<Body> {
    Request::post(path).body(Body::empty()).unwrap()
}

#[test]
fn the_layer_answers_503_for_a_handler_that_finished_after_a_runtime_stall() {
    let server = RedisServer::start();
    current_thread().block_on(async {
        let client = client_with_lease(&server.url(), LEASE).await;
        for run in 0..RUNS {
            let response = app(client.clone())
                .oneshot(post_to("/orders/42/stall"))
                .await
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::SERVICE_UNAVAILABLE,
                "run {run}"
            );
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert!(!body.starts_with(b"done"), "the handler's body was dropped");
        }
        let control = app(client.clone())
            .oneshot(post_to("/orders/42/wait"))
            .await
            .unwrap();
        assert_eq!(control.status(), StatusCode::OK);
        assert_eq!(
            control.into_body().collect().await.unwrap().to_bytes(),
            "done"
        );
        assert_clean(&server).await;
    });
}

#[test]
fn the_layer_cuts_off_a_streaming_body_whose_last_frame_came_after_a_runtime_stall() {
    let server = RedisServer::start();
    current_thread().block_on(async {
        let client = client_with_lease(&server.url(), LEASE).await;
        for run in 0..RUNS {
            let response = app(client.clone())
                .oneshot(post_to("/orders/7/stream-stall"))
                .await
                .unwrap();
            // The headers went out under the lock; the body must not arrive complete.
            assert_eq!(response.status(), StatusCode::OK, "run {run}");
            let body = response.into_body().collect().await;
            assert!(body.is_err(), "run {run}: a complete body: {body:?}");
        }
        let control = app(client.clone())
            .oneshot(post_to("/orders/7/stream"))
            .await
            .unwrap();
        let body = control.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "first,last");
        assert_clean(&server).await;
    });
}

// ---------------------------------------------------------------------------------------------
// A lock taken away in Redis while the handler runs

/// With the watchdog's next renewal 10 s away, a force-unlock while the body runs is news only
/// the release's answer brings: `run` then reports the loss, not the body's output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_checks_the_releases_answer_before_it_reports_success() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    for taken in [true, false] {
        let (entered, started) = tokio::sync::oneshot::channel();
        let go = std::sync::Arc::new(tokio::sync::Notify::new());
        let body = {
            let go = go.clone();
            move |_held| async move {
                let _ = entered.send(());
                go.notified().await;
                "done"
            }
        };
        let run = tokio::spawn(client.lock("taken").run(body));
        started.await.unwrap();
        if taken {
            assert!(client.mutex("taken").force_unlock().await.unwrap());
        }
        go.notify_one();
        let outcome = run.await.unwrap();
        if taken {
            assert!(
                matches!(outcome, Err(LockError::Lost { .. })),
                "{outcome:?}"
            );
        } else {
            assert_eq!(outcome.unwrap(), "done");
        }
    }
    assert_clean(&server).await;
}

/// `POST /taken/{id}/{shape}` behind the layer (default watchdog lease, 30 s): the handler
/// says it started, then waits for `go` before it answers (`small`) or before the last frame
/// of its streaming body (`stream`).
fn waiting_app(
    client: LockClient,
    started: tokio::sync::mpsc::UnboundedSender<()>,
    go: std::sync::Arc<tokio::sync::Notify>,
) -> Router {
    let handler = move |Path((_, shape)): Path<(String, String)>| async move {
        let _ = started.send(());
        if shape == "stream" {
            let frames = futures_util::stream::unfold(0, move |n| {
                let go = go.clone();
                async move {
                    let frame = match n {
                        0 => Bytes::from_static(b"first,"),
                        1 => {
                            go.notified().await;
                            Bytes::from_static(b"last")
                        }
                        _ => return None,
                    };
                    Some((Ok::<_, Infallible>(frame), n + 1))
                }
            });
            return Body::from_stream(frames);
        }
        go.notified().await;
        Body::from("done")
    };
    Router::new().route(
        "/taken/{id}/{shape}",
        post(handler).route_layer(DistributedLockLayer::new(client, PathParam::new("id"))),
    )
}

/// With the watchdog's next renewal 10 s away, a force-unlock is news only the release's answer
/// brings: a small response is then answered 503, a streaming body cut off before its last
/// frame. Without the force-unlock, both succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_checks_the_releases_answer_before_the_response_goes_out() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let (started, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let go = std::sync::Arc::new(tokio::sync::Notify::new());
    let app = waiting_app(client.clone(), started, go.clone());
    for taken in [true, false] {
        let request = tokio::spawn(app.clone().oneshot(post_to("/taken/small/small")));
        entered.recv().await.unwrap();
        if taken {
            assert!(client.mutex("http:small").force_unlock().await.unwrap());
        }
        go.notify_one();
        let response = request.await.unwrap().unwrap();
        let (status, body) = (response.status(), response.into_body().collect().await);
        if taken {
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        } else {
            assert_eq!(
                (status, body.unwrap().to_bytes()),
                (StatusCode::OK, "done".into())
            );
        }

        let response = app
            .clone()
            .oneshot(post_to("/taken/big/stream"))
            .await
            .unwrap();
        entered.recv().await.unwrap();
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "first,");
        if taken {
            assert!(client.mutex("http:big").force_unlock().await.unwrap());
        }
        go.notify_one();
        let rest = body.collect().await;
        if taken {
            assert!(rest.is_err(), "a complete body: {rest:?}");
        } else {
            assert_eq!(rest.unwrap().to_bytes(), "last");
        }
    }
    assert_clean(&server).await;
}

// ---------------------------------------------------------------------------------------------
// A frozen process

/// The child process of `src/bin/frozen_body.rs`, killed when dropped (also while stopped).
struct Frozen {
    child: tokio::process::Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Frozen {
    fn start(mode: &str, server: &RedisServer, name: &str) -> Frozen {
        let lease_ms = LEASE.as_millis().to_string();
        let mut child = Command::new(env!("CARGO_BIN_EXE_frozen_body"))
            .args([mode, &server.url(), name, &lease_ms])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the frozen_body child starts");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Frozen {
            child,
            stdin,
            lines,
        }
    }

    /// The rest of the child's next line that starts with `prefix` (waiting up to 60 s).
    async fn line(&mut self, prefix: &str) -> String {
        let read = async {
            while let Some(line) = self.lines.next_line().await.unwrap() {
                if let Some(rest) = line.strip_prefix(prefix) {
                    return rest.trim().to_owned();
                }
            }
            panic!("the child ended before printing {prefix}");
        };
        timeout(Duration::from_secs(60), read)
            .await
            .unwrap_or_else(|_| panic!("the child never printed {prefix}"))
    }

    fn signal(&self, signal: &str) {
        send_signal(self.child.id().unwrap(), signal).unwrap();
    }

    /// Writes the line the child's body `id` waits for (`body` for `run` and `macro`, the
    /// order id for `layer`).
    async fn release_the_body(&mut self, id: &str) {
        self.stdin
            .write_all(format!("go {id}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// With the child's body waiting: freezes the child, takes `name` with `client` (which
    /// waits until the child's lease has run out in Redis), writes the line the body waits
    /// for and resumes the child. Returns the guard this test took.
    async fn freeze_past_the_lease(
        &mut self,
        client: &LockClient,
        name: &str,
        id: &str,
    ) -> lock_core::LockGuard {
        self.signal("-STOP");
        let taken = client.lock(name).wait(Duration::from_secs(60)).await;
        self.release_the_body(id).await;
        self.signal("-CONT");
        taken.expect("the frozen child's lease ran out and another client took the lock")
    }
}

/// One run of `mode` (`run` or `macro`) in a child: its outcome line, frozen or not.
async fn outcome_in_a_child(
    server: &RedisServer,
    client: &LockClient,
    mode: &str,
    freeze: bool,
) -> String {
    let name = format!("frozen-{mode}");
    let mut child = Frozen::start(mode, server, &name);
    child.line("WAITING").await;
    let taken = if freeze {
        Some(child.freeze_past_the_lease(client, &name, "body").await)
    } else {
        child.release_the_body("body").await;
        None
    };
    let outcome = child.line("OUTCOME").await;
    if let Some(guard) = taken {
        assert!(guard.unlock().await.unwrap());
    }
    outcome
}

/// `mode` in a child frozen past its lease, [`RUNS`] times: the loss every time; then once not
/// frozen: success.
async fn frozen_runs_report_the_loss(mode: &str) {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    for run in 0..RUNS {
        let outcome = outcome_in_a_child(&server, &client, mode, true).await;
        assert_eq!(outcome, "lost", "{mode}, run {run}");
    }
    assert_eq!(
        outcome_in_a_child(&server, &client, mode, false).await,
        "ok true"
    );
    assert_clean(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_in_a_process_frozen_past_its_lease_reports_the_loss() {
    frozen_runs_report_the_loss("run").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_macro_in_a_process_frozen_past_its_lease_reports_the_loss() {
    frozen_runs_report_the_loss("macro").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_in_a_process_frozen_past_its_lease_answers_503() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let mut child = Frozen::start("layer", &server, "unused");
    let port = child.line("LISTENING").await;
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    for (run, freeze) in [true, true, true, false].into_iter().enumerate() {
        let url = format!("http://127.0.0.1:{port}/orders/{run}");
        let request = tokio::spawn(http.post(url).send());
        child.line("WAITING").await;
        let taken = if freeze {
            let name = format!("order:{run}");
            let id = run.to_string();
            Some(child.freeze_past_the_lease(&client, &name, &id).await)
        } else {
            child.release_the_body(&run.to_string()).await;
            None
        };
        let response = request.await.unwrap().unwrap();
        let expected = if freeze {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        assert_eq!(response.status().as_u16(), expected.as_u16(), "run {run}");
        let body = response.text().await.unwrap();
        assert_eq!(body == "done", !freeze, "run {run}: {body}");
        if let Some(guard) = taken {
            assert!(guard.unlock().await.unwrap());
        }
    }
    drop(child);
    assert_clean(&server).await;
}
