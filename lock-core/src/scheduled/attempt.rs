//! One attempt of a job's body: the body as the runner keeps it, run in a task of its own (so
//! a panic is an error, not the runner's end) that is aborted when the attempt is dropped.

use std::fmt::Display;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::task::JoinHandle;

use super::context::RunContext;

/// A job's body, its error turned into text.
pub(crate) type Body = Arc<
    dyn Fn(RunContext) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync,
>;

/// The body `body` as the runner keeps it.
pub(crate) fn body<F, Fut, E>(body: F) -> Body
where
    F: Fn(RunContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + 'static,
{
    Arc::new(move |ctx| {
        let run = body(ctx);
        Box::pin(async move { run.await.map_err(|e| e.to_string()) })
    })
}

/// Runs one attempt of `body` with `ctx`: `Err` with the error's text, or `panicked: ...`.
/// Dropping the future aborts the body's task.
pub(crate) async fn attempt(body: &Body, ctx: RunContext) -> Result<(), String> {
    let task = AbortOnDrop(tokio::spawn(body(ctx)));
    match task.await {
        Ok(result) => result,
        Err(join) if join.is_panic() => Err(format!("panicked: {}", panic_text(join.into_panic()))),
        Err(_) => Err("the body's task was cancelled".to_owned()),
    }
}

/// What a panic said, when it said it with a string.
fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    match panic.downcast::<String>() {
        Ok(text) => *text,
        Err(panic) => match panic.downcast::<&'static str>() {
            Ok(text) => (*text).to_owned(),
            Err(_) => "(not a string)".to_owned(),
        },
    }
}

/// A task that is aborted when this is dropped (a lost lock or a stop past its grace drops
/// the run, and the body with it).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
