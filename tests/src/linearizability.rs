//! An outside judge of lock histories: [`stateright`]'s linearizability tester
//! ([`LinearizabilityTester`]) over two sequential models of what lock-core promises.
//!
//! A history is what clients saw: each operation invoked at one time and answered at a later
//! one (or never: its effect is unknown), on one clock, in microseconds. The tester searches
//! for an order of the operations that respects real time (an operation answered before
//! another was invoked comes first) and that the model accepts step by step. Histories are
//! kept per key (one lock name, one resource), so each search stays small.
//!
//! - [`MutexHistory`] and its model [`LeaseMutex`]: one holder at a time; a grant's fencing
//!   token is above every earlier grant's; a holder's hold ends when its owner releases it
//!   (a release answers whether it was still held) or, no sooner than the holder last knew
//!   itself within its lease, by expiry; a try or wait that found it busy found a holder
//!   (judged only where every acquisition is in the history).
//! - [`RegisterHistory`] and its model [`FencedRegister`]: what `lock_core::fenced::set`
//!   promises — a write whose token is below the stored one is refused and names it; an
//!   equal token is accepted ([`EqualToken::Accepted`]) or, for a store that also checks the
//!   writer, only from the writer that stored it ([`EqualToken::SameWriter`]); a read
//!   returns the token of the last write.
//!
//! The models are written for the search as much as for the reader: grants are taken in the
//! order of their tokens (a history whose tokens do not grow in real time has no such order,
//! so nothing is lost), and a hold whose release answered "still held" cannot be taken over
//! (its release would then have found another holder). Both are what the models say anyway;
//! stated up front they let the tester reject a wrong branch at once instead of deep down.
//!
//! The tester's search is exhaustive; a budget of model steps ([`Budget`]) bounds it, and a
//! search that runs out says so ([`Verdict::Undecided`]) rather than passing.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};

/// How many model steps one key's search may take before it gives up (a linearizable history
/// of a few hundred operations takes about as many steps as it has operations).
pub const DEFAULT_BUDGET: u64 = 2_000_000;

/// A shared count of model steps: every clone of a model counts into the same one.
#[derive(Debug, Clone)]
pub struct Budget {
    left: Arc<AtomicU64>,
    limit: u64,
}

impl Budget {
    /// A budget of `steps` model steps.
    pub fn new(steps: u64) -> Self {
        Budget {
            left: Arc::new(AtomicU64::new(steps)),
            limit: steps,
        }
    }

    /// Takes one step; false once the budget is spent.
    fn step(&self) -> bool {
        self.left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Steps taken so far.
    pub fn used(&self) -> u64 {
        self.limit - self.left.load(Ordering::Relaxed)
    }

    fn spent(&self) -> bool {
        self.left.load(Ordering::Relaxed) == 0
    }
}

/// What the tester found for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Some order of the operations respects real time and the model.
    Linearizable,
    /// None does: the history breaks the model.
    NotLinearizable,
    /// The search ran out of its budget before deciding.
    Undecided,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Linearizable => "linearizable",
            Verdict::NotLinearizable => "NOT LINEARIZABLE",
            Verdict::Undecided => "UNDECIDED (search budget spent)",
        })
    }
}

/// The judgement of one key's history.
#[derive(Debug, Clone)]
pub struct KeyVerdict {
    /// The key (a lock name, a resource).
    pub key: String,
    /// Which model judged it: `"lease mutex"` or `"fenced register"`.
    pub model: &'static str,
    /// Operations in the history (those with an unknown outcome included).
    pub ops: usize,
    /// Of them, operations whose outcome is unknown (never answered, or an error).
    pub unknown: usize,
    /// The verdict.
    pub verdict: Verdict,
    /// Model steps the search took.
    pub steps: u64,
    /// The first and last time in the history.
    pub span: (i64, i64),
}

impl KeyVerdict {
    /// Whether the history was found linearizable.
    pub fn ok(&self) -> bool {
        self.verdict == Verdict::Linearizable
    }
}

impl fmt::Display for KeyVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {} ops ({} unknown): {} in {} steps",
            self.key, self.model, self.ops, self.unknown, self.verdict, self.steps
        )
    }
}

/// One operation for the tester: when it was invoked and answered (None: never, or its
/// outcome is unknown), what it was and what it answered.
#[derive(Debug, Clone)]
struct Call<Op, Ret> {
    invoked: i64,
    returned: Option<(i64, Ret)>,
    op: Op,
}

