//! A native call's `MULTI`/`EXEC` that a Cluster node aborted because its slot is elsewhere.
//!
//! A node that does not own the slot answers each queued command with `MOVED <slot> <host:port>`
//! (or `ASK …` / `TRYAGAIN …` while the slot is being migrated) and `EXEC` with `EXECABORT`: the
//! transaction is discarded whole, nothing of it applied. The redis crate turns that into one
//! error of kind `ExecAbort` holding the queued commands' errors, and neither follows it nor
//! refreshes its slot map (its retry method is "no retry"). This module reads such an error
//! ([`next`]) and sends a pipeline to the node a `MOVED` names ([`Pinned`]).

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{ErrorKind, RedisError, RedisFuture, ServerErrorKind, Value};

/// A Cluster node, as a `MOVED` reply names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Node {
    host: String,
    port: u16,
}

impl Node {
    /// The route to this node, by its address.
    pub(super) fn route(&self) -> SingleNodeRoutingInfo {
        SingleNodeRoutingInfo::ByAddress {
            host: self.host.clone(),
            port: self.port,
        }
    }
}

/// What to do with a transaction a node aborted for its slot's sake (nothing of it applied).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// The slot moved: send it to this node, its owner now.
    To(Node),
    /// Send it again after a pause: the slot is being migrated (`ASK`, `TRYAGAIN`; a `MULTI`
    /// after `ASKING` could be split from it by other traffic on the shared connection), or
    /// (`moved`) it moved to a node whose address could not be read, and the slot map has to be
    /// learnt again first.
    Pause { moved: bool },
}

/// What `e` asks for when it is an aborted transaction whose commands all met a moved or
/// migrating slot (`MOVED`, `ASK`, `TRYAGAIN`): then nothing was applied and the transaction can
/// be sent again. None for any other error (an I/O error or a timeout after `EXEC` was written
/// leaves the outcome unknown, and an abort for another reason would be refused again).
pub(super) fn next(e: &RedisError) -> Option<Next> {
    if e.kind() != ErrorKind::Server(ServerErrorKind::ExecAbort) {
        return None;
    }
    let errors = e.clone().into_server_errors()?;
    if errors.is_empty() {
        return None;
    }
    let mut next = Next::Pause { moved: false };
    for (_, error) in errors.iter() {
        match error.kind() {
            Some(ServerErrorKind::Moved) => {
                if !matches!(next, Next::To(_)) {
                    next = node(error.details()).map_or(Next::Pause { moved: true }, Next::To);
                }
            }
            Some(ServerErrorKind::Ask | ServerErrorKind::TryAgain) => {}
            _ => return None,
        }
    }
    Some(next)
}

/// The node in a `MOVED` reply's details (`<slot> <host:port>`, an IPv6 host maybe in
/// brackets); None when they do not read as that (no redirect then).
fn node(details: Option<&str>) -> Option<Node> {
    let mut words = details?.split_ascii_whitespace();
    words.next()?.parse::<u16>().ok()?;
    let (host, port) = words.next()?.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host == "?" || words.next().is_some() {
        return None;
    }
    let port = port.parse::<u16>().ok().filter(|&p| p != 0)?;
    Some(Node {
        host: host.to_owned(),
        port,
    })
}

/// A cluster connection that sends every pipeline to one node, by its address (a node the
/// connection does not know fails with `ClusterConnectionNotFound`, nothing sent), with the
/// offset and count the caller gives: `Pipeline::query_async` asks a `MULTI`/`EXEC` of `n`
/// commands for the one reply after `n + 1` (`EXEC`'s), as it does on the cluster connection
/// itself, and reads it the same way.
pub(super) struct Pinned {
    connection: ClusterConnection,
    node: Node,
}

impl Pinned {
    /// Pipelines on `connection`, to `node`.
    pub(super) fn new(connection: ClusterConnection, node: Node) -> Self {
        Self { connection, node }
    }
}

