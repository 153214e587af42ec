//! End to end: the storefront page in headless Chromium, driven over WebDriver (fantoccini
//! and Debian's chromedriver). Loads the page of a shop without a sale (it says what to do),
//! then, with a sale, buys, sees the stock drop and the order confirmed, pays; then watches
//! the lock panel: its waiters line, the fencing token rising with each purchase and a
//! refused one listed; and a double click on Buy (the page's second click of it) buys once.
//! Skipped, with the reason printed, where Chromium or its driver is not installed
//! (`apt-get install chromium chromium-driver`).

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Env, Setup, create_sale, http, read};
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A chromedriver process, stopped on drop together with any browser it left behind.
struct Driver {
    child: Child,
    port: u16,
    profile: tempfile::TempDir,
}

impl Driver {
    fn start() -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver = Driver {
            child,
            port,
            profile: tempfile::tempdir().expect("profile dir"),
        };
        // Bounded wait for the driver's port to accept connections.
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        driver
    }

    async fn connect(&self) -> Client {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": CHROMIUM,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--window-size=1200,900",
                    format!("--user-data-dir={}", self.profile.path().display()),
                ],
            }),
        );
        ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("WebDriver session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A browser whose session was not closed (a failed test) outlives its driver: stop
        // the processes that use this test's own profile directory, by pid.
        kill_processes_using(self.profile.path());
    }
}

