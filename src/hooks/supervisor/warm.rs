//! A guard started ahead of time for the next fenced hook ([`WarmGuard`]), so that the hook
//! does not wait for leaderd's own binary to start when leadership begins.

use std::time::Duration;
use tokio::time::Instant;
use tracing::debug;

use super::Supervisor;
use crate::hooks::process::WarmGuard;

/// After a fenced hook took the guard started ahead, when the next one starts: not while
/// that hook is starting, on a host with few cores.
const WARM_GUARD_AFTER: Duration = Duration::from_millis(100);

impl Supervisor {
    /// Whether any hook configured now is fenced (and so can use a guard started ahead).
    fn runs_fenced_hooks(&self) -> bool {
        let c = &self.config;
        !self.phase.is_shutting_down()
            && (c.on_elected.is_some() || c.while_leader.is_some() || c.leader_command.is_some())
    }

    /// The guard started ahead, for a fenced hook starting now; the next one starts a
    /// little later, not while this hook is starting.
    pub(super) fn take_warm_guard(&mut self) -> Option<WarmGuard> {
        self.warm_due
            .get_or_insert(Instant::now() + WARM_GUARD_AFTER);
        self.warm.take()
    }

    pub(super) fn start_warm_guard(&mut self) {
        self.warm_due = None;
        if self.warm.is_some() || !self.runs_fenced_hooks() {
            return;
        }
        match WarmGuard::start(&self.context.containment) {
            Ok(guard) => self.warm = Some(guard),
            // Hooks start the usual way; try again later.
            Err(error) => {
                debug!(%error, "cannot start a guard ahead of time");
                self.warm_due = Some(Instant::now() + self.context.interval);
            }
        }
    }
}
