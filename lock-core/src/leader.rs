//! [`Leader`]: leader election on a mutex. A campaign takes the lock (waiting as long as it
//! takes), the watchdog keeps it, a [`Term`] is the leadership it won, and
//! [`Leader::events`] runs campaign after campaign as a stream of transitions.

use std::fmt;
use std::time::Duration;

use futures_util::Stream;

use crate::client::LockClient;
use crate::error::LockError;
use crate::held_lock::{HeldLock, Lost};
use crate::mutex::{LockGuard, Mutex};

/// Leader election among the instances that campaign for one name: made by
/// [`LockClient::leader`](crate::LockClient::leader). Cheap to clone.
///
/// The leader holds the mutex `name`, renewed by the client's watchdog for as long as its
/// [`Term`] lives; the others wait for it (woken by its release, or at its lease's end if it
/// died). Its fencing token is the term number: strictly greater for every new leader, so a
/// resource that refuses lower numbers ignores a deposed leader that kept writing.
///
/// **Guarantees.** At most one instance holds leadership whose lease is valid (as for any
/// mutex of this crate: on one Redis primary; see the crate docs for failover and
/// `min_replicas`). A leader that was paused (a GC pause, `SIGSTOP`, a stalled VM) past its
/// lease may wake up believing it leads; [`Term::is_leader`] checks the lease against the local
/// clock, so a leader that checks before each unit of work learns it lost before doing it.
/// Writes it started before the pause can still land late: have the resource check the term
/// (fencing token).
///
/// ```no_run
/// # async fn f(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
/// let leader = client.leader("scheduler");
/// loop {
///     let term = leader.campaign().await?; // waits until this instance leads
///     println!("leading in term {}", term.number());
///     while term.is_leader() {
///         // ... one unit of leader's work, writing with term.number() ...
///         # break;
///     }
///     println!("no longer leading: {:?}", term.lost_reason());
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct Leader {
    mutex: Mutex,
}

impl Leader {
    /// How long [`events`](Self::events) waits before campaigning again after a campaign
    /// failed (Redis unreachable): 1 s.
    pub const RETRY: Duration = Duration::from_secs(1);

    pub(crate) fn new(mutex: Mutex) -> Self {
        Self { mutex }
    }

    /// The name campaigned for.
    pub fn name(&self) -> &str {
        self.mutex.name()
    }

    /// Campaigns until this instance leads, and returns its term. Waits as long as another
    /// leader holds the name (riding out a Redis outage once waiting); fails at once if Redis
    /// cannot be reached when it starts. Dropping the term steps down.
    pub async fn campaign(&self) -> Result<Term, LockError> {
        let guard = self.mutex.lock().await?;
        Ok(Term { guard })
    }

    /// One attempt: the term if nobody leads now, `None` if someone does.
    pub async fn try_campaign(&self) -> Result<Option<Term>, LockError> {
        Ok(self.mutex.try_lock().await?.map(|guard| Term { guard }))
    }