fn kill_processes_using(profile: &Path) {
    let needle = format!("--user-data-dir={}", profile.display());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(&needle) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storefront_buy_and_pay_in_chromium() {
    for tool in [CHROMIUM, CHROMEDRIVER] {
        if !Path::new(tool).exists() {
            common::skip(
                "storefront_buy_and_pay_in_chromium",
                &format!("{tool} is not installed (apt-get install chromium chromium-driver)"),
            );
            return;
        }
    }
    let env = Env::start(Setup::default()).await;
    let base = env.url(0);
    let driver = Driver::start();
    let client = driver.connect().await;
    let outcome = match drive_empty(&client, &base).await {
        Ok(()) => {
            let sale = create_sale(&base, 3).await;
            match drive(&client, &base, &sale).await {
                Ok(order) => match drive_panel(&client, &sale).await {
                    Ok(()) => drive_double_click(&client, &base).await.map(|()| order),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    };
    // A picture of the page at the end, for people: target/tmp/flash-sale-storefront.png.
    if let Some(dir) = option_env!("CARGO_TARGET_TMPDIR")
        && let Ok(png) = client.screenshot().await
    {
        let _ = std::fs::write(Path::new(dir).join("flash-sale-storefront.png"), png);
    }
    let _ = client.close().await;
    drop(driver);
    let order_id = outcome.unwrap_or_else(|e| panic!("{e}"));

    // The page's order is in the database, paid, for the buyer typed in.
    let (status, order) = read(
        http()
            .get(format!("{base}/api/orders/{order_id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{order}");
    assert_eq!(order["user_id"], "e2e-buyer");
    assert_eq!(order["status"], "paid");
    env.finish().await;
}

/// The page of a shop without a sale (these instances create no demo sale) says what to do,
/// and opens the form that creates one.
async fn drive_empty(client: &Client, base: &str) -> Result<(), String> {
    let e = |what: &'static str| move |err: fantoccini::error::CmdError| format!("{what}: {err}");
    client.goto(base).await.map_err(e("open the empty page"))?;
    let text = client
        .wait()
        .at_most(Duration::from_secs(15))
        .for_element(Locator::Css("#sales .empty.none"))
        .await
        .map_err(e("the empty shop's message"))?
        .text()
        .await
        .map_err(e("the message's text"))?;
    if !text.contains("No sales yet") || !text.contains("New sale") {
        return Err(format!("the empty shop says {text:?}"));
    }
    client
        .find(Locator::XPath("//details[@open]//form[@id='new-sale']"))
        .await
        .map_err(e("the new-sale form, opened"))?;
    Ok(())
}

/// The browser steps; the order id the page confirmed.
async fn drive(client: &Client, base: &str, sale: &str) -> Result<String, String> {
    let e = |what: &'static str| move |err: fantoccini::error::CmdError| format!("{what}: {err}");
    let stock_is = |n: u32| {
        format!(
            "//article[@data-sale-id='{sale}']//span[@class='stock' and normalize-space()='{n}']"
        )
    };
    let wait = Duration::from_secs(15);
    client.goto(base).await.map_err(e("open the page"))?;
    client
        .wait()
        .at_most(wait)
        .for_element(Locator::XPath(&stock_is(3)))
        .await
        .map_err(e("the sale with 3 left"))?;
    let buyer = client
        .find(Locator::Css("#buyer"))
        .await
        .map_err(e("buyer field"))?;
    buyer.clear().await.map_err(e("clear buyer"))?;
    buyer
        .send_keys("e2e-buyer")
        .await
        .map_err(e("type buyer"))?;
    client
        .find(Locator::Css(&format!(
            "article[data-sale-id='{sale}'] button.buy"
        )))
        .await
        .map_err(e("buy button"))?
        .click()
        .await
        .map_err(e("click buy"))?;
    let order = client
        .wait()
        .at_most(wait)
        .for_element(Locator::Css("#outcome.ok .order-id"))
        .await
        .map_err(e("the order confirmation"))?;
    let order_id = order.text().await.map_err(e("order id"))?;
    let text = client
        .find(Locator::Css("#outcome"))
        .await
        .map_err(e("outcome"))?
        .text()
        .await
        .map_err(e("outcome text"))?;
    if !text.contains("Order confirmed") || !order_id.starts_with("ord_") {
        return Err(format!("unexpected outcome: {text:?}"));
    }
    client
        .wait()
        .at_most(wait)
        .for_element(Locator::XPath(&stock_is(2)))
        .await
        .map_err(e("the stock dropping to 2"))?;
    client
        .find(Locator::Css("#outcome button.pay"))
        .await
        .map_err(e("pay button"))?
        .click()
        .await
        .map_err(e("click pay"))?;
    client
        .wait()
        .at_most(wait)
        .for_element(Locator::XPath(
            "//span[@class='order-status' and normalize-space()='paid']",
        ))
        .await
        .map_err(e("the order shown paid"))?;
    Ok(order_id)
}

/// The lock panel's steps, after `drive`'s purchase by `e2e-buyer`: the panel shows that
/// purchase's fencing token; the same buyer's second try is refused (`409 already_ordered`,
/// listed on the panel) and another buyer's purchase shows a higher token each time.
async fn drive_panel(client: &Client, sale: &str) -> Result<(), String> {
    let e = |what: &'static str| move |err: fantoccini::error::CmdError| format!("{what}: {err}");
    let wait = Duration::from_secs(15);
    let token_above = |n: i64| {
        format!(
            "//section[@id='lock-panel' and @data-sale-id='{sale}']\
             //span[@class='last-token' and number(normalize-space()) > {n}]"
        )
    };
    let token = |text: String| {
        text.trim()
            .parse::<i64>()
            .map_err(|err| format!("the panel's token {text:?}: {err}"))
    };
    let first = token(
        client
            .wait()
            .at_most(wait)
            .for_element(Locator::XPath(&token_above(0)))
            .await
            .map_err(e("the panel with the first purchase's token"))?
            .text()
            .await
            .map_err(e("token text"))?,
    )?;
    let served_by = client
        .find(Locator::Css("#lock-panel .served-by"))
        .await
        .map_err(e("served by"))?
        .text()
        .await
        .map_err(e("served by text"))?;
    if !served_by.contains("instance-0") {
        return Err(format!("the panel names its instance {served_by:?}"));
    }
    // The lock is free between purchases: the waiters line says so, in one piece.
    client
        .wait()
        .at_most(wait)
        .for_element(Locator::XPath(
            "//section[@id='lock-panel']//dd[@class='lock-waiters' \
             and normalize-space()='no purchase of this instance waiting']",
        ))
        .await
        .map_err(e("the waiters line of the free lock"))?;
    let buy = || async {
        client
            .find(Locator::Css(&format!(
                "article[data-sale-id='{sale}'] button.buy"
            )))
            .await
            .map_err(e("buy button"))?
            .click()
            .await
            .map_err(e("click buy"))
    };
    // The same buyer again: refused under the lock, with a newer token.
    buy().await?;
    client
        .wait()
        .at_most(wait)
        .for_element(Locator::XPath(
            "//section[@id='lock-panel']//li[@class='rejection' and contains(., '409 already_ordered')]",
        ))
        .await
        .map_err(e("the refused purchase listed on the panel"))?;
    let second = token(
        client
            .wait()
            .at_most(wait)
            .for_element(Locator::XPath(&token_above(first)))
            .await
            .map_err(e("a token above the first"))?
            .text()
            .await
            .map_err(e("token text"))?,
    )?;
    // Another buyer: an order, and a newer token still.
    let buyer = client
        .find(Locator::Css("#buyer"))
        .await
        .map_err(e("buyer field"))?;
    buyer.clear().await.map_err(e("clear buyer"))?;
    buyer
        .send_keys("e2e-buyer-2")
        .await
        .map_err(e("type buyer"))?;
    buy().await?;
    client
        .wait()
        .at_most(wait)
        .for_element(Locator::Css("#outcome.ok .order-id"))
        .await
        .map_err(e("the second order confirmed"))?;
    client
        .wait()
        .at_most(wait)
        .for_element(Locator::XPath(&token_above(second)))
        .await
        .map_err(e("a token above the second"))?;
    Ok(())
}

/// A double click buys once: on a sale that allows two per buyer, the page's Buy as a single
/// click, then as the second click of a double click (the browser's `event.detail` 2), then as
/// a new single click. The double click's purchase is answered from the first one's record;
/// the new click buys the second item.
async fn drive_double_click(client: &Client, base: &str) -> Result<(), String> {
    let e = |what: &'static str| move |err: fantoccini::error::CmdError| format!("{what}: {err}");
    let new_sale = json!({"sku": "T-2", "name": "Two per buyer", "stock": 5, "per_user_limit": 2});
    let res = http()
        .post(format!("{base}/api/sales"))
        .json(&new_sale)
        .send()
        .await
        .map_err(|err| format!("create the sale: {err}"))?;
    let (status, body) = read(res).await;
    let sale = body["id"]
        .as_str()
        .filter(|_| status == 201)
        .ok_or(format!("{body}"))?;
    let card = format!("article[data-sale-id='{sale}'] button.buy");
    client
        .wait()
        .at_most(Duration::from_secs(15))
        .for_element(Locator::Css(&card))
        .await
        .map_err(e("the new sale's card"))?;
    // The clicks through the page's own handler, one after the other.
    let clicked = client
        .execute(
            "const [sale] = arguments;
             const el = document.querySelector(`article[data-sale-id='${sale}']`);
             document.getElementById('buyer').value = 'e2e-double';
             return (async () => {
               const said = [];
               for (const clicks of [1, 2, 1]) {
                 await buy(sale, el, clicks);
                 said.push(document.getElementById('outcome').textContent);
               }
               return said;
             })();",
            vec![json!(sale)],
        )
        .await
        .map_err(e("click Buy: once, double, once more"))?;
    let said: Vec<String> = serde_json::from_value(clicked).map_err(|err| err.to_string())?;
    let [first, double, again] = said.as_slice() else {
        return Err(format!("the page said {said:?}"));
    };
    let order = |text: &str| text.split_whitespace().nth(2).map(str::to_owned);
    if !double.contains("double click")
        || order(double) != order(first)
        || order(again) == order(first)
    {
        return Err(format!("the page said {said:?}"));
    }
    let (_, stats) = read(
        http()
            .get(format!("{base}/api/sales/{sale}/stats"))
            .send()
            .await
            .map_err(|err| format!("stats: {err}"))?,
    )
    .await;
    if stats["orders"] != 2 {
        return Err(format!("two clicks and a double click made {stats}"));
    }
    Ok(())
}