impl ConnectionLike for Pinned {
    /// A single command goes by its key, as on the cluster connection.
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> RedisFuture<'a, Value> {
        self.connection.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let route = self.node.route();
        Box::pin(
            self.connection
                .route_pipeline(pipeline.clone(), offset, count, route),
        )
    }

    fn get_db(&self) -> i64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::{BufRead, BufReader, Write};

    /// One request's arguments, read off a RESP stream (None at its end).
    fn request(reader: &mut impl BufRead) -> Option<Vec<String>> {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let count: usize = line.trim().strip_prefix('*')?.parse().ok()?;
        let mut args = Vec::with_capacity(count);
        for _ in 0..count {
            line.clear();
            reader.read_line(&mut line).ok()?;
            let len: usize = line.trim().strip_prefix('$')?.parse().ok()?;
            let mut arg = vec![0; len + 2];
            reader.read_exact(&mut arg).ok()?;
            arg.truncate(len);
            args.push(String::from_utf8(arg).ok()?);
        }
        Some(args)
    }

    /// The error the redis crate makes of a `MULTI`/`EXEC` of two commands whose queueing a
    /// server answers with `queued` (one error line each, without the `-`), then `EXECABORT`.
    async fn aborted(queued: [&'static str; 2]) -> RedisError {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut writer = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            let mut queue = queued.iter();
            while let Some(args) = request(&mut reader) {
                let reply = match args[0].to_ascii_uppercase().as_str() {
                    "EXEC" => "-EXECABORT Transaction discarded\r\n".to_owned(),
                    "MULTI" | "CLIENT" => "+OK\r\n".to_owned(),
                    _ => format!("-{}\r\n", queue.next().unwrap_or(&"ERR unexpected")),
                };
                if writer.write_all(reply.as_bytes()).is_err() {
                    break;
                }
            }
        });
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("INCR")
            .arg("c")
            .cmd("SET")
            .arg("k")
            .arg(1);
        pipe.query_async::<Value>(&mut con).await.unwrap_err()
    }

    fn to(host: &str, port: u16) -> Next {
        Next::To(Node {
            host: host.into(),
            port,
        })
    }

    #[tokio::test]
    async fn an_abort_for_moved_goes_to_the_node_named() {
        let e = aborted(["MOVED 5 127.0.0.1:7001", "MOVED 5 127.0.0.1:7001"]).await;
        assert_eq!(e.kind(), ErrorKind::Server(ServerErrorKind::ExecAbort));
        assert_eq!(next(&e), Some(to("127.0.0.1", 7001)));
        let e = aborted(["TRYAGAIN Multiple keys", "MOVED 5 127.0.0.1:7002"]).await;
        assert_eq!(next(&e), Some(to("127.0.0.1", 7002)));
    }

    #[tokio::test]
    async fn an_abort_for_a_migrating_slot_or_an_unreadable_address_waits() {
        let e = aborted(["ASK 5 127.0.0.1:7001", "TRYAGAIN Multiple keys"]).await;
        assert_eq!(next(&e), Some(Next::Pause { moved: false }));
        let e = aborted(["MOVED 5 nowhere", "MOVED 5 nowhere"]).await;
        assert_eq!(next(&e), Some(Next::Pause { moved: true }));
    }

    #[tokio::test]
    async fn an_abort_for_anything_else_is_not_sent_again() {
        let e = aborted(["MOVED 5 127.0.0.1:7001", "WRONGTYPE Operation"]).await;
        assert_eq!(next(&e), None);
        let e = aborted(["OOM command not allowed", "OOM command not allowed"]).await;
        assert_eq!(next(&e), None);
    }

    #[test]
    fn other_errors_are_not_redirects() {
        let moved = redis::make_extension_error("MOVED".into(), Some("1 127.0.0.1:7000".into()));
        assert_eq!(next(&moved), None);
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(next(&io), None);
    }

    fn moved(details: &str) -> Option<Node> {
        node(Some(details))
    }

    #[test]
    fn a_moved_reply_names_its_node() {
        assert_eq!(
            moved("3999 127.0.0.1:6381"),
            Some(Node {
                host: "127.0.0.1".into(),
                port: 6381
            })
        );
        assert_eq!(
            moved("1 [::1]:7000"),
            Some(Node {
                host: "::1".into(),
                port: 7000
            })
        );
    }

    #[test]
    fn a_bad_address_is_no_redirect() {
        for details in [
            "",
            "3999",
            "x 127.0.0.1:6381",
            "3999 127.0.0.1",
            "3999 :6381",
            "3999 ?:6381",
            "3999 127.0.0.1:0",
            "3999 127.0.0.1:99999",
            "3999 127.0.0.1:6381 extra",
        ] {
            assert_eq!(moved(details), None, "{details:?}");
        }
        assert_eq!(node(None), None);
    }
}
