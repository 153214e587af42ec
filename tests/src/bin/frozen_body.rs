//! A child process for the "a lost lock never reports success" suite (`tests/lost_lock.rs`):
//! it takes a lock through one of the wrappers that promise to stop a body when its lock is
//! lost, and its body waits at an `.await` (a line on standard input) so the suite can freeze
//! the process (`SIGSTOP`) past the lease, let another client take the lock, and resume it
//! (`SIGCONT`) with the line already there: the body is then ready in the very first step
//! after the freeze.
//!
//! ```text
//! frozen_body run|macro <redis url> <lock name> <watchdog lease ms>
//!     prints WAITING when the body waits (until the line `go body`), then one line:
//!     OUTCOME ok <held> | OUTCOME lost | OUTCOME error <error>
//! frozen_body layer <redis url> <lock name> <watchdog lease ms>
//!     serves POST /orders/{id} behind DistributedLockLayer on a loopback port and prints
//!     LISTENING <port>; each request's handler prints WAITING and answers 200 after the
//!     line `go <id>`
//! ```

// Its lines on standard output are what the suite reads.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::routing::post;
use lock_core::{HeldLock, LockClient, LockError, distributed_lock};
use lock_tower::{DistributedLockLayer, PathParam};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, url, name, lease_ms] = args.as_slice() else {
        return Err("usage: frozen_body run|macro|layer <redis url> <lock name> <lease ms>".into());
    };
    read_lines();
    let client = LockClient::builder(url.as_str())
        .watchdog_lease(Duration::from_millis(lease_ms.parse()?))
        .build()
        .await?;
    match mode.as_str() {
        "run" => {
            let outcome = client.lock(name.as_str()).run(body).await;
            report(outcome);
        }
        "macro" => report(locked_by_the_macro(&client, name).await),
        "layer" => serve(client).await?,
        other => return Err(format!("unknown mode {other}").into()),
    }
    Ok(())
}

/// The lines read on standard input so far, by one reader task for the whole process, and a
/// wake-up for each: a body waits for its own line (`go <id>`), so one that is cancelled (the
/// layer drops it) leaves nothing behind for the next.
static LINES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
static READ: Notify = Notify::const_new();

/// Reads standard input line by line for as long as it is open.
fn read_lines() {
    tokio::spawn(async {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            LINES
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(line);
            READ.notify_waiters();
        }
    });
}

/// Waits for the line `go <id>` on standard input.
async fn go(id: &str) {
    let wanted = format!("go {id}");
    loop {
        let read = READ.notified();
        tokio::pin!(read);
        read.as_mut().enable();
        if LINES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&wanted)
        {
            return;
        }
        read.await;
    }
}

/// Waits for a line on standard input; returns whether the lock was held when it came.
async fn body(held: HeldLock) -> bool {
    println!("WAITING");
    go("body").await;
    held.is_held()
}

#[distributed_lock(key = "{name}", client = client, held = held)]
async fn locked_by_the_macro(client: &LockClient, name: &str) -> Result<bool, LockError> {
    Ok(body(held).await)
}

fn report(outcome: Result<bool, LockError>) {
    match outcome {
        Ok(held) => println!("OUTCOME ok {held}"),
        Err(LockError::Lost { .. }) => println!("OUTCOME lost"),
        Err(e) => println!("OUTCOME error {e}"),
    }
}

async fn serve(client: LockClient) -> Result<(), BoxError> {
    let app = Router::new().route(
        "/orders/{id}",
        post(|Path(id): Path<String>| async move {
            println!("WAITING");
            go(&id).await;
            "done"
        })
        .route_layer(DistributedLockLayer::new(client, PathParam::new("id")).prefix("order:")),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("LISTENING {}", listener.local_addr()?.port());
    axum::serve(listener, app).await?;
    Ok(())
}
