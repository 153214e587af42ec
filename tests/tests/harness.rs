//! Self-tests of the harness: `RedisServer` and `FaultProxy`.

use std::io;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lock_tests::{FaultProxy, Mode, RedisServer, Reply, init_tracing, unique_name};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// Whether a process with this pid exists (`kill -0`).
fn process_exists(pid: u32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// Writes `request` and reads whatever arrives first, with a timeout.
/// `Ok(empty)` means EOF.
async fn round_trip(
    stream: &mut TcpStream,
    request: &[u8],
    timeout: Duration,
) -> io::Result<Vec<u8>> {
    stream.write_all(request).await?;
    read_some(stream, timeout).await
}

/// Reads one chunk with a timeout (`ErrorKind::TimedOut` on timeout).
async fn read_some(stream: &mut TcpStream, timeout: Duration) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(timeout, stream.read(&mut buf)).await {
        Ok(Ok(n)) => {
            buf.truncate(n);
            Ok(buf)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "read timed out")),
    }
}

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.unwrap()
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn server_starts_and_answers() {
    init_tracing();
    let server = RedisServer::start();
    assert_eq!(server.cmd(&["PING"]), "PONG");
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(server.addr().port(), server.port());
    assert!(server.addr().ip().is_loopback());
    assert_ne!(server.port(), 6379);
    assert!(process_exists(server.pid()));
    // Persistence is off and DEBUG is enabled.
    assert_eq!(
        server.cmd(&["CONFIG", "GET", "appendonly"]),
        "appendonly\nno"
    );
    assert_eq!(server.cmd(&["CONFIG", "GET", "save"]), "save\n");
    assert_eq!(server.cmd(&["DEBUG", "SLEEP", "0"]), "OK");
}

#[test]
fn start_with_passes_extra_args() {
    let server = RedisServer::start_with(&["--maxmemory", "12mb"]);
    assert_eq!(
        server.cmd(&["CONFIG", "GET", "maxmemory"]),
        "maxmemory\n12582912"
    );
}

#[test]
fn two_servers_are_independent() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    a.cmd(&["SET", "only-in-a", "1"]);
    assert_eq!(a.dbsize(), 1);
    assert_eq!(b.dbsize(), 0);
}

#[test]
fn cmd_renders_replies() {
    let server = RedisServer::start();
    let key = unique_name("k");
    assert_eq!(server.cmd(&["SET", &key, "v a l"]), "OK");
    assert_eq!(server.cmd(&["GET", &key]), "v a l");
    assert_eq!(server.cmd(&["GET", "missing"]), "(nil)");
    assert_eq!(server.cmd(&["EXISTS", &key]), "1");
    assert_eq!(server.cmd(&["RPUSH", "list", "a", "b", "c"]), "3");
    assert_eq!(server.cmd(&["LRANGE", "list", "0", "-1"]), "a\nb\nc");
    assert_eq!(server.cmd(&["LRANGE", "nolist", "0", "-1"]), "");
    assert!(server.cmd(&["INCR", &key]).starts_with("ERR "));
    assert!(server.query(&["INCR", &key]).is_error());
    // Nested arrays and nil inside arrays (Lua false -> nil bulk).
    let nested = server.query(&["EVAL", "return {1, {'x', 'y'}, false, 'z'}", "0"]);
    assert_eq!(
        nested,
        Reply::Array(vec![
            Reply::Integer(1),
            Reply::Array(vec![Reply::Bulk("x".into()), Reply::Bulk("y".into())]),
            Reply::Nil,
            Reply::Bulk("z".into()),
        ])
    );
    assert_eq!(
        server.cmd(&["EVAL", "return {1, {'x', 'y'}, false, 'z'}", "0"]),
        "1\nx\ny\n(nil)\nz"
    );
    // Binary-ish payloads with CRLF survive.
    server.cmd(&["SET", "crlf", "a\r\nb"]);
    assert_eq!(server.cmd(&["GET", "crlf"]), "a\r\nb");

    let mut keys = vec![key.clone(), "crlf".to_owned(), "list".to_owned()];
    keys.sort();
    assert_eq!(server.keys("*"), keys);
    assert_eq!(server.keys("lis*"), vec!["list".to_owned()]);
    assert!(server.keys("nothing*").is_empty());
    assert_eq!(server.dbsize(), 3);
    assert!(server.pubsub_channels().is_empty());
    assert_eq!(server.cmd(&["SCRIPT", "FLUSH"]), "OK");
}

