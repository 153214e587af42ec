//! A throwaway Redis Sentinel deployment for integration tests.
//!
//! [`SentinelGroup`] runs one primary, one replica and three sentinels
//! (`redis-server <conf> --sentinel`, each with its own writable
//! configuration file), all private [`RedisServer`]s on free loopback ports.
//! Tests can crash the primary and wait for the sentinels to promote the
//! replica, trigger a graceful `SENTINEL FAILOVER`, and bring the crashed
//! node back as a replica. Every process is killed when the handle is
//! dropped.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use crate::server::{RedisServer, Reply};
use crate::server::{info_field, wait_until};

/// Name under which the sentinels monitor the primary.
pub const MASTER_NAME: &str = "lock-tests-primary";
/// `down-after-milliseconds` of every sentinel.
pub const DOWN_AFTER_MS: u64 = 1000;
/// `failover-timeout` of every sentinel, in milliseconds.
pub const FAILOVER_TIMEOUT_MS: u64 = 5000;
/// Number of sentinels.
const SENTINELS: usize = 3;
/// Bound on forming the group and on each failover.
const TOPOLOGY_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of a single probe command while polling.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One primary, one replica and three sentinels monitoring them under
/// [`MASTER_NAME`] with quorum 2.
///
/// The two data nodes keep their indices (0 = initial primary, 1 = initial
/// replica); which one is the primary is tracked across failovers.
#[derive(Debug)]
pub struct SentinelGroup {
    data: [RedisServer; 2],
    primary: usize,
    sentinels: Vec<RedisServer>,
}

impl SentinelGroup {
    /// Starts the primary, the replica (`--replicaof`), waits for the
    /// replication link, then starts the sentinels and waits until each of
    /// them reports the primary, knows the replica (healthy, link `ok`) and
    /// the two other sentinels.
    ///
    /// # Panics
    ///
    /// Panics if a process cannot be started or the group does not form
    /// within 30 seconds.
    pub fn start() -> SentinelGroup {
        SentinelGroup::start_inner(|primary| primary, FAILOVER_TIMEOUT_MS)
    }

    /// Like [`SentinelGroup::start`], but the replica replicates from the
    /// address `via` returns for the primary's (a [`crate::proxy::FaultProxy`] in
    /// front of it, say), so a test can cut replication alone. The
    /// sentinels' failover timeout is raised to 60 s here: Sentinel "fixes"
    /// a replica whose master address differs from the one it monitors
    /// once a failover timeout has passed, which would move the replica off
    /// the proxy mid-test.
    ///
    /// # Panics
    ///
    /// As [`SentinelGroup::start`].
    pub fn start_with_replication_via(via: impl FnOnce(SocketAddr) -> SocketAddr) -> SentinelGroup {
        SentinelGroup::start_inner(via, 60_000)
    }

