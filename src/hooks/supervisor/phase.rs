//! [`Phase`]: where the supervisor stands between leading and giving leadership up, each
//! phase with the data only it has, and the transitions between them. The step-down order
//! ([`Phase::advance_step_down`]) is here too, free of the hooks it waits for, so that the
//! simulator's model of the supervisor (`sim/leader_work.rs`) drives the same order.
//!
//! ```text
//!   Following ──Elected──► Leading ──resign──► Resigning ──work gone, on_demoted done──► Following
//!       ▲                    │  ▲                  │            (the election resigns)
//!       └─────Demoted────────┘  └─────Elected──────┘
//!   any ──shutdown──► ShuttingDown (final: answered once every hook is gone)
//! ```
//!
//! Beside the phase, in the supervisor, stays what outlives a phase: the runs (a term's
//! leader work goes on stopping after its phase ended, and on_demoted waits for it), the
//! event queue, what the events told of the leader and term (every hook's environment),
//! the last term whose on_demoted was queued (a term is demoted once, whichever of a
//! resign, a shutdown and the election says so first), the warm guard (started ahead in
//! every phase but a shutdown), the stop channels (a run subscribes as it starts, and a
//! resign's stop must reach runs of the term it left) and the crash loops (their counts
//! span terms).

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The supervisor's phase.
#[derive(Debug)]
pub(crate) enum Phase {
    /// Not leading, and nothing to give up.
    Following,
    /// Leading `term`, as the events tell: leader work may start.
    Leading {
        term: i64,
        /// When the next `while_leader` run is due.
        next_while: Instant,
        /// When the leader_command that ended starts again (per its `restart`).
        command_restart_at: Option<Instant>,
    },
    /// Giving `term` up on a resign (step_down_on_exit, a failed on_elected, a request):
    /// its leader work is stopping, and the election resigns once that and on_demoted are
    /// done. An election of a later term makes it moot.
    Resigning { term: i64 },
    /// Stepping down for shutdown: no new leader work, events ignored. Final.
    ShuttingDown(Shutdown),
}

/// A shutdown's step-down.
#[derive(Debug)]
pub(crate) struct Shutdown {
    /// When it must be over: on_demoted gets what is left of `hooks.shutdown_timeout`.
    pub(crate) deadline: Instant,
    /// A resign under way when the shutdown began: still passed on once done.
    pub(crate) resigning: Option<i64>,
    /// The warm guard the shutdown closed, until it has exited.
    pub(crate) closing_warm: Option<JoinHandle<()>>,
    /// Told once every hook is gone (taken then).
    pub(crate) done: Option<oneshot::Sender<()>>,
}

impl Phase {
    /// The term this node leads, as the events tell.
    pub(crate) fn leading(&self) -> Option<i64> {
        match self {
            Phase::Leading { term, .. } => Some(*term),
            _ => None,
        }
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        matches!(self, Phase::ShuttingDown(_))
    }

    /// When the next while_leader run and the leader_command's restart are due: leading
    /// only.
    pub(crate) fn timers(&self) -> (Option<Instant>, Option<Instant>) {
        match self {
            Phase::Leading {
                next_while,
                command_restart_at,
                ..
            } => (Some(*next_while), *command_restart_at),
            _ => (None, None),
        }
    }

    /// Sets when the leader_command restarts, if leading.
    pub(crate) fn restart_command_at(&mut self, at: Option<Instant>) {
        if let Phase::Leading {
            command_restart_at, ..
        } = self
        {
            *command_restart_at = at;
        }
    }

    /// Whether a shutdown waits for the warm guard it closed.
    pub(crate) fn closing_warm(&self) -> bool {
        matches!(
            self,
            Phase::ShuttingDown(Shutdown {
                closing_warm: Some(_),
                ..
            })
        )
    }

    /// The term being resigned from, if a resign is under way.
    pub(crate) fn resigning(&self) -> Option<i64> {
        match self {
            Phase::Resigning { term } => Some(*term),
            Phase::ShuttingDown(shutdown) => shutdown.resigning,
            _ => None,
        }
    }

    /// Elected in `term`. A resign of an earlier term is moot; a leader_command restart
    /// still pending carries over. A shutdown is final (its caller ignores events then).
    pub(crate) fn elected(&mut self, term: i64) {
        let command_restart_at = match self {
            Phase::Leading {
                command_restart_at, ..
            } => *command_restart_at,
            Phase::ShuttingDown(_) => return,
            _ => None,
        };
        *self = Phase::Leading {
            term,
            next_while: Instant::now(),
            command_restart_at,
        };
    }

    /// Demoted: this node leads no more (a resign under way goes on).
    pub(crate) fn demoted(&mut self) {
        if let Phase::Leading { .. } = self {
            *self = Phase::Following;
        }
    }

    /// The first step of a resign: the term led is given up. Returns it (`None`, and no
    /// change, if this node does not lead).
    pub(crate) fn begin_resign(&mut self) -> Option<i64> {
        let term = self.leading()?;
        *self = Phase::Resigning { term };
        Some(term)
    }

    /// The first step of a shutdown's step-down, from any phase. Returns the term led
    /// until now, if any.
    pub(crate) fn begin_shutdown(&mut self, shutdown: Shutdown) -> Option<i64> {
        let led = self.leading();
        let resigning = self.resigning();
        *self = Phase::ShuttingDown(Shutdown {
            resigning,
            ..shutdown
        });
        led
    }

