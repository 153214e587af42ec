//! Production Redis: `rediss://` with a private CA, mutual TLS, a wrong CA and bad PEMs (typed
//! errors, no hang), the development opt-out; an ACL user with exactly the permissions
//! lock-core's docs list uses every primitive, one without a permission gets
//! `LockError::NoPermission`; TLS and ACL users through Sentinel and on a Cluster, for the lock
//! client and for operators' plain connections to each primary (`connect_primaries`). Every
//! server is a private `redis-server` with a throwaway CA made by `openssl`.

use std::collections::BTreeSet;
use std::time::Duration;

use lock_core::redis;
use lock_core::{LockClient, LockClientBuilder, LockError, Primaries};
use lock_tests::fixtures::{blocking, eventually, woken};
use lock_tests::{ClientAuth, RedisCluster, RedisServer, TlsFiles};
use tokio::time::Instant;

/// lock-core's crate docs, where the ACL lines are written.
const DOCS: &str = include_str!("../../lock-core/src/lib.rs");

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Each primary answers `PING` on a connection of its own.
async fn ping_each(primaries: &Primaries) {
    for primary in primaries {
        let mut connection = primary.connection().await.unwrap();
        let pong: String = redis::cmd("PING")
            .query_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(pong, "PONG", "{}", primary.address());
    }
}

fn tls_server(files: &TlsFiles, auth: ClientAuth) -> RedisServer {
    RedisServer::start_tls(files, auth, None, &[])
}

/// A builder for `url` trusting `files`' CA, with a short watchdog lease (renewals happen
/// within the tests) and short timeouts.
fn builder(url: &str, files: &TlsFiles) -> LockClientBuilder {
    LockClient::builder(url)
        .tls_root_certificate(files.ca_pem())
        .watchdog_lease(Duration::from_millis(600))
        .connect_timeout(CONNECT_TIMEOUT)
        .response_timeout(Duration::from_secs(1))
}

/// `url` with a user and password.
fn as_user(url: &str, user: &str) -> String {
    url.replacen("://", &format!("://{user}:secret-{user}@"), 1)
}

/// The documented `ACL SETUSER` line that starts with `start`, as arguments.
fn documented_acl(start: &str) -> Vec<String> {
    let line = DOCS
        .lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("lock-core's docs have no line starting {start:?}"));
    line.split_whitespace().map(str::to_owned).collect()
}

/// The entries of `node`'s `ACL LOG`, but for the optional `CONFIG GET` of the eviction check
/// at connect (documented as optional: its refusal is expected with the minimal line).
fn refusals(node: &RedisServer) -> Vec<String> {
    node.cmd(&["ACL", "LOG"])
        .split("count\n")
        // Also the redis crate's `CLIENT SETINFO` at connect (Valkey logs its refusal; the
        // client goes on without it).
        .filter(|entry| {
            !entry.is_empty()
                && !entry.contains("\nobject\nconfig|get\n")
                && !entry.contains("\nobject\nclient|setinfo\n")
        })
        .map(str::to_owned)
        .collect()
}

/// The data-node ACL of the docs.
fn data_acl() -> Vec<String> {
    documented_acl("ACL SETUSER locks reset on >CHANGE-ME ~")
}

/// Creates ACL user `user` (password `secret-<user>`) on `server` from a documented line,
/// with `add` appended and `without` removed.
fn create_user(server: &RedisServer, acl: &[String], user: &str, add: &[&str], without: &[&str]) {
    let password = format!(">secret-{user}");
    let mut args: Vec<&str> = acl
        .iter()
        .map(|a| match a.as_str() {
            "locks" => user,
            ">CHANGE-ME" => password.as_str(),
            other => other,
        })
        .filter(|a| !without.contains(a))
        .collect();
    for w in without {
        assert!(
            acl.iter().any(|a| a == w),
            "{w} is not in the documented line"
        );
    }
    args.extend_from_slice(add);
    // On a server with the native protocol's commands, the documented addition for it; on
    // one with `SET … NX GET` (known by `SINTERCARD`) but without them, the hybrid one's.
    let has = |command: &str| {
        let reply = server.cmd(&["COMMAND", "INFO", command]);
        !reply.is_empty() && reply != "(nil)"
    };
    if has("DELIFEQ") {
        args.extend(protocol_acl(
            "the native protocol ([`MutexProtocol`]), add `",
        ));
    } else if has("SINTERCARD") {
        args.extend(protocol_acl("where it speaks the hybrid one, add\n//! `"));
    }
    assert_eq!(server.cmd(&args), "OK", "{args:?}");
}

