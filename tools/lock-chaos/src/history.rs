//! The history of a run: every worker event, every fault, every worker process's life, and
//! the coordinator's own checks of the servers, as typed records.

use std::collections::HashMap;

use serde_json::Value;

use super::event::{i, oi, ou, s};
use super::nemesis::FaultKind;
use super::store::Write;
use super::topology::Live;

/// One lock of a section.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub(crate) family: String,
    pub(crate) name: String,
    pub(crate) token: Option<u64>,
}

/// A critical section, as its worker reported it.
#[derive(Debug, Clone)]
pub(crate) struct Sec {
    pub(crate) id: String,
    pub(crate) worker: usize,
    pub(crate) inc: u32,
    /// `direct`, `multi` or `http`.
    pub(crate) via: String,
    /// `excl`, `read`, `write` or `permit`.
    pub(crate) kind: String,
    /// Permits held.
    pub(crate) n: u32,
    pub(crate) parts: Vec<Part>,
    /// When the acquisition had returned.
    pub(crate) start: i64,
    /// The believed end of the lease at the start.
    pub(crate) acq_valid: i64,
    pub(crate) req: String,
    /// When the section ended (before its release was sent).
    pub(crate) end: Option<i64>,
    /// The latest moment the holder believed the lock its own.
    pub(crate) valid: Option<i64>,
    /// When `lost()` fired.
    pub(crate) lost: Option<i64>,
    pub(crate) writes: Vec<Write>,
    /// The release: sent, answered, what it said (`held`, `not-held`, `error:...`, `hung`).
    pub(crate) rel: Option<(i64, i64, String)>,
}

/// An acquisition by a task.
#[derive(Debug, Clone)]
pub(crate) struct Op {
    pub(crate) worker: usize,
    pub(crate) inc: u32,
    pub(crate) req: String,
    pub(crate) prim: String,
    pub(crate) via: String,
    pub(crate) name: String,
    pub(crate) wait_ms: Option<u64>,
    pub(crate) fixed: bool,
    pub(crate) t0: i64,
    pub(crate) t1: i64,
    pub(crate) out: String,
    pub(crate) err: Option<String>,
    pub(crate) bound_ms: u64,
}

/// A request through the tower layer, as its client saw it.
#[derive(Debug, Clone)]
pub(crate) struct HttpOp {
    pub(crate) worker: usize,
    pub(crate) inc: u32,
    pub(crate) req: String,
    pub(crate) route: String,
    pub(crate) method: String,
    pub(crate) key: i64,
    /// The worker that served it.
    pub(crate) peer: usize,
    pub(crate) t0: i64,
    pub(crate) t1: i64,
    pub(crate) status: i64,
    pub(crate) out: String,
    pub(crate) bound_ms: u64,
}

/// A guarded take of one unit from a lock's counter, by a section holding that lock.
#[derive(Debug, Clone)]
pub(crate) struct Take {
    pub(crate) id: String,
    pub(crate) sec: String,
    pub(crate) name: String,
    pub(crate) token: Option<u64>,
    /// Sent.
    pub(crate) t0: i64,
    /// Answered (none: the worker died first).
    pub(crate) t1: Option<i64>,
    /// `applied`, `not_enough`, `not_held`, or `unknown` (an error or no answer: it may have
    /// been applied); none when no answer was reported.
    pub(crate) out: Option<String>,
    /// What an applied take left.
    pub(crate) left: Option<i64>,
}

impl Take {
    /// Whether the take may have been applied without the history knowing.
    pub(crate) fn unknown(&self) -> bool {
        matches!(self.out.as_deref(), None | Some("unknown"))
    }
}

/// A fault the nemesis injected.
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    pub(crate) target: Option<usize>,
    pub(crate) t0: i64,
    pub(crate) t1: i64,
    /// False when it could not be injected (its target was not running, the harness failed).
    pub(crate) done: bool,
    pub(crate) detail: String,
}

