//! Idempotency keys on the app's purchases and payment callbacks, over real instances, a
//! private Redis and the database: duplicates of one key on two instances buy once (the others
//! get `409` or the first answer, byte for byte), a key reused for another sale is `422`, a
//! replayed callback is answered from the record, and an instance killed (`SIGKILL`) right after
//! its purchase committed with its record leaves a retry that is replayed, not bought again — on
//! SQLite, and on PostgreSQL when `DATABASE_URL` is set.

mod common;

use std::time::Duration;

use common::{Database, Env, Setup, http, postgres_url};
use serde_json::Value;
use sqlx::Row;

/// Creates a sale of `stock` with a per-buyer limit of `limit` and returns its id.
async fn create_sale(base: &str, stock: i64, limit: i64) -> String {
    let sale = serde_json::json!({
        "sku": "IDEM-1", "name": "Keyed item", "stock": stock, "price_cents": 700,
        "per_user_limit": limit,
    });
    let res = http()
        .post(format!("{base}/api/sales"))
        .json(&sale)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let body: Value = res.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// What an answer said: status, whether it is a replay, its problem code, its body's bytes.
struct Answer {
    status: u16,
    replayed: bool,
    body: Vec<u8>,
}

impl Answer {
    async fn of(res: reqwest::Response) -> Answer {
        let status = res.status().as_u16();
        let replayed = res
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true");
        let body = res.bytes().await.unwrap().to_vec();
        Answer {
            status,
            replayed,
            body,
        }
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// `POST /api/sales/{sale}/orders` as `user` with the idempotency key `key`.
async fn buy(base: &str, sale: &str, user: &str, key: &str) -> reqwest::Result<reqwest::Response> {
    http()
        .post(format!("{base}/api/sales/{sale}/orders"))
        .header("x-user-id", user)
        .header("idempotency-key", key)
        .send()
        .await
}

/// The number `sql` (one `$1`, bound to `arg`) reads from the database.
async fn number(env: &Env, sql: &str, arg: &str) -> i64 {
    sqlx::query(sql)
        .bind(arg)
        .fetch_one(env.db.pool())
        .await
        .unwrap()
        .try_get(0)
        .unwrap()
}

async fn orders_of(env: &Env, user: &str) -> i64 {
    number(env, "SELECT COUNT(*) FROM orders WHERE user_id = $1", user).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_of_one_key_buy_once_across_two_instances() {
    let env = Env::start(Setup {
        instances: 2,
        // A slow reservation step, so that the duplicates come while the first one runs.
        work: Duration::from_millis(300),
        ..Setup::default()
    })
    .await;
    // A limit of 5: only the key stops a second order.
    let sale = create_sale(&env.url(0), 10, 5).await;
    let urls = env.urls();
    let mut tries = tokio::task::JoinSet::new();
    for i in 0..8 {
        let (url, sale) = (urls[i % 2].clone(), sale.clone());
        tries.spawn(async move { buy(&url, &sale, "keen", "click-1").await });
    }
    let answers = tries.join_all().await;
    let mut first = None;
    let mut replays = Vec::new();
    for res in answers {
        let answer = Answer::of(res.unwrap()).await;
        match (answer.status, answer.replayed) {
            (201, false) => assert!(first.replace(answer.body).is_none(), "two ran"),
            (201, true) => replays.push(answer.body),
            (409, false) => assert_eq!(answer.json()["code"], "idempotency_key_in_use"),
            _ => panic!(
                "{} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            ),
        }
    }
    let first = first.expect("one of them ran");
    assert!(
        replays.iter().all(|r| *r == first),
        "replays are the first answer"
    );
    // Later retries, on either instance: the first answer, byte for byte.
    for url in &urls {
        let again = Answer::of(buy(url, &sale, "keen", "click-1").await.unwrap()).await;
        assert_eq!((again.status, again.replayed), (201, true));
        assert_eq!(again.body, first);
    }
    assert_eq!(orders_of(&env, "keen").await, 1, "one order for one key");
    // Another key is another purchase; the same key for another sale is another request.
    let second = Answer::of(buy(&urls[1], &sale, "keen", "click-2").await.unwrap()).await;
    assert_eq!((second.status, second.replayed), (201, false));
    let other_sale = create_sale(&env.url(0), 10, 5).await;
    let reused = Answer::of(buy(&urls[0], &other_sale, "keen", "click-1").await.unwrap()).await;
    assert_eq!(reused.status, 422);
    assert_eq!(reused.json()["code"], "idempotency_key_reused");
    assert_eq!(orders_of(&env, "keen").await, 2);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_payment_callback_is_answered_from_the_record() {
    let env = Env::start(Setup {
        instances: 2,
        ..Setup::default()
    })
    .await;
    let sale = create_sale(&env.url(0), 10, 1).await;
    let order = Answer::of(buy(&env.url(0), &sale, "payer", "buy-1").await.unwrap()).await;
    let order = order.json()["id"].as_str().unwrap().to_owned();
    let pay = |base: String| {
        let order = order.clone();
        async move {
            let res = http()
                .post(format!("{base}/api/orders/{order}/pay"))
                .header("idempotency-key", format!("psp-event-{order}"))
                .json(&serde_json::json!({ "payment_ref": format!("psp-{order}") }))
                .send()
                .await
                .unwrap();
            Answer::of(res).await
        }
    };
    // Delivered twice at once, on two instances: one runs, the other waits for its answer.
    let (a, b) = tokio::join!(pay(env.url(0)), pay(env.url(1)));
    assert_eq!((a.status, b.status), (200, 200));
    assert!(a.replayed != b.replayed, "one ran, one was replayed");
    assert_eq!(a.body, b.body);
    assert_eq!(a.json()["applied"], true);
    let paid = number(
        &env,
        "SELECT COUNT(*) FROM payments WHERE order_id = $1",
        &order,
    )
    .await;
    assert_eq!(paid, 1);
    // The replay is counted at /metrics.
    let metrics = http()
        .get(format!("{}/metrics", env.url(0)))
        .send()
        .await
        .unwrap();
    let metrics = metrics.text().await.unwrap();
    let metrics_1 = http()
        .get(format!("{}/metrics", env.url(1)))
        .send()
        .await
        .unwrap();
    let metrics = metrics + &metrics_1.text().await.unwrap();
    assert!(
        metrics.contains("flash_sale_idempotent_replays_total{route=\"pay\"} 1"),
        "{metrics}"
    );
    env.finish().await;
}

/// An instance is killed right after its purchase committed the order with its idempotency
/// record, before it answered: the client's retry, on the other instance, is replayed.
async fn a_crash_after_the_commit_is_replayed_not_bought_again(database: Database) {
    let mut env = Env::start(Setup {
        instances: 2,
        database,
        crash_first: true,
        ..Setup::default()
    })
    .await;
    let sale = create_sale(&env.url(1), 10, 5).await;
    let (url, sale_id) = (env.url(0), sale.clone());
    let first =
        tokio::spawn(async move { buy(&url, &sale_id, "doomed", "crash-1").await.map(drop) });
    let line = env.instances[0]
        .next_stall(Duration::from_secs(30))
        .await
        .expect("the first instance committed the purchase");
    assert!(line.starts_with("COMMITTED"), "{line}");
    flash_sale::cluster::signal(env.instances[0].pid(), "-KILL").unwrap();
    env.instances[0].kill();
    assert!(
        first.await.unwrap().is_err(),
        "the killed instance never answered"
    );

    let retry = Answer::of(buy(&env.url(1), &sale, "doomed", "crash-1").await.unwrap()).await;
    assert_eq!(
        (retry.status, retry.replayed),
        (201, true),
        "{}",
        String::from_utf8_lossy(&retry.body)
    );
    let order = retry.json()["id"].as_str().unwrap().to_owned();
    let ids: Vec<String> = sqlx::query("SELECT id FROM orders WHERE user_id = $1")
        .bind("doomed")
        .fetch_all(env.db.pool())
        .await
        .unwrap()
        .iter()
        .map(|r| r.try_get(0).unwrap())
        .collect();
    assert_eq!(ids, [order], "the one order, the one the record names");
    let stock = number(&env, "SELECT stock FROM sales WHERE id = $1", &sale).await;
    assert_eq!(stock, 9);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_commit_is_replayed_not_bought_again_sqlite() {
    a_crash_after_the_commit_is_replayed_not_bought_again(Database::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_commit_is_replayed_not_bought_again_postgres() {
    if postgres_url("a_crash_after_the_commit_is_replayed_not_bought_again_postgres").is_some() {
        a_crash_after_the_commit_is_replayed_not_bought_again(Database::Postgres).await;
    }
}
