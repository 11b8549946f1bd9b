//! Live reload: on SIGHUP (or `POST /reload` on the admin listener) the
//! configuration is read again. A valid one replaces the route table
//! atomically: a request holds the table it started with until it ends, so
//! requests and streams in flight finish on their configuration. An
//! invalid one is refused with every problem logged, and the old one keeps
//! serving. Listeners are bound once: a changed address is logged and
//! ignored until a restart.

use std::sync::{Arc, RwLock};

use crate::config::{Config, Problems};
use crate::route::RouteTable;
use crate::telemetry;

/// The route table in force, swapped whole on a reload.
pub(crate) struct Routes(RwLock<Arc<RouteTable>>);

impl Routes {
    pub(crate) fn new(table: RouteTable) -> Self {
        Self(RwLock::new(Arc::new(table)))
    }

    /// The table in force now; the caller keeps it for its request.
    pub(crate) fn current(&self) -> Arc<RouteTable> {
        match self.0.read() {
            Ok(table) => table.clone(),
            // A writer never panics while holding the lock (it only swaps an
            // Arc), but a poisoned lock still holds a whole table.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn replace(&self, table: RouteTable) {
        let table = Arc::new(table);
        match self.0.write() {
            Ok(mut current) => *current = table,
            Err(poisoned) => *poisoned.into_inner() = table,
        }
    }
}

/// Reads the configuration again and builds its route table: what `main`
/// knows (the file, the environment), handed to the server.
pub type ConfigSource = Box<dyn Fn() -> Result<(Config, RouteTable), Problems> + Send + Sync>;

/// What a reload needs: where the configuration comes from, and the
/// listeners it started with.
pub(crate) struct Reloader {
    pub(crate) source: ConfigSource,
    pub(crate) listen: String,
    pub(crate) admin_listen: String,
}

impl Reloader {
    /// Reloads into `routes`: the number of routes now in force, or every
    /// problem of the configuration that was refused.
    pub(crate) fn reload(&self, routes: &Routes, trigger: &'static str) -> Result<usize, String> {
        match (self.source)() {
            Ok((config, table)) => {
                let server = &config.server;
                if server.listen != self.listen || server.admin_listen != self.admin_listen {
                    tracing::warn!(
                        listen = %server.listen,
                        admin_listen = %server.admin_listen,
                        "listener addresses cannot change on a reload: restart probity to move them"
                    );
                }
                let count = config.routes.len();
                routes.replace(table);
                telemetry::config_reloaded(trigger, true, count, "");
                Ok(count)
            }
            Err(problems) => {
                let text = problems.to_string();
                telemetry::config_reloaded(trigger, false, 0, &text);
                Err(text)
            }
        }
    }
}
