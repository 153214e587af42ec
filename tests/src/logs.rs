//! `tracing` events captured in a test binary: [`Captured`], an event with its fields, and
//! [`everything`], a process-wide collector for suites whose code emits on the worker threads
//! of multi-threaded runtimes (a test picks its own events by a field value unique to it).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, OnceLock, PoisonError};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// One captured event: its level, target and fields (the message is the `message` field).
#[derive(Debug, Clone)]
pub struct Captured {
    /// The event's level.
    pub level: Level,
    /// The event's target (its module path, unless set).
    pub target: String,
    /// Its fields, each as `Debug` prints it (strings as they are).
    pub fields: BTreeMap<String, String>,
}

impl Captured {
    /// The event, read.
    pub fn of(event: &Event<'_>) -> Self {
        let mut fields = Fields(BTreeMap::new());
        event.record(&mut fields);
        Captured {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            fields: fields.0,
        }
    }

    /// The value of field `name`, if the event has it.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// Every event of this process at `info` (or the level given to [`everything_at`]) or above
/// whose target starts with a prefix given to [`everything`].
#[derive(Debug)]
pub struct Everything {
    targets: &'static [&'static str],
    events: Mutex<Vec<Captured>>,
}

impl Everything {
    /// The events captured so far that `pick` selects.
    pub fn picked(&self, pick: impl Fn(&Captured) -> bool) -> Vec<Captured> {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        events.iter().filter(|e| pick(e)).cloned().collect()
    }
}

struct Collector(&'static Everything);

impl<S: Subscriber> Layer<S> for Collector {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let target = event.metadata().target();
        if self.0.targets.iter().any(|t| target.starts_with(t)) {
            let captured = Captured::of(event);
            let mut events = self.0.events.lock().unwrap_or_else(PoisonError::into_inner);
            events.push(captured);
        }
    }
}

/// Installs, on the first call, a global subscriber that keeps every `info`, `warn` and
/// `error` event whose target starts with one of `targets` (the first call's), and returns
/// it. It must be the test binary's only global subscriber: the call panics if another one
/// was installed first.
pub fn everything(targets: &'static [&'static str]) -> &'static Everything {
    everything_at(targets, Level::INFO)
}

/// [`everything`], keeping the events at `level` or above (`Level::DEBUG`: the `debug`
/// events too). The first call of either in a test binary sets the targets and the level.
pub fn everything_at(targets: &'static [&'static str], level: Level) -> &'static Everything {
    static EVERYTHING: OnceLock<&'static Everything> = OnceLock::new();
    EVERYTHING.get_or_init(|| {
        let everything: &'static Everything = Box::leak(Box::new(Everything {
            targets,
            events: Mutex::new(Vec::new()),
        }));
        tracing::subscriber::set_global_default(
            tracing_subscriber::registry()
                .with(LevelFilter::from_level(level))
                .with(Collector(everything)),
        )
        .expect("the only global subscriber of this test binary");
        everything
    })
}