/// What the docs add to the data-node line for a mutex protocol: the rules quoted right
/// after `after`.
fn protocol_acl(after: &str) -> Vec<&'static str> {
    let rules = DOCS
        .split(after)
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .expect("the docs name the protocol's ACL rules");
    rules.split_whitespace().collect()
}

/// Every primitive, each with a waiter woken by its release (pub/sub), info of every kind,
/// force-unlock, shared readers, and renewals of every kind by the watchdog: what a lock
/// client does, through `a` and `b`. `subscribed` counts the channels the server side has.
async fn every_primitive(
    a: &LockClient,
    b: &LockClient,
    tag: &str,
    subscribed: impl Fn() -> usize,
) {
    let n = |k: &str| format!("{tag}-{k}");
    let long = Duration::from_secs(30);
    let wait = Duration::from_secs(20);

    // Each holder keeps its lock with a long fixed lease: only a release message wakes its
    // waiter early.
    let mutex = a.lock(n("mutex")).lease(long).await.unwrap();
    let permits = a
        .semaphore(n("sem"), 2)
        .acquire(2)
        .lease(long)
        .await
        .unwrap();
    let write = a
        .read_write_lock(n("rw"))
        .write()
        .lease(long)
        .await
        .unwrap();
    let fair = a.fair_lock(n("fair")).lock().lease(long).await.unwrap();
    let multi = a
        .multi_lock([n("m1"), n("m2")])
        .lock()
        .lease(long)
        .await
        .unwrap();
    let mutex_waiter = {
        let (b, name) = (b.clone(), n("mutex"));
        tokio::spawn(async move { b.lock(name).wait(wait).await })
    };
    let sem_waiter = {
        let (b, name) = (b.clone(), n("sem"));
        tokio::spawn(async move { b.semaphore(name, 2).acquire(1).wait(wait).await })
    };
    let read_waiter = {
        let (b, name) = (b.clone(), n("rw"));
        tokio::spawn(async move { b.read_write_lock(name).read().wait(wait).await })
    };
    let fair_waiter = {
        let (b, name) = (b.clone(), n("fair"));
        tokio::spawn(async move { b.fair_lock(name).lock().wait(wait).await })
    };
    let multi_waiter = {
        let (b, names) = (b.clone(), [n("m1"), n("m2")]);
        tokio::spawn(async move { b.multi_lock(names).lock().wait(wait).await })
    };
    eventually("the five waiters subscribed", || subscribed() >= 5).await;
    let mutex_info = a.mutex(n("mutex")).info().await.unwrap();
    assert!(mutex_info.ttl.is_some(), "{mutex_info:?}");
    a.semaphore(n("sem"), 2).info().await.unwrap();
    a.read_write_lock(n("rw")).info().await.unwrap();
    a.fair_lock(n("fair")).info().await.unwrap();
    a.multi_lock([n("m1"), n("m2")]).info().await.unwrap();

    let released = Instant::now();
    assert!(mutex.unlock().await.unwrap());
    assert!(permits.unlock().await.unwrap());
    assert!(write.unlock().await.unwrap());
    assert!(fair.unlock().await.unwrap());
    assert!(multi.unlock().await.unwrap());
    assert!(woken(mutex_waiter, released).await.unlock().await.unwrap());
    assert!(woken(sem_waiter, released).await.unlock().await.unwrap());
    assert!(woken(read_waiter, released).await.unlock().await.unwrap());
    assert!(woken(fair_waiter, released).await.unlock().await.unwrap());
    assert!(woken(multi_waiter, released).await.unlock().await.unwrap());

    // Force-unlock.
    let forced = a.lock(n("forced")).await.unwrap();
    assert!(a.mutex(n("forced")).force_unlock().await.unwrap());
    drop(forced);

    // Readers together; every kind of hold renewed by the watchdog (lease 600 ms) for 1.5 s.
    let r1 = a.read_write_lock(n("rw2")).read().await.unwrap();
    let r2 = b.read_write_lock(n("rw2")).read().await.unwrap();
    let m = a.lock(n("renewed")).await.unwrap();
    let s = a.semaphore(n("sem2"), 1).acquire(1).await.unwrap();
    let f = a.fair_lock(n("fair2")).lock().await.unwrap();
    let w = b.read_write_lock(n("rw3")).write().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (kind, held) in [
        ("read", r1.is_held() && r2.is_held()),
        ("mutex", m.is_held()),
        ("semaphore", s.is_held()),
        ("fair", f.is_held()),
        ("write", w.is_held()),
    ] {
        assert!(held, "the {kind} hold was not renewed");
    }
    assert!(r1.unlock().await.unwrap() && r2.unlock().await.unwrap());
    assert!(m.unlock().await.unwrap() && s.unlock().await.unwrap());
    assert!(f.unlock().await.unwrap() && w.unlock().await.unwrap());
}

