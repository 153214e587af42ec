//! The HTTP API against a real `serve` process, a real redis-server and SQLite.

mod common;

use std::time::Duration;

use common::{Env, Setup, buy, create_sale, http, read};
use flash_sale::invariants::Invariants;
use flash_sale::model::SaleId;
use flash_sale::telemetry::{self, Scrape};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sales_orders_and_payments() {
    let env = Env::start(Setup::default()).await;
    let base = env.url(0);
    let c = http();

    // The page.
    let res = c.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert!(res.text().await.unwrap().contains("Flash sale"));

    // Creating sales: good and bad bodies.
    let sale = create_sale(&base, 2).await;
    for (body, what) in [
        (json!({"sku": "A", "name": "B"}), "no stock"),
        (
            json!({"sku": "A", "name": "B", "stock": -1}),
            "negative stock",
        ),
        (json!({"sku": "", "name": "B", "stock": 1}), "empty sku"),
        (
            json!({"sku": "A", "name": "B", "stock": 1, "starts_at": "soon"}),
            "bad time",
        ),
        (
            json!({"sku": "A", "name": "B", "stock": 1, "starts_at": "2030-01-01T00:00:00Z", "ends_at": "2029-01-01T00:00:00Z"}),
            "ends before start",
        ),
        (
            json!({"sku": "A", "name": "B", "stock": 1, "color": "red"}),
            "unknown field",
        ),
    ] {
        let (status, body) = read(
            c.post(format!("{base}/api/sales"))
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 400, "{what}: {body}");
        assert_eq!(body["code"], "invalid_body", "{what}: {body}");
    }
    let (status, body) = read(
        c.post(format!("{base}/api/sales"))
            .body("{not json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_body")));

    // Reading sales.
    let (status, list) = read(c.get(format!("{base}/api/sales")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert!(list.as_array().unwrap().iter().any(|s| s["id"] == sale));
    let (status, one) = read(
        c.get(format!("{base}/api/sales/{sale}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, one["stock"].as_i64()), (200, Some(2)));
    assert_eq!(one["status"], "open");
    let unknown = SaleId::generate();
    let (status, body) = read(
        c.get(format!("{base}/api/sales/{unknown}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("sale_not_found"))
    );
    let (status, body) = read(c.get(format!("{base}/api/sales/42")).send().await.unwrap()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_sale_id"))
    );
    let (status, _) = read(c.get(format!("{base}/api/nope")).send().await.unwrap()).await;
    assert_eq!(status, 404);

    // Buying: bad input first.
    let (status, body) = read(
        c.post(format!("{base}/api/sales/{sale}/orders"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("missing_user_id"))
    );
    let (status, body) = buy(&base, &sale, "two words").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_user_id"))
    );
    let (status, body) = buy(&base, "sale_nope", "alice").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_sale_id"))
    );
    let (status, body) = buy(&base, unknown.as_str(), "alice").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("sale_not_found"))
    );

    // One order per person; then sold out.
    let (status, order) = buy(&base, &sale, "alice").await;
    assert_eq!(status, 201, "{order}");
    assert_eq!(order["status"], "reserved");
    assert!(
        order["fence"].as_i64().unwrap() > 0,
        "written under a fencing token"
    );
    let order_id = order["id"].as_str().unwrap().to_owned();
    let (status, body) = buy(&base, &sale, "alice").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("already_ordered"))
    );
    let (status, _) = buy(&base, &sale, "bob").await;
    assert_eq!(status, 201);
    let (status, body) = buy(&base, &sale, "carol").await;
    assert_eq!((status, body["code"].as_str()), (410, Some("sold_out")));

    // Orders.
    let (status, got) = read(
        c.get(format!("{base}/api/orders/{order_id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, got["user_id"].as_str()), (200, Some("alice")));
    let (status, body) = read(
        c.get(format!("{base}/api/orders/ord_00000000000000000000"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("order_not_found"))
    );
    let (status, body) = read(
        c.get(format!("{base}/api/orders/bogus"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_order_id"))
    );

    // Payments: applied once, replays idempotent, another payment refused.
    let pay = |body: serde_json::Value| {
        let c = c.clone();
        let url = format!("{base}/api/orders/{order_id}/pay");
        async move { read(c.post(url).json(&body).send().await.unwrap()).await }
    };
    let (status, body) = pay(json!({"payment_ref": ""})).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_body")));
    let (status, first) = pay(json!({"payment_ref": "psp-1"})).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["applied"], true);
    assert_eq!(first["order"]["status"], "paid");
    assert_eq!(first["amount_cents"], 500);
    assert!(first.get("replay_caught_by").is_none(), "{first}");
    let (status, replay) = pay(json!({"payment_ref": "psp-1"})).await;
    assert_eq!((status, replay["applied"].as_bool()), (200, Some(false)));
    assert_eq!(replay["replay_caught_by"], "found_paid", "{replay}");
    let (status, body) = pay(json!({"payment_ref": "psp-2"})).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("already_paid")));
    let (status, body) = read(
        c.post(format!("{base}/api/orders/ord_00000000000000000000/pay"))
            .json(&json!({"payment_ref": "x"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("order_not_found"))
    );

    // Stats and invariants, straight from the database.
    let (status, stats) = read(
        c.get(format!("{base}/api/sales/{sale}/stats"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        (
            stats["orders"].as_i64(),
            stats["stock"].as_i64(),
            stats["paid"].as_i64()
        ),
        (Some(2), Some(0), Some(1))
    );
    let inv = Invariants::check(&env.db, &SaleId::parse(&sale).unwrap())
        .await
        .unwrap();
    assert!(inv.violations().is_empty(), "{inv:?}");
    assert_eq!((inv.sold, inv.paid_orders), (2, 1));
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_sales_and_double_clicks() {
    let env = Env::start(Setup {
        // A slow reservation step keeps the first click inside its purchase.
        work: Duration::from_millis(300),
        ..Setup::default()
    })
    .await;
    let base = env.url(0);
    let c = http();
    let create = |body: serde_json::Value| {
        let c = c.clone();
        let url = format!("{base}/api/sales");
        async move { read(c.post(url).json(&body).send().await.unwrap()).await }
    };
    let (status, upcoming) = create(json!({"sku": "U", "name": "Later", "stock": 5,
        "starts_at": "2999-01-01T00:00:00Z", "ends_at": "2999-01-02T00:00:00Z"}))
    .await;
    assert_eq!(status, 201);
    assert_eq!(upcoming["status"], "upcoming");
    let (status, body) = buy(&base, upcoming["id"].as_str().unwrap(), "dave").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("sale_not_started"))
    );
    let (status, ended) = create(json!({"sku": "E", "name": "Past", "stock": 5,
        "starts_at": "2001-01-01T00:00:00Z", "ends_at": "2001-01-02T00:00:00Z"}))
    .await;
    assert_eq!(status, 201);
    let (status, body) = buy(&base, ended["id"].as_str().unwrap(), "dave").await;
    assert_eq!((status, body["code"].as_str()), (410, Some("sale_ended")));

    // A double click: two requests of one buyer at once. One order; the other is 409.
    let sale = create_sale(&base, 10).await;
    let (a, b) = tokio::join!(buy(&base, &sale, "erin"), buy(&base, &sale, "erin"));
    let mut statuses = [a.0, b.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 409], "{a:?} {b:?}");
    let rejected = if a.0 == 409 { &a.1 } else { &b.1 };
    assert!(
        matches!(
            rejected["code"].as_str(),
            Some("lock_busy" | "already_ordered")
        ),
        "{rejected}"
    );
    let inv = Invariants::check(&env.db, &SaleId::parse(&sale).unwrap())
        .await
        .unwrap();
    assert_eq!((inv.sold, inv.stock_left, inv.duplicate_orders), (1, 9, 0));
    env.finish().await;
}

/// `GET /api/sales/{id}/lock` until `done` holds for its body, for at most 10 s.
async fn panel_until(
    c: &reqwest::Client,
    base: &str,
    sale: &str,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = read(
            c.get(format!("{base}/api/sales/{sale}/lock"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        if done(&body) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the panel never showed {what}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_panel_and_metrics() {
    let env = Env::start(Setup::default()).await;
    let base = env.url(0);
    let c = http();
    let sale = create_sale(&base, 5).await;
    let token = |body: &serde_json::Value| body["last_fencing_token"].as_i64().unwrap();

    // Free, never claimed; the instance names itself.
    let panel = panel_until(&c, &base, &sale, "the free lock", |_| true).await;
    assert_eq!(panel["lock"], format!("sale:{sale}:stock"));
    assert_eq!((panel["held"].as_bool(), token(&panel)), (Some(false), 0));
    assert!(panel["holder"].is_null() && panel["fencing_token"].is_null());
    assert_eq!(panel["served_by"]["name"], "instance-0");
    let me = panel["served_by"]["client_id"].as_str().unwrap().to_owned();
    assert_eq!(me.len(), 32, "{panel}");
    let (status, instance) =
        read(c.get(format!("{base}/api/instance")).send().await.unwrap()).await;
    assert_eq!(
        (status, instance["client_id"].as_str()),
        (200, Some(me.as_str()))
    );

    // Each purchase takes the lock with a higher token; a rejection shows on the panel.
    let (status, _) = buy(&base, &sale, "alice").await;
    assert_eq!(status, 201);
    let first = token(&panel_until(&c, &base, &sale, "a token", |_| true).await);
    assert!(first > 0);
    let (status, _) = buy(&base, &sale, "alice").await;
    assert_eq!(status, 409);
    let panel = panel_until(&c, &base, &sale, "the rejection", |_| true).await;
    assert!(token(&panel) > first, "{panel}");
    assert_eq!(panel["recent_rejections"][0]["code"], "already_ordered");
    assert_eq!(panel["recent_rejections"][0]["status"], 409);
    assert_eq!(
        panel["rejections"],
        json!([{"status": 409, "code": "already_ordered", "count": 1}])
    );

    // A holder of another registered client, a purchase waiting behind it.
    let holder = lock_core::LockClient::builder(&env.redis.url())
        .build()
        .await
        .unwrap();
    env.db
        .register_instance(holder.client_id(), "test-holder", "http://test", 0)
        .await
        .unwrap();
    let guard = holder.lock(format!("sale:{sale}:stock")).await.unwrap();
    let held_token = guard.fencing_token();
    let panel = panel_until(&c, &base, &sale, "the holder", |_| true).await;
    assert_eq!(panel["held"], true);
    assert_eq!(panel["holder"]["instance"], "test-holder", "{panel}");
    assert_eq!(panel["holder"]["client_id"], holder.client_id());
    assert_holder_token(&panel, held_token);
    assert!(panel["ttl_ms"].as_u64().is_some_and(|t| t > 0), "{panel}");
    let waiting = tokio::spawn({
        let (base, sale) = (base.clone(), sale.clone());
        async move { buy(&base, &sale, "bob").await }
    });
    let panel = panel_until(&c, &base, &sale, "a waiter", |p| {
        (p["contended"] == true || p["waiter_marks"] == false) && p["queued_here"] == 1
    })
    .await;
    assert_eq!(panel["held"], true, "{panel}");
    guard.unlock().await.unwrap();
    let (status, order) = waiting.await.unwrap();
    assert_eq!(status, 201, "{order}");
    let panel = panel_until(&c, &base, &sale, "the lock free again", |p| {
        p["held"] == false
    })
    .await;
    assert!(token(&panel) as u64 > held_token, "{panel}");
    assert_eq!(panel["queued_here"], 0);

    // Bad ids.
    let (status, body) = read(
        c.get(format!("{base}/api/sales/42/lock"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_sale_id"))
    );
    let unknown = SaleId::generate();
    let (status, _) = read(
        c.get(format!("{base}/api/sales/{unknown}/lock"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);

    // The app's figures at /metrics.
    let res = c.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let kind = res.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("text/plain"), "{kind}");
    let text = res.text().await.unwrap();
    let scrape = Scrape::parse(&text);
    assert_eq!(scrape.sum(telemetry::ORDERS, &[]), 2.0, "{text}");
    assert_eq!(scrape.sum(telemetry::UNITS_SOLD, &[]), 2.0, "{text}");
    let already = [
        ("route", "orders"),
        ("status", "409"),
        ("code", "already_ordered"),
    ];
    assert_eq!(scrape.sum(telemetry::REJECTIONS, &already), 1.0, "{text}");
    let bad_id = [
        ("route", "other"),
        ("status", "400"),
        ("code", "invalid_sale_id"),
    ];
    assert_eq!(scrape.sum(telemetry::REJECTIONS, &bad_id), 1.0, "{text}");
    // And the locks' own (lock-core's `metrics` feature), by family: three purchases took the
    // stock lock, bob's after waiting for the test's holder; each took its buyer lock.
    let acquired = |family| {
        scrape.sum(
            "lock_acquisitions_total",
            &[("family", family), ("outcome", "acquired")],
        )
    };
    assert_eq!(acquired("stock"), 3.0, "{text}");
    assert_eq!(acquired("buyer"), 3.0, "{text}");
    let waited = [("family", "stock")];
    assert_eq!(
        scrape.sum("lock_wait_duration_seconds_count", &waited),
        1.0,
        "{text}"
    );
    assert!(
        scrape
            .quantile(
                0.99,
                "lock_acquire_duration_seconds",
                &[("family", "stock")]
            )
            .is_some(),
        "acquire times as a histogram: {text}"
    );
    env.finish().await;
}

/// Two instances: while instance 0's purchase holds the stock lock (stopped at its stall
/// point), both panels name instance 0 as the holder, each from its own side (itself, or the
/// `instances` table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_panels_name_the_instance_that_holds_the_lock() {
    let mut env = Env::start(Setup {
        instances: 2,
        stall_first: true,
        ..Setup::default()
    })
    .await;
    let (base0, base1) = (env.url(0), env.url(1));
    let c = http();
    let sale = create_sale(&base0, 5).await;
    let buying = tokio::spawn({
        let (base0, sale) = (base0.clone(), sale.clone());
        async move { buy(&base0, &sale, "alice").await }
    });
    let line = env.instances[0]
        .next_stall(Duration::from_secs(30))
        .await
        .expect("instance 0 reaches its stall point holding the stock lock");
    let token: u64 = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("token="))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no token in {line:?}"));
    for base in [&base0, &base1] {
        let (status, panel) = read(
            c.get(format!("{base}/api/sales/{sale}/lock"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{panel}");
        assert_eq!(panel["held"], true, "{base}: {panel}");
        assert_eq!(panel["holder"]["instance"], "instance-0", "{base}: {panel}");
        assert_holder_token(&panel, token);
    }
    let (_, panel) = read(
        c.get(format!("{base1}/api/sales/{sale}/lock"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(panel["served_by"]["name"], "instance-1");
    assert_eq!(
        panel["queued_here"], 0,
        "instance 1 runs no purchase: {panel}"
    );
    assert!(
        panel["waiters"]
            .as_str()
            .is_some_and(|w| w.starts_with("no purchase of this instance waiting; ")),
        "{panel}"
    );

    // A second purchase on the holder's instance, and one on the other instance: each
    // panel counts its own, and says that a waiter asked Redis for the release.
    let spawn_buy = |base: &str, buyer: &'static str| {
        let (base, sale) = (base.to_owned(), sale.clone());
        tokio::spawn(async move { buy(&base, &sale, buyer).await })
    };
    let bob = spawn_buy(&base0, "bob");
    let panel = panel_until(&c, &base0, &sale, "bob waiting", |p| {
        p["waiting_here"] == 1 && (p["contended"] == true || p["waiter_marks"] == false)
    })
    .await;
    assert_eq!(panel["holding_here"], 1, "{panel}");
    let redis = if panel["waiter_marks"] == true {
        "a waiter asked Redis to announce the release"
    } else {
        "its release is always announced (this lock protocol marks no waiter in Redis)"
    };
    assert_eq!(
        panel["waiters"],
        format!("this instance holds it, 1 more of its purchases waiting; {redis}")
    );
    let carol = spawn_buy(&base1, "carol");
    let panel = panel_until(&c, &base1, &sale, "carol waiting", |p| {
        p["waiting_here"] == 1
    })
    .await;
    assert_eq!(panel["holding_here"], 0, "{panel}");
    assert_eq!(
        panel["waiters"],
        format!("1 purchase of this instance waiting; {redis}")
    );

    env.instances[0].release_stall().unwrap();
    let (status, order) = buying.await.unwrap();
    assert_eq!(status, 201, "{order}");
    assert_eq!(order["fence"].as_u64(), Some(token));
    for waiter in [bob, carol] {
        let (status, order) = waiter.await.unwrap();
        assert_eq!(status, 201, "{order}");
    }
    env.finish().await;
}

/// An instance that starts on a database without a sale creates the demo sale, so the
/// storefront has something to buy and a lock to show; a second instance finds it and does
/// not create another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_database_opens_with_the_demo_sale() {
    let env = Env::start(Setup {
        instances: 2,
        demo_sale: true,
        ..Setup::default()
    })
    .await;
    let c = http();
    let demo = flash_sale::serve::demo_sale();
    for base in env.urls() {
        let (status, list) = read(c.get(format!("{base}/api/sales")).send().await.unwrap()).await;
        assert_eq!(status, 200);
        let sales = list.as_array().unwrap();
        assert_eq!(sales.len(), 1, "one demo sale for both instances: {list}");
        assert_eq!(sales[0]["name"], demo.name.as_str());
        assert_eq!(sales[0]["stock"], demo.stock);
        assert_eq!(sales[0]["status"], "open");
        let sale = sales[0]["id"].as_str().unwrap();
        let panel = panel_until(&c, &base, sale, "the demo sale's lock", |_| true).await;
        assert_eq!(panel["held"], false, "{panel}");
    }
    env.finish().await;
}

/// The panel shows the holder's token `token`: itself where the lock's key keeps it (the
/// scripted protocol) or the instance holds the lock, else (the native and hybrid protocols,
/// asked from another instance) no token and an upper bound at least `token`.
fn assert_holder_token(panel: &serde_json::Value, token: u64) {
    match panel["fencing_token"].as_u64() {
        Some(shown) => assert_eq!(shown, token, "{panel}"),
        None => assert!(
            panel["fencing_token_at_most"]
                .as_u64()
                .is_some_and(|at_most| at_most >= token),
            "{panel}"
        ),
    }
}