#[tokio::test(flavor = "multi_thread")]
async fn pubsub_channels_lists_subscriptions() {
    let server = RedisServer::start();
    let mut sub = connect(server.addr()).await;
    let reply = round_trip(
        &mut sub,
        b"*2\r\n$9\r\nSUBSCRIBE\r\n$5\r\nchan1\r\n",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert!(String::from_utf8_lossy(&reply).contains("chan1"));
    assert_eq!(server.pubsub_channels(), vec!["chan1".to_owned()]);
    drop(sub);
}

#[test]
fn kill_then_restart_on_same_port() {
    let mut server = RedisServer::start();
    let port = server.port();
    let old_pid = server.pid();
    server.cmd(&["SET", "k", "v"]);
    server.kill();
    assert!(!server.is_running());
    assert!(!process_exists(old_pid));
    assert!(
        server
            .try_cmd(&["PING"], Duration::from_millis(300))
            .is_err()
    );

    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), old_pid);
    assert_eq!(server.cmd(&["PING"]), "PONG");
    // No persistence: the data set is gone.
    assert_eq!(server.dbsize(), 0);

    // Restarting a running server replaces it.
    let pid = server.pid();
    server.restart();
    assert_ne!(server.pid(), pid);
    assert!(!process_exists(pid));
    assert_eq!(server.cmd(&["PING"]), "PONG");
}

#[test]
fn pause_blocks_and_resume_answers() {
    let mut server = RedisServer::start();
    server.pause();
    assert!(server.is_paused());
    let err = server
        .try_cmd(&["PING"], Duration::from_millis(300))
        .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
        "unexpected error {err:?}"
    );
    server.resume();
    assert!(!server.is_paused());
    assert_eq!(
        server.try_cmd(&["PING"], Duration::from_secs(5)).unwrap(),
        "PONG"
    );
}