    /// Campaign after campaign, as a stream of transitions: [`LeaderEvent::Elected`] when
    /// this instance starts leading (said only of a term that still leads at that moment: a
    /// term lost on its way, its process stalled past the lease, is not reported and the
    /// campaign goes on), [`LeaderEvent::Deposed`] when it stops (and then it campaigns
    /// again), an `Err` when a campaign could not reach Redis (it tries again after
    /// [`RETRY`](Self::RETRY)). The stream holds the leadership: dropping it steps down.
    ///
    /// With `futures-util`'s `StreamExt`:
    ///
    /// ```no_run
    /// # async fn f(client: lock_core::LockClient) {
    /// use futures_util::StreamExt;
    /// use lock_core::LeaderEvent;
    ///
    /// let mut events = std::pin::pin!(client.leader("scheduler").events());
    /// while let Some(event) = events.next().await {
    ///     match event {
    ///         Ok(LeaderEvent::Elected { term, .. }) => println!("term {term}: start duties"),
    ///         Ok(LeaderEvent::Deposed { term, reason }) => {
    ///             println!("term {term} ended ({reason}): stop duties")
    ///         }
    ///         Ok(_) => {}
    ///         Err(e) => println!("campaign failed, retrying: {e}"),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn events(self) -> impl Stream<Item = Result<LeaderEvent, LockError>> + Send + 'static {
        enum State {
            Campaigning { failed: bool },
            Leading(Term),
        }
        futures_util::stream::unfold(
            (self, State::Campaigning { failed: false }),
            |(leader, state)| async move {
                match state {
                    State::Campaigning { failed } => {
                        if failed {
                            tokio::time::sleep(Self::RETRY).await;
                        }
                        loop {
                            match leader.campaign().await {
                                // Elected is said only of a term that still leads when it is
                                // said: one lost on its way here (the process stalled past
                                // its lease) was never this instance's to report.
                                Ok(term) if term.is_leader() => {
                                    let event = LeaderEvent::Elected {
                                        term: term.number(),
                                        held: term.held_lock(),
                                    };
                                    break Some((Ok(event), (leader, State::Leading(term))));
                                }
                                Ok(lost) => drop(lost),
                                Err(e) => {
                                    let next = State::Campaigning { failed: true };
                                    break Some((Err(e), (leader, next)));
                                }
                            }
                        }
                    }
                    State::Leading(term) => {
                        term.deposed().await;
                        let event = LeaderEvent::Deposed {
                            term: term.number(),
                            reason: term.lost_reason().unwrap_or("stepped down"),
                        };
                        drop(term);
                        Some((Ok(event), (leader, State::Campaigning { failed: false })))
                    }
                }
            },
        )
    }
}

impl fmt::Debug for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("name", &self.mutex.name())
            .finish()
    }
}

/// A change of leadership, from [`Leader::events`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LeaderEvent {
    /// This instance leads, in term `term` (its fencing token).
    Elected {
        /// The term number.
        term: u64,
        /// The held lock: its `is_held()` and `lost()` for the duties' own checks.
        held: HeldLock,
    },
    /// This instance no longer leads: the lock was lost (`reason` says how) or released.
    Deposed {
        /// The term that ended.
        term: u64,
        /// Why it ended (e.g. "the watchdog found the lock gone", "no renewal succeeded
        /// within the lease").
        reason: &'static str,
    },
}

/// Leadership won by a campaign: the mutex guard, renewed by the watchdog while it lives.
/// Dropping it (or [`step_down`](Term::step_down)) releases the leadership.
#[derive(Debug)]
#[must_use = "dropping the term steps down"]
pub struct Term {
    guard: LockGuard,
}

impl Term {
    /// The term number: the lock's fencing token, strictly greater for every new leader.
    pub fn number(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// True while this instance leads: not deposed and within its lease by the local clock.
    /// Check it before each unit of leader's work.
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Resolves when leadership is lost (or given up): stop the leader's duties.
    pub fn deposed(&self) -> Lost {
        self.guard.lost()
    }

    /// Why leadership was lost, once it was.
    pub fn lost_reason(&self) -> Option<&'static str> {
        let core = self.guard.core();
        core.hold.lost_reason(core.generation)
    }

    /// The held lock, for code that must check leadership.
    pub fn held_lock(&self) -> HeldLock {
        self.guard.held_lock()
    }

    /// Gives leadership up, so another instance can lead at once. Returns whether this
    /// instance still led until now.
    pub async fn step_down(self) -> Result<bool, LockError> {
        self.guard.unlock().await
    }
}

impl LockClient {
    /// Leader election for `name`: one instance at a time leads, the others wait to take
    /// over (see [`Leader`]).
    pub fn leader(&self, name: impl Into<String>) -> Leader {
        Leader::new(self.mutex(name))
    }
}
