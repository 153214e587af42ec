//! A throwaway Redis Cluster for integration tests.
//!
//! [`RedisCluster`] starts `primaries × (1 + replicas_per_primary)`
//! cluster-enabled [`RedisServer`]s on free loopback ports (each with its
//! cluster bus port, `port + 10000`, free too), joins them with
//! `redis-cli --cluster create` and waits until every node agrees on a
//! complete, healthy topology. Tests can then move slots (with the `ASK`
//! window exposed), fail primaries over (crash or manual) and inspect who
//! owns what. Every process is killed when the handle is dropped.
//!
//! The `redis-cli` binary is taken from the `REDIS_CLI_BIN` environment
//! variable and defaults to `redis-cli` on the `PATH`.

use std::collections::hash_map::RandomState;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::server::{RedisServer, Reply};
use crate::server::{info_field, wait_until};

/// Number of hash slots of a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;
/// `cluster-node-timeout` of every node, in milliseconds.
pub const NODE_TIMEOUT_MS: u64 = 2000;
/// Offset between a node's client port and its cluster bus port.
const BUS_PORT_OFFSET: u16 = 10000;
/// Client ports are picked in this range, so that bus ports stay below the
/// usual ephemeral range (32768+) and nothing is ever near 6379/16379.
const PORT_RANGE: (u16, u16) = (15000, 22767);
/// How many port pairs are tried per node before giving up.
const NODE_START_ATTEMPTS: usize = 20;
/// Bound on forming the cluster and on each topology change.
const TOPOLOGY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on `redis-cli --cluster create`.
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);
/// Timeout of a single probe command while polling.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How many keys one `MIGRATE ... KEYS` moves at most.
const MIGRATE_BATCH: usize = 100;

/// One contiguous slot range and who serves it, as reported by
/// `CLUSTER SLOTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRange {
    /// First slot of the range.
    pub start: u16,
    /// Last slot of the range (inclusive).
    pub end: u16,
    /// Index (in [`RedisCluster::nodes`]) of the primary owning the range.
    pub primary: usize,
    /// Indices of its healthy replicas, in `CLUSTER SLOTS` order.
    pub replicas: Vec<usize>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct NodeLine {
    id: String,
    port: u16,
    flags: Vec<String>,
    master_id: Option<String>,
}

impl NodeLine {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

/// A private Redis Cluster: `primaries` primaries with
/// `replicas_per_primary` replicas each, all on 127.0.0.1.
///
/// Node indices are stable for the lifetime of the handle (they are the
/// positions in [`RedisCluster::nodes`]); roles are not (failovers swap
/// them), so role queries ask the live cluster. Dropping the handle kills
/// every node.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    primaries: usize,
    replicas_per_primary: usize,
}