    fn start_inner(
        via: impl FnOnce(SocketAddr) -> SocketAddr,
        failover_timeout_ms: u64,
    ) -> SentinelGroup {
        let primary = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
        let primary_port = primary.port().to_string();
        let upstream = via(primary.addr());
        let upstream_port = upstream.port().to_string();
        let replica = RedisServer::start_with(&[
            "--replicaof",
            "127.0.0.1",
            &upstream_port,
            "--repl-diskless-sync-delay",
            "0",
        ]);
        // Sentinels discover replicas through the primary's INFO, so the
        // link must be up before they start (or discovery takes 10 s).
        wait_replica_link(&replica, upstream.port());
        let config = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {MASTER_NAME} {failover_timeout_ms}\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n"
        );
        let sentinels = (0..SENTINELS)
            .map(|_| RedisServer::start_with_config(&config, &["--sentinel"]))
            .collect();
        let group = SentinelGroup {
            data: [primary, replica],
            primary: 0,
            sentinels,
        };
        group.wait_formed();
        tracing::debug!(
            primary = group.data[0].port(),
            replica = group.data[1].port(),
            sentinels = ?group.sentinels.iter().map(RedisServer::port).collect::<Vec<_>>(),
            "sentinel group formed"
        );
        group
    }

    /// The name the sentinels monitor the primary under.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// `redis://127.0.0.1:PORT/` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}/", s.port()))
            .collect()
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// Sentinel `index` (0..3).
    ///
    /// # Panics
    ///
    /// Panics if `index` is out of range.
    pub fn sentinel(&self, index: usize) -> &RedisServer {
        &self.sentinels[index]
    }

    /// Sentinel `index`, mutably (to kill or pause it).
    ///
    /// # Panics
    ///
    /// Panics if `index` is out of range.
    pub fn sentinel_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.sentinels[index]
    }

    /// Both data nodes: index 0 started as the primary, 1 as the replica.
    pub fn data_nodes(&self) -> &[RedisServer] {
        &self.data
    }

    /// Index (0 or 1) of the data node that is currently the primary, as
    /// tracked by this handle's failover methods.
    pub fn primary_index(&self) -> usize {
        self.primary
    }

    /// Index (0 or 1) of the other data node (the replica, or a crashed
    /// former primary).
    pub fn replica_index(&self) -> usize {
        1 - self.primary
    }

    /// The current primary.
    pub fn primary(&self) -> &RedisServer {
        &self.data[self.primary]
    }

    /// The other data node: the replica, or the killed former primary
    /// after [`SentinelGroup::kill_primary_and_wait_failover`].
    pub fn replica(&self) -> &RedisServer {
        &self.data[self.replica_index()]
    }

    /// The current primary, mutably (to pause it, for instance).
    pub fn primary_mut(&mut self) -> &mut RedisServer {
        &mut self.data[self.primary]
    }

    /// The other data node, mutably.
    pub fn replica_mut(&mut self) -> &mut RedisServer {
        let index = self.replica_index();
        &mut self.data[index]
    }

    /// The primary's address according to the first sentinel that answers
    /// (`SENTINEL get-master-addr-by-name`).
    ///
    /// # Panics
    ///
    /// Panics if no sentinel answers with an address.
    pub fn current_primary_addr(&self) -> SocketAddr {
        let mut errors = Vec::new();
        for sentinel in self.live_sentinels() {
            match master_addr(sentinel) {
                Ok(addr) => return addr,
                Err(e) => errors.push(e),
            }
        }
        panic!("no sentinel reported the primary address: {errors:?}");
    }

    /// Kills the current primary with `SIGKILL` and waits (bounded, 30 s;
    /// typically a few seconds) until every live sentinel reports the other
    /// data node as the primary and that node's `ROLE` is `master`. Returns
    /// the new primary's address. The killed node stays down (see
    /// [`SentinelGroup::restart_old_primary`]).
    ///
    /// # Panics
    ///
    /// Panics if the failover does not complete in time.
    pub fn kill_primary_and_wait_failover(&mut self) -> SocketAddr {
        let old = self.primary;
        let new = 1 - old;
        assert!(
            !self.data[new].is_killed(),
            "kill_primary_and_wait_failover: the replica is not running"
        );
        self.data[old].kill();
        tracing::debug!(port = self.data[old].port(), "sentinel primary killed");
        self.wait_primary(new, "the sentinels to promote the replica");
        self.primary = new;
        self.data[new].addr()
    }

    /// Graceful failover: `SENTINEL FAILOVER` on a sentinel, then waits
    /// (bounded, 30 s) until every sentinel reports the former replica as
    /// primary, its `ROLE` is `master`, and the former primary is its
    /// replica with the link up. Returns the new primary's address.
    ///
    /// Sentinel only demotes the former primary about 8–10 s after the
    /// promotion; to keep tests fast this sends it `REPLICAOF <new primary>`
    /// itself once the sentinels agree, which is what Sentinel would do.
    ///
    /// # Panics
    ///
    /// Panics if the command fails or the roles do not swap in time.
    pub fn failover(&mut self) -> SocketAddr {
        let old = self.primary;
        let new = 1 - old;
        let sentinel = self
            .live_sentinels()
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("failover: no running sentinel"));
        match sentinel.query(&["SENTINEL", "FAILOVER", MASTER_NAME]) {
            Reply::Status(s) if s == "OK" => {}
            other => panic!("SENTINEL FAILOVER failed: {other:?}"),
        }
        self.wait_primary(new, "the sentinels to complete SENTINEL FAILOVER");
        self.primary = new;
        self.demote(old);
        self.data[new].addr()
    }

    /// Restarts the killed former primary (same port, empty data set),
    /// makes it a replica of the current primary (`REPLICAOF`, as Sentinel
    /// would after a few seconds) and waits (bounded, 30 s) until its link
    /// is up and every sentinel lists it as a healthy replica.
    ///
    /// # Panics
    ///
    /// Panics if the other data node is running, cannot be restarted or
    /// does not rejoin in time.
    pub fn restart_old_primary(&mut self) {
        let old = self.replica_index();
        assert!(
            self.data[old].is_killed(),
            "restart_old_primary: node {old} is running"
        );
        self.data[old].restart();
        self.demote(old);
    }

    /// Makes data node `index` a replica of the current primary and waits
    /// until its link is up and a majority of the sentinels see it as a
    /// healthy replica (all of them, as first written, was flaky: a sentinel
    /// that learned of the failover second-hand sometimes took longer than
    /// 30 s to list the returning node; Sentinel decides by majority anyway).
    fn demote(&self, index: usize) {
        let node = &self.data[index];
        let primary_port = self.primary().port();
        match node.query(&["REPLICAOF", "127.0.0.1", &primary_port.to_string()]) {
            Reply::Status(s) if s.starts_with("OK") => {}
            other => panic!("REPLICAOF on port {} failed: {other:?}", node.port()),
        }
        wait_replica_link(node, primary_port);
        let port = node.port();
        let sentinels = self.live_sentinels();
        wait_until(
            &format!("the sentinels to list port {port} as a healthy replica"),
            TOPOLOGY_TIMEOUT,
            || {
                let mut healthy = 0;
                let mut reasons = Vec::new();
                for sentinel in &sentinels {
                    let replicas = sentinel_replicas(sentinel)?;
                    let entry = replicas
                        .iter()
                        .find(|r| r.get("port").map(String::as_str) == Some(&port.to_string()));
                    match entry.and_then(|e| e.get("flags")) {
                        Some(flags) if flags == "slave" => healthy += 1,
                        Some(flags) => reasons.push(format!(
                            "sentinel {}: replica flags {flags:?}",
                            sentinel.port()
                        )),
                        None => reasons.push(format!(
                            "sentinel {} does not know port {port}",
                            sentinel.port()
                        )),
                    }
                }
                if healthy * 2 > sentinels.len() {
                    Ok(())
                } else {
                    Err(reasons.join("; "))
                }
            },
        );
    }

    /// Waits until every live sentinel reports data node `index` as the
    /// primary and its `ROLE` is `master`.
    fn wait_primary(&self, index: usize, what: &str) {
        let node = &self.data[index];
        let expected = node.addr();
        let sentinels = self.live_sentinels();
        wait_until(what, TOPOLOGY_TIMEOUT, || {
            for sentinel in &sentinels {
                let addr = master_addr(sentinel)?;
                if addr != expected {
                    return Err(format!("sentinel {} still reports {addr}", sentinel.port()));
                }
            }
            let role = node
                .try_query(&["ROLE"], PROBE_TIMEOUT)
                .map_err(|e| format!("ROLE on {}: {e}", node.port()))?
                .into_strings();
            if role.first().map(String::as_str) != Some("master") {
                return Err(format!("port {} has role {:?}", node.port(), role.first()));
            }
            Ok(())
        });
    }

    /// Waits until every sentinel reports the primary, knows the healthy
    /// replica and the two other sentinels.
    fn wait_formed(&self) {
        let primary = self.primary().addr();
        let replica_port = self.replica().port().to_string();
        wait_until("the sentinel group to form", TOPOLOGY_TIMEOUT, || {
            for sentinel in &self.sentinels {
                let port = sentinel.port();
                let addr = master_addr(sentinel)?;
                if addr != primary {
                    return Err(format!("sentinel {port} reports primary {addr}"));
                }
                let master = pairs(
                    sentinel
                        .try_query(&["SENTINEL", "MASTER", MASTER_NAME], PROBE_TIMEOUT)
                        .map_err(|e| format!("SENTINEL MASTER on {port}: {e}"))?,
                );
                if master.get("flags").map(String::as_str) != Some("master") {
                    return Err(format!(
                        "sentinel {port}: master flags {:?}",
                        master.get("flags")
                    ));
                }
                let others = master.get("num-other-sentinels").map(String::as_str);
                if others != Some(&(SENTINELS - 1).to_string()) {
                    return Err(format!("sentinel {port}: num-other-sentinels {others:?}"));
                }
                let replicas = sentinel_replicas(sentinel)?;
                let healthy = replicas.iter().any(|r| {
                    r.get("port") == Some(&replica_port)
                        && r.get("flags").map(String::as_str) == Some("slave")
                        && r.get("master-link-status").map(String::as_str) == Some("ok")
                });
                if !healthy {
                    return Err(format!(
                        "sentinel {port}: replica not (yet) healthy: {replicas:?}"
                    ));
                }
            }
            Ok(())
        });
    }

    /// Sentinels that were neither killed nor paused through their handle.
    fn live_sentinels(&self) -> Vec<&RedisServer> {
        self.sentinels
            .iter()
            .filter(|s| !s.is_killed() && !s.is_paused())
            .collect()
    }
}

