//! [`Named`]: what a handle locks: a name under the client's prefix, on one engine.

use std::fmt;
use std::sync::Arc;

use crate::engine::Engine;
use crate::error::LockError;
use crate::hold::Hold;
use crate::kind::HoldKind;
use crate::name::Keys;

/// A lock name on an engine, checked once when the handle is made: an invalid name is
/// reported by every request and `info()` of the handle, before anything is sent. Cheap to
/// clone when valid (the keys hold the name).
#[derive(Clone)]
pub(crate) struct Named {
    pub(crate) engine: Arc<Engine>,
    name: Name,
}

#[derive(Clone)]
enum Name {
    /// A valid name: its keys, which hold it.
    Keyed(Keys),
    /// An invalid name (reported by every request), or one that is not one lock's.
    Unkeyed(String),
}

impl Named {
    pub(crate) fn new(engine: Arc<Engine>, name: String) -> Self {
        let name = match engine.keys(&name) {
            Ok(keys) => Name::Keyed(keys),
            Err(_) => Name::Unkeyed(name),
        };
        Self { engine, name }
    }

    /// A name that is not one lock's (a multi-lock's names joined), so it has no keys.
    pub(crate) fn unkeyed(engine: Arc<Engine>, name: String) -> Self {
        Self {
            engine,
            name: Name::Unkeyed(name),
        }
    }

    pub(crate) fn name(&self) -> &str {
        match &self.name {
            Name::Keyed(keys) => keys.name(),
            Name::Unkeyed(name) => name,
        }
    }

    /// The keys of the name, or why the name cannot be used.
    pub(crate) fn keys(&self) -> Result<Keys, LockError> {
        match &self.name {
            Name::Keyed(keys) => Ok(keys.clone()),
            Name::Unkeyed(name) => self.engine.keys(name),
        }
    }

    /// The hold of `holder` on this name (of `kind`).
    pub(crate) fn hold(&self, kind: HoldKind, holder: u64) -> Result<Arc<Hold>, LockError> {
        Ok(self.engine.hold(kind, &self.keys()?, holder))
    }

    /// The hold of the current task (its reentrant scope's holder, or a new one).
    pub(crate) fn hold_for_current_task(&self, kind: HoldKind) -> Result<Arc<Hold>, LockError> {
        self.hold(kind, self.engine.holder_for_current_task())
    }
}

impl fmt::Debug for Named {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.name(), f)
    }
}
