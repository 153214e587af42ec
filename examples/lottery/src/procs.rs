//! Instances as child processes whose stdout lines arrive as events: what the demo and the
//! multi-process tests drive. Every child is killed (`SIGKILL`, which also ends a stopped
//! one) and reaped when [`Instances`] drops, so an error or a failed assertion leaves no
//! process behind.

use std::io::{self, BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use crate::line::Line;

/// One line from one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Which instance (the index [`Instances::spawn`] returned).
    pub instance: usize,
    /// The line; `EOF` (no fields) when the instance's stdout closed.
    pub line: Line,
}

/// Child processes, killed on drop, and the events of their stdout.
#[derive(Debug)]
pub struct Instances {
    children: Vec<Option<Child>>,
    names: Vec<String>,
    sender: Sender<Event>,
    events: Receiver<Event>,
    history: Vec<Event>,
}

impl Default for Instances {
    fn default() -> Self {
        Self::new()
    }
}

impl Instances {
    /// No instances yet.
    pub fn new() -> Instances {
        let (sender, events) = mpsc::channel();
        Instances {
            children: Vec::new(),
            names: Vec::new(),
            sender,
            events,
            history: Vec::new(),
        }
    }

    /// Starts `command` (its stdout is read line by line; stdin is closed; stderr is
    /// inherited) as the instance `name`; returns its index.
    pub fn spawn(&mut self, name: &str, mut command: Command) -> io::Result<usize> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let index = self.children.len();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("the child has no stdout"))?;
        let sender = self.sender.clone();
        thread::Builder::new()
            .name(format!("lines-{name}"))
            .spawn(move || {
                for text in BufReader::new(stdout).lines() {
                    let Ok(text) = text else { break };
                    if let Some(line) = Line::parse(&text) {
                        // The receiver is gone only when the instances are: stop reading.
                        if sender
                            .send(Event {
                                instance: index,
                                line,
                            })
                            .is_err()
                        {
                            return;
                        }
                    }
                }
                let _ = sender.send(Event {
                    instance: index,
                    line: Line {
                        kind: "EOF".to_owned(),
                        fields: Default::default(),
                    },
                });
            })?;
        self.children.push(Some(child));
        self.names.push(name.to_owned());
        Ok(index)
    }

    /// How many instances were spawned.
    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// Whether none was spawned.
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// The name instance `i` was spawned with.
    pub fn name(&self, i: usize) -> &str {
        self.names.get(i).map_or("?", String::as_str)
    }

    /// The pid of instance `i`, while it has not been killed by [`kill`](Self::kill).
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.children.get(i)?.as_ref().map(Child::id)
    }

    /// Sends a signal (`"-STOP"`, `"-CONT"`, ...) to instance `i` with the `kill` command.
    pub fn signal(&self, i: usize, signal: &str) -> io::Result<()> {
        let pid = self
            .pid(i)
            .ok_or_else(|| io::Error::other(format!("instance {i} is not running")))?;
        lock_tests::send_signal(pid, signal)
    }

    /// Kills instance `i` with `SIGKILL` and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.children.get_mut(i).and_then(Option::take) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `timeout` for instance `i` to exit by itself.
    pub fn wait_exit(&mut self, i: usize, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let child = self.children.get_mut(i)?.as_mut()?;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                _ => return None,
            }
        }
    }

    /// The next event, waiting up to `timeout`; `None` when none came.
    pub fn next(&mut self, timeout: Duration) -> Option<Event> {
        match self.events.recv_timeout(timeout) {
            Ok(event) => {
                self.history.push(event.clone());
                Some(event)
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Waits up to `timeout` for an event that `wanted` accepts (earlier events are kept in
    /// the [`history`](Self::history)); `None` if none came in time.
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        mut wanted: impl FnMut(&Event) -> bool,
    ) -> Option<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let event = self.next(left)?;
            if wanted(&event) {
                return Some(event);
            }
        }
    }

    /// Waits up to `timeout` until every instance's stdout has closed; returns whether they
    /// all did.
    pub fn wait_all_closed(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut open = self
            .len()
            .saturating_sub(self.history.iter().filter(|e| e.line.kind == "EOF").count());
        while open > 0 {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            match self.next(left) {
                Some(event) if event.line.kind == "EOF" => open -= 1,
                Some(_) => {}
                None => return false,
            }
        }
        true
    }

    /// Every event received so far, in the order received.
    pub fn history(&self) -> &[Event] {
        &self.history
    }
}

impl Drop for Instances {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}