/// One worker process.
#[derive(Debug, Clone)]
pub(crate) struct Life {
    pub(crate) worker: usize,
    pub(crate) inc: u32,
    pub(crate) pid: u32,
    pub(crate) started: i64,
    pub(crate) hello: Option<i64>,
    pub(crate) client_id: Option<String>,
    pub(crate) killed: Option<i64>,
    pub(crate) exited: Option<i64>,
    pub(crate) drained: Option<i64>,
    pub(crate) bye: Option<i64>,
    /// `SIGSTOP` .. `SIGCONT` windows.
    pub(crate) stops: Vec<(i64, Option<i64>)>,
    /// Panics, fatal errors and notes the worker reported.
    pub(crate) notes: Vec<String>,
}

/// The check, after a worker was killed, that nothing it held outlived its lease.
#[derive(Debug, Clone)]
pub(crate) struct PostKill {
    pub(crate) worker: usize,
    pub(crate) inc: u32,
    pub(crate) killed: i64,
    pub(crate) checked: i64,
    pub(crate) client_id: Option<String>,
    pub(crate) leftovers: Vec<Live>,
    pub(crate) error: Option<String>,
}

/// Everything that happened.
#[derive(Debug, Default)]
pub(crate) struct History {
    pub(crate) secs: Vec<Sec>,
    pub(crate) index: HashMap<String, usize>,
    pub(crate) ops: Vec<Op>,
    pub(crate) http: Vec<HttpOp>,
    pub(crate) faults: Vec<Fault>,
    pub(crate) lives: Vec<Life>,
    pub(crate) post_kills: Vec<PostKill>,
    /// Guarded takes from the locks' counters, in the order they were sent.
    pub(crate) takes: Vec<Take>,
    /// Each counter's units left after the run, read by the coordinator (a standalone run):
    /// (lock name, what it held, or why it could not be read).
    pub(crate) stock_left: Vec<(String, Result<i64, String>)>,
    /// Problems the coordinator itself saw (a worker that did not stop, a crash, locks left
    /// after the run): the kind of check, and what.
    pub(crate) problems: Vec<(&'static str, String)>,
    /// Every event line, when the run keeps them.
    pub(crate) raw: Option<Vec<String>>,
}

impl History {
    pub(crate) fn life_mut(&mut self, worker: usize, inc: u32) -> Option<&mut Life> {
        self.lives
            .iter_mut()
            .rev()
            .find(|l| l.worker == worker && l.inc == inc)
    }

    pub(crate) fn life(&self, worker: usize, inc: u32) -> Option<&Life> {
        self.lives
            .iter()
            .rev()
            .find(|l| l.worker == worker && l.inc == inc)
    }

    pub(crate) fn sec(&self, id: &str) -> Option<&Sec> {
        self.index.get(id).map(|&k| &self.secs[k])
    }