    /// Waits for the warm guard a shutdown closed to exit, and forgets it; pending if
    /// there is none. Cancel-safe: the handle stays until it has finished.
    pub(crate) async fn warm_guard_closed(&mut self) {
        match self {
            Phase::ShuttingDown(Shutdown {
                closing_warm: closing @ Some(_),
                ..
            }) => {
                let _ = closing.as_mut().expect("matched").await;
                *closing = None;
            }
            _ => std::future::pending().await,
        }
    }

    /// The step-down order's last steps, checked after each step of the supervisor: a
    /// resign is passed on to the election once its term's leader work is gone and no
    /// event hook runs or waits (on_demoted among them); then a shutdown is answered once
    /// every hook is gone. `leader_work_running(term)`: leader work of `term` or earlier
    /// still runs. `event_hooks_busy`: an event hook runs or waits.
    pub(crate) fn advance_step_down(
        &mut self,
        leader_work_running: impl Fn(i64) -> bool,
        event_hooks_busy: bool,
        resign: impl FnOnce(i64),
    ) {
        let stepped_down = |term| !leader_work_running(term) && !event_hooks_busy;
        let released = match self {
            Phase::Resigning { term } if stepped_down(*term) => {
                let term = *term;
                *self = Phase::Following;
                Some(term)
            }
            Phase::ShuttingDown(shutdown) => shutdown.resigning.take_if(|t| stepped_down(*t)),
            _ => None,
        };
        if let Some(term) = released {
            tracing::info!(
                term,
                "leader work stopped and on_demoted done; releasing the lease"
            );
            resign(term);
        }
        if let Phase::ShuttingDown(shutdown) = self
            && shutdown.closing_warm.is_none()
            && stepped_down(i64::MAX)
            && let Some(done) = shutdown.done.take()
        {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn shutdown(done: oneshot::Sender<()>) -> Shutdown {
        Shutdown {
            deadline: Instant::now(),
            resigning: None,
            closing_warm: None,
            done: Some(done),
        }
    }

    /// Steps with leader work of terms up to `work` running: the term resigned, if any.
    fn advance(phase: &mut Phase, work: Option<i64>, event_hooks_busy: bool) -> Option<i64> {
        let resigned = Cell::new(None);
        let running = |term| work.is_some_and(|w| w <= term);
        phase.advance_step_down(running, event_hooks_busy, |t| resigned.set(Some(t)));
        resigned.get()
    }

    #[test]
    fn a_resign_waits_for_the_leader_work_then_for_on_demoted() {
        let mut phase = Phase::Following;
        assert_eq!(phase.begin_resign(), None);
        phase.elected(3);
        assert_eq!(phase.begin_resign(), Some(3));
        assert_eq!(phase.resigning(), Some(3));
        assert_eq!(advance(&mut phase, Some(3), false), None);
        assert_eq!(advance(&mut phase, None, true), None);
        // Leader work of a later term does not hold up the resign of this one.
        assert_eq!(advance(&mut phase, Some(4), false), Some(3));
        assert!(matches!(phase, Phase::Following));
    }

    #[test]
    fn an_election_makes_a_resign_moot_and_a_demotion_does_not() {
        let mut phase = Phase::Following;
        phase.elected(3);
        phase.begin_resign();
        phase.demoted();
        assert_eq!(phase.resigning(), Some(3));
        phase.elected(4);
        assert_eq!((phase.leading(), phase.resigning()), (Some(4), None));
        let at = Instant::now();
        phase.restart_command_at(Some(at));
        phase.elected(5);
        assert_eq!(phase.timers().1, Some(at));
        phase.demoted();
        assert!(matches!(phase, Phase::Following));
    }

    #[tokio::test]
    async fn a_shutdown_during_a_resign_passes_it_on_then_answers() {
        let mut phase = Phase::Following;
        phase.elected(3);
        phase.begin_resign();
        let (done, answered) = oneshot::channel();
        assert_eq!(phase.begin_shutdown(shutdown(done)), None);
        assert!(phase.is_shutting_down());
        assert_eq!(phase.resigning(), Some(3));
        phase.elected(4);
        assert!(phase.is_shutting_down());
        assert_eq!(advance(&mut phase, Some(3), false), None);
        assert_eq!(advance(&mut phase, None, false), Some(3));
        assert!(answered.await.is_ok());
    }

    #[tokio::test]
    async fn a_shutdown_waits_for_every_hook_and_the_closing_warm_guard() {
        let mut phase = Phase::Following;
        phase.elected(3);
        let (done, mut answered) = oneshot::channel();
        let (release, released) = oneshot::channel::<()>();
        let mut stop = shutdown(done);
        stop.closing_warm = Some(tokio::spawn(async move {
            let _ = released.await;
        }));
        assert_eq!(phase.begin_shutdown(stop), Some(3));
        assert_eq!(phase.leading(), None);
        advance(&mut phase, Some(1), false);
        advance(&mut phase, None, true);
        advance(&mut phase, None, false);
        assert!(answered.try_recv().is_err());
        assert!(phase.closing_warm());
        release.send(()).unwrap();
        phase.warm_guard_closed().await;
        assert!(!phase.closing_warm());
        advance(&mut phase, None, false);
        assert!(answered.await.is_ok());
    }
}
