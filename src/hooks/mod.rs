//! Hooks: the leader-only work, run as processes that consume the election's role changes.
//!
//! The supervisor is a task of its own fed by the election's event channel and status watch;
//! nothing here can delay a renewal. Event hooks run one at a time in the order their
//! events happened. Leader-scoped processes (`on_elected`, `while_leader` runs and
//! `leader_command`) are *fenced*: each watches the lease deadline and gets SIGTERM shortly
//! before it, and SIGKILL early enough to be gone before the lease can lapse on the
//! database, whatever the election is doing at that moment.
//!
//! * `run`: one hook run, fenced to the lease ([`run_leased`] for `leaderd lock`).
//! * `supervisor`: which hook runs when, and the step-down sequence ([`Hooks`]).
//! * `process` and [`guard`]: the hook process and the guard it runs under; `stub`: the
//!   process a pre-started guard forks ahead for its hook.
//! * [`containment`] and `subreaper`: how the guard holds everything a fenced hook starts.
//! * [`config`]: the `[hooks]` section; [`kind`]: the hooks it knows, and their names.
//! * [`health`]: `[election.health_check]`, a check run like a hook that gates candidacy.

pub mod config;
pub mod containment;
pub mod guard;
pub mod health;
pub mod kind;
mod process;
mod run;
mod stub;
mod subreaper;
mod supervisor;

pub use config::HooksConfig;
#[cfg(test)]
pub use containment::ContainmentMode;
pub use containment::{ContainmentError, resolve_containment};
pub use kind::HookKind;
pub use run::{HookContext, HookRuns, run_leased};
/// The fence's instants, for the simulator's leader work.
#[cfg(test)]
pub(crate) use run::{fence_at, kill_lead, term_lead};
pub use supervisor::{CrashLoopWiring, Hooks};
/// The supervisor's phases and step-down order, for the simulator's model of it.
#[cfg(test)]
pub(crate) use supervisor::{Phase, Shutdown};