impl RedisCluster {
    /// Starts a cluster of 3 primaries with one replica each.
    ///
    /// # Panics
    ///
    /// Panics if the nodes cannot be started or the cluster does not become
    /// healthy within 30 seconds.
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(3, 1)
    }

    /// Starts a cluster of `primaries` primaries (at least 3, as required by
    /// `redis-cli --cluster create`) with `replicas_per_primary` replicas
    /// each, and waits until every node reports `cluster_state:ok`, all of
    /// them agree on the owner and replicas of all 16384 slots, and every
    /// replica's link to its primary is up.
    ///
    /// # Panics
    ///
    /// Panics if `primaries < 3`, if the nodes cannot be started, if
    /// `redis-cli` fails or if the cluster does not become healthy within 30
    /// seconds.
    pub fn start_with(primaries: usize, replicas_per_primary: usize) -> RedisCluster {
        RedisCluster::start_inner(primaries, replicas_per_primary, None)
    }

    /// Like [`RedisCluster::start_with`], but every node also serves TLS with `tls`'s
    /// certificates on a port of its own ([`RedisCluster::tls_urls`]), and the cluster bus and
    /// replication run over TLS (`tls-cluster yes`, `tls-replication yes`), so `CLUSTER SLOTS`
    /// names the TLS ports to TLS clients (and the plain ports, which the harness uses, to
    /// plain ones).
    ///
    /// # Panics
    ///
    /// As [`RedisCluster::start_with`].
    pub fn start_tls(
        tls: &crate::tls::TlsFiles,
        primaries: usize,
        replicas_per_primary: usize,
    ) -> RedisCluster {
        RedisCluster::start_inner(primaries, replicas_per_primary, Some(tls))
    }

    fn start_inner(
        primaries: usize,
        replicas_per_primary: usize,
        tls: Option<&crate::tls::TlsFiles>,
    ) -> RedisCluster {
        assert!(
            primaries >= 3,
            "RedisCluster::start_with: redis-cli --cluster create needs at least 3 primaries, got {primaries}"
        );
        let total = primaries * (1 + replicas_per_primary);
        let nodes: Vec<RedisServer> = (0..total).map(|_| start_cluster_node(tls)).collect();
        let cluster = RedisCluster {
            nodes,
            primaries,
            replicas_per_primary,
        };
        cluster.create();
        cluster.wait_healthy("the cluster to form", |_| Ok(()));
        tracing::debug!(
            ports = ?cluster.nodes.iter().map(RedisServer::port).collect::<Vec<_>>(),
            "redis cluster formed"
        );
        cluster
    }

    /// Runs `redis-cli --cluster create` over all nodes.
    fn create(&self) {
        let log_path = self.nodes[0].dir().join("redis-cli-create.log");
        let log = File::create(&log_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let log_err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot clone log file handle: {e}"));
        let binary = std::env::var("REDIS_CLI_BIN").unwrap_or_else(|_| "redis-cli".to_owned());
        let mut command = Command::new(&binary);
        command.args(["--cluster", "create"]);
        command.args(self.nodes.iter().map(|n| n.addr().to_string()));
        command
            .args([
                "--cluster-replicas",
                &self.replicas_per_primary.to_string(),
                "--cluster-yes",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {binary:?} (set REDIS_CLI_BIN?): {e}"));
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "redis-cli --cluster create did not finish within {CREATE_TIMEOUT:?}; output:\n{}",
                        read_file(&log_path)
                    );
                }
                Err(e) => panic!("cannot wait for redis-cli: {e}"),
            }
        };
        assert!(
            status.success(),
            "redis-cli --cluster create failed with {status}; output:\n{}",
            read_file(&log_path)
        );
    }

    /// All nodes, primaries and replicas, in index order.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `index`.
    ///
    /// # Panics
    ///
    /// Panics if `index` is out of range.
    pub fn node(&self, index: usize) -> &RedisServer {
        self.nodes
            .get(index)
            .unwrap_or_else(|| panic!("no cluster node {index} (have {})", self.nodes.len()))
    }

    /// Node `index`, mutably (to kill, pause or restart it directly; the
    /// cluster waits nothing in that case).
    ///
    /// # Panics
    ///
    /// Panics if `index` is out of range.
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        let len = self.nodes.len();
        self.nodes
            .get_mut(index)
            .unwrap_or_else(|| panic!("no cluster node {index} (have {len})"))
    }

    /// Number of primaries the cluster was started with.
    pub fn primary_count(&self) -> usize {
        self.primaries
    }

    /// Number of replicas per primary the cluster was started with.
    pub fn replicas_per_primary(&self) -> usize {
        self.replicas_per_primary
    }

    /// `redis://127.0.0.1:PORT/` of every node (including killed ones), in
    /// index order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(node_url).collect()
    }

    /// `rediss://127.0.0.1:TLS_PORT/` of every node of a cluster started by
    /// [`RedisCluster::start_tls`], in index order.
    ///
    /// # Panics
    ///
    /// Panics if the nodes serve no TLS.
    pub fn tls_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::tls_url).collect()
    }

    /// `redis://127.0.0.1:PORT/` of every primary currently owning slots, in
    /// index order.
    pub fn primary_urls(&self) -> Vec<String> {
        self.primaries()
            .into_iter()
            .map(|i| node_url(&self.nodes[i]))
            .collect()
    }

    /// Indices of the primaries currently owning slots, ascending.
    pub fn primaries(&self) -> Vec<usize> {
        let mut primaries: Vec<usize> = self.slot_ranges().iter().map(|r| r.primary).collect();
        primaries.sort_unstable();
        primaries.dedup();
        primaries
    }

    /// Slot ranges with their primary and replicas, sorted by first slot,
    /// as seen by the first reachable node.
    pub fn slot_ranges(&self) -> Vec<SlotRange> {
        let node = self.any_live_node();
        let ranges = cluster_slots(node).unwrap_or_else(|e| panic!("{e}"));
        ranges
            .into_iter()
            .map(|(start, end, primary, replicas)| SlotRange {
                start,
                end,
                primary: self.index_of_port(primary),
                replicas: replicas
                    .into_iter()
                    .map(|p| self.index_of_port(p))
                    .collect(),
            })
            .collect()
    }

    /// Index of the primary that owns `slot` (per `CLUSTER SLOTS` on the
    /// first reachable node).
    ///
    /// # Panics
    ///
    /// Panics if `slot` is out of range or not assigned.
    pub fn node_for_slot(&self, slot: u16) -> usize {
        assert!(slot < SLOT_COUNT, "slot {slot} out of range");
        self.slot_ranges()
            .into_iter()
            .find(|r| r.start <= slot && slot <= r.end)
            .map(|r| r.primary)
            .unwrap_or_else(|| panic!("slot {slot} is not assigned"))
    }

    /// Index of the primary that owns `key`'s slot.
    pub fn node_for_key(&self, key: &str) -> usize {
        self.node_for_slot(RedisCluster::slot_of(key))
    }

    /// The hash slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag
    /// (the part between the first `{` and the next `}`, if non-empty),
    /// modulo 16384.
    pub fn slot_of(key: &str) -> u16 {
        let bytes = key.as_bytes();
        let hashed = match bytes.iter().position(|&b| b == b'{') {
            Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
                Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
                _ => bytes,
            },
            None => bytes,
        };
        crc16_xmodem(hashed) % SLOT_COUNT
    }

    /// A key in `slot`: `prefix` followed by a numeric hash tag (e.g.
    /// `lock:{1234}`) chosen so that [`RedisCluster::slot_of`] gives `slot`.
    /// Any suffix appended to the result stays in the same slot.
    ///
    /// # Panics
    ///
    /// Panics if `slot` is out of range or `prefix` itself contains a
    /// complete hash tag.
    pub fn key_for_slot(prefix: &str, slot: u16) -> String {
        assert!(slot < SLOT_COUNT, "slot {slot} out of range");
        assert_eq!(
            RedisCluster::slot_of(&format!("{prefix}{{0}}")),
            RedisCluster::slot_of("0"),
            "key_for_slot: prefix {prefix:?} already contains a hash tag"
        );
        (0u64..)
            .map(|n| format!("{prefix}{{{n}}}"))
            .find(|key| RedisCluster::slot_of(key) == slot)
            .unwrap_or_else(|| unreachable!("every slot is reached by some numeric hash tag"))
    }

    /// Index of a healthy replica of primary `primary_index` (the lowest
    /// index if it has several).
    ///
    /// # Panics
    ///
    /// Panics if the node has no healthy replica.
    pub fn replica_of(&self, primary_index: usize) -> usize {
        self.replicas_of(primary_index)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("cluster node {primary_index} has no healthy replica"))
    }

    /// Indices of the healthy (not failed) replicas of `primary_index`,
    /// ascending, per `CLUSTER NODES` on the first reachable node.
    pub fn replicas_of(&self, primary_index: usize) -> Vec<usize> {
        let lines = self.cluster_nodes_view();
        let primary_port = self.node(primary_index).port();
        let Some(primary) = lines.iter().find(|l| l.port == primary_port) else {
            panic!("cluster node {primary_index} is not in CLUSTER NODES")
        };
        let mut replicas: Vec<usize> = lines
            .iter()
            .filter(|l| {
                l.master_id.as_deref() == Some(primary.id.as_str())
                    && !l.has_flag("fail")
                    && !l.has_flag("fail?")
            })
            .map(|l| self.index_of_port(l.port))
            .collect();
        replicas.sort_unstable();
        replicas
    }

    /// Index of the primary that replica `replica_index` replicates.
    ///
    /// # Panics
    ///
    /// Panics if the node is not a replica.
    pub fn primary_of(&self, replica_index: usize) -> usize {
        let lines = self.cluster_nodes_view();
        let port = self.node(replica_index).port();
        let master_id = lines
            .iter()
            .find(|l| l.port == port)
            .and_then(|l| l.master_id.clone())
            .unwrap_or_else(|| panic!("cluster node {replica_index} is not a replica"));
        let master = lines
            .iter()
            .find(|l| l.id == master_id)
            .unwrap_or_else(|| panic!("primary {master_id} of node {replica_index} is unknown"));
        self.index_of_port(master.port)
    }

    /// The cluster node ID of node `index` (`CLUSTER MYID`).
    pub fn node_id(&self, index: usize) -> String {
        match self.node(index).query(&["CLUSTER", "MYID"]) {
            Reply::Bulk(id) | Reply::Status(id) => id,
            other => panic!("unexpected CLUSTER MYID reply from node {index}: {other:?}"),
        }
    }

    /// Moves `slot` and its keys from its current owner to primary
    /// `to_primary` the documented way ([`RedisCluster::begin_migration`]
    /// then [`RedisCluster::finish_migration`]). Does nothing if `to_primary`
    /// already owns it.
    ///
    /// # Panics
    ///
    /// Panics if a step fails or the nodes do not agree on the new owner
    /// within 30 seconds.
    pub fn migrate_slot(&self, slot: u16, to_primary: usize) {
        if self.node_for_slot(slot) == to_primary {
            return;
        }
        self.begin_migration(slot, to_primary);
        self.finish_migration(slot, to_primary);
    }

    /// First half of a slot migration: `CLUSTER SETSLOT slot IMPORTING` on
    /// the target, then `MIGRATING` on the current owner. No key is moved,
    /// so the owner answers `-ASK` for keys of the slot it does not have
    /// and the target serves them after `ASKING`.
    ///
    /// # Panics
    ///
    /// Panics if `to_primary` already owns the slot or a command fails.
    pub fn begin_migration(&self, slot: u16, to_primary: usize) {
        let source = self.node_for_slot(slot);
        assert_ne!(
            source, to_primary,
            "begin_migration: node {to_primary} already owns slot {slot}"
        );
        let slot_arg = slot.to_string();
        let source_id = self.node_id(source);
        let target_id = self.node_id(to_primary);
        expect_ok(
            self.node(to_primary),
            &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &source_id],
        );
        expect_ok(
            self.node(source),
            &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &target_id],
        );
    }

    /// Second half of a slot migration started by
    /// [`RedisCluster::begin_migration`]: moves the slot's keys with
    /// `CLUSTER GETKEYSINSLOT` + `MIGRATE ... KEYS`, assigns the slot with
    /// `CLUSTER SETSLOT slot NODE target` on the target, the source and the
    /// other primaries, and waits until every reachable node agrees.
    ///
    /// # Panics
    ///
    /// Panics if a step fails or the nodes do not agree within 30 seconds.
    pub fn finish_migration(&self, slot: u16, to_primary: usize) {
        let source = self.node_for_slot(slot);
        assert_ne!(
            source, to_primary,
            "finish_migration: node {to_primary} already owns slot {slot}"
        );
        let slot_arg = slot.to_string();
        let target = self.node(to_primary);
        let target_port = target.port().to_string();
        let batch = MIGRATE_BATCH.to_string();
        loop {
            let keys = self
                .node(source)
                .query(&["CLUSTER", "GETKEYSINSLOT", &slot_arg, &batch]);
            let keys = match keys {
                Reply::Array(_) => keys.into_strings(),
                other => panic!("unexpected CLUSTER GETKEYSINSLOT reply: {other:?}"),
            };
            if keys.is_empty() {
                break;
            }
            let mut args = vec![
                "MIGRATE",
                "127.0.0.1",
                &target_port,
                "",
                "0",
                "5000",
                "REPLACE",
                "KEYS",
            ];
            args.extend(keys.iter().map(String::as_str));
            expect_ok(self.node(source), &args);
        }
        let target_id = self.node_id(to_primary);
        let setslot = ["CLUSTER", "SETSLOT", &slot_arg, "NODE", &target_id];
        expect_ok(target, &setslot);
        expect_ok(self.node(source), &setslot);
        for other in self.primaries() {
            if other != source && other != to_primary {
                expect_ok(self.node(other), &setslot);
            }
        }
        let target_port = target.port();
        self.wait_healthy(
            &format!("slot {slot} to move to node {to_primary}"),
            |ranges| match ranges.iter().find(|r| r.0 <= slot && slot <= r.1) {
                Some(r) if r.2 == target_port => Ok(()),
                Some(r) => Err(format!("slot {slot} still served by port {}", r.2)),
                None => Err(format!("slot {slot} unassigned")),
            },
        );
    }

    /// Kills primary `primary_index` with `SIGKILL` and waits until its
    /// replica has been promoted (its `ROLE` is `master`) and every
    /// surviving node reports `cluster_state:ok` with all slots served by
    /// live primaries. Returns the index of the promoted replica. The
    /// killed node stays down (restart it with [`RedisCluster::restart_node`]).
    ///
    /// # Panics
    ///
    /// Panics if the node is not a primary with a healthy replica, or the
    /// failover does not complete within 30 seconds.
    pub fn failover(&mut self, primary_index: usize) -> usize {
        assert!(
            self.primaries().contains(&primary_index),
            "failover: cluster node {primary_index} is not a primary owning slots"
        );
        let replica = self.replica_of(primary_index);
        let dead_port = self.node(primary_index).port();
        self.nodes[primary_index].kill();
        tracing::debug!(primary_index, replica, "cluster primary killed");
        let replica_port = self.node(replica).port();
        self.wait_healthy(
            &format!("node {replica} to take over from killed node {primary_index}"),
            |ranges| {
                if ranges.iter().any(|r| r.2 == dead_port) {
                    return Err(format!("slots still owned by killed port {dead_port}"));
                }
                if !ranges.iter().any(|r| r.2 == replica_port) {
                    return Err(format!("port {replica_port} owns no slots yet"));
                }
                Ok(())
            },
        );
        replica
    }

    /// Runs `CLUSTER FAILOVER` on replica `replica_index` and waits until
    /// the roles have swapped: the replica is a primary owning its former
    /// primary's slots, the former primary is its replica with the link up,
    /// and every node agrees. Returns the index of the former primary.
    ///
    /// # Panics
    ///
    /// Panics if the node is not a replica, the command fails, or the roles
    /// do not swap within 30 seconds.
    pub fn manual_failover(&self, replica_index: usize) -> usize {
        let old_primary = self.primary_of(replica_index);
        expect_ok(self.node(replica_index), &["CLUSTER", "FAILOVER"]);
        let replica_port = self.node(replica_index).port();
        let old_port = self.node(old_primary).port();
        self.wait_healthy(
            &format!("replica {replica_index} to take over from node {old_primary}"),
            |ranges| {
                if ranges.iter().any(|r| r.2 == old_port) {
                    return Err(format!("slots still owned by port {old_port}"));
                }
                match ranges.iter().find(|r| r.2 == replica_port) {
                    Some(r) if r.3.contains(&old_port) => Ok(()),
                    Some(_) => Err(format!(
                        "port {old_port} is not yet a replica of {replica_port}"
                    )),
                    None => Err(format!("port {replica_port} owns no slots yet")),
                }
            },
        );
        old_primary
    }

    /// Restarts node `index` (killing it first if needed) on the same port
    /// with its `nodes.conf`, and waits until it has rejoined: the cluster is
    /// healthy again and, if it comes back as a replica, its link is up. A
    /// former primary whose slots were taken over comes back as a replica
    /// of the new owner.
    ///
    /// # Panics
    ///
    /// Panics if the node cannot be restarted or does not rejoin within 30
    /// seconds.
    pub fn restart_node(&mut self, index: usize) {
        self.node_mut(index).restart();
        let port = self.node(index).port();
        self.wait_healthy(&format!("node {index} to rejoin"), |ranges| {
            let known = ranges.iter().any(|r| r.2 == port || r.3.contains(&port));
            if known {
                Ok(())
            } else {
                Err(format!(
                    "port {port} is neither a primary nor a healthy replica"
                ))
            }
        });
    }

    /// The first node that is not killed, paused, and answers.
    fn any_live_node(&self) -> &RedisServer {
        self.live_nodes()
            .into_iter()
            .find(|n| n.try_query(&["PING"], PROBE_TIMEOUT).is_ok())
            .unwrap_or_else(|| panic!("no reachable cluster node"))
    }

    /// Nodes that were neither killed nor paused through their handle.
    fn live_nodes(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| !n.is_killed() && !n.is_paused())
            .collect()
    }

    fn index_of_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| panic!("port {port} is not a node of this cluster"))
    }

    fn cluster_nodes_view(&self) -> Vec<NodeLine> {
        cluster_nodes(self.any_live_node()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits (30 s) until every live node reports `cluster_state:ok`, all
    /// live nodes report the same complete `CLUSTER SLOTS`, every range has
    /// as many replicas as configured among live nodes, every live replica's
    /// link is up, and `extra` accepts the agreed ranges.
    fn wait_healthy(&self, what: &str, mut extra: impl FnMut(&[RawRange]) -> Result<(), String>) {
        let live = self.live_nodes();
        let live_ports: Vec<u16> = live.iter().map(|n| n.port()).collect();
        // With a node down, some primary may legitimately lack a replica.
        let required_replicas = if live.len() == self.nodes.len() {
            self.replicas_per_primary
        } else {
            0
        };
        wait_until(what, TOPOLOGY_TIMEOUT, || {
            let mut agreed: Option<Vec<RawRange>> = None;
            for node in &live {
                let info = node
                    .try_query(&["CLUSTER", "INFO"], PROBE_TIMEOUT)
                    .map_err(|e| format!("CLUSTER INFO on {}: {e}", node.port()))?
                    .to_string();
                if info_field(&info, "cluster_state").as_deref() != Some("ok") {
                    return Err(format!("port {}: cluster_state is not ok", node.port()));
                }
                if info_field(&info, "cluster_slots_assigned").as_deref() != Some("16384") {
                    return Err(format!("port {}: not all slots assigned", node.port()));
                }
                let ranges = cluster_slots(node)?;
                let covered: u32 = ranges.iter().map(|r| u32::from(r.1 - r.0) + 1).sum();
                if covered != u32::from(SLOT_COUNT) {
                    return Err(format!(
                        "port {}: CLUSTER SLOTS covers {covered} slots",
                        node.port()
                    ));
                }
                for r in &ranges {
                    let live_replicas = r.3.iter().filter(|p| live_ports.contains(p)).count();
                    if live_replicas < required_replicas {
                        return Err(format!(
                            "port {}: slots {}-{} have {live_replicas} live replicas",
                            node.port(),
                            r.0,
                            r.1
                        ));
                    }
                }
                match &agreed {
                    None => agreed = Some(ranges),
                    Some(first) if *first == ranges => {}
                    Some(_) => {
                        return Err(format!("port {} disagrees on CLUSTER SLOTS", node.port()));
                    }
                }
                let replication = node
                    .try_query(&["INFO", "replication"], PROBE_TIMEOUT)
                    .map_err(|e| format!("INFO on {}: {e}", node.port()))?
                    .to_string();
                if info_field(&replication, "role").as_deref() == Some("slave")
                    && info_field(&replication, "master_link_status").as_deref() != Some("up")
                {
                    return Err(format!("port {}: replica link is not up", node.port()));
                }
            }
            let ranges = agreed.ok_or("no live node")?;
            let primaries = {
                let mut p: Vec<u16> = ranges.iter().map(|r| r.2).collect();
                p.sort_unstable();
                p.dedup();
                p
            };
            if primaries.iter().any(|p| !live_ports.contains(p)) {
                return Err("a slot is owned by a killed node".to_owned());
            }
            extra(&ranges)
        });
    }
}

/// `(start, end, primary port, replica ports)` from `CLUSTER SLOTS`.
type RawRange = (u16, u16, u16, Vec<u16>);

/// `CLUSTER SLOTS` of `node`, sorted by first slot.
fn cluster_slots(node: &RedisServer) -> Result<Vec<RawRange>, String> {
    let reply = node
        .try_query(&["CLUSTER", "SLOTS"], PROBE_TIMEOUT)
        .map_err(|e| format!("CLUSTER SLOTS on {}: {e}", node.port()))?;
    let bad = |what: &str| {
        format!(
            "unexpected CLUSTER SLOTS reply from {}: {what}",
            node.port()
        )
    };
    let Reply::Array(entries) = reply else {
        return Err(bad(&format!("{reply:?}")));
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let Reply::Array(items) = entry else {
            return Err(bad("entry is not an array"));
        };
        let number = |r: &Reply| match r {
            Reply::Integer(n) => u16::try_from(*n).map_err(|_| bad("number out of range")),
            _ => Err(bad("not an integer")),
        };
        let port = |r: &Reply| match r {
            Reply::Array(fields) if fields.len() >= 2 => number(&fields[1]),
            _ => Err(bad("node entry")),
        };
        if items.len() < 3 {
            return Err(bad("short entry"));
        }
        let replicas = items[3..].iter().map(port).collect::<Result<Vec<_>, _>>()?;
        let mut replicas = replicas;
        replicas.sort_unstable();
        ranges.push((
            number(&items[0])?,
            number(&items[1])?,
            port(&items[2])?,
            replicas,
        ));
    }
    ranges.sort_unstable();
    Ok(ranges)
}

/// `CLUSTER NODES` of `node`, parsed.
fn cluster_nodes(node: &RedisServer) -> Result<Vec<NodeLine>, String> {
    let text = node
        .try_query(&["CLUSTER", "NODES"], PROBE_TIMEOUT)
        .map_err(|e| format!("CLUSTER NODES on {}: {e}", node.port()))?
        .to_string();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let bad = || format!("unexpected CLUSTER NODES line {line:?}");
            if fields.len() < 8 {
                return Err(bad());
            }
            // `ip:port@cport[,hostname]`
            let port = fields[1]
                .split('@')
                .next()
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse().ok())
                .ok_or_else(bad)?;
            Ok(NodeLine {
                id: fields[0].to_owned(),
                port,
                flags: fields[2].split(',').map(str::to_owned).collect(),
                master_id: (fields[3] != "-").then(|| fields[3].to_owned()),
            })
        })
        .collect()
}

