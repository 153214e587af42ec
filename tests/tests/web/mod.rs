//! Real HTTP for the layer suites (`mod web;` in each): an axum app served on a free loopback port ([`App`]), a
//! real client that never goes through a proxy ([`http`]), a bound on a step ([`within`]),
//! and the check of a layer's problem document ([`problem`]).

// Each suite uses what it needs.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use tokio::time::timeout;

/// An axum app served on a free loopback port until dropped.
#[derive(Debug)]
pub struct App {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl App {
    /// Serves `router` on a free loopback port.
    pub async fn serve(router: Router) -> App {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        App { addr, task }
    }

    /// The URL of `path` on it.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An HTTP client for tests: no proxy (loopback must not go through one), 30 s per request.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Waits for `what` with a generous bound, so a hang fails the test instead of stalling it.
pub async fn within<T>(what: &str, secs: u64, future: impl Future<Output = T>) -> T {
    timeout(Duration::from_secs(secs), future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {secs} s: {what}"))
}

/// A layer's rejection: its status, `Retry-After` and JSON problem document, checked to be
/// one (`application/problem+json`, its `status` the response's).
pub async fn problem(res: reqwest::Response) -> (StatusCode, Option<String>, serde_json::Value) {
    let status = StatusCode::from_u16(res.status().as_u16()).unwrap();
    let retry_after = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(
        res.headers()["content-type"],
        "application/problem+json",
        "a rejection of the layer"
    );
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["status"], status.as_u16());
    (status, retry_after, body)
}
