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
        let route = SingleNodeRoutingInfo::ByAddress {
            host: self.node.host.clone(),
            port: self.node.port,
        };
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
