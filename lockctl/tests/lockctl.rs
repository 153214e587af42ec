//! The lockctl binary against private redis-servers started by the harness (`lock_tests`):
//! status of every kind held and free, list (sorted, bounded, filtered, paged through SCAN) on
//! a server and on a Cluster, force-unlock (refused, confirmed, per kind; the waiter woken and
//! fenced), watch (keyspace notifications, the release channels when they are off or CONFIG
//! is refused, a Cluster), JSON parsed back, and the exit code and message of each failure.
//!
//! The lock clients here speak the scripted mutex protocol, whose lock keys keep the holder's
//! fencing token and hold count, which these tests compare with what lockctl (another client)
//! shows. Under the native and hybrid protocols (Valkey 9, Redis 7) the key keeps only the
//! owner: another client sees no token (an upper bound instead) and a hold count of 1, as
//! lock-core's `LockInfo` documents.

use std::process::Stdio;
use std::time::Duration;

use futures_util::future::join_all;
use lock_core::{LockClient, LockGuard, MutexProtocol};
use lock_tests::fixtures::{blocking, eventually, scripted_client, woken};
use lock_tests::{ClientAuth, RedisCluster, RedisServer, SentinelGroup, TlsFiles};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const LOCKCTL: &str = env!("CARGO_BIN_EXE_lockctl");
/// The longest a lockctl run may take before the test fails.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a test waits for one line of watch's output.
const LINE_TIMEOUT: Duration = Duration::from_secs(15);
const LONG: Duration = Duration::from_secs(60);

/// lock-core's crate docs, where the ACL line of a lock client is written.
const DOCS: &str = include_str!("../../lock-core/src/lib.rs");

