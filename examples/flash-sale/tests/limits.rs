//! The rate limits (lock-core's `rate_limit`, see `flash_sale::limits`): one buyer's attempts
//! over its quota are answered `429` with `Retry-After` on any instance (the quota is shared
//! through Redis), before any lock; one client's API requests over its quota too, while other
//! clients and payment callbacks go on; `--no-limit` lets everything through.

mod common;

use common::{Env, Setup, create_sale, http, read};
use flash_sale::limits::{BUYER_LIMITED, BUYER_QUOTA, CLIENT_LIMITED, CLIENT_QUOTA};

/// `POST /api/sales/{sale}/orders` as `user`: status, `Retry-After`, body.
async fn attempt(base: &str, sale: &str, user: &str) -> (u16, Option<String>, serde_json::Value) {
    let res = http()
        .post(format!("{base}/api/sales/{sale}/orders"))
        .header("x-user-id", user)
        .send()
        .await
        .expect("POST orders");
    let retry = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (status, body) = read(res).await;
    (status, retry, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_buyers_attempts_over_its_quota_are_429_on_every_instance() {
    let env = Env::start(Setup {
        instances: 2,
        ..Setup::default()
    })
    .await;
    let sale = create_sale(&env.url(0), 10).await;
    let burst = BUYER_QUOTA.burst_size() as usize;
    let mut statuses = Vec::new();
    // One after another, on the two instances in turn: one quota between them.
    for i in 0..burst + 1 {
        statuses.push(attempt(&env.url(i % 2), &sale, "greedy").await);
    }
    assert_eq!(statuses[0].0, 201, "{statuses:?}");
    assert!(
        statuses[1..burst].iter().all(|(s, _, _)| *s == 409),
        "the burst reaches the purchase: {statuses:?}"
    );
    let (status, retry, body) = &statuses[burst];
    assert_eq!(*status, 429, "{statuses:?}");
    assert_eq!(body["code"], BUYER_LIMITED, "{body}");
    assert!(
        retry
            .as_deref()
            .is_some_and(|r| r.parse::<u64>().unwrap() >= 1)
    );
    // Another buyer is not limited by it.
    let (status, _, body) = attempt(&env.url(1), &sale, "patient").await;
    assert_eq!(status, 201, "{body}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_api_requests_over_its_quota_are_429() {
    let env = Env::start(Setup::default()).await;
    let base = env.url(0);
    let sale = create_sale(&base, 10).await;
    let c = http();
    let poll = |client: &'static str| {
        c.get(format!("{base}/api/sales/{sale}/stats"))
            .header("x-client-id", client)
            .send()
    };
    // Twice the burst at once: up to half of them over it (the rate adds some back).
    let burst = CLIENT_QUOTA.burst_size() as usize;
    let mut polls = tokio::task::JoinSet::new();
    for _ in 0..2 * burst {
        polls.spawn(poll("scraper"));
    }
    let mut limited = Vec::new();
    while let Some(answer) = polls.join_next().await {
        let answer = answer.unwrap().expect("GET stats");
        if answer.status().as_u16() == 429 {
            limited.push(answer);
        }
    }
    assert!(
        !limited.is_empty() && limited.len() < burst,
        "{} of {} limited",
        limited.len(),
        2 * burst
    );
    assert!(limited[0].headers().contains_key("retry-after"));
    let (_, body) = read(limited.into_iter().next().unwrap()).await;
    assert_eq!(body["code"], CLIENT_LIMITED, "{body}");
    // Another client is served; the rejections are counted like the app's others.
    let other = poll("browser").await.expect("GET stats");
    assert_eq!(other.status().as_u16(), 200);
    let metrics = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("client_rate_limited"), "{metrics}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_limit_lets_every_attempt_through() {
    let env = Env::start(Setup {
        limiting: false,
        ..Setup::default()
    })
    .await;
    let sale = create_sale(&env.url(0), 10).await;
    let burst = BUYER_QUOTA.burst_size() as usize;
    for i in 0..burst + 3 {
        let (status, _, body) = attempt(&env.url(0), &sale, "greedy").await;
        assert_eq!(status, if i == 0 { 201 } else { 409 }, "{body}");
    }
    env.finish().await;
}