/// Feeds `calls` to stateright's tester in real-time order and asks for a linearization.
///
/// Calls are laid on lanes (the tester's threads): a call goes on the lowest lane whose last
/// call was answered strictly before it was invoked, so one lane's calls never overlap and
/// program order on a lane is real-time order. Invocations and answers are fed sorted by time,
/// an invocation before an answer of the same microsecond (such a pair counts as concurrent).
fn linearizable<S>(spec: S, budget: &Budget, calls: Vec<Call<S::Op, S::Ret>>) -> Verdict
where
    S: SequentialSpec + Clone,
    S::Op: Clone + fmt::Debug,
    S::Ret: Clone + fmt::Debug + PartialEq,
{
    let mut calls = calls;
    calls.sort_by_key(|c| c.invoked);
    let mut lane_free_from: Vec<i64> = Vec::new();
    // (time, 0 = invoke / 1 = return, call index, lane)
    let mut events: Vec<(i64, u8, usize, u32)> = Vec::with_capacity(calls.len() * 2);
    for (k, call) in calls.iter().enumerate() {
        let lane = match lane_free_from.iter().position(|&t| t < call.invoked) {
            Some(lane) => lane,
            None => {
                lane_free_from.push(i64::MIN);
                lane_free_from.len() - 1
            }
        };
        lane_free_from[lane] = call.returned.as_ref().map_or(i64::MAX, |(t, _)| *t);
        let lane = u32::try_from(lane).unwrap_or(u32::MAX);
        events.push((call.invoked, 0, k, lane));
        if let Some((t, _)) = &call.returned {
            events.push((*t, 1, k, lane));
        }
    }
    events.sort_by_key(|&(t, kind, k, _)| (t, kind, k));
    let mut tester = LinearizabilityTester::new(spec);
    for (_, kind, k, lane) in events {
        let call = &calls[k];
        let fed = if kind == 0 {
            tester.on_invoke(lane, call.op.clone()).map(|_| ())
        } else {
            let ret = call.returned.as_ref().map(|(_, r)| r.clone());
            match ret {
                Some(ret) => tester.on_return(lane, ret).map(|_| ()),
                None => Ok(()),
            }
        };
        // Lanes never overlap, so the tester never refuses the history's shape.
        if let Err(e) = fed {
            panic!("a malformed history for the tester (a bug in the judge): {e}");
        }
    }
    if tester.serialized_history().is_some() {
        Verdict::Linearizable
    } else if budget.spent() {
        Verdict::Undecided
    } else {
        Verdict::NotLinearizable
    }
}

/// Runs `f` on a thread with a large stack (the tester's search recurses once per operation)
/// and returns its result.
fn on_big_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .name("linearizability".to_owned())
        .stack_size(256 << 20)
        .spawn(f)
        .expect("a thread for the linearizability search")
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

fn span<T>(items: &[T], times: impl Fn(&T) -> (i64, Option<i64>)) -> (i64, i64) {
    let mut lo = i64::MAX;
    let mut hi = i64::MIN;
    for item in items {
        let (a, b) = times(item);
        lo = lo.min(a);
        hi = hi.max(b.unwrap_or(a));
    }
    if items.is_empty() { (0, 0) } else { (lo, hi) }
}

// ---------------------------------------------------------------------------------------------
// The lease mutex

/// Who asked: one value per hold (an acquisition and the release of what it got), unique
/// within a key's history.
pub type Owner = u64;

/// What an acquisition answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// Granted with this fencing token. `believed_until`: the latest time the holder knew
    /// the lock its own (the request's send time plus the lease, as the client tracks it, or
    /// `remaining()` read at some moment): the server keeps the lock at least until then
    /// unless its owner releases it.
    Granted {
        /// The fencing token.
        token: u64,
        /// When the hold may first have expired.
        believed_until: i64,
    },
    /// Busy: a try that found it held, or a wait that ran out.
    Busy,
    /// An error, or no answer: it may have taken the lock (and given it back later).
    Unknown,
}

/// What a release answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// It was still this owner's until the release (`unlock()` answered `true`).
    Held,
    /// It was not (`false`): expired or taken over before the release. Only where the
    /// release was sent once: one whose reply was lost is sent again, and the repeat answers
    /// `false` when another holder took the lock its first sending freed (give such a
    /// release as [`Released::Unknown`]).
    NotHeld,
    /// An error, or no answer: it may have released the lock at any time after it was sent.
    Unknown,
}

#[derive(Debug, Clone)]
struct Hold {
    invoked: i64,
    returned: i64,
    token: u64,
    believed_until: i64,
    release: Option<(i64, Option<i64>, Released)>,
}

