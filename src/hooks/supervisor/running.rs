//! A hook run in progress, with the term it is fenced to.

use tokio::task::JoinHandle;

use crate::hooks::run::RunOutcome;

/// A hook run in progress.
pub(super) struct RunningHook {
    pub(super) handle: JoinHandle<RunOutcome>,
    /// The term it is leader-scoped in (fenced to), if it is: kept with the handle so that
    /// the two cannot disagree.
    pub(super) term: Option<i64>,
}

impl RunningHook {
    /// Whether it is leader work of `term` or an earlier term.
    pub(super) fn leader_work_of(&self, term: i64) -> bool {
        self.term.is_some_and(|t| t <= term)
    }
}

/// Whether any of `runs` is leader work of `term` or an earlier term.
pub(super) fn leader_work_running(runs: [&Option<RunningHook>; 3], term: i64) -> bool {
    runs.into_iter()
        .flatten()
        .any(|run| run.leader_work_of(term))
}

/// Waits for the run in `slot` to end, empties the slot and gives back its outcome (`None`
/// if the task failed) and its term; pending while the slot is empty. Cancel-safe: the
/// handle stays in the slot until it has finished, so a `select!` that takes another
/// branch loses nothing.
pub(super) async fn join_running(
    slot: &mut Option<RunningHook>,
) -> (Option<RunOutcome>, Option<i64>) {
    match slot {
        Some(running) => {
            let outcome = (&mut running.handle).await.ok();
            let term = slot.take().and_then(|running| running.term);
            (outcome, term)
        }
        None => std::future::pending().await,
    }
}