/// Channels subscribed on a standalone server.
fn channels(server: &RedisServer) -> usize {
    server.pubsub_channels().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca_runs_every_primitive() {
    let files = TlsFiles::generate();
    let server = tls_server(&files, ClientAuth::No);
    let a = builder(&server.tls_url(), &files).build().await.unwrap();
    let b = builder(&server.tls_url(), &files).build().await.unwrap();
    every_primitive(&a, &b, "tls", || channels(&server)).await;

    // The TLS port speaks only TLS: a plain client there gets no answer in time.
    let plain = server.tls_url().replace("rediss://", "redis://");
    let err = LockClient::builder(&plain)
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_the_client_identity_and_says_so_at_once() {
    let files = TlsFiles::generate();
    let server = tls_server(&files, ClientAuth::Required);
    let with = builder(&server.tls_url(), &files)
        .tls_client_identity(files.client_cert_pem(), files.client_key_pem())
        .build()
        .await
        .unwrap();
    let g = with.lock("mtls").await.unwrap();
    assert!(g.unlock().await.unwrap());

    // No identity: the server's alert, as a typed error, well before the connect timeout.
    let started = Instant::now();
    let err = builder(&server.tls_url(), &files)
        .build()
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&err, LockError::Tls { reason, .. } if reason.contains("client certificate")),
        "{err:?}"
    );
    assert!(!err.is_unavailable());
    assert!(took < Duration::from_secs(1), "took {took:?}");

    // An identity from another CA: refused the same way.
    let other = TlsFiles::generate();
    let err = builder(&server.tls_url(), &files)
        .tls_client_identity(other.client_cert_pem(), other.client_key_pem())
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Tls { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_server_certificate_is_a_typed_error_within_the_connect_timeout() {
    let files = TlsFiles::generate();
    let server = tls_server(&files, ClientAuth::No);
    let other = TlsFiles::generate();
    for (what, b) in [
        (
            "another CA",
            LockClient::builder(&server.tls_url()).tls_root_certificate(other.ca_pem()),
        ),
        ("the system's roots", LockClient::builder(&server.tls_url())),
    ] {
        let started = Instant::now();
        let err = b
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert!(
            matches!(&err, LockError::Tls { reason, .. } if reason.contains("trusted CA")),
            "{what}: {err:?}"
        );
        assert!(!err.is_unavailable(), "{what}");
        assert!(took < CONNECT_TIMEOUT, "{what}: took {took:?}");
        assert!(err.to_string().contains("TLS"), "{what}: {err}");
    }
    // An operator's connections fail the same way.
    let err = LockClient::builder(&server.tls_url())
        .tls_root_certificate(other.ca_pem())
        .connect_timeout(CONNECT_TIMEOUT)
        .connect_primaries()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Tls { .. }), "{err:?}");

    // A plain server behind a rediss:// URL reads the TLS hello as the start of an inline
    // command and waits for its end: the connect timeout bounds that.
    let plain = RedisServer::start();
    let started = Instant::now();
    let err = builder(&plain.url().replace("redis://", "rediss://"), &files)
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(started.elapsed() < Duration::from_millis(1500), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_development_opt_out_accepts_an_unknown_ca() {
    let files = TlsFiles::generate();
    let server = tls_server(&files, ClientAuth::No);
    let c = LockClient::builder(&server.tls_url())
        .danger_accept_invalid_certificates()
        .build()
        .await
        .unwrap();
    assert!(c.lock("insecure").await.unwrap().unlock().await.unwrap());
    let url = format!("{}#insecure", server.tls_url());
    let c = LockClient::builder(&url).build().await.unwrap();
    assert!(c.lock("insecure").await.unwrap().unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_options_are_invalid_options_before_anything_connects() {
    let files = TlsFiles::generate();
    let other = TlsFiles::generate();
    // Nothing listens on port 1: an error other than InvalidOption would mean it connected.
    let url = "rediss://127.0.0.1:1/";
    let cases: Vec<(&str, LockClientBuilder)> = vec![
        (
            "tls_root_certificate",
            LockClient::builder(url).tls_root_certificate(b"not a certificate".to_vec()),
        ),
        (
            "tls_root_certificate",
            LockClient::builder(url).tls_root_certificate(
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            ),
        ),
        (
            "tls_client_identity",
            LockClient::builder(url).tls_client_identity(files.client_cert_pem(), "no key"),
        ),
        (
            "tls_client_identity",
            LockClient::builder(url).tls_client_identity("no cert", files.client_key_pem()),
        ),
        (
            "tls_client_identity",
            LockClient::builder(url)
                .tls_client_identity(files.client_cert_pem(), other.client_key_pem()),
        ),
        // Certificates for a client that would talk in plain text.
        (
            "tls_root_certificate",
            LockClient::builder("redis://127.0.0.1:1/").tls_root_certificate(files.ca_pem()),
        ),
        (
            "danger_accept_invalid_certificates",
            LockClient::builder_cluster(["redis://127.0.0.1:1/"])
                .danger_accept_invalid_certificates(),
        ),
        (
            "tls_client_identity",
            LockClient::builder_sentinel(["redis://127.0.0.1:1/"], "s")
                .tls_client_identity(files.client_cert_pem(), files.client_key_pem()),
        ),
    ];
    for (option, b) in cases {
        let err = b.build().await.unwrap_err();
        assert!(
            matches!(&err, LockError::InvalidOption { option: o, .. } if *o == option),
            "{option}: {err:?}"
        );
    }
    // A bad URL fragment is the URL's error.
    let err = LockClient::builder("rediss://127.0.0.1:1/#nope")
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(err, LockError::InvalidOption { option: "url", .. }),
        "{err:?}"
    );
}

/// The documented permissions name every command the library sends and every command its
/// scripts call, so a change to either that the docs miss fails here.
#[test]
fn the_documented_acl_covers_every_command_the_library_sends() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lock-core/src");
    let data: BTreeSet<String> = data_acl().into_iter().collect();
    let mut files = vec![src.clone()];
    let mut lua = Vec::new();
    let mut rust = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "lua") {
            let guarded = path.file_name().is_some_and(|n| n == "guarded_update.lua");
            lua.push((guarded, std::fs::read_to_string(&path).unwrap()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            // Without comments: a doc example's command is the reader's, not the library's.
            let text = std::fs::read_to_string(&path).unwrap();
            let code: Vec<&str> = text
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .collect();
            rust.push(code.join("\n"));
        }
    }
    assert!(
        lua.len() > 10,
        "the scripts were not found under {}",
        src.display()
    );
    let called = |text: &str, marker: &str| -> Vec<String> {
        text.split(marker)
            .skip(1)
            .filter_map(|rest| {
                let rest = rest.trim_start();
                let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
                let name = &rest[1..];
                name.find(quote).map(|end| name[..end].to_ascii_lowercase())
            })
            .collect()
    };
    // A guarded update runs on the user's keys, with the documented additions for it.
    let guarded_additions = ["+mget", "+incrby", "+decrby", "+hincrby"];
    assert!(DOCS.contains("`+mget` (its one read) and `+incrby +decrby +hincrby`"));
    let mut script_commands = BTreeSet::new();
    for (guarded, text) in &lua {
        let mut calls = called(text, "redis.call(");
        calls.extend(called(text, "redis.pcall("));
        for command in &calls {
            let acl = format!("+{command}");
            assert!(
                data.contains(&acl) || (*guarded && guarded_additions.contains(&acl.as_str())),
                "the scripts call {command}, which the documented ACL line lacks"
            );
        }
        script_commands.extend(calls);
    }
    assert!(script_commands.contains("get"), "{script_commands:?}");
    // Sharded scripts publish with SPUBLISH: a Cluster addition.
    assert!(DOCS.contains("`+spublish +ssubscribe +sunsubscribe +cluster|slots +info`"));
    let mut sent = BTreeSet::new();
    for text in &rust {
        sent.extend(called(text, "redis::cmd("));
        sent.extend(called(text, "cmd("));
    }
    for command in &sent {
        let rule = match command.as_str() {
            "sentinel" => "+sentinel|get-master-addr-by-name".to_owned(),
            other => format!("+{other}"),
        };
        assert!(
            DOCS.contains(&rule),
            "lock-core sends {command}, which lock-core's ACL docs do not name ({rule})"
        );
    }
    for (documented, needed) in [("`+wait`", "min_replicas"), ("`+role`", "Sentinel")] {
        assert!(DOCS.contains(documented), "{documented} for {needed}");
    }
    // The guide's production chapter shows the same line.
    let line = data_acl().join(" ");
    assert!(
        include_str!("../../guide/src/production.md").contains(&line),
        "the guide's ACL line (production chapter) differs from lock-core's docs: {line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_with_the_documented_permissions_uses_every_primitive() {
    let files = TlsFiles::generate();
    let server = tls_server(&files, ClientAuth::No);
    create_user(&server, &data_acl(), "locks", &["+wait"], &[]);
    let url = as_user(&server.tls_url(), "locks");
    // With an owner description: its `SET … PX` (at build) and `GET` need nothing more.
    let a = builder(&url, &files)
        .owner_description("acl user a")
        .build()
        .await
        .unwrap();
    let b = builder(&url, &files).build().await.unwrap();
    every_primitive(&a, &b, "acl", || channels(&server)).await;
    assert_eq!(
        b.owner_description(a.client_id()).await.unwrap().as_deref(),
        Some("acl user a")
    );
    // `+wait`: with no replica, the acquisition is given back as NotReplicated.
    let acked = builder(&url, &files)
        .min_replicas(1, Duration::from_millis(10))
        .build()
        .await
        .unwrap();
    let err = acked.lock("acked").await.unwrap_err();
    assert!(matches!(err, LockError::NotReplicated { .. }), "{err:?}");
    // Nothing was refused along the way.
    assert_eq!(refusals(&server), Vec::<String>::new(), "refusals logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_without_a_permission_gets_no_permission_naming_it() {
    let server = RedisServer::start();
    let acl = data_acl();
    let client = |user: &str| {
        // The scripts' permissions: a native mutex would need none of them.
        LockClient::builder(&as_user(&server.url(), user))
            .connect_timeout(CONNECT_TIMEOUT)
            .mutex_protocol(lock_core::MutexProtocol::Scripted)
            .build()
    };
    let refused = |err: &LockError, expected: &str| {
        assert!(!err.is_unavailable(), "{err:?}");
        match err {
            LockError::NoPermission { missing, .. } => assert!(
                missing.starts_with(expected),
                "missing {missing:?}, expected {expected:?}"
            ),
            other => panic!("expected NoPermission({expected}), got {other:?}"),
        }
        assert!(err.to_string().contains("ACL"), "{err}");
    };

    // FUNCTION LOAD (and its fallback, SCRIPT LOAD), at build().
    create_user(&server, &acl, "no-load", &[], &["+function|load"]);
    refused(&client("no-load").await.unwrap_err(), "+function|load");

    // FCALL, at the first acquisition.
    create_user(&server, &acl, "no-fcall", &[], &["+fcall"]);
    let c = client("no-fcall").await.unwrap();
    refused(&c.lock("l").await.unwrap_err(), "+fcall");

    // The documented alternative: scripts instead of functions.
    create_user(
        &server,
        &acl,
        "scripts",
        &["+evalsha", "+script|load"],
        &["+fcall", "+function|load"],
    );
    let c = client("scripts").await.unwrap();
    c.lock("by-script").await.unwrap().unlock().await.unwrap();

    // A command a script calls (TIME seeds a new lock's fencing token). Redis 7.0 does not
    // name it; 7.2 and later do.
    create_user(&server, &acl, "no-time", &[], &["+time"]);
    let c = client("no-time").await.unwrap();
    let err = c.lock("fresh").await.unwrap_err();
    match &err {
        LockError::NoPermission { missing, .. } if missing == "+time" => {}
        _ => refused(&err, "+<a command a lock script calls>"),
    }

    // The key pattern.
    create_user(&server, &acl, "no-keys", &[], &["~lock:*"]);
    let c = client("no-keys").await.unwrap();
    refused(&c.try_lock("l").await.unwrap_err(), "~");

    // WAIT, with min_replicas.
    create_user(&server, &acl, "no-wait", &[], &[]);
    let c = LockClient::builder(&as_user(&server.url(), "no-wait"))
        .min_replicas(1, Duration::from_millis(10))
        .build()
        .await
        .unwrap();
    refused(&c.lock("acked").await.unwrap_err(), "+wait");
    // That acquisition was applied before WAIT was refused: it is given back.
    eventually("nothing left held", || {
        lock_tests::fixtures::lock_keys(&server).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_subscribe_waiters_look_again_on_their_own_and_nothing_spins() {
    let server = RedisServer::start();
    create_user(&server, &data_acl(), "no-sub", &[], &["+subscribe"]);
    let c = LockClient::builder(&as_user(&server.url(), "no-sub"))
        .build()
        .await
        .unwrap();
    let connections = || -> u64 {
        let info = server.cmd(&["INFO", "stats"]);
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    };
    let held = c.lock("unsubscribed").await.unwrap();
    let before = connections();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.lock("unsubscribed").wait(Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let released = Instant::now();
    assert!(held.unlock().await.unwrap());
    assert!(woken(waiter, released).await.unlock().await.unwrap());
    // The refused subscription did not make the pub/sub task reconnect again and again.
    let opened = connections() - before;
    assert!(opened <= 2, "{opened} connections opened while waiting");
}

/// `SENTINEL MASTER <name>` as a map.
fn sentinel_master(
    sentinel: &RedisServer,
    name: &str,
) -> std::collections::HashMap<String, String> {
    let fields = sentinel.query(&["SENTINEL", "MASTER", name]).into_strings();
    fields
        .chunks_exact(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_acl_users_through_a_sentinel() {
    const SERVICE: &str = "tls-primary";
    let files = TlsFiles::generate();
    let primary = blocking(|| tls_server(&files, ClientAuth::Required));
    create_user(&primary, &data_acl(), "locks", &["+role"], &[]);
    let primary_tls = primary.tls_port().unwrap();
    // One sentinel, speaking TLS to clients and to the primary it monitors (its TLS port).
    let config = format!(
        "sentinel monitor {SERVICE} 127.0.0.1 {primary_tls} 1\n\
         sentinel down-after-milliseconds {SERVICE} 1000\n"
    );
    let sentinel = blocking(|| {
        RedisServer::start_tls(
            &files,
            ClientAuth::Required,
            Some(&config),
            &["--sentinel", "--tls-replication", "yes"],
        )
    });
    create_user(
        &sentinel,
        &documented_acl("ACL SETUSER locks reset on >CHANGE-ME &+switch-master"),
        "locks",
        &[],
        &[],
    );
    // The sentinel reaches the primary over TLS: it has its INFO.
    eventually("the sentinel monitors the primary over TLS", || {
        let master = sentinel_master(&sentinel, SERVICE);
        master.get("flags").map(String::as_str) == Some("master")
            && master
                .get("info-refresh")
                .and_then(|ms| ms.parse::<u64>().ok())
                .is_some_and(|ms| ms < 20_000)
    })
    .await;

    let builder = |sentinel_url: String| {
        LockClient::builder_sentinel([sentinel_url], SERVICE)
            .sentinel_primary_url(as_user("rediss://primary/", "locks"))
            .tls_root_certificate(files.ca_pem())
            .tls_client_identity(files.client_cert_pem(), files.client_key_pem())
            .watchdog_lease(Duration::from_millis(600))
            .connect_timeout(CONNECT_TIMEOUT)
    };
    // TLS to the sentinel and to the primary, as ACL users on both.
    let a = builder(as_user(&sentinel.tls_url(), "locks"))
        .build()
        .await
        .unwrap();
    // A plain connection to the sentinel (its own setting), TLS to the primary.
    let b = builder(as_user(&sentinel.url(), "locks"))
        .build()
        .await
        .unwrap();
    every_primitive(&a, &b, "sentinel", || channels(&primary)).await;
    // An operator's tool reaches the primary the sentinel names, with the same TLS options.
    let primaries = builder(as_user(&sentinel.tls_url(), "locks"))
        .connect_primaries()
        .await
        .unwrap();
    assert!(!primaries.is_cluster());
    let addresses: Vec<&str> = primaries.iter().map(|p| p.address()).collect();
    assert_eq!(addresses, [format!("127.0.0.1:{primary_tls}")]);
    ping_each(&primaries).await;
    assert_eq!(
        refusals(&primary),
        Vec::<String>::new(),
        "refusals on the primary"
    );
    assert_eq!(
        refusals(&sentinel),
        Vec::<String>::new(),
        "refusals on the sentinel"
    );

    // The data nodes' ACL without `+role`: the check of the named primary is refused, and
    // said so.
    create_user(&primary, &data_acl(), "no-role", &[], &[]);
    let err = LockClient::builder_sentinel([as_user(&sentinel.tls_url(), "locks")], SERVICE)
        .sentinel_primary_url(as_user("rediss://primary/", "no-role"))
        .tls_root_certificate(files.ca_pem())
        .tls_client_identity(files.client_cert_pem(), files.client_key_pem())
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::NoPermission { missing, .. } if missing == "+role"),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_an_acl_user_on_a_cluster() {
    let files = TlsFiles::generate();
    let cluster = blocking(|| RedisCluster::start_tls(&files, 3, 0));
    let additions = [
        "+spublish",
        "+ssubscribe",
        "+sunsubscribe",
        "+cluster|slots",
        "+info",
    ];
    for node in cluster.nodes() {
        create_user(node, &data_acl(), "locks", &additions, &[]);
    }
    let urls: Vec<String> = cluster
        .tls_urls()
        .iter()
        .map(|u| as_user(u, "locks"))
        .collect();
    let builder = || {
        LockClient::builder_cluster(urls.clone())
            .tls_root_certificate(files.ca_pem())
            .watchdog_lease(Duration::from_millis(600))
            .connect_timeout(CONNECT_TIMEOUT)
    };
    let a = builder().build().await.unwrap();
    let b = builder().build().await.unwrap();
    let shard_channels = || -> usize {
        cluster
            .nodes()
            .iter()
            .map(|n| n.query(&["PUBSUB", "SHARDCHANNELS"]).into_strings().len())
            .sum()
    };
    every_primitive(&a, &b, "cluster", shard_channels).await;
    // An operator's tool reaches every primary over TLS, as the lock client's ACL user.
    let primaries = builder().connect_primaries().await.unwrap();
    assert!(primaries.is_cluster());
    assert_eq!(primaries.as_slice().len(), cluster.nodes().len());
    ping_each(&primaries).await;
    for node in cluster.nodes() {
        assert_eq!(
            refusals(node),
            Vec::<String>::new(),
            "refusals on {}",
            node.port()
        );
    }
}