/// The history of one lock name, as its clients saw it: acquisitions (granted, busy, unknown)
/// and releases. Check it with [`MutexHistory::check`].
#[derive(Debug, Clone)]
pub struct MutexHistory {
    key: String,
    judge_busy: bool,
    holds: BTreeMap<Owner, Hold>,
    busy: Vec<(i64, i64)>,
    unknown: Vec<(Owner, i64)>,
}

impl MutexHistory {
    /// An empty history of lock `key`. With `judge_busy`, a busy answer must have found a
    /// holder (or an acquisition of unknown outcome that may have taken the lock); set it
    /// only when every acquisition is in the history (not when a process that was killed
    /// may have taken the lock without a trace).
    pub fn new(key: impl Into<String>, judge_busy: bool) -> Self {
        MutexHistory {
            key: key.into(),
            judge_busy,
            holds: BTreeMap::new(),
            busy: Vec::new(),
            unknown: Vec::new(),
        }
    }

    /// The lock's name.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Records an acquisition by `owner`, invoked at `invoked` and answered at `returned`.
    /// Owners are unique per history; an acquisition of unknown outcome may give `returned`
    /// as anything (it is not used).
    pub fn acquire(&mut self, owner: Owner, invoked: i64, returned: i64, answer: Acquired) {
        match answer {
            Acquired::Granted {
                token,
                believed_until,
            } => {
                let previous = self.holds.insert(
                    owner,
                    Hold {
                        invoked,
                        returned,
                        token,
                        believed_until,
                        release: None,
                    },
                );
                assert!(
                    previous.is_none(),
                    "owner {owner} granted twice in {}",
                    self.key
                );
            }
            Acquired::Busy if self.judge_busy => self.busy.push((invoked, returned)),
            Acquired::Busy => {}
            // Without busy answers to judge, an acquisition that may have taken the lock
            // changes nothing the model checks (it holds no token anyone saw, and any grant
            // may take the lock from it).
            Acquired::Unknown if self.judge_busy => self.unknown.push((owner, invoked)),
            Acquired::Unknown => {}
        }
    }

    /// Records the release of `owner`'s hold, sent at `invoked` and answered at `returned`
    /// (None when no answer came).
    pub fn release(&mut self, owner: Owner, invoked: i64, returned: Option<i64>, answer: Released) {
        let hold = self
            .holds
            .get_mut(&owner)
            .unwrap_or_else(|| panic!("a release of owner {owner}, never granted"));
        hold.release = Some((invoked, returned, answer));
    }