/// What one run of lockctl did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Standard output as one JSON document.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    /// The names of the locks of a `status` or `list` document, in order.
    fn names(&self) -> Vec<String> {
        self.json()["locks"]
            .as_array()
            .unwrap_or_else(|| panic!("no locks: {self:?}"))
            .iter()
            .map(|l| l["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// A lockctl command with its output piped, without the environment's LOCKCTL_* and
/// REDIS_URL settings.
fn command(args: &[&str]) -> Command {
    let mut command = Command::new(LOCKCTL);
    command
        .args(args)
        .env_remove("LOCKCTL_URL")
        .env_remove("REDIS_URL")
        .env_remove("LOCKCTL_PREFIX")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs lockctl with `input` on its standard input.
async fn lockctl_with_input(args: &[&str], input: &str) -> Run {
    let mut child = command(args).spawn().expect("lockctl starts");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let output = tokio::time::timeout(RUN_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("lockctl {args:?} did not finish"))
        .unwrap();
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs lockctl with nothing on its standard input.
async fn lockctl(args: &[&str]) -> Run {
    lockctl_with_input(args, "").await
}

/// A running `lockctl watch`, once it said it is watching.
struct Watch {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    /// What it said on standard error before it was watching.
    notices: String,
    rest: JoinHandle<String>,
}

impl Watch {
    /// Starts `lockctl <args>` and waits until it says it is watching.
    async fn start(args: &[&str]) -> Watch {
        let mut child = command(args).spawn().expect("lockctl starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
        let mut notices = String::new();
        let until = Instant::now() + RUN_TIMEOUT;
        loop {
            let line = tokio::time::timeout_at(until, stderr.next_line())
                .await
                .unwrap_or_else(|_| panic!("watch never started: {notices}"))
                .unwrap();
            let Some(line) = line else {
                let status = child.wait().await.unwrap();
                panic!("watch ended before watching ({status}): {notices}");
            };
            notices.push_str(&line);
            notices.push('\n');
            if line.starts_with("lockctl: watching") {
                break;
            }
        }
        let rest = tokio::spawn(async move {
            let mut rest = String::new();
            while let Ok(Some(line)) = stderr.next_line().await {
                rest.push_str(&line);
                rest.push('\n');
            }
            rest
        });
        Watch {
            child,
            lines: BufReader::new(stdout).lines(),
            notices,
            rest,
        }
    }

    /// The next event, as JSON.
    async fn event(&mut self) -> Value {
        let line = tokio::time::timeout(LINE_TIMEOUT, self.lines.next_line())
            .await
            .expect("an event within the timeout")
            .unwrap()
            .expect("watch printed an event before it ended");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Waits for the end (it was given --count or --for): its exit code, the rest of its
    /// standard output and error.
    async fn finish(mut self) -> Run {
        let status = tokio::time::timeout(RUN_TIMEOUT, self.child.wait())
            .await
            .expect("watch ends")
            .unwrap();
        let mut stdout = String::new();
        while let Ok(Some(line)) = self.lines.next_line().await {
            stdout.push_str(&line);
            stdout.push('\n');
        }
        Run {
            code: status.code().unwrap_or(-1),
            stdout,
            stderr: self.notices + &self.rest.await.unwrap(),
        }
    }
}

/// The client id of an owner id (`<client id>:<holder id>`).
fn client_id(owner: &Value) -> String {
    let owner = owner.as_str().expect("an owner id");
    owner.split_once(':').expect("client:holder").0.to_owned()
}

/// The first lock of a `status` document.
fn first_lock(run: &Run) -> Value {
    run.json()["locks"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_every_kind_held_then_free() {
    let server = RedisServer::start();
    let url = server.url();
    let (a, b) = (scripted_client(&url).await, scripted_client(&url).await);
    let status = |name: &'static str| {
        let url = url.clone();
        async move { lockctl(&["--url", &url, "--json", "status", name]).await }
    };

    // A mutex re-entered once, a fair lock with a waiter queued, two readers, two permits.
    let (outer, inner) = lock_core::reentrant(async {
        let outer = a.lock("m").await?;
        let inner = a.lock("m").await?;
        Ok::<_, lock_core::LockError>((outer, inner))
    })
    .await
    .unwrap();
    let fair = a.fair_lock("f").lock().await.unwrap();
    let queued = tokio::spawn({
        let lock = b.fair_lock("f");
        async move { lock.lock().wait(Duration::from_secs(30)).await }
    });
    eventually("the fair waiter is queued", || {
        server.cmd(&["ZCARD", "lock:{f}:fair:queue"]) == "1"
    })
    .await;
    let readers = [
        a.read_write_lock("r").read().await.unwrap(),
        b.read_write_lock("r").read().await.unwrap(),
    ];
    let permits = a.semaphore("s", 5).acquire(2).await.unwrap();

    let run = status("m").await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["held"], true);
    let m = first_lock(&run);
    assert_eq!(m["kind"], "mutex");
    assert_eq!(m["hold_count"], 2);
    assert_eq!(m["fencing_token"], outer.fencing_token());
    assert_eq!(m["waiting"], false);
    let lease = m["remaining_ms"].as_u64().unwrap();
    assert!(lease > 0 && lease <= 30_000, "{lease}");
    let client_a = client_id(&m["owners"][0]);

    let f = first_lock(&status("f").await);
    assert_eq!(
        (f["kind"].as_str(), f["queued"].as_u64()),
        (Some("fair"), Some(1))
    );
    assert_eq!(f["waiting"], true);
    assert_eq!(f["fencing_token"], fair.fencing_token());
    assert_eq!(client_id(&f["owners"][0]), client_a);

    let r = first_lock(&status("r").await);
    assert_eq!(
        (r["kind"].as_str(), r["mode"].as_str()),
        (Some("rw"), Some("read"))
    );
    assert_eq!(
        (r["readers"].as_u64(), r["hold_count"].as_u64()),
        (Some(2), Some(2))
    );
    assert!(r["fencing_token"].is_null(), "readers have no token");
    let owners: Vec<String> = r["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(client_id)
        .collect();
    assert!(owners.contains(&client_a) && owners.iter().any(|o| *o != client_a));

    let s = first_lock(&status("s").await);
    assert_eq!(
        (s["kind"].as_str(), s["hold_count"].as_u64()),
        (Some("semaphore"), Some(2))
    );
    assert_eq!(s["size"], 5);
    assert!(
        s["waiting"].is_null(),
        "lock-core does not record a semaphore's waiters"
    );

    // The table says the same.
    let table = lockctl(&["--url", &url, "status", "m"]).await;
    assert_eq!(table.code, 0);
    // The server it read, and the mutex protocol its client speaks there, on standard error.
    assert!(
        table.stderr.contains("server redis") && table.stderr.contains("mutex protocol"),
        "{table:?}"
    );
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(
        lines[0].starts_with("KIND") && lines[0].contains("OWNER"),
        "{table:?}"
    );
    assert!(
        lines[1].starts_with("mutex") && lines[1].contains("held"),
        "{table:?}"
    );
    assert!(
        lines[1].contains(&outer.fencing_token().to_string()),
        "{table:?}"
    );
    // Another kind under the same name: none.
    let other = lockctl(&["--url", &url, "--json", "status", "m", "--kind", "fair"]).await;
    assert_eq!(
        (other.code, other.json()["found"].as_bool()),
        (1, Some(false))
    );

    // Everything given back: the mutex and fair lock keep their keys (free), the others go.
    assert!(inner.unlock().await.unwrap() && outer.unlock().await.unwrap());
    assert!(fair.unlock().await.unwrap());
    let next = woken(queued, Instant::now()).await;
    assert!(next.unlock().await.unwrap());
    for r in readers {
        assert!(r.unlock().await.unwrap());
    }
    assert!(permits.unlock().await.unwrap());
    for name in ["m", "f"] {
        let run = status(name).await;
        assert_eq!(run.code, 1, "{run:?}");
        let doc = run.json();
        assert_eq!(
            (doc["found"].as_bool(), doc["held"].as_bool()),
            (Some(true), Some(false))
        );
        assert_eq!(doc["locks"][0]["held"], false);
    }
    for name in ["r", "s"] {
        let run = status(name).await;
        assert_eq!(
            (run.code, run.json()["found"].as_bool()),
            (1, Some(false)),
            "{run:?}"
        );
    }
    let absent = lockctl(&["--url", &url, "status", "never-used"]).await;
    assert_eq!(absent.code, 1);
    assert!(
        absent.stdout.contains("no lock named \"never-used\""),
        "{absent:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_list_show_the_owner_description() {
    let server = RedisServer::start();
    let url = server.url();
    let described = LockClient::builder(&url)
        .mutex_protocol(MutexProtocol::Scripted)
        .owner_description("billing@web-3 pid 4242")
        .build()
        .await
        .unwrap();
    let plain = scripted_client(&url).await;
    let held = [
        described.lock("d:1").lease(LONG).await.unwrap(),
        described.lock("d:2").lease(LONG * 2).await.unwrap(),
        plain.lock("d:3").lease(LONG * 3).await.unwrap(),
    ];

    let status = lockctl(&["--url", &url, "--json", "status", "d:1"]).await;
    assert_eq!(status.code, 0, "{status:?}");
    assert_eq!(
        first_lock(&status)["owner_description"],
        "billing@web-3 pid 4242"
    );
    let none = lockctl(&["--url", &url, "--json", "status", "d:3"]).await;
    assert!(first_lock(&none)["owner_description"].is_null(), "{none:?}");

    // `list`: the client's own key (`lock:client:<id>`) is no lock, and every row is described.
    assert_eq!(server.keys("lock:client:*").len(), 1);
    let listed = lockctl(&["--url", &url, "--json", "list"]).await;
    assert_eq!(listed.names(), ["d:1", "d:2", "d:3"]);
    let descriptions: Vec<Value> = listed.json()["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["owner_description"].clone())
        .collect();
    assert_eq!(
        descriptions,
        [
            Value::from("billing@web-3 pid 4242"),
            Value::from("billing@web-3 pid 4242"),
            Value::Null
        ]
    );

    // The table's last column.
    let table = lockctl(&["--url", &url, "list"]).await;
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(lines[0].ends_with("WAITERS  DESCRIPTION"), "{table:?}");
    assert!(
        lines[1].ends_with("no       billing@web-3 pid 4242"),
        "{table:?}"
    );
    assert!(lines[3].ends_with("no       -"), "{table:?}");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_is_sorted_by_remaining_lease_bounded_and_filtered() {
    let server = RedisServer::start();
    let url = server.url();
    let c = scripted_client(&url).await;
    let lease = |s| Duration::from_secs(s);
    let mut guards: Vec<LockGuard> = Vec::new();
    for (name, secs) in [("job:a", 40), ("job:b", 10), ("job:c", 20), ("other:x", 5)] {
        guards.push(c.lock(name).lease(lease(secs)).await.unwrap());
    }
    let permit = c
        .semaphore("job:s", 3)
        .acquire(1)
        .lease(lease(30))
        .await
        .unwrap();
    // A free lock keeps its key (its fencing counter): never listed.
    assert!(c.lock("job:free").await.unwrap().unlock().await.unwrap());

    let all = lockctl(&["--url", &url, "--json", "list"]).await;
    assert_eq!(all.code, 0, "{all:?}");
    assert_eq!(all.names(), ["other:x", "job:b", "job:c", "job:s", "job:a"]);
    assert_eq!(all.json()["truncated"], false);
    let remaining: Vec<u64> = all.json()["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["remaining_ms"].as_u64().unwrap())
        .collect();
    assert!(remaining.is_sorted(), "{remaining:?}");

    let jobs = lockctl(&["--url", &url, "--json", "list", "job:*"]).await;
    assert_eq!(jobs.names(), ["job:b", "job:c", "job:s", "job:a"]);
    let sems = lockctl(&[
        "--url",
        &url,
        "--json",
        "list",
        "job:*",
        "--kind",
        "semaphore",
    ])
    .await;
    assert_eq!(sems.names(), ["job:s"]);

    let two = lockctl(&["--url", &url, "--json", "list", "--limit", "2"]).await;
    assert_eq!(
        (two.code, two.json()["truncated"].as_bool()),
        (0, Some(true))
    );
    assert_eq!(two.names().len(), 2);
    let table = lockctl(&["--url", &url, "list", "--limit", "2"]).await;
    assert_eq!(table.stdout.lines().count(), 3, "{table:?}");
    assert!(table.stderr.contains("truncated"), "{table:?}");

    let none = lockctl(&["--url", &url, "list", "nothing:*"]).await;
    assert_eq!(none.code, 0);
    assert!(none.stdout.contains("no held lock matches"), "{none:?}");

    // More keys than one SCAN page.
    let bulk: Vec<LockGuard> = join_all((0..1100).map(|i| {
        let c = c.clone();
        async move { c.lock(format!("bulk:{i}")).lease(LONG).await.unwrap() }
    }))
    .await;
    let listed = lockctl(&["--url", &url, "--json", "list", "bulk:*", "--limit", "5000"]).await;
    assert_eq!(listed.names().len(), 1100);
    assert_eq!(listed.json()["truncated"], false);
    let capped = lockctl(&["--url", &url, "--json", "list", "bulk:*"]).await;
    assert_eq!(capped.names().len(), 1000);
    assert_eq!(capped.json()["truncated"], true);

    drop((guards, permit, bulk));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_asks_first_then_frees_wakes_and_fences() {
    let server = RedisServer::start();
    let url = server.url();
    let (a, b) = (scripted_client(&url).await, scripted_client(&url).await);
    // A long fixed lease: only the release message can wake the waiter in time.
    let forced = a.lock("stuck").lease(LONG).await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("stuck").wait(Duration::from_secs(30)).await }
    });
    eventually("the waiter subscribed", || {
        !server.pubsub_channels().is_empty()
    })
    .await;

    let refused = lockctl_with_input(&["--url", &url, "force-unlock", "stuck"], "n\n").await;
    assert_eq!(refused.code, 5, "{refused:?}");
    assert!(
        refused.stderr.contains("force-unlock? [y/N]"),
        "{refused:?}"
    );
    assert!(refused.stderr.contains("not confirmed"), "{refused:?}");
    assert!(a.mutex("stuck").info().await.unwrap().held);
    let no_answer = lockctl(&["--url", &url, "force-unlock", "stuck"]).await;
    assert_eq!(no_answer.code, 5, "the end of the input is a no");

    let done = lockctl_with_input(&["--url", &url, "--json", "force-unlock", "stuck"], "y\n").await;
    assert_eq!(done.code, 0, "{done:?}");
    let freed = &done.json()["locks"][0];
    assert_eq!(
        (freed["kind"].as_str(), freed["freed"].as_bool()),
        (Some("mutex"), Some(true))
    );
    assert_eq!(freed["fencing_token"], forced.fencing_token());
    assert_eq!(freed["owners"].as_array().map(Vec::len), Some(1));
    let next = woken(waiter, Instant::now()).await;
    assert!(next.fencing_token() > forced.fencing_token());
    assert!(
        !forced.unlock().await.unwrap(),
        "the forced holder's release: not held"
    );

    // Two kinds under one name: --kind frees one, then the rest.
    let permit = a.semaphore("stuck", 2).acquire(1).await.unwrap();
    let one = lockctl(&[
        "--url",
        &url,
        "--json",
        "force-unlock",
        "stuck",
        "--kind",
        "sem",
        "--yes",
    ])
    .await;
    assert_eq!(one.code, 0, "{one:?}");
    assert_eq!(one.json()["locks"].as_array().map(Vec::len), Some(1));
    assert_eq!(one.json()["locks"][0]["kind"], "semaphore");
    assert!(
        a.mutex("stuck").info().await.unwrap().held,
        "the mutex is still held"
    );
    let rest = lockctl(&["--url", &url, "force-unlock", "stuck", "-y"]).await;
    assert_eq!(rest.code, 0, "{rest:?}");
    assert!(rest.stdout.starts_with("freed mutex \"stuck\""), "{rest:?}");
    let nothing = lockctl(&["--url", &url, "force-unlock", "stuck", "--yes"]).await;
    assert_eq!(nothing.code, 1, "{nothing:?}");
    assert!(nothing.stdout.contains("nothing to free"), "{nothing:?}");
    assert!(!next.unlock().await.unwrap() && !permit.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_acquisitions_and_releases_through_keyspace_notifications() {
    let server = RedisServer::start();
    server.cmd(&["CONFIG", "SET", "notify-keyspace-events", "K$hzxg"]);
    let url = server.url();
    let c = scripted_client(&url).await;
    // Held before watch starts: read first, so its release is a release, not news.
    let old = c.lock("w:old").lease(LONG).await.unwrap();
    let mut watch = Watch::start(&[
        "--url", &url, "--json", "watch", "w:*", "--count", "4", "--for", "40s",
    ])
    .await;
    assert!(!watch.notices.contains("not seen"), "{}", watch.notices);
    assert!(
        watch.notices.contains("keyspace notifications"),
        "{}",
        watch.notices
    );

    let g = c.lock("w:new").await.unwrap();
    let acquired = watch.event().await;
    assert_eq!(
        (acquired["event"].as_str(), acquired["name"].as_str()),
        (Some("acquired"), Some("w:new"))
    );
    assert_eq!(acquired["fencing_token"], g.fencing_token());
    assert_eq!(acquired["source"], "keyspace");
    let owner = acquired["owner"].clone();
    assert!(g.unlock().await.unwrap());
    let released = watch.event().await;
    assert_eq!(released["event"], "released");
    assert_eq!(
        (&released["owner"], &released["fencing_token"]),
        (&owner, &acquired["fencing_token"])
    );

    assert!(old.unlock().await.unwrap());
    let released = watch.event().await;
    assert_eq!(
        (released["event"].as_str(), released["name"].as_str()),
        (Some("released"), Some("w:old"))
    );
    let permit = c.semaphore("w:sem", 2).acquire(1).await.unwrap();
    let acquired = watch.event().await;
    assert_eq!(
        (acquired["event"].as_str(), acquired["kind"].as_str()),
        (Some("acquired"), Some("semaphore"))
    );
    let run = watch.finish().await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(permit.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_uses_the_release_channels_when_notifications_are_off_or_config_refused() {
    let server = RedisServer::start();
    let url = server.url();
    let (a, b) = (scripted_client(&url).await, scripted_client(&url).await);
    let mut watch = Watch::start(&["--url", &url, "watch", "--count", "1", "--for", "40s"]).await;
    assert!(
        watch.notices.contains("keyspace notifications are off"),
        "{}",
        watch.notices
    );
    assert!(
        watch
            .notices
            .contains("CONFIG SET notify-keyspace-events K$hzxg"),
        "{}",
        watch.notices
    );
    assert!(watch.notices.contains("are not seen"), "{}", watch.notices);

    // A release that someone waits for is published: the only kind of mutex release seen.
    let holder = a.lock("busy").lease(LONG).await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("busy").wait(Duration::from_secs(30)).await }
    });
    eventually("the waiter subscribed", || {
        server
            .pubsub_channels()
            .contains(&"lock:{busy}:released".to_owned())
    })
    .await;
    let token = holder.fencing_token();
    assert!(holder.unlock().await.unwrap());
    let line = tokio::time::timeout(LINE_TIMEOUT, watch.lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        line.contains("released") && line.contains("mutex") && line.contains("busy"),
        "{line}"
    );
    assert!(line.contains(&format!("token={token}")), "{line}");
    let run = watch.finish().await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(waiter.await.unwrap().unwrap().unlock().await.unwrap());

    // An ACL user with a lock client's permissions and lockctl's own, but no CONFIG (as on
    // managed services): watch says it cannot read the setting and listens to the channels.
    let line = DOCS
        .lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .find(|l| l.starts_with("ACL SETUSER locks reset on >CHANGE-ME ~"))
        .expect("lock-core documents a lock client's ACL line");
    let mut acl: Vec<&str> = line
        .split_whitespace()
        .map(|a| if a == ">CHANGE-ME" { ">ops-secret" } else { a })
        .collect();
    acl.extend(["+scan", "+exists", "+psubscribe", "+punsubscribe"]);
    assert_eq!(server.cmd(&acl), "OK");
    let ops = url.replacen("://", "://locks:ops-secret@", 1);
    let watch = Watch::start(&["--url", &ops, "watch", "--count", "0"]).await;
    assert!(
        watch.notices.contains("CONFIG GET was refused"),
        "{}",
        watch.notices
    );
    assert!(
        watch.notices.contains("through the release channels"),
        "{}",
        watch.notices
    );
    assert_eq!(watch.finish().await.code, 0);
    let status = lockctl(&["--url", &ops, "status", "busy"]).await;
    assert_eq!(status.code, 1, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_status_force_unlock_and_watch_on_a_cluster() {
    let cluster = blocking(|| RedisCluster::start_with(3, 0));
    let urls = cluster.urls();
    let c = LockClient::builder_cluster(urls.clone())
        .mutex_protocol(MutexProtocol::Scripted)
        .owner_description("cluster client")
        .build()
        .await
        .unwrap();
    // Names on every primary, each with its own fixed lease.
    let mut names: Vec<String> = Vec::new();
    let mut nodes = std::collections::BTreeSet::new();
    for i in 0.. {
        let name = format!("c:{i}");
        nodes.insert(cluster.node_for_key(&format!("lock:{{{name}}}")));
        names.push(name);
        if nodes.len() == 3 && names.len() >= 6 {
            break;
        }
    }
    let mut guards = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let lease = Duration::from_secs(30 + 2 * i as u64);
        guards.push(c.lock(name.clone()).lease(lease).await.unwrap());
    }
    // One URL: the Cluster is detected, and every primary scanned.
    let listed = lockctl(&["--url", &urls[0], "--json", "list"]).await;
    assert_eq!(listed.code, 0, "{listed:?}");
    assert_eq!(
        listed.names(),
        names,
        "sorted by remaining lease, from every primary"
    );
    let capped = lockctl(&[
        "--cluster",
        "--url",
        &urls[1],
        "--json",
        "list",
        "c:*",
        "--limit",
        "2",
    ])
    .await;
    assert_eq!(
        (capped.names().len(), capped.json()["truncated"].as_bool()),
        (2, Some(true))
    );

    // A name whose slot is on another node than the first URL's.
    let first_node = cluster.node_for_key(&format!("lock:{{{}}}", names[0]));
    let (i, far) = names
        .iter()
        .enumerate()
        .find(|(_, n)| cluster.node_for_key(&format!("lock:{{{n}}}")) != first_node)
        .expect("names on several nodes");
    let status = lockctl(&["--url", &urls[0], "--json", "status", far]).await;
    assert_eq!(status.code, 0, "{status:?}");
    assert_eq!(
        first_lock(&status)["fencing_token"],
        guards[i].fencing_token()
    );
    // The description, recorded in its own slot, is found from any node.
    assert_eq!(first_lock(&status)["owner_description"], "cluster client");
    let forced = lockctl(&["--url", &urls[0], "force-unlock", far, "--yes"]).await;
    assert_eq!(forced.code, 0, "{forced:?}");
    let next = c
        .try_lock(far.clone())
        .await
        .unwrap()
        .expect("free after force-unlock");
    assert!(next.fencing_token() > guards[i].fencing_token());
    assert!(next.unlock().await.unwrap());

    // Without keyspace notifications watch cannot see a Cluster's sharded channels.
    let refused = lockctl(&["--url", &urls[0], "watch", "--count", "1"]).await;
    assert_eq!(refused.code, 4, "{refused:?}");
    assert!(refused.stderr.contains("sharded"), "{refused:?}");
    for node in cluster.nodes() {
        node.cmd(&["CONFIG", "SET", "notify-keyspace-events", "K$hzxg"]);
    }
    let mut watch = Watch::start(&[
        "--url", &urls[0], "--json", "watch", "new:*", "--count", "2", "--for", "40s",
    ])
    .await;
    assert!(watch.notices.contains("on 3 node(s)"), "{}", watch.notices);
    // On the primary the first URL is not.
    let new = (0..)
        .map(|i| format!("new:{i}"))
        .find(|n| cluster.node_for_key(&format!("lock:{{{n}}}")) != first_node)
        .unwrap_or_default();
    let g = c.lock(new.clone()).await.unwrap();
    assert_eq!(watch.event().await["event"], "acquired");
    assert!(g.unlock().await.unwrap());
    let released = watch.event().await;
    assert_eq!(
        (released["event"].as_str(), released["name"].as_str()),
        (Some("released"), Some(new.as_str()))
    );
    assert_eq!(watch.finish().await.code, 0);
    drop(guards);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_is_found_through_the_sentinels() {
    let group = blocking(SentinelGroup::start);
    let sentinels = group.sentinel_urls().join(",");
    let c = LockClient::builder_sentinel(group.sentinel_urls(), group.master_name())
        .mutex_protocol(MutexProtocol::Scripted)
        .build()
        .await
        .unwrap();
    let g = c.lock("s:1").await.unwrap();
    let master = group.master_name();
    let args = |more: &[&'static str]| {
        let mut args = vec![
            "--sentinel-master",
            master,
            "--url",
            sentinels.as_str(),
            "--json",
        ];
        args.extend_from_slice(more);
        args
    };
    let listed = lockctl(&args(&["list"])).await;
    assert_eq!(listed.code, 0, "{listed:?}");
    assert_eq!(listed.names(), ["s:1"]);
    let status = lockctl(&args(&["status", "s:1"])).await;
    assert_eq!(first_lock(&status)["fencing_token"], g.fencing_token());
    // The primary's own URL works too, while it is the primary.
    let direct = lockctl(&["--url", &group.primary().url(), "status", "s:1"]).await;
    assert_eq!(direct.code, 0, "{direct:?}");
    assert!(g.unlock().await.unwrap());

    let unknown = lockctl(&["--sentinel-master", "no-such", "--url", &sentinels, "list"]).await;
    assert_eq!(unknown.code, 3, "{unknown:?}");
    assert!(unknown.stderr.contains("no primary"), "{unknown:?}");
}

/// Runs lockctl with `env` set (after [`command`] cleared the URL variables).
async fn lockctl_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = command(args);
    command.envs(env.iter().copied());
    let output = tokio::time::timeout(RUN_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| panic!("lockctl {args:?} did not finish"))
        .unwrap();
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_comes_from_lockctl_url_then_redis_url_and_every_answer_names_it() {
    let server = RedisServer::start();
    let live = server.url();
    let dead = format!("redis://127.0.0.1:{}", lock_tests::free_port());

    // REDIS_URL alone: used, and status says which server answered and from where.
    let status = lockctl_env(&["status", "x"], &[("REDIS_URL", &live)]).await;
    assert_eq!(status.code, 1, "{status:?}");
    let said = format!("server {live} (from REDIS_URL): ");
    assert!(status.stderr.contains(&said), "{status:?}");
    assert!(status.stderr.contains("mutex protocol"), "{status:?}");
    let json = lockctl_env(&["--json", "status", "x"], &[("REDIS_URL", &live)]).await;
    let server_doc = &json.json()["server"];
    assert_eq!(
        server_doc["address"],
        format!("{live} (from REDIS_URL)"),
        "{json:?}"
    );
    assert!(
        server_doc["version"]
            .as_str()
            .is_some_and(|v| !v.is_empty())
    );
    assert!(server_doc["mutex_protocol"].as_str().is_some());

    // LOCKCTL_URL first: the dead REDIS_URL is not tried.
    let both = &[("LOCKCTL_URL", live.as_str()), ("REDIS_URL", dead.as_str())];
    let first = lockctl_env(&["status", "x"], both).await;
    assert_eq!(first.code, 1, "{first:?}");
    assert!(first.stderr.contains("(from LOCKCTL_URL)"), "{first:?}");

    // --url before both.
    let flag = lockctl_env(&["--url", &live, "status", "x"], &[("LOCKCTL_URL", &dead)]).await;
    assert_eq!(flag.code, 1, "{flag:?}");
    assert!(flag.stderr.contains("(from --url)"), "{flag:?}");

    // A connection error names the address and where it came from.
    let down = lockctl_env(&["status", "x"], &[("REDIS_URL", &dead)]).await;
    assert_eq!(down.code, 3, "{down:?}");
    assert!(
        down.stderr
            .contains(&format!("cannot connect to {dead} (from REDIS_URL)")),
        "{down:?}"
    );
    // lock-core's own message in it names the address too.
    let host_port = dead.trim_start_matches("redis://");
    assert!(
        down.stderr
            .contains(&format!("no Redis connection to {host_port} within")),
        "{down:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_exit_with_their_code_and_name_the_cause() {
    // Nothing listens: 3, connection refused.
    let port = lock_tests::free_port();
    let refused = lockctl(&["--url", &format!("redis://127.0.0.1:{port}"), "status", "x"]).await;
    assert_eq!(refused.code, 3, "{refused:?}");
    assert!(refused.stderr.contains("connection refused"), "{refused:?}");

    // A wrong password: 3, authentication, and the password is not shown.
    let server = RedisServer::start();
    server.cmd(&["CONFIG", "SET", "requirepass", "right-one"]);
    let wrong = format!("redis://:wrong-one@127.0.0.1:{}", server.port());
    let auth = lockctl(&["--url", &wrong, "list"]).await;
    assert_eq!(auth.code, 3, "{auth:?}");
    assert!(auth.stderr.contains("authentication failed"), "{auth:?}");
    assert!(!auth.stderr.contains("wrong-one"), "{auth:?}");
    // No password at all: 3, and how to give one.
    let none = lockctl(&["--url", &server.url(), "list"]).await;
    assert_eq!(none.code, 3, "{none:?}");
    assert!(
        none.stderr.contains("requires authentication")
            && none.stderr.contains("--url")
            && none.stderr.contains("redis://user:password@host:port"),
        "{none:?}"
    );

    // TLS with a certificate nobody trusts: 3, TLS; with its CA: it works.
    let files = blocking(TlsFiles::generate);
    let tls = RedisServer::start_tls(&files, ClientAuth::No, None, &[]);
    let untrusted = lockctl(&["--url", &tls.tls_url(), "status", "x"]).await;
    assert_eq!(untrusted.code, 3, "{untrusted:?}");
    assert!(untrusted.stderr.contains("TLS"), "{untrusted:?}");
    let ca = files.ca_cert_file();
    let ca = ca.to_str().unwrap();
    let trusted = lockctl(&["--url", &tls.tls_url(), "--tls-ca", ca, "status", "x"]).await;
    assert_eq!(trusted.code, 1, "{trusted:?}");

    // Usage: 2, before or without touching Redis (a bad name or pattern needs no server).
    let nowhere = format!("redis://127.0.0.1:{port}");
    for args in [
        vec!["--url", &nowhere, "status", "a b"],
        vec!["--url", &nowhere, "force-unlock", "{x}", "--yes"],
        vec!["--url", &nowhere, "list", "a{b"],
        vec!["--url", &nowhere, "watch", ""],
    ] {
        let run = lockctl(&args).await;
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
    }
    let plain = RedisServer::start();
    let url = plain.url();
    for args in [
        vec!["--url", &url, "--prefix", "a b", "list"],
        vec!["--url", &url, "watch", "x", "--for", "soon"],
        vec!["--url", &url, "--tls-ca", "/nonexistent/ca.pem", "list"],
        vec!["--url", "nonsense://x", "list"],
        vec!["--url", &url, "frobnicate"],
    ] {
        let run = lockctl(&args).await;
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
    }
    // A URL of another scheme says which ones are Redis URLs.
    let http = lockctl(&["--url", "http://user:secret@127.0.0.1:6379", "list"]).await;
    assert_eq!(http.code, 2, "{http:?}");
    assert!(
        http.stderr.contains("`http://` is not a Redis URL scheme")
            && http.stderr.contains("redis://")
            && http.stderr.contains("rediss://")
            && !http.stderr.contains("secret"),
        "{http:?}"
    );
    assert_eq!(plain.dbsize(), 0);
    let help = lockctl(&["--help"]).await;
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("Exit codes:") && help.stdout.contains("5  force-unlock"));
    let help = lockctl(&["status", "--help"]).await;
    assert!(help.stdout.contains("Exit codes:"), "{help:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_record_next_to_a_name() {
    let server = RedisServer::start();
    let url = server.url();
    let c = scripted_client(&url).await;
    let none = lockctl(&["--url", &url, "--json", "status", "idem::k"]).await;
    assert!(none.json()["record"].is_null(), "{none:?}");
    let ttl = Duration::from_secs(60);
    c.records()
        .put("idem::k", b"stored", 42, ttl)
        .await
        .unwrap();
    let run = lockctl(&["--url", &url, "--json", "status", "idem::k"]).await;
    assert_eq!((run.code, run.json()["found"].as_bool()), (1, Some(false)));
    assert_eq!(
        run.json()["record"],
        serde_json::json!({"token": 42, "bytes": 6})
    );
    let table = lockctl(&["--url", &url, "status", "idem::k"]).await;
    assert!(
        table
            .stdout
            .contains("its record: 6 bytes, written with fencing token 42"),
        "{table:?}"
    );
    // From the idempotency key itself: the name lock-tower's layer gives it.
    let by_key = lockctl(&["--url", &url, "--json", "status", "--idempotency-key", "k"]).await;
    assert_eq!(by_key.json()["name"], "idem::k", "{by_key:?}");
    assert_eq!(by_key.json()["record"]["token"], 42, "{by_key:?}");
    let scoped = [
        "--url",
        &url,
        "--json",
        "status",
        "--idempotency-key",
        "k",
        "--scope",
        "s",
    ];
    let scoped = lockctl(&scoped).await;
    assert_eq!(scoped.json()["name"], "idem:s:k", "{scoped:?}");
    assert!(scoped.json()["record"].is_null(), "{scoped:?}");
    let guard = c.lock("idem::k").lease(LONG).await.unwrap();
    let held = lockctl(&["--url", &url, "status", "idem::k"]).await;
    assert_eq!(held.code, 0, "{held:?}");
    assert!(
        held.stderr
            .contains("record: 6 bytes, written with fencing token 42"),
        "{held:?}"
    );
    guard.unlock().await.unwrap();
}

/// `status --idempotency-key`: the request's state (in progress while its lock is held and
/// nothing is stored, then completed with the stored status code), the record's time to live
/// and its age.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_an_idempotency_key_says_its_state_status_age_and_ttl() {
    use lock_tower::{Fingerprint, Record};
    let server = RedisServer::start();
    let url = server.url();
    let c = scripted_client(&url).await;
    let status = |ttl: &'static str| {
        let url = url.clone();
        async move {
            lockctl(&[
                "--url",
                &url,
                "--json",
                "status",
                "--idempotency-key",
                "pay-1",
                "--idempotency-ttl",
                ttl,
            ])
            .await
        }
    };
    let unknown = status("60s").await;
    assert_eq!(
        unknown.json()["idempotency"]["state"],
        "unknown",
        "{unknown:?}"
    );
    // The first request runs: its lock is held, nothing is stored.
    let guard = c.lock("idem::pay-1").lease(LONG).await.unwrap();
    let running = status("60s").await;
    let state = &running.json()["idempotency"];
    assert_eq!(state["state"], "in_progress", "{running:?}");
    assert!(
        state["status"].is_null() && state["ttl_ms"].is_null(),
        "{state}"
    );
    guard.unlock().await.unwrap();
    // It completed with 201, stored for 60 s (as the layer does, through lock-core's records).
    let fingerprint = Fingerprint::of(&http::Method::POST, &"/pay".parse().unwrap(), b"x");
    let record = Record::new(
        fingerprint,
        http::StatusCode::CREATED,
        http::HeaderMap::new(),
        bytes::Bytes::from_static(b"paid"),
    );
    c.records()
        .put(
            "idem::pay-1",
            &record.to_bytes(),
            7,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let done = status("60s").await;
    let state = &done.json()["idempotency"];
    assert_eq!(state["state"], "completed", "{done:?}");
    assert_eq!(state["status"], 201);
    let ttl = state["ttl_ms"].as_u64().unwrap();
    let age = state["age_ms"].as_u64().unwrap();
    assert!(ttl <= 60_000 && ttl > 30_000, "{state}");
    assert_eq!(
        ttl + age,
        60_000,
        "the age is the layer's ttl less what is left"
    );
    let table = lockctl(&[
        "--url",
        &url,
        "status",
        "--idempotency-key",
        "pay-1",
        "--idempotency-ttl",
        "60s",
    ])
    .await;
    // Beside the table of its (free) lock: on standard error.
    assert!(
        table.stderr.contains("request: completed (201), stored ")
            && table.stderr.contains("s ago, kept "),
        "{table:?}"
    );
    // A "completed, not replayable" marker.
    let marker = Record::not_replayable(fingerprint, http::StatusCode::OK);
    c.records()
        .put(
            "idem::pay-1",
            &marker.to_bytes(),
            8,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let marked = status("60s").await;
    assert_eq!(
        marked.json()["idempotency"]["state"],
        "completed_not_replayable",
        "{marked:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_rate_limit_of_a_name_and_list_leaves_it_out() {
    let server = RedisServer::start();
    let url = server.url();
    let c = scripted_client(&url).await;
    let none = lockctl(&["--url", &url, "--json", "status", "api:7"]).await;
    assert!(none.json()["rate_limit"].is_null(), "{none:?}");
    // One permit every 10 s, 3 at once: two taken leave one.
    let limit = c
        .rate_limit("api:7")
        .per(Duration::from_secs(60), 6)
        .burst(3);
    for _ in 0..2 {
        assert!(limit.check().await.unwrap().is_allowed());
    }
    let run = lockctl(&["--url", &url, "--json", "status", "api:7"]).await;
    assert_eq!((run.code, run.json()["found"].as_bool()), (1, Some(false)));
    let rate = &run.json()["rate_limit"];
    assert_eq!(rate["burst"], 3, "{run:?}");
    assert_eq!(rate["interval_us"], 10_000_000, "{run:?}");
    assert_eq!(rate["remaining"], 1, "{run:?}");
    assert_eq!(rate["retry_after_ms"], 0, "{run:?}");
    let full = rate["full_after_ms"].as_u64().unwrap();
    assert!((10_000..=20_000).contains(&full), "{run:?}");
    let table = lockctl(&["--url", &url, "status", "api:7"]).await;
    assert!(
        table.stdout.contains(
            "no lock named \"api:7\" under prefix \"lock:\"; its rate limit: burst 3, one \
             permit every 10s (0.100/s), 1 remaining now, full again in"
        ),
        "{table:?}"
    );
    // Not a lock: list does not show it, even with a lock of the same name held.
    let guard = c.lock("api:7").lease(LONG).await.unwrap();
    let list = lockctl(&["--url", &url, "--json", "list"]).await;
    assert_eq!(list.names(), ["api:7"], "{list:?}");
    let held = lockctl(&["--url", &url, "status", "api:7"]).await;
    assert_eq!(held.code, 0, "{held:?}");
    assert!(
        held.stderr
            .contains("rate limit: burst 3, one permit every 10s"),
        "{held:?}"
    );
    guard.unlock().await.unwrap();
    assert!(limit.check().await.unwrap().is_allowed());
    let empty = lockctl(&["--url", &url, "--json", "status", "api:7"]).await;
    assert_eq!(empty.json()["rate_limit"]["remaining"], 0, "{empty:?}");
    let retry = empty.json()["rate_limit"]["retry_after_ms"]
        .as_u64()
        .unwrap();
    assert!(retry > 0 && retry <= 10_000, "{empty:?}");
    // The free mutex keeps its key (its fencing counter): the limit goes to standard error.
    let table = lockctl(&["--url", &url, "status", "api:7"]).await;
    assert!(
        table.stderr.contains("0 remaining now (next in"),
        "{table:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_last_guarded_update_and_its_fence() {
    let server = RedisServer::start();
    let url = server.url();
    let c = scripted_client(&url).await;
    let none = lockctl(&["--url", &url, "--json", "status", "item:1"]).await;
    assert!(none.json()["last_update"].is_null(), "{none:?}");
    let guard = c.lock("item:1").lease(LONG).await.unwrap();
    server.cmd(&["SET", "stock:{item:1}", "3"]);
    let stock = guard.key_in_slot("stock:").unwrap();
    let sold = guard
        .update()
        .take(&stock, 1, 0)
        .set("note:{item:1}", "x")
        .send()
        .await;
    assert_eq!(
        sold.unwrap(),
        lock_core::Updated::Applied { values: vec![2, 1] }
    );
    let run = lockctl(&["--url", &url, "--json", "status", "item:1"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let update = &run.json()["last_update"];
    assert_eq!(update["token"], guard.fencing_token(), "{run:?}");
    assert_eq!(update["values"], serde_json::json!([2, 1]), "{run:?}");
    let table = lockctl(&["--url", &url, "status", "item:1"]).await;
    assert!(
        table.stderr.contains(&format!(
            "last guarded update: update {} with fencing token {}, values [2, 1]",
            update["seq"],
            guard.fencing_token()
        )),
        "{table:?}"
    );
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_shows_each_value_with_its_fence() {
    let server = RedisServer::start();
    let url = server.url();
    let c = scripted_client(&url).await;
    let guard = c.lock("report:1").lease(LONG).await.unwrap();
    let token = guard.fencing_token();
    let mut conn = c.connection();
    let written = lock_core::fenced::set(&mut conn, "result:{report:1}", "42 rows", token).await;
    assert_eq!(written.unwrap(), lock_core::fenced::Fenced::Written);
    server.cmd(&["SET", "plain", "x"]);
    let run = lockctl(&[
        "--url",
        &url,
        "--json",
        "fenced",
        "result:{report:1}",
        "missing",
    ])
    .await;
    assert_eq!(run.code, 1, "a key without a fenced value: {run:?}");
    let keys = &run.json()["keys"];
    assert_eq!(keys[0]["value"], "42 rows", "{run:?}");
    assert_eq!(keys[0]["fence"], token, "{run:?}");
    assert!(keys[1]["fence"].is_null(), "{run:?}");
    let table = lockctl(&["--url", &url, "fenced", "result:{report:1}"]).await;
    assert_eq!(table.code, 0, "{table:?}");
    assert!(
        table.stdout.contains(&format!("{token}  42 rows")),
        "{table:?}"
    );
    let wrong = lockctl(&["--url", &url, "fenced", "plain"]).await;
    assert_eq!(wrong.code, 4, "a key of another kind is refused: {wrong:?}");
    guard.unlock().await.unwrap();
}

/// `jobs`: each scheduled job's record (last period, instance, outcome, duration, next
/// period), and nothing else's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_lists_each_job_with_its_last_run_and_next_period() {
    use lock_core::scheduled::{JobEvent, Schedule};
    let server = RedisServer::start();
    let url = server.url();
    let c = scripted_client(&url).await;
    c.records()
        .put("order:1", b"not a job", 1, Duration::from_secs(60))
        .await
        .unwrap();
    let hourly = Schedule::every(Duration::from_secs(3600)).unwrap();
    let ok = c
        .job("nightly", hourly.clone())
        .instance("host-a")
        .start(|_run| async { Ok::<_, String>(()) })
        .unwrap();
    let failing = c
        .job("flaky", hourly)
        .instance("host-b")
        .retries(0)
        .start(|_run| async { Err::<(), _>("disk full") })
        .unwrap();
    let mut events = ok.events();
    let period = loop {
        if let JobEvent::Done { period, .. } = events.recv().await.unwrap() {
            break period;
        }
    };
    let mut events = failing.events();
    while !matches!(events.recv().await.unwrap(), JobEvent::Failed { .. }) {}
    let run = lockctl(&["--url", &url, "--json", "jobs"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let jobs = run.json()["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 2, "{run:?}");
    let (flaky, nightly) = (&jobs[0], &jobs[1]);
    let start = humantime::format_rfc3339_seconds(period).to_string();
    let next = humantime::format_rfc3339_seconds(period + Duration::from_secs(3600)).to_string();
    assert_eq!(nightly["job"], "nightly");
    assert_eq!(nightly["period"], start.as_str());
    assert_eq!(nightly["instance"], "host-a");
    assert_eq!(nightly["outcome"], "done");
    assert_eq!(nightly["next"], next.as_str());
    assert_eq!(nightly["schedule"], "every 3600s");
    assert_eq!(flaky["job"], "flaky");
    assert_eq!(
        (&flaky["outcome"], &flaky["error"]),
        (&"failed".into(), &"disk full".into())
    );
    let table = lockctl(&["--url", &url, "jobs", "night*"]).await;
    assert!(table.stdout.starts_with("JOB "), "{table:?}");
    assert!(
        table.stdout.contains(&format!("nightly  {start}  host-a")),
        "{table:?}"
    );
    assert!(!table.stdout.contains("flaky"), "{table:?}");
    ok.stop().await;
    failing.stop().await;
}