    /// Records one event of worker `worker`, incarnation `inc`.
    pub(crate) fn apply(&mut self, worker: usize, inc: u32, v: &Value, json: &str) {
        if let Some(raw) = &mut self.raw {
            raw.push(format!("{{\"w\":{worker},\"inc\":{inc},\"e\":{json}}}"));
        }
        match s(v, "ev") {
            "acq" => self.acquired(worker, inc, v),
            "end" => {
                if let Some(&k) = self.index.get(s(v, "sec")) {
                    let sec = &mut self.secs[k];
                    sec.end = oi(v, "t");
                    sec.valid = oi(v, "valid");
                    sec.lost = oi(v, "lost");
                    sec.writes = v
                        .get("writes")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Write::from_json).collect())
                        .unwrap_or_default();
                }
            }
            "rel" => {
                if let Some(&k) = self.index.get(s(v, "sec")) {
                    self.secs[k].rel = Some((i(v, "t0"), i(v, "t1"), s(v, "res").to_owned()));
                }
            }
            "take" => self.takes.push(Take {
                id: s(v, "take").to_owned(),
                sec: s(v, "sec").to_owned(),
                name: s(v, "name").to_owned(),
                token: ou(v, "token"),
                t0: i(v, "t0"),
                t1: None,
                out: None,
                left: None,
            }),
            "took" => {
                let id = s(v, "take");
                if let Some(take) = self.takes.iter_mut().rev().find(|t| t.id == id) {
                    take.t1 = oi(v, "t1");
                    take.out = Some(s(v, "out").to_owned());
                    take.left = oi(v, "left");
                }
            }
            "op" => self.ops.push(op(worker, inc, v)),
            "http" => self.http.push(http_op(worker, inc, v)),
            "hello" => {
                if let Some(life) = self.life_mut(worker, inc) {
                    life.hello = Some(super::event::now_us());
                }
            }
            "drained" => {
                if let Some(life) = self.life_mut(worker, inc) {
                    life.drained = oi(v, "t");
                }
            }
            "bye" => {
                if let Some(life) = self.life_mut(worker, inc) {
                    life.bye = oi(v, "t");
                }
            }
            "panic" | "fatal" | "note" => {
                let note = format!("{}: {}", s(v, "ev"), s(v, "msg"));
                if let Some(life) = self.life_mut(worker, inc) {
                    life.notes.push(note);
                }
            }
            _ => {}
        }
    }

    /// An `acq` event: a critical section begins.
    fn acquired(&mut self, worker: usize, inc: u32, v: &Value) {
        let parts = v
            .get("parts")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|p| {
                        let p = p.as_array()?;
                        Some(Part {
                            family: p.first()?.as_str()?.to_owned(),
                            name: p.get(1)?.as_str()?.to_owned(),
                            token: p.get(2).and_then(Value::as_u64),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let id = s(v, "sec").to_owned();
        self.index.insert(id.clone(), self.secs.len());
        self.secs.push(Sec {
            id,
            worker,
            inc,
            via: s(v, "via").to_owned(),
            kind: s(v, "kind").to_owned(),
            n: ou(v, "n").unwrap_or(1) as u32,
            parts,
            start: i(v, "t"),
            acq_valid: i(v, "valid"),
            req: s(v, "req").to_owned(),
            end: None,
            valid: None,
            lost: None,
            writes: Vec::new(),
            rel: None,
        });
    }

    /// How long worker `worker` (any incarnation) was stopped within `[t0, t1]`, in µs.
    pub(crate) fn stopped_within(&self, worker: usize, t0: i64, t1: i64, run_end: i64) -> i64 {
        self.lives
            .iter()
            .filter(|l| l.worker == worker)
            .flat_map(|l| l.stops.iter())
            .map(|&(a, b)| {
                let b = b.unwrap_or(run_end);
                (b.min(t1) - a.max(t0)).max(0)
            })
            .sum()
    }
}

/// An `op` event: an acquisition attempt and its outcome.
fn op(worker: usize, inc: u32, v: &Value) -> Op {
    Op {
        worker,
        inc,
        req: s(v, "req").to_owned(),
        prim: s(v, "prim").to_owned(),
        via: s(v, "via").to_owned(),
        name: s(v, "name").to_owned(),
        wait_ms: ou(v, "wait"),
        fixed: v.get("fixed").and_then(Value::as_bool).unwrap_or(false),
        t0: i(v, "t0"),
        t1: i(v, "t1"),
        out: s(v, "out").to_owned(),
        err: v.get("err").and_then(Value::as_str).map(str::to_owned),
        bound_ms: ou(v, "bound").unwrap_or(0),
    }
}

/// An `http` event: a request through the tower layer.
fn http_op(worker: usize, inc: u32, v: &Value) -> HttpOp {
    HttpOp {
        worker,
        inc,
        req: s(v, "req").to_owned(),
        route: s(v, "route").to_owned(),
        method: s(v, "method").to_owned(),
        key: i(v, "key"),
        peer: ou(v, "peer").unwrap_or(0) as usize,
        t0: i(v, "t0"),
        t1: i(v, "t1"),
        status: i(v, "status"),
        out: s(v, "out").to_owned(),
        bound_ms: ou(v, "bound").unwrap_or(0),
    }
}