#[test]
fn drop_leaves_no_process() {
    let server = RedisServer::start();
    let pid = server.pid();
    assert!(process_exists(pid));
    drop(server);
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_exists(pid) {
        assert!(Instant::now() < deadline, "redis-server {pid} still exists");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn drop_of_paused_server_leaves_no_process() {
    let mut server = RedisServer::start();
    let pid = server.pid();
    let dir = server.dir().to_path_buf();
    server.pause();
    drop(server);
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_exists(pid) {
        assert!(Instant::now() < deadline, "redis-server {pid} still exists");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!dir.exists());
}

#[test]
fn unique_names_differ() {
    let a = unique_name("lock");
    let b = unique_name("lock");
    assert!(a.starts_with("lock-"));
    assert!(a["lock-".len()..].chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(a, b);
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_pass_forwards() {
    init_tracing();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    assert_eq!(proxy.mode(), Mode::Pass);
    assert_eq!(proxy.upstream(), server.addr());
    assert_eq!(
        proxy.url(),
        format!("redis://127.0.0.1:{}", proxy.addr().port())
    );
    assert_eq!(proxy.connections(), 0);

    let mut conn = connect(proxy.addr()).await;
    let reply = round_trip(&mut conn, PING, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(reply, b"+PONG\r\n");
    assert_eq!(proxy.connections(), 1);
    drop(conn);
    wait_until("the connection count to drop", || proxy.connections() == 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_works_with_redis_client() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let client = redis::Client::open(proxy.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("SET")
        .arg("via-proxy")
        .arg("1")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(server.cmd(&["GET", "via-proxy"]), "1");
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_drop_next_reply_swallows_exactly_one() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let mut conn = connect(proxy.addr()).await;
    // Warm up the connection so the drop applies to the SET reply.
    assert_eq!(
        round_trip(&mut conn, PING, Duration::from_secs(5))
            .await
            .unwrap(),
        b"+PONG\r\n"
    );

    proxy.drop_next_reply();
    assert_eq!(proxy.mode(), Mode::DropNextReply);
    let set = b"*3\r\n$3\r\nSET\r\n$4\r\nlost\r\n$3\r\nyes\r\n";
    match round_trip(&mut conn, set, Duration::from_secs(5)).await {
        Ok(bytes) => assert!(bytes.is_empty(), "reply was not swallowed: {bytes:?}"),
        Err(e) => assert!(
            matches!(
                e.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
            ),
            "unexpected error {e:?}"
        ),
    }
    assert_eq!(proxy.dropped_replies(), 1);
    assert_eq!(proxy.mode(), Mode::Pass);
    // The server did execute the command.
    assert_eq!(server.cmd(&["GET", "lost"]), "yes");

    // The next connection works and nothing more is dropped.
    let mut next = connect(proxy.addr()).await;
    for _ in 0..3 {
        assert_eq!(
            round_trip(&mut next, PING, Duration::from_secs(5))
                .await
                .unwrap(),
            b"+PONG\r\n"
        );
    }
    assert_eq!(proxy.dropped_replies(), 1);
    wait_until("the dropped connection to be closed", || {
        proxy.connections() == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_blackhole_times_out_then_recovers() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let mut existing = connect(proxy.addr()).await;
    assert_eq!(
        round_trip(&mut existing, PING, Duration::from_secs(5))
            .await
            .unwrap(),
        b"+PONG\r\n"
    );

    proxy.blackhole();
    let err = round_trip(&mut existing, PING, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    // New connections are accepted but black-holed as well; the command never
    // reaches the server.
    let mut fresh = connect(proxy.addr()).await;
    let set = b"*3\r\n$3\r\nSET\r\n$4\r\nhole\r\n$1\r\n1\r\n";
    let err = round_trip(&mut fresh, set, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    assert_eq!(server.cmd(&["EXISTS", "hole"]), "0");

    proxy.pass();
    let mut after = connect(proxy.addr()).await;
    assert_eq!(
        round_trip(&mut after, PING, Duration::from_secs(5))
            .await
            .unwrap(),
        b"+PONG\r\n"
    );
    // Connections that lost bytes during the black hole were closed when it ended (a stream
    // missing bytes in its middle cannot go on); what they sent was dropped.
    for stream in [&mut fresh, &mut existing] {
        // Closed: end of stream (an empty read) or a reset.
        let reply = round_trip(stream, PING, Duration::from_secs(5)).await;
        assert!(
            reply.as_ref().map_or(true, Vec::is_empty),
            "a connection that lost bytes was left open: {reply:?}"
        );
    }
    assert_eq!(server.cmd(&["EXISTS", "hole"]), "0");
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_delay_slows_round_trips() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let mut conn = connect(proxy.addr()).await;
    proxy.delay(Duration::from_millis(200));
    assert_eq!(proxy.mode(), Mode::Delay(Duration::from_millis(200)));
    let started = Instant::now();
    let reply = round_trip(&mut conn, PING, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(reply, b"+PONG\r\n");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_reset_all_closes_connections() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let mut a = connect(proxy.addr()).await;
    let mut b = connect(proxy.addr()).await;
    for conn in [&mut a, &mut b] {
        assert_eq!(
            round_trip(conn, PING, Duration::from_secs(5))
                .await
                .unwrap(),
            b"+PONG\r\n"
        );
    }
    assert_eq!(proxy.connections(), 2);
    assert_eq!(proxy.accepted(), 2);

    proxy.reset_all();
    for conn in [&mut a, &mut b] {
        match read_some(conn, Duration::from_secs(5)).await {
            Ok(bytes) => assert!(bytes.is_empty(), "unexpected bytes {bytes:?}"),
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
        }
    }
    wait_until("connections to be closed", || proxy.connections() == 0).await;

    let mut c = connect(proxy.addr()).await;
    assert_eq!(
        round_trip(&mut c, PING, Duration::from_secs(5))
            .await
            .unwrap(),
        b"+PONG\r\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_closes_client_when_server_dies() {
    let mut server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let mut conn = connect(proxy.addr()).await;
    assert_eq!(
        round_trip(&mut conn, PING, Duration::from_secs(5))
            .await
            .unwrap(),
        b"+PONG\r\n"
    );
    server.kill();
    match read_some(&mut conn, Duration::from_secs(5)).await {
        Ok(bytes) => assert!(bytes.is_empty(), "unexpected bytes {bytes:?}"),
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
    }
    server.restart();
    let mut again = connect(proxy.addr()).await;
    assert_eq!(
        round_trip(&mut again, PING, Duration::from_secs(5))
            .await
            .unwrap(),
        b"+PONG\r\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_drop_stops_listener_and_connections() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr()).await;
    let addr = proxy.addr();
    let mut conn = connect(addr).await;
    assert_eq!(
        round_trip(&mut conn, PING, Duration::from_secs(5))
            .await
            .unwrap(),
        b"+PONG\r\n"
    );
    drop(proxy);
    match read_some(&mut conn, Duration::from_secs(5)).await {
        Ok(bytes) => assert!(bytes.is_empty(), "unexpected bytes {bytes:?}"),
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "proxy still accepts connections");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
