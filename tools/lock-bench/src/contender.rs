//! The three contenders behind one interface, and the native floor (a fourth lock, run only
//! on a server with `DELIFEQ`; not in [`Kind::ALL`], so the three contenders' runs stay as
//! they were).

use std::time::Duration;

use lock_core::{LockClient, LockGuard, MutexProtocol};

use crate::floor::{Floor, FloorGuard};

/// Fixed lease of the floor's and rslock's locks outside W5 (ours uses its watchdog lease,
/// 30 s by default, as `client.lock(name).await` does).
pub(crate) const FIXED_LEASE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Ours,
    Floor,
    Rslock,
    /// The floor on native compare commands (`DELIFEQ`, no script): see [`Floor::connect_native`].
    NativeFloor,
}

impl Kind {
    /// The three contenders (the native floor is run apart, where the server has `DELIFEQ`).
    pub(crate) const ALL: [Kind; 3] = [Kind::Ours, Kind::Floor, Kind::Rslock];

    /// The key in `BENCH` lines, JSON and lock names.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Ours => "ours",
            Kind::Floor => "floor",
            Kind::Rslock => "rslock",
            Kind::NativeFloor => "native_floor",
        }
    }

    /// The row's name in the tables.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::NativeFloor => "native floor",
            other => other.name(),
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .chain([Kind::NativeFloor])
            .find(|k| k.name() == s)
    }
}

/// Settings shared by every contender, passed on to child processes.
#[derive(Clone, Debug)]
pub(crate) struct Opts {
    pub(crate) url: String,
    /// lock-core's connection pool size.
    pub(crate) pool: u32,
    /// rslock's retry delay: it sleeps a random 0..delay between attempts.
    pub(crate) rslock_retry: Duration,
    /// lock-core's mutex protocol (`--mutex-protocol`, default `auto`).
    pub(crate) mutex_protocol: MutexProtocol,
}

/// The mutex protocol named `name` (as `MutexProtocol` displays it: `auto`, `native`,
/// `hybrid`, `scripted`).
pub(crate) fn parse_protocol(name: &str) -> Option<MutexProtocol> {
    [
        MutexProtocol::Auto,
        MutexProtocol::Native,
        MutexProtocol::Hybrid,
        MutexProtocol::Scripted,
    ]
    .into_iter()
    .find(|p| p.to_string() == name)
}

/// A connected contender. Cloning shares its connections.
#[derive(Clone)]
pub(crate) enum Locker {
    Ours(LockClient),
    Floor(Floor),
    Rslock {
        /// Waits: `acquire` loops over `lock`, which tries 3 times with random sleeps.
        waiting: rslock::LockManager,
        /// Single attempts: retry count 1.
        once: rslock::LockManager,
    },
}

/// A held lock of any contender.
#[derive(Debug)]
pub(crate) enum Held {
    Ours(LockGuard),
    Floor(FloorGuard),
    Rslock(rslock::Lock),
}

impl Locker {
    pub(crate) async fn connect(kind: Kind, opts: &Opts) -> Locker {
        Self::connect_with(kind, opts, None).await
    }

    /// Connects; `lease` sets ours' watchdog lease and the others' fixed lease.
    pub(crate) async fn connect_with(kind: Kind, opts: &Opts, lease: Option<Duration>) -> Locker {
        match kind {
            Kind::Ours => {
                let mut b = LockClient::builder(&opts.url)
                    .pool_size(opts.pool)
                    .mutex_protocol(opts.mutex_protocol);
                if let Some(lease) = lease {
                    b = b.watchdog_lease(lease);
                }
                Locker::Ours(b.build().await.expect("connect lock-core"))
            }
            Kind::Floor => {
                Locker::Floor(Floor::connect(&opts.url, lease.unwrap_or(FIXED_LEASE)).await)
            }
            Kind::NativeFloor => {
                Locker::Floor(Floor::connect_native(&opts.url, lease.unwrap_or(FIXED_LEASE)).await)
            }
            Kind::Rslock => {
                let mut waiting = rslock::LockManager::new(vec![opts.url.as_str()]);
                waiting.set_retry(3, opts.rslock_retry);
                let mut once = waiting.clone();
                once.set_retry(1, Duration::from_millis(1));
                Locker::Rslock { waiting, once }
            }
        }
    }

    /// Takes the lock `name`, waiting at most `wait`.
    pub(crate) async fn lock(&self, name: &str, wait: Duration) -> Result<Held, String> {
        match self {
            Locker::Ours(c) => c
                .lock(name)
                .wait(wait)
                .await
                .map(Held::Ours)
                .map_err(|e| format!("ours lock {name}: {e}")),
            Locker::Floor(f) => f.lock(name, wait).await.map(Held::Floor),
            Locker::Rslock { waiting, .. } => {
                match tokio::time::timeout(wait, waiting.acquire_no_guard(name, FIXED_LEASE)).await
                {
                    Ok(Ok(l)) => Ok(Held::Rslock(l)),
                    Ok(Err(e)) => Err(format!("rslock acquire {name}: {e}")),
                    Err(_) => Err(format!("rslock: timed out waiting for {name}")),
                }
            }
        }
    }

    /// One attempt, as the tower layer makes by default (`wait(ZERO)` for ours).
    pub(crate) async fn try_lock(&self, name: &str) -> Result<Option<Held>, String> {
        match self {
            Locker::Ours(c) => match c.lock(name).wait(Duration::ZERO).await {
                Ok(g) => Ok(Some(Held::Ours(g))),
                Err(e) if e.is_timeout() => Ok(None),
                Err(e) => Err(format!("ours lock {name}: {e}")),
            },
            Locker::Floor(f) => Ok(f.try_lock(name).await?.map(Held::Floor)),
            Locker::Rslock { once, .. } => match once.lock(name, FIXED_LEASE).await {
                Ok(l) => Ok(Some(Held::Rslock(l))),
                Err(rslock::LockError::Unavailable) => Ok(None),
                Err(e) => Err(format!("rslock lock {name}: {e}")),
            },
        }
    }

    /// Releases a lock this contender took.
    pub(crate) async fn unlock(&self, held: Held) -> Result<(), String> {
        match (self, held) {
            (_, Held::Ours(g)) => match g.unlock().await {
                Ok(true) => Ok(()),
                Ok(false) => Err("ours: lock was no longer held at release".into()),
                Err(e) => Err(format!("ours unlock: {e}")),
            },
            (Locker::Floor(f), Held::Floor(g)) => match f.unlock(g).await? {
                true => Ok(()),
                false => Err("floor: lock was no longer held at release".into()),
            },
            // rslock's unlock is best effort and reports nothing.
            (Locker::Rslock { waiting, .. }, Held::Rslock(l)) => {
                waiting.unlock(&l).await;
                Ok(())
            }
            _ => Err("lock released through another contender".into()),
        }
    }
}
