//! W6: one axum app on a loopback port, one handler body, four ways to lock around it:
//!
//! * `/layer/{id}`: `lock_tower::DistributedLockLayer` (defaults: one attempt, watchdog
//!   lease, released after the body) around the plain handler;
//! * `/ours/{id}`, `/floor/{id}`, `/rslock/{id}`: the same handler taking the lock itself
//!   with one attempt and releasing it before answering;
//! * [`CORE_CALLS_ROUTE`]`/{id}`, where the run has it: the same with the floor's client
//!   sending lock-core's server calls;
//! * [`NATIVE_ROUTE`]`/{id}`, on a server with `DELIFEQ`: the same with the native floor.
//!
//! Every request has a key of its own, so none is ever turned away; the driver checks that
//! every answer is `200`.

use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use axum::serve::ListenerExt;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lock_tower::{DistributedLockLayer, PathParam};

use crate::contender::Locker;
use crate::stats::Sample;

/// The handler's work: format a small answer.
fn answer(id: &str) -> String {
    format!("ok {id}")
}

async fn plain(Path(id): Path<String>) -> String {
    answer(&id)
}

async fn direct(locker: Locker, id: String) -> Response {
    match locker.try_lock(&format!("http:{id}")).await {
        Ok(Some(held)) => {
            let body = answer(&id);
            match locker.unlock(held).await {
                Ok(()) => (StatusCode::OK, body).into_response(),
                Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
        Ok(None) => StatusCode::CONFLICT.into_response(),
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

fn direct_route(locker: Locker) -> MethodRouter {
    get(move |Path(id): Path<String>| direct(locker.clone(), id))
}

/// A running W6 server.
pub(crate) struct Server {
    pub(crate) base: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The route of the floor's client on lock-core's calls.
pub(crate) const CORE_CALLS_ROUTE: &str = "core_calls";
/// The route of the native floor.
pub(crate) const NATIVE_ROUTE: &str = "native_floor";

/// Starts the app; `lockers` are ours, the floor and rslock, in that order.
pub(crate) async fn serve(
    lockers: &[Locker],
    core_calls: Option<&Locker>,
    native: Option<&Locker>,
    nodelay: bool,
) -> Server {
    let [ours, floor, rslock] = lockers else {
        unreachable!("three contenders")
    };
    let Locker::Ours(client) = ours else {
        unreachable!("the layer needs lock-core")
    };
    let mut app = Router::new()
        .route(
            "/layer/{id}",
            get(plain).route_layer(DistributedLockLayer::new(
                client.clone(),
                PathParam::new("id"),
            )),
        )
        .route("/ours/{id}", direct_route(ours.clone()))
        .route("/floor/{id}", direct_route(floor.clone()))
        .route("/rslock/{id}", direct_route(rslock.clone()));
    if let Some(calls) = core_calls {
        app = app.route(
            &format!("/{CORE_CALLS_ROUTE}/{{id}}"),
            direct_route(calls.clone()),
        );
    }
    if let Some(native) = native {
        app = app.route(
            &format!("/{NATIVE_ROUTE}/{{id}}"),
            direct_route(native.clone()),
        );
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind W6 listener");
    let base = format!("http://{}", listener.local_addr().expect("local addr"));
    let task = tokio::spawn(async move {
        if nodelay {
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let _ = axum::serve(listener, app).await;
        } else {
            let _ = axum::serve(listener, app).await;
        }
    });
    Server { base, task }
}

/// Sends `requests` GETs to `{base}/{route}/{run}-{t}-{i}` from `concurrency` tasks over
/// keep-alive connections.
pub(crate) async fn drive(
    base: &str,
    route: &str,
    run: &str,
    concurrency: usize,
    requests: usize,
) -> Result<Sample, String> {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(concurrency)
        .build_http();
    let start = Instant::now();
    let handles: Vec<_> = (0..concurrency)
        .map(|t| {
            let client = client.clone();
            let n = requests / concurrency + usize::from(t < requests % concurrency);
            let prefix = format!("{base}/{route}/{run}-{t}");
            let route = route.to_owned();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(n);
                for i in 0..n {
                    let uri: http::Uri = format!("{prefix}-{i}")
                        .parse()
                        .map_err(|e| format!("{e}"))?;
                    let t0 = Instant::now();
                    let resp = tokio::time::timeout(Duration::from_secs(10), client.get(uri))
                        .await
                        .map_err(|_| "W6 request timed out".to_owned())?
                        .map_err(|e| format!("W6 request: {e}"))?;
                    let status = resp.status();
                    let _ = resp
                        .into_body()
                        .collect()
                        .await
                        .map_err(|e| format!("W6 body: {e}"))?;
                    if status != StatusCode::OK {
                        return Err(format!("W6 {route}: status {status}"));
                    }
                    lat.push(t0.elapsed());
                }
                Ok::<_, String>(lat)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(requests);
    for h in handles {
        all.extend(h.await.map_err(|e| e.to_string())??);
    }
    Ok(Sample::new(all, start.elapsed()))
}
