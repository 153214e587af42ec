//! The public paths and names lock-tower had before its layers became sibling modules
//! (`lock`, `rate`, `idempotency`, each `XLayer` / `X` / `ResponseFuture`) still compile, for
//! one release, and name the same items as the new paths.
#![allow(deprecated)]

use std::any::TypeId;
use std::time::Duration;

use axum::body::Body;
use lock_core::{LockClient, LockError, Quota};
use lock_tower::{DefaultRejection, Header};

type Inner = axum::routing::Route;

fn same<A: 'static, B: 'static>() -> bool {
    TypeId::of::<A>() == TypeId::of::<B>()
}

#[test]
fn the_former_paths_name_the_same_items() {
    // Crate-root re-exports.
    assert!(same::<
        lock_tower::DistributedLockLayer<Header>,
        lock_tower::lock::DistributedLockLayer<Header>,
    >());
    assert!(same::<
        lock_tower::DistributedLock<Inner, Header>,
        lock_tower::lock::DistributedLock<Inner, Header>,
    >());
    assert!(same::<
        lock_tower::RateLimitLayer<Header>,
        lock_tower::rate::RateLimitLayer<Header>,
    >());
    assert!(same::<
        lock_tower::IdempotencyLayer,
        lock_tower::idempotency::IdempotencyLayer,
    >());
    assert!(same::<
        lock_tower::Idempotent<Inner, lock_tower::Unscoped>,
        lock_tower::idempotency::Idempotent<Inner, lock_tower::Unscoped>,
    >());
    // Renamed: the rate-limit service and its future, now `rate::RateLimit` and
    // `rate::ResponseFuture`.
    assert!(same::<
        lock_tower::RateLimitService<Inner, Header, Quota>,
        lock_tower::rate::RateLimit<Inner, Header, Quota>,
    >());
    assert!(same::<
        lock_tower::rate::RateLimitService<Inner, Header, Quota, DefaultRejection>,
        lock_tower::rate::RateLimit<Inner, Header, Quota>,
    >());
    assert!(same::<
        lock_tower::rate::RateLimitFuture<Inner, Body, Body, DefaultRejection>,
        lock_tower::rate::ResponseFuture<Inner, Body, Body, DefaultRejection>,
    >());
    // The lock layer's future module, now `lock::{ResponseFuture, BUFFER_LIMIT}`.
    assert!(same::<
        lock_tower::future::ResponseFuture<Inner, Body, Body, DefaultRejection>,
        lock_tower::lock::ResponseFuture<Inner, Body, Body, DefaultRejection>,
    >());
    assert_eq!(
        lock_tower::future::BUFFER_LIMIT,
        lock_tower::lock::BUFFER_LIMIT
    );
    assert_eq!(lock_tower::future::BUFFER_LIMIT, 64 * 1024);
}

/// `lease`, the lock layer's former name of `fixed_lease` (and the idempotency layer's), is
/// the same setting: the same range check, under the same option name.
#[tokio::test]
async fn lease_is_fixed_lease_on_every_layer() {
    let client = LockClient::in_memory().await.unwrap();
    let too_short = Duration::from_millis(1);
    let option = |result: Result<(), LockError>| match result {
        Err(LockError::InvalidOption { option, .. }) => option,
        other => panic!("expected an invalid option, got {other:?}"),
    };
    let lock = || {
        lock_tower::DistributedLockLayer::new(
            client.clone(),
            Header::new(http::HeaderName::from_static("x-id")),
        )
    };
    assert_eq!(option(lock().lease(too_short).validate()), "lease");
    assert_eq!(option(lock().fixed_lease(too_short).validate()), "lease");
    assert!(lock().lease(Duration::from_secs(5)).validate().is_ok());
    let idempotency = || lock_tower::IdempotencyLayer::new(client.clone());
    assert_eq!(option(idempotency().lease(too_short).validate()), "lease");
    assert_eq!(
        option(idempotency().fixed_lease(too_short).validate()),
        "lease"
    );
    assert!(
        idempotency()
            .fixed_lease(Duration::from_secs(5))
            .validate()
            .is_ok()
    );
}