    /// Operations recorded.
    pub fn len(&self) -> usize {
        self.holds.len()
            + self.holds.values().filter(|h| h.release.is_some()).count()
            + self.busy.len()
            + self.unknown.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn calls(&self) -> Vec<Call<MutexOp, MutexAnswer>> {
        let mut by_token: Vec<(&Owner, &Hold)> = self.holds.iter().collect();
        by_token.sort_by_key(|(_, h)| (h.token, h.returned));
        let mut calls = Vec::with_capacity(self.len());
        for (rank, (owner, hold)) in by_token.into_iter().enumerate() {
            // A release whose answer is unknown may have freed the lock as soon as it was
            // sent; one that answered "held" proves the owner kept it until then.
            let (gone_from, released_by_owner) = match hold.release {
                Some((sent, _, Released::Unknown)) => (hold.believed_until.min(sent), false),
                Some((_, _, Released::Held)) => (hold.believed_until, true),
                _ => (hold.believed_until, false),
            };
            calls.push(Call {
                invoked: hold.invoked,
                returned: Some((hold.returned, MutexAnswer::Granted)),
                op: MutexOp::Grant {
                    owner: *owner,
                    token: hold.token,
                    rank: u32::try_from(rank).unwrap_or(u32::MAX),
                    from: hold.invoked,
                    by: hold.returned,
                    gone_from,
                    released_by_owner,
                },
            });
            if let Some((sent, Some(answered), answer)) = hold.release
                && answer != Released::Unknown
            {
                calls.push(Call {
                    invoked: sent,
                    returned: Some((
                        answered,
                        MutexAnswer::Released {
                            held: answer == Released::Held,
                        },
                    )),
                    op: MutexOp::Release {
                        owner: *owner,
                        from: sent,
                        by: answered,
                    },
                });
            }
        }
        for &(invoked, returned) in &self.busy {
            calls.push(Call {
                invoked,
                returned: Some((returned, MutexAnswer::Busy)),
                op: MutexOp::Busy {
                    from: invoked,
                    by: returned,
                },
            });
        }
        for &(owner, invoked) in &self.unknown {
            calls.push(Call {
                invoked,
                returned: None,
                op: MutexOp::Orphan {
                    owner,
                    from: invoked,
                },
            });
        }
        calls
    }

    /// The part of the history up to the `grants`-th grant (by answer time): those grants,
    /// and the busy answers and releases answered by then (a release answered later is left
    /// out, as if not sent yet).
    fn prefix(&self, grants: usize) -> MutexHistory {
        let mut order: Vec<(&Owner, &Hold)> = self.holds.iter().collect();
        order.sort_by_key(|(_, h)| h.returned);
        let until = order
            .get(grants.saturating_sub(1))
            .map_or(i64::MIN, |(_, h)| h.returned);
        let mut prefix = MutexHistory::new(self.key.clone(), self.judge_busy);
        for (owner, hold) in order.into_iter().take(grants) {
            let mut hold = hold.clone();
            if let Some((sent, answered, _)) = hold.release
                && (sent > until || answered.is_some_and(|t| t > until))
            {
                hold.release = None;
            }
            prefix.holds.insert(*owner, hold);
        }
        prefix.busy = self.busy.iter().filter(|b| b.1 <= until).copied().collect();
        prefix.unknown = self
            .unknown
            .iter()
            .filter(|u| u.1 <= until)
            .copied()
            .collect();
        prefix
    }

    /// Where a history that is not linearizable first fails: the owner of the first grant
    /// (by answer time) such that the history up to it is not linearizable, and when that
    /// grant was answered. None when the whole history is linearizable (or undecided).
    pub fn first_failure(&self, budget: u64) -> Option<(Owner, i64)> {
        if self.check(budget).verdict != Verdict::NotLinearizable {
            return None;
        }
        // Bisect on the number of grants: prefixes of a linearizable prefix are linearizable.
        let (mut good, mut bad) = (0, self.holds.len());
        while bad - good > 1 {
            let mid = (good + bad) / 2;
            if self.prefix(mid).check(budget).verdict == Verdict::NotLinearizable {
                bad = mid;
            } else {
                good = mid;
            }
        }
        let mut order: Vec<(&Owner, &Hold)> = self.holds.iter().collect();
        order.sort_by_key(|(_, h)| h.returned);
        order.get(bad - 1).map(|(o, h)| (**o, h.returned))
    }

    /// Judges the history against [`LeaseMutex`] within `budget` model steps.
    pub fn check(&self, budget: u64) -> KeyVerdict {
        let calls = self.calls();
        let ops = calls.len();
        let unknown = self.unknown.len()
            + self
                .holds
                .values()
                .filter(|h| matches!(h.release, Some((_, _, Released::Unknown)) | None))
                .count();
        let span = span(&calls, |c| (c.invoked, c.returned.as_ref().map(|r| r.0)));
        let budget = Budget::new(budget);
        let spec = LeaseMutex::new(budget.clone());
        let counted = budget.clone();
        let verdict = on_big_stack(move || linearizable(spec, &budget, calls));
        KeyVerdict {
            key: self.key.clone(),
            model: "lease mutex",
            ops,
            unknown,
            verdict,
            steps: counted.used(),
            span,
        }
    }
}

/// An operation of [`LeaseMutex`], with what the model needs of its times: `from` and `by`
/// bound the moment it took effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MutexOp {
    /// A grant to `owner` with `token`; `rank` is the token's place among every grant of the
    /// history. The hold may expire from `gone_from` on, unless `released_by_owner` (its
    /// release answered that it was still held).
    Grant {
        /// The new holder.
        owner: Owner,
        /// Its fencing token.
        token: u64,
        /// Its token's place among the history's grants.
        rank: u32,
        /// When it was invoked.
        from: i64,
        /// When it was answered.
        by: i64,
        /// When the hold may first have ended without its owner's release.
        gone_from: i64,
        /// Whether its owner's release answered "still held".
        released_by_owner: bool,
    },
    /// A try or wait that found the lock busy.
    Busy {
        /// Invoked.
        from: i64,
        /// Answered.
        by: i64,
    },
    /// `owner`'s release.
    Release {
        /// Whose.
        owner: Owner,
        /// Sent.
        from: i64,
        /// Answered.
        by: i64,
    },
    /// An acquisition of unknown outcome: it may have taken a free lock, with a token nobody
    /// saw, for as short a time as any.
    Orphan {
        /// Whose.
        owner: Owner,
        /// Invoked.
        from: i64,
    },
}

