//! [`Speech`]: how the engine speaks with a deployment, settled at connect: what every
//! primary can do (see `backend::Probe`), the mutex protocol that follows from it and from
//! what the builder asked for, and this crate's Lua code where the server has scripting.

use tokio::time::Instant;

use crate::backend::Backend;
use crate::capabilities::{MutexProtocol, ServerCapabilities};
use crate::error::LockError;
use crate::wire::{Mode, Scripts};

/// What the engine speaks with a deployment: its code, and what the deployment can do.
pub(crate) struct Speech {
    /// The Lua code, in the deployment's flavour.
    pub(crate) scripts: &'static Scripts,
    /// How calls reach the code.
    pub(crate) mode: Mode,
    pub(crate) capabilities: ServerCapabilities,
    /// The server's clock in microseconds as read at connect, and when it was read.
    pub(crate) clock: (u64, Instant),
}

impl Speech {
    /// Finds out what the deployment can do, settles the mutex protocol (`requested`:
    /// [`MutexProtocol::Auto`] takes the native one where every primary has it), and loads
    /// the Lua code. Fails when what the client needs is missing: the native protocol asked
    /// for and absent, scripts needed (the scripted protocol) and not loadable, `WAIT` needed
    /// (`min_replicas`) and absent, sharded pub/sub absent on a Cluster.
    pub(crate) async fn negotiate(
        backend: &Backend,
        requested: MutexProtocol,
        needs_wait: bool,
    ) -> Result<Speech, LockError> {
        let probe = backend.probe().await?;
        let unsupported = |feature, missing| LockError::Unsupported {
            feature,
            missing,
            detail: Some(probe.server.clone()),
        };
        if backend.is_sharded() && !probe.sharded_pubsub {
            return Err(unsupported(
                "a Redis Cluster",
                "sharded pub/sub (Redis 7.0 or later)",
            ));
        }
        if needs_wait && !probe.wait {
            return Err(unsupported("min_replicas", "the WAIT command"));
        }
        // The native acquisition seeds a missing fencing counter from the server's clock.
        let clock = probe.clock.is_some();
        let native = probe.native_compare && clock;
        let hybrid = probe.set_nx_get && clock;
        if !probe.transactions && matches!(requested, MutexProtocol::Native | MutexProtocol::Hybrid)
        {
            return Err(unsupported(
                "the native and hybrid mutex protocols",
                "MULTI and EXEC for this user (the ACL refused EXEC)",
            ));
        }
        let (native, hybrid) = (native && probe.transactions, hybrid && probe.transactions);
        let mutex_protocol = match (requested, native, hybrid) {
            (MutexProtocol::Native, false, _) => {
                return Err(unsupported(
                    "the native mutex protocol",
                    "SET … IFEQ and DELIFEQ (Valkey 9.0 or later)",
                ));
            }
            (MutexProtocol::Hybrid, _, false) => {
                return Err(unsupported(
                    "the hybrid mutex protocol",
                    "SET … NX GET (Redis 7.0 or later, Valkey 7.2 or later)",
                ));
            }
            (MutexProtocol::Auto | MutexProtocol::Native, true, _) => MutexProtocol::Native,
            (MutexProtocol::Auto | MutexProtocol::Hybrid, _, true) => MutexProtocol::Hybrid,
            _ => MutexProtocol::Scripted,
        };
        let scripts = Scripts::get(backend.is_sharded());
        let loaded = backend.load_scripts(scripts).await;
        let (mode, scripting) = match loaded {
            Ok(mode) => (mode, true),
            // The native mutex works without the code; what needs it fails at first use.
            Err(error) if mutex_protocol == MutexProtocol::Native && !error.is_unavailable() => {
                tracing::info!(%error, "no Lua code on the server: the fair lock, the \
                    read-write lock and the semaphore will fail with Unsupported");
                (Mode::Script, false)
            }
            Err(error) => return Err(error),
        };
        let capabilities = ServerCapabilities {
            server: probe.server,
            native_compare: probe.native_compare,
            set_nx_get: probe.set_nx_get,
            scripting,
            functions: scripting && mode == Mode::Function,
            wait: probe.wait,
            sharded_pubsub: probe.sharded_pubsub,
            mutex_protocol,
        };
        tracing::info!(capabilities = %capabilities, "connected to Redis");
        Ok(Speech {
            scripts,
            mode,
            capabilities,
            clock: probe.clock.unwrap_or((0, Instant::now())),
        })
    }
}