/// Panics unless `args` on `node` replies `OK`.
fn expect_ok(node: &RedisServer, args: &[&str]) {
    match node.query(args) {
        Reply::Status(s) if s == "OK" => {}
        other => panic!("{args:?} on port {} failed: {other:?}", node.port()),
    }
}

fn node_url(node: &RedisServer) -> String {
    format!("redis://127.0.0.1:{}/", node.port())
}

/// Starts one cluster-enabled node on a port whose bus port is free too.
fn start_cluster_node(tls: Option<&crate::tls::TlsFiles>) -> RedisServer {
    let timeout = NODE_TIMEOUT_MS.to_string();
    let args = [
        "--cluster-enabled",
        "yes",
        // Relative to `--dir`, the node's private temporary directory.
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        &timeout,
        // Replicas sync at once instead of waiting for more replicas.
        "--repl-diskless-sync-delay",
        "0",
        // The replication offset must move for `CLUSTER SLOTS` to list a
        // replica; on an idle primary only these pings move it.
        "--repl-ping-replica-period",
        "1",
    ];
    let mut last_error = String::new();
    for attempt in 1..=NODE_START_ATTEMPTS {
        let port = free_port_pair();
        let started = match tls {
            None => RedisServer::try_start_on(port, None, &args),
            Some(tls) => {
                // With `tls-cluster yes` the bus would listen on the TLS port + 10000: keep it
                // on the plain port's, which `free_port_pair` found free.
                let bus = (port + BUS_PORT_OFFSET).to_string();
                let tls_args = [
                    &args[..],
                    &[
                        "--tls-cluster",
                        "yes",
                        "--tls-replication",
                        "yes",
                        "--cluster-port",
                        &bus,
                    ],
                ]
                .concat();
                let tls_port = free_port_pair();
                RedisServer::try_start_tls_on(
                    port,
                    tls_port,
                    tls,
                    crate::tls::ClientAuth::Optional,
                    None,
                    &tls_args,
                )
            }
        };
        match started {
            Ok(server) => return server,
            Err(e) => {
                tracing::warn!(attempt, port, error = %e, "cluster node did not start, retrying");
                last_error = e;
            }
        }
    }
    panic!("could not start a cluster node after {NODE_START_ATTEMPTS} attempts: {last_error}");
}