/// What an operation of [`LeaseMutex`] answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MutexAnswer {
    /// The lock was granted (the token is in the operation).
    Granted,
    /// It was busy.
    Busy,
    /// The release's answer.
    Released {
        /// Whether it was still the owner's.
        held: bool,
    },
    /// Nothing was seen.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Holder {
    /// None: an acquisition of unknown outcome.
    owner: Option<Owner>,
    gone_from: i64,
    released_by_owner: bool,
}

/// The sequential model of a lock with a lease and fencing tokens.
///
/// State: the holder (if any), the last token granted, and the model's clock — the earliest
/// moment the operations applied so far can have taken effect, in order. Each operation takes
/// effect at one moment between its invocation and its answer, never before an earlier one's;
/// the model takes the earliest moment that works.
///
/// - A grant needs a free lock, or a holder that may have expired by then (its hold ends no
///   sooner than it believed; not at all before its release if that release answered "still
///   held"), and a token above every earlier grant's.
/// - A release answering "held" needs its owner to be the holder, and frees the lock. One
///   answering "not held" needs another holder, or its own hold expired by then.
/// - A busy answer needs a holder.
#[derive(Debug, Clone)]
pub struct LeaseMutex {
    holder: Option<Holder>,
    last_token: Option<u64>,
    next_rank: u32,
    clock: i64,
    budget: Budget,
}

impl LeaseMutex {
    /// A free lock that has granted nothing yet, counting its steps in `budget`.
    pub fn new(budget: Budget) -> Self {
        LeaseMutex {
            holder: None,
            last_token: None,
            next_rank: 0,
            clock: i64::MIN,
            budget,
        }
    }

    /// The moment an operation invoked at `from` and answered at `by` takes effect, no
    /// sooner than `not_before`, if there is one.
    fn at(&self, from: i64, by: i64, not_before: i64) -> Option<i64> {
        let at = self.clock.max(from).max(not_before);
        (at <= by).then_some(at)
    }

    fn step(&mut self, op: &MutexOp, ret: &MutexAnswer) -> Option<i64> {
        match (op, ret) {
            (
                MutexOp::Grant {
                    owner,
                    token,
                    rank,
                    from,
                    by,
                    gone_from,
                    released_by_owner,
                },
                MutexAnswer::Granted,
            ) => {
                if *rank != self.next_rank || self.last_token.is_some_and(|t| *token <= t) {
                    return None;
                }
                let not_before = match &self.holder {
                    None | Some(Holder { owner: None, .. }) => i64::MIN,
                    Some(Holder {
                        released_by_owner: true,
                        ..
                    }) => return None,
                    Some(h) => h.gone_from,
                };
                let at = self.at(*from, *by, not_before)?;
                self.holder = Some(Holder {
                    owner: Some(*owner),
                    gone_from: *gone_from,
                    released_by_owner: *released_by_owner,
                });
                self.last_token = Some(*token);
                self.next_rank += 1;
                Some(at)
            }
            (MutexOp::Busy { from, by }, MutexAnswer::Busy) => {
                self.holder.as_ref()?;
                self.at(*from, *by, i64::MIN)
            }
            (MutexOp::Release { owner, from, by }, MutexAnswer::Released { held }) => {
                let mine = self
                    .holder
                    .as_ref()
                    .is_some_and(|h| h.owner == Some(*owner));
                let at = match (mine, held) {
                    (true, true) => self.at(*from, *by, i64::MIN)?,
                    (false, true) => return None,
                    (true, false) => {
                        let holder = self.holder.as_ref()?;
                        if holder.released_by_owner {
                            return None;
                        }
                        self.at(*from, *by, holder.gone_from)?
                    }
                    (false, false) => self.at(*from, *by, i64::MIN)?,
                };
                if mine {
                    self.holder = None;
                }
                Some(at)
            }
            _ => None,
        }
    }
}

impl SequentialSpec for LeaseMutex {
    type Op = MutexOp;
    type Ret = MutexAnswer;

    /// Only acquisitions of unknown outcome are invoked this way (the tester applies an
    /// operation that never answered, or leaves it out): one takes a free lock.
    fn invoke(&mut self, op: &MutexOp) -> MutexAnswer {
        if !self.budget.step() {
            return MutexAnswer::Unknown;
        }
        if let MutexOp::Orphan { from, .. } = op
            && self.holder.is_none()
        {
            self.clock = self.clock.max(*from);
            self.holder = Some(Holder {
                owner: None,
                gone_from: *from,
                released_by_owner: false,
            });
        }
        MutexAnswer::Unknown
    }

