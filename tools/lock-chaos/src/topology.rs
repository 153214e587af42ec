//! The Redis deployment the locks live on (from the harness: a `RedisServer`, a
//! `SentinelGroup` or a `RedisCluster`), and the coordinator's own view into it: plain RESP
//! commands on fresh connections, the scan for locks a dead client still holds, the topology
//! changes.
//!
//! Everything here blocks (the harness does); the coordinator calls it from
//! `spawn_blocking`.

use std::io;
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use lock_tests::{RedisCluster, RedisServer, Reply, SentinelGroup};

use super::cli::{Deploy, TopologyKind};
use super::names::{ALL_NAMES, KEY_PREFIX};

/// The lock servers of a run.
pub(crate) enum Topo {
    /// Kept on disk (`appendonly yes`, written before every reply; `appendfsync no`, since a
    /// killed process loses nothing the kernel holds), so a restart keeps every lock, record
    /// and fenced value the clients were told about.
    Standalone(StdMutex<RedisServer>),
    Sentinel(StdMutex<SentinelGroup>),
    Cluster(StdMutex<RedisCluster>),
}

fn locked<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f`, turning a harness panic into an error message.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "harness panic".to_owned())
    })
}

impl Topo {
    pub(crate) fn start(kind: TopologyKind) -> Topo {
        match kind {
            TopologyKind::Standalone => {
                Topo::Standalone(StdMutex::new(RedisServer::start_with(&[
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "no",
                ])))
            }
            TopologyKind::Sentinel => Topo::Sentinel(StdMutex::new(SentinelGroup::start())),
            TopologyKind::Cluster => Topo::Cluster(StdMutex::new(RedisCluster::start())),
        }
    }

    /// What a worker's client connects to (`proxy`: the standalone server's proxy URL).
    pub(crate) fn deploy(&self, proxy: Option<String>) -> Deploy {
        match self {
            Topo::Standalone(server) => {
                Deploy::Standalone(proxy.unwrap_or_else(|| locked(server).url()))
            }
            Topo::Sentinel(group) => Deploy::Sentinel {
                service: lock_tests::sentinel::MASTER_NAME.to_owned(),
                urls: locked(group).sentinel_urls(),
            },
            Topo::Cluster(cluster) => Deploy::Cluster(locked(cluster).urls()),
        }
    }

    /// The address of the standalone server.
    pub(crate) fn standalone_addr(&self) -> Option<SocketAddr> {
        match self {
            Topo::Standalone(server) => Some(locked(server).addr()),
            _ => None,
        }
    }

    /// The pid of the standalone server.
    pub(crate) fn standalone_pid(&self) -> Option<u32> {
        match self {
            Topo::Standalone(server) => Some(locked(server).pid()),
            _ => None,
        }
    }

    /// Kills the standalone server and starts it again on the same port, from its
    /// append-only file.
    pub(crate) fn restart_standalone(&self) -> Result<u32, String> {
        match self {
            Topo::Standalone(server) => guarded(|| {
                let mut server = locked(server);
                server.restart();
                server.pid()
            }),
            _ => Err("no standalone server".to_owned()),
        }
    }

    /// The nodes that serve locks now: the server, the Sentinel primary, the Cluster's
    /// primaries.
    pub(crate) fn primaries(&self) -> Vec<SocketAddr> {
        match self {
            Topo::Standalone(server) => vec![locked(server).addr()],
            Topo::Sentinel(group) => {
                let group = locked(group);
                let asked = guarded(|| group.current_primary_addr());
                vec![asked.unwrap_or_else(|_| group.primary().addr())]
            }
            Topo::Cluster(cluster) => {
                let cluster = locked(cluster);
                guarded(|| {
                    cluster
                        .primaries()
                        .into_iter()
                        .map(|i| cluster.node(i).addr())
                        .collect()
                })
                .unwrap_or_default()
            }
        }
    }

    /// The nodes that claim to be a primary, as the clients would find them: on Sentinel,
    /// every data node whose `ROLE` is `master` (two of them is a split brain); on a
    /// Cluster, the primaries owning slots. `None` for one server.
    pub(crate) fn masters(&self) -> Option<Vec<SocketAddr>> {
        match self {
            Topo::Standalone(_) => None,
            Topo::Sentinel(group) => {
                let addrs: Vec<SocketAddr> = locked(group)
                    .data_nodes()
                    .iter()
                    .filter(|n| !n.is_killed())
                    .map(RedisServer::addr)
                    .collect();
                let masters = addrs
                    .into_iter()
                    .filter(|&a| {
                        query(a, &["ROLE"], Duration::from_millis(500))
                            .is_ok_and(|r| r.into_strings().first().is_some_and(|s| s == "master"))
                    })
                    .collect();
                Some(masters)
            }
            Topo::Cluster(_) => Some(self.primaries()),
        }
    }

    /// A failover or slot move, chosen by `arg`; returns what it did.
    pub(crate) fn change(
        &self,
        kind: super::nemesis::FaultKind,
        arg: u64,
    ) -> Result<String, String> {
        use super::nemesis::FaultKind::*;
        match (self, kind) {
            (Topo::Sentinel(group), SentinelFailover) => {
                let mut group = locked(group);
                guarded(|| format!("new primary {}", group.failover()))
            }
            (Topo::Sentinel(group), SentinelCrash) => {
                let mut group = locked(group);
                guarded(|| {
                    let new = group.kill_primary_and_wait_failover();
                    group.restart_old_primary();
                    format!("primary killed; new primary {new}; the old one is back as a replica")
                })
            }
            (Topo::Cluster(cluster), ClusterFailover) => {
                let mut cluster = locked(cluster);
                guarded(|| {
                    let primaries = cluster.primaries();
                    let p = primaries[(arg % primaries.len() as u64) as usize];
                    let port = cluster.node(p).port();
                    let promoted = cluster.failover(p);
                    let promoted_port = cluster.node(promoted).port();
                    cluster.restart_node(p);
                    format!(
                        "primary :{port} killed, :{promoted_port} promoted, :{port} back as a replica"
                    )
                })
            }
            (Topo::Cluster(cluster), ClusterManualFailover) => {
                let cluster = locked(cluster);
                guarded(|| {
                    let primaries = cluster.primaries();
                    let p = primaries[(arg % primaries.len() as u64) as usize];
                    let r = cluster.replica_of(p);
                    cluster.manual_failover(r);
                    format!(
                        "replica :{} took over from :{}",
                        cluster.node(r).port(),
                        cluster.node(p).port()
                    )
                })
            }
            (Topo::Cluster(cluster), SlotMigration) => {
                let cluster = locked(cluster);
                guarded(|| {
                    let name = ALL_NAMES[(arg % ALL_NAMES.len() as u64) as usize];
                    let slot = RedisCluster::slot_of(&format!("{KEY_PREFIX}{{{name}}}"));
                    let from = cluster.node_for_slot(slot);
                    let others: Vec<usize> = cluster
                        .primaries()
                        .into_iter()
                        .filter(|&p| p != from)
                        .collect();
                    let to = others[((arg >> 8) % others.len() as u64) as usize];
                    cluster.migrate_slot(slot, to);
                    format!(
                        "slot {slot} ({name}) moved from :{} to :{}",
                        cluster.node(from).port(),
                        cluster.node(to).port()
                    )
                })
            }
            _ => Err(format!("{} does not apply here", kind.name())),
        }
    }
}

/// Sends one command on a fresh connection and reads its reply.
pub(crate) fn query(addr: SocketAddr, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    lock_tests::query_at(addr, args, timeout)
}

/// Sends several commands, pipelined, on one fresh connection.
fn query_many(
    addr: SocketAddr,
    commands: &[Vec<String>],
    timeout: Duration,
) -> io::Result<Vec<Reply>> {
    let args: Vec<Vec<&str>> = commands
        .iter()
        .map(|c| c.iter().map(String::as_str).collect())
        .collect();
    let args: Vec<&[&str]> = args.iter().map(Vec::as_slice).collect();
    lock_tests::query_many_at(addr, &args, timeout)
}

/// Something lock-related that is live on a server.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    pub(crate) key: String,
    /// The owner id (`<client id>:<holder>`) it belongs to.
    pub(crate) owner: String,
    pub(crate) what: String,
    /// Queued fair waiters are not held locks: a dead one is dropped at its deadline (the
    /// waiter timeout), which may be later than a lease.
    pub(crate) waiter: bool,
    /// How long it has left, if it expires by a deadline of its own (ms, server clock).
    pub(crate) left_ms: Option<i64>,
}

/// What a scan of the lock servers found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Held locks, live read shares and permits, queued fair waiters, writer marks.
    pub(crate) live: Vec<Live>,
    /// Lock keys without a time to live.
    pub(crate) no_ttl: Vec<String>,
    /// Subscribed channels (plain and sharded).
    pub(crate) channels: Vec<String>,
    /// Lock keys seen.
    pub(crate) keys: usize,
}

fn strings(r: Reply) -> Vec<String> {
    r.into_strings()
}

fn int(r: &Reply) -> i64 {
    match r {
        Reply::Integer(n) => *n,
        Reply::Bulk(s) | Reply::Status(s) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

/// Scans every lock key of the nodes at `addrs` (each node lists its own keys).
pub(crate) fn scan(addrs: &[SocketAddr], timeout: Duration) -> io::Result<Scan> {
    let mut scan = Scan::default();
    for &addr in addrs {
        let time = strings(query(addr, &["TIME"], timeout)?);
        let now_ms: i64 = match time.as_slice() {
            [secs, micros] => {
                secs.parse::<i64>().unwrap_or(0) * 1000 + micros.parse::<i64>().unwrap_or(0) / 1000
            }
            _ => 0,
        };
        let keys = strings(query(addr, &["KEYS", &format!("{KEY_PREFIX}*")], timeout)?);
        scan.keys += keys.len();
        for key in keys {
            // The native protocol's fencing counters (one per slot) never expire, by design;
            // a lock's record (`{P}{name}:record`, written by the sections) and the record of
            // its last guarded update (`{P}{name}:updated`, kept a minute past the lease) are
            // no locks.
            if key == format!("{KEY_PREFIX}fence")
                || key.starts_with(&format!("{KEY_PREFIX}fence:{{"))
                || key.ends_with(":record")
                || key.ends_with(":updated")
            {
                continue;
            }
            scan_key(&mut scan, addr, &key, now_ms, timeout)?;
        }
        let mut channels = strings(query(addr, &["PUBSUB", "CHANNELS"], timeout)?);
        if let Ok(reply) = query(addr, &["PUBSUB", "SHARDCHANNELS"], timeout)
            && !reply.is_error()
        {
            channels.extend(strings(reply));
        }
        // Sentinel's own channel on the nodes it monitors is not ours.
        scan.channels.extend(
            channels
                .into_iter()
                .filter(|c| !c.starts_with("__sentinel__")),
        );
    }
    Ok(scan)
}

/// What one lock key holds: a time to live or not, and what is live in it (by its type).
fn scan_key(
    scan: &mut Scan,
    addr: SocketAddr,
    key: &str,
    now_ms: i64,
    timeout: Duration,
) -> io::Result<()> {
    let replies = query_many(
        addr,
        &[
            vec!["TYPE".into(), key.to_owned()],
            vec!["PTTL".into(), key.to_owned()],
        ],
        timeout,
    )?;
    let kind = replies[0].to_string();
    let pttl = int(&replies[1]);
    if pttl == -1 {
        scan.no_ttl.push(key.to_owned());
    }
    match kind.as_str() {
        "string" => {
            let value = query(addr, &["GET", key], timeout)?.to_string();
            scan.live.extend(string_live(key, &value, pttl));
        }
        "hash" => {
            let fields = strings(query(addr, &["HGETALL", key], timeout)?);
            scan.live.extend(hash_live(key, &fields, now_ms));
        }
        "zset" if key.ends_with(":permits") || key.ends_with(":fair:deadlines") => {
            let entries = strings(query(
                addr,
                &["ZRANGE", key, "0", "-1", "WITHSCORES"],
                timeout,
            )?);
            scan.live.extend(zset_live(key, &entries, now_ms));
        }
        _ => {}
    }
    Ok(())
}

/// A lock string: a held scripted lock (`owner|...`), a waiting writer's mark or a native
/// mutex (an owner id).
fn string_live(key: &str, value: &str, pttl: i64) -> Option<Live> {
    if let Some((owner, rest)) = value.split_once('|') {
        (!owner.is_empty()).then(|| Live {
            key: key.to_owned(),
            owner: owner.to_owned(),
            what: format!("held: {owner}|{rest}, PTTL {pttl} ms"),
            waiter: false,
            left_ms: Some(pttl),
        })
    } else if value != "(nil)" {
        // A waiting writer's mark, and a native mutex, hold an owner id.
        let what = if key.ends_with(":writer-waiting") {
            format!("writer-waiting mark of {value}, PTTL {pttl} ms")
        } else {
            format!("held (native): {value}, PTTL {pttl} ms")
        };
        Some(Live {
            key: key.to_owned(),
            owner: value.to_owned(),
            what,
            waiter: false,
            left_ms: Some(pttl),
        })
    } else {
        None
    }
}

/// A read-write lock's read shares (owner → `...|expiry`) not yet expired.
fn hash_live(key: &str, fields: &[String], now_ms: i64) -> Vec<Live> {
    let mut live = Vec::new();
    for pair in fields.chunks(2) {
        if let [owner, share] = pair {
            let expiry: i64 = share
                .split_once('|')
                .and_then(|(_, e)| e.parse().ok())
                .unwrap_or(0);
            if expiry > now_ms {
                live.push(Live {
                    key: key.to_owned(),
                    owner: owner.clone(),
                    what: format!("read share {share}, {} ms left", expiry - now_ms),
                    waiter: false,
                    left_ms: Some(expiry - now_ms),
                });
            }
        }
    }
    live
}

/// A semaphore's permits or a fair lock's queued waiters (member → expiry) not yet expired.
fn zset_live(key: &str, entries: &[String], now_ms: i64) -> Vec<Live> {
    let mut live = Vec::new();
    for pair in entries.chunks(2) {
        if let [member, score] = pair {
            let expiry = score.parse::<f64>().unwrap_or(0.0) as i64;
            if expiry > now_ms {
                let (owner, what) = if key.ends_with(":permits") {
                    let owner = member.rsplit_once(':').map_or(member.as_str(), |(o, _)| o);
                    (owner.to_owned(), "permit")
                } else {
                    (member.clone(), "queued fair waiter")
                };
                live.push(Live {
                    key: key.to_owned(),
                    owner,
                    what: format!("{what} {member}, {} ms left", expiry - now_ms),
                    waiter: what != "permit",
                    left_ms: Some(expiry - now_ms),
                });
            }
        }
    }
    live
}

/// The client id that owns the mutex `name` (read from its lock string on whichever node
/// has it), if it is held.
pub(crate) fn owner_client_id(addrs: &[SocketAddr], name: &str) -> Option<String> {
    let key = format!("{KEY_PREFIX}{{{name}}}");
    for &addr in addrs {
        if let Ok(Reply::Bulk(value)) = query(addr, &["GET", &key], Duration::from_secs(2)) {
            let owner = value.split('|').next().unwrap_or("");
            if let Some((client, _holder)) = owner.split_once(':') {
                return Some(client.to_owned());
            }
        }
    }
    None
}