/// Waits until `replica` reports `role:slave`, `master_port:<primary_port>`
/// and `master_link_status:up`.
fn wait_replica_link(replica: &RedisServer, primary_port: u16) {
    let port = replica.port();
    wait_until(
        &format!("replica {port} to link to {primary_port}"),
        TOPOLOGY_TIMEOUT,
        || {
            let info = replica
                .try_query(&["INFO", "replication"], PROBE_TIMEOUT)
                .map_err(|e| format!("INFO on {port}: {e}"))?
                .to_string();
            let field = |name| info_field(&info, name).unwrap_or_default();
            if field("role") == "slave"
                && field("master_port") == primary_port.to_string()
                && field("master_link_status") == "up"
            {
                Ok(())
            } else {
                Err(format!(
                    "role {:?}, master_port {:?}, link {:?}",
                    field("role"),
                    field("master_port"),
                    field("master_link_status")
                ))
            }
        },
    );
}

/// `SENTINEL get-master-addr-by-name` on `sentinel`.
fn master_addr(sentinel: &RedisServer) -> Result<SocketAddr, String> {
    let port = sentinel.port();
    let reply = sentinel
        .try_query(
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
            PROBE_TIMEOUT,
        )
        .map_err(|e| format!("SENTINEL GET-MASTER-ADDR-BY-NAME on {port}: {e}"))?;
    let fields = reply.clone().into_strings();
    match fields.as_slice() {
        [ip, p] => {
            let ip: Ipv4Addr = ip
                .parse()
                .map_err(|_| format!("sentinel {port}: bad primary ip in {reply:?}"))?;
            let p: u16 = p
                .parse()
                .map_err(|_| format!("sentinel {port}: bad primary port in {reply:?}"))?;
            Ok(SocketAddr::V4(SocketAddrV4::new(ip, p)))
        }
        _ => Err(format!("sentinel {port}: unexpected reply {reply:?}")),
    }
}

/// `SENTINEL REPLICAS` on `sentinel`, one field map per replica.
fn sentinel_replicas(sentinel: &RedisServer) -> Result<Vec<HashMap<String, String>>, String> {
    let port = sentinel.port();
    match sentinel
        .try_query(&["SENTINEL", "REPLICAS", MASTER_NAME], PROBE_TIMEOUT)
        .map_err(|e| format!("SENTINEL REPLICAS on {port}: {e}"))?
    {
        Reply::Array(items) => Ok(items.into_iter().map(pairs).collect()),
        other => Err(format!(
            "sentinel {port}: unexpected SENTINEL REPLICAS reply {other:?}"
        )),
    }
}

/// A flat `key, value, key, value...` reply as a map.
fn pairs(reply: Reply) -> HashMap<String, String> {
    let fields = reply.into_strings();
    fields
        .chunks_exact(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect()
}