    fn is_valid_step(&mut self, op: &MutexOp, ret: &MutexAnswer) -> bool {
        if !self.budget.step() {
            return false;
        }
        match self.step(op, ret) {
            Some(at) => {
                self.clock = at;
                true
            }
            None => false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fenced register

/// Whether a write with the stored token itself is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EqualToken {
    /// From anyone: `lock_core::fenced::set` (the same holder writing again).
    Accepted,
    /// Only from the writer that stored it (lock-chaos's store, which also names the writer).
    SameWriter,
}

/// An operation of [`FencedRegister`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterOp {
    /// A write by `writer` with `token`.
    Write {
        /// The token it carries.
        token: u64,
        /// Who wrote (a hold).
        writer: u64,
    },
    /// A read of the stored token.
    Read,
}

/// What an operation of [`FencedRegister`] answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterAnswer {
    /// The write was stored.
    Written,
    /// The write was refused; the register holds `stored`.
    Refused {
        /// The stored token.
        stored: u64,
    },
    /// The stored token (None: nothing written yet).
    Read(Option<u64>),
    /// Nothing was seen.
    Unknown,
}

/// The sequential model of a resource that refuses writes with a lower token than the one it
/// stored (`lock_core::fenced::set`; lock-chaos's fenced store).
#[derive(Debug, Clone)]
pub struct FencedRegister {
    stored: Option<(u64, u64)>,
    equal: EqualToken,
    budget: Budget,
}

impl FencedRegister {
    /// An empty register with the rule `equal` for equal tokens, counting its steps in
    /// `budget`.
    pub fn new(equal: EqualToken, budget: Budget) -> Self {
        FencedRegister {
            stored: None,
            equal,
            budget,
        }
    }

    fn apply(&mut self, op: &RegisterOp) -> RegisterAnswer {
        match op {
            RegisterOp::Write { token, writer } => match self.stored {
                Some((stored, by))
                    if stored > *token
                        || (stored == *token
                            && self.equal == EqualToken::SameWriter
                            && by != *writer) =>
                {
                    RegisterAnswer::Refused { stored }
                }
                _ => {
                    self.stored = Some((*token, *writer));
                    RegisterAnswer::Written
                }
            },
            RegisterOp::Read => RegisterAnswer::Read(self.stored.map(|(t, _)| t)),
        }
    }
}

impl SequentialSpec for FencedRegister {
    type Op = RegisterOp;
    type Ret = RegisterAnswer;

    fn invoke(&mut self, op: &RegisterOp) -> RegisterAnswer {
        if !self.budget.step() {
            return RegisterAnswer::Unknown;
        }
        self.apply(op)
    }

    fn is_valid_step(&mut self, op: &RegisterOp, ret: &RegisterAnswer) -> bool {
        self.budget.step() && self.apply(op) == *ret
    }
}

/// The history of one fenced resource: writes (and reads) with their answers. Check it with
/// [`RegisterHistory::check`].
#[derive(Debug, Clone)]
pub struct RegisterHistory {
    key: String,
    equal: EqualToken,
    calls: Vec<Call<RegisterOp, RegisterAnswer>>,
    unknown: usize,
}

impl RegisterHistory {
    /// An empty history of the resource `key`, whose equal tokens follow `equal`.
    pub fn new(key: impl Into<String>, equal: EqualToken) -> Self {
        RegisterHistory {
            key: key.into(),
            equal,
            calls: Vec::new(),
            unknown: 0,
        }
    }

    /// The resource's name.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Records a write of `writer` with `token`, invoked at `invoked`, answered at `returned`
    /// with `answer` (None: no answer, its effect unknown).
    pub fn write(
        &mut self,
        writer: u64,
        token: u64,
        invoked: i64,
        answered: Option<(i64, RegisterAnswer)>,
    ) {
        self.unknown += usize::from(answered.is_none());
        self.calls.push(Call {
            invoked,
            returned: answered,
            op: RegisterOp::Write { token, writer },
        });
    }

    /// Records a read, invoked at `invoked`, answered at `returned` with the stored token.
    pub fn read(&mut self, invoked: i64, returned: i64, stored: Option<u64>) {
        self.calls.push(Call {
            invoked,
            returned: Some((returned, RegisterAnswer::Read(stored))),
            op: RegisterOp::Read,
        });
    }