/// A port in [`PORT_RANGE`] that, together with its bus port, was free a
/// moment ago.
fn free_port_pair() -> u16 {
    let state = RandomState::new();
    for n in 0u64.. {
        let mut hasher = state.build_hasher();
        hasher.write_u64(n);
        let span = u64::from(PORT_RANGE.1 - PORT_RANGE.0) + 1;
        let port = PORT_RANGE.0 + (hasher.finish() % span) as u16;
        let free = |p: u16| TcpListener::bind((Ipv4Addr::LOCALHOST, p)).is_ok();
        if free(port) && free(port + BUS_PORT_OFFSET) {
            return port;
        }
        assert!(n < 10_000, "no free port pair found in {PORT_RANGE:?}");
    }
    unreachable!()
}

/// CRC16-CCITT (XMODEM variant: polynomial 0x1021, initial value 0), as used
/// by Redis Cluster key hashing.
fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

fn read_file(path: &std::path::Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_reference_vector() {
        // From the Redis Cluster specification.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
    }

    #[test]
    fn hash_tags() {
        assert_eq!(RedisCluster::slot_of("foo"), 12182);
        assert_eq!(
            RedisCluster::slot_of("{user1000}.following"),
            RedisCluster::slot_of("user1000")
        );
        assert_eq!(
            RedisCluster::slot_of("foo{}{bar}"),
            crc16_xmodem(b"foo{}{bar}") % SLOT_COUNT
        );
        assert_eq!(
            RedisCluster::slot_of("foo{{bar}}zap"),
            RedisCluster::slot_of("{bar")
        );
        assert_eq!(
            RedisCluster::slot_of("foo{bar}{zap}"),
            RedisCluster::slot_of("bar")
        );
        let key = RedisCluster::key_for_slot("lock:", 42);
        assert!(key.starts_with("lock:{"));
        assert_eq!(RedisCluster::slot_of(&key), 42);
    }
}