    /// Operations recorded.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Judges the history against [`FencedRegister`] within `budget` model steps.
    pub fn check(&self, budget: u64) -> KeyVerdict {
        let calls = self.calls.clone();
        let span = span(&calls, |c| (c.invoked, c.returned.as_ref().map(|r| r.0)));
        let budget = Budget::new(budget);
        let spec = FencedRegister::new(self.equal, budget.clone());
        let counted = budget.clone();
        let verdict = on_big_stack(move || linearizable(spec, &budget, calls));
        KeyVerdict {
            key: self.key.clone(),
            model: "fenced register",
            ops: self.calls.len(),
            unknown: self.unknown,
            verdict,
            steps: counted.used(),
            span,
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each model accepting good histories and catching broken ones (synthetic histories; the
    //! chaos checker's tests feed the same broken histories to both judges).

    use super::*;

    const B: u64 = DEFAULT_BUDGET;

    /// The verdict on a history of lock `m` (busy answers judged) that `build` records.
    fn mutex(build: impl FnOnce(&mut MutexHistory)) -> Verdict {
        let mut h = MutexHistory::new("m", true);
        build(&mut h);
        h.check(B).verdict
    }

    fn granted(token: u64, believed_until: i64) -> Acquired {
        Acquired::Granted {
            token,
            believed_until,
        }
    }

    #[test]
    fn one_holder_after_another_is_linearizable() {
        let mut h = MutexHistory::new("m", true);
        h.acquire(1, 0, 10, granted(5, 1000));
        h.acquire(2, 5, 40, granted(6, 1000));
        h.acquire(3, 12, 14, Acquired::Busy);
        h.release(1, 20, Some(25), Released::Held);
        h.release(2, 50, Some(60), Released::Held);
        let v = h.check(B);
        assert_eq!(v.verdict, Verdict::Linearizable, "{v}");
        assert_eq!(v.ops, 5);
    }

    #[test]
    fn a_release_without_the_owner_check_is_caught() {
        // 1 holds; 2's release (no owner check) deletes 1's lock; 3 takes it while 1 still
        // holds and is told so by its own release.
        let mut h = MutexHistory::new("m", true);
        h.acquire(1, 0, 10, granted(5, 10_000));
        h.acquire(2, 1, 2, granted(4, 10_000)); // never legitimately granted
        h.release(2, 20, Some(21), Released::Held);
        h.acquire(3, 22, 30, granted(6, 10_000));
        h.release(1, 40, Some(41), Released::Held);
        assert_eq!(h.check(B).verdict, Verdict::NotLinearizable);
        // Without the forged grant: 3 overlaps 1, whose release says it was still held.
        let mut h = MutexHistory::new("m", true);
        h.acquire(1, 0, 10, granted(5, 10_000));
        h.acquire(3, 22, 30, granted(6, 10_000));
        h.release(1, 40, Some(41), Released::Held);
        assert_eq!(h.check(B).verdict, Verdict::NotLinearizable);
    }

    #[test]
    fn a_token_that_repeats_or_goes_back_is_caught() {
        for second in [5, 4] {
            let verdict = mutex(|h| {
                h.acquire(1, 0, 10, granted(5, 1000));
                h.release(1, 20, Some(25), Released::Held);
                h.acquire(2, 30, 40, granted(second, 1000));
            });
            assert_eq!(verdict, Verdict::NotLinearizable, "token 5 then {second}");
        }
    }

    #[test]
    fn a_grant_before_the_holder_could_have_expired_is_caught_and_after_is_fine() {
        // The first holder believed itself held until 100: a grant answered at 90 cannot be
        // explained by an expiry, one answered at 120 can, unless the first holder's release
        // found the lock still its own.
        for (answered, release, expected) in [
            (90, Released::NotHeld, Verdict::NotLinearizable),
            (120, Released::NotHeld, Verdict::Linearizable),
            (120, Released::Held, Verdict::NotLinearizable),
        ] {
            let verdict = mutex(|h| {
                h.acquire(1, 0, 10, granted(5, 100));
                h.acquire(2, 50, answered, granted(6, 1000));
                h.release(1, 200, Some(210), release);
            });
            assert_eq!(verdict, expected, "answered at {answered}, {release:?}");
        }
    }

    #[test]
    fn an_unknown_release_may_have_freed_the_lock_when_it_was_sent() {
        let mut h = MutexHistory::new("m", true);
        h.acquire(1, 0, 10, granted(5, 10_000));
        h.release(1, 20, None, Released::Unknown);
        h.acquire(2, 30, 40, granted(6, 10_000));
        assert_eq!(h.check(B).verdict, Verdict::Linearizable);
        // A grant before the release was even sent is still two holders.
        let mut h = MutexHistory::new("m", true);
        h.acquire(1, 0, 10, granted(5, 10_000));
        h.acquire(2, 12, 15, granted(6, 10_000));
        h.release(1, 20, None, Released::Unknown);
        assert_eq!(h.check(B).verdict, Verdict::NotLinearizable);
    }

    #[test]
    fn busy_needs_a_holder_when_judged() {
        let mut h = MutexHistory::new("m", true);
        h.acquire(1, 0, 10, granted(5, 1000));
        h.release(1, 20, Some(25), Released::Held);
        h.acquire(2, 30, 40, Acquired::Busy);
        assert_eq!(h.check(B).verdict, Verdict::NotLinearizable);
        // An acquisition whose outcome is unknown may be what it found.
        h.acquire(3, 26, 0, Acquired::Unknown);
        assert_eq!(h.check(B).verdict, Verdict::Linearizable);
        // Not judged: busy answers are left out.
        let mut h = MutexHistory::new("m", false);
        h.acquire(1, 0, 10, granted(5, 1000));
        h.release(1, 20, Some(25), Released::Held);
        h.acquire(2, 30, 40, Acquired::Busy);
        assert_eq!(h.check(B).verdict, Verdict::Linearizable);
    }

    #[test]
    fn the_register_refuses_lower_tokens_and_names_the_stored_one() {
        let mut h = RegisterHistory::new("r", EqualToken::Accepted);
        h.write(1, 5, 0, Some((10, RegisterAnswer::Written)));
        h.write(1, 5, 11, Some((12, RegisterAnswer::Written)));
        h.write(2, 7, 20, Some((30, RegisterAnswer::Written)));
        h.write(1, 5, 25, Some((40, RegisterAnswer::Refused { stored: 7 })));
        h.read(41, 42, Some(7));
        assert_eq!(h.check(B).verdict, Verdict::Linearizable);
        // A store that let a lower token through.
        let mut h = RegisterHistory::new("r", EqualToken::Accepted);
        h.write(2, 7, 0, Some((10, RegisterAnswer::Written)));
        h.write(1, 5, 20, Some((30, RegisterAnswer::Written)));
        assert_eq!(h.check(B).verdict, Verdict::NotLinearizable);
        // A read of a value overwritten before it began.
        let mut h = RegisterHistory::new("r", EqualToken::Accepted);
        h.write(1, 5, 0, Some((10, RegisterAnswer::Written)));
        h.write(2, 7, 20, Some((30, RegisterAnswer::Written)));
        h.read(31, 32, Some(5));
        assert_eq!(h.check(B).verdict, Verdict::NotLinearizable);
    }

    #[test]
    fn an_equal_token_from_another_writer_is_refused_by_a_same_writer_store() {
        let mut h = RegisterHistory::new("r", EqualToken::SameWriter);
        h.write(1, 5, 0, Some((10, RegisterAnswer::Written)));
        h.write(1, 5, 11, Some((12, RegisterAnswer::Written)));
        h.write(2, 5, 20, Some((30, RegisterAnswer::Refused { stored: 5 })));
        assert_eq!(h.check(B).verdict, Verdict::Linearizable);
        // A store that took it.
        let mut h = RegisterHistory::new("r", EqualToken::SameWriter);
        h.write(1, 5, 0, Some((10, RegisterAnswer::Written)));
        h.write(2, 5, 20, Some((30, RegisterAnswer::Written)));
        assert_eq!(h.check(B).verdict, Verdict::NotLinearizable);
    }

    #[test]
    fn a_write_with_no_answer_may_or_may_not_have_happened() {
        let mut h = RegisterHistory::new("r", EqualToken::Accepted);
        h.write(1, 9, 0, None);
        h.write(2, 7, 20, Some((30, RegisterAnswer::Refused { stored: 9 })));
        assert_eq!(h.check(B).verdict, Verdict::Linearizable);
        let mut h = RegisterHistory::new("r", EqualToken::Accepted);
        h.write(1, 9, 0, None);
        h.write(2, 7, 20, Some((30, RegisterAnswer::Written)));
        assert_eq!(h.check(B).verdict, Verdict::Linearizable);
    }

    #[test]
    fn a_spent_budget_is_undecided_not_a_pass() {
        let mut h = MutexHistory::new("m", true);
        for k in 0..20 {
            h.acquire(
                k,
                k as i64 * 100,
                k as i64 * 100 + 10,
                granted(k + 1, 100_000),
            );
            h.release(
                k,
                k as i64 * 100 + 20,
                Some(k as i64 * 100 + 30),
                Released::Held,
            );
        }
        assert_eq!(h.check(B).verdict, Verdict::Linearizable);
        assert_eq!(h.check(5).verdict, Verdict::Undecided);
    }
}
