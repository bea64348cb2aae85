//! One node's part in an election: a loop that claims or renews the lease through a
//! [`LeaseStore`](crate::store::LeaseStore) and publishes this node's [`Status`] on a
//! watch channel.
//!
//! Safety rests on two clocks that are never compared with each other. The database clock
//! decides, inside each statement, whether a lease is live. This node's monotonic clock
//! decides how long it may act as leader: until `ttl` (less a small margin) after its last
//! successful renewal was *sent*. A renewal executes on the database no earlier than it was
//! sent, so the database keeps the lease at least that long, and no other node can take it
//! before this node has stopped acting as leader. A renewal whose answer comes back after
//! that instant is not trusted again: leadership resumes only with a new term.
//!
//! One concern per file:
//! - `settings`: [`ElectionSettings`] and the rules every name and timing must meet.
//! - `status`: what the election publishes ([`Status`], [`Role`], [`RoleEvent`],
//!   [`RoundReport`]).
//! - `clock`: the monotonic clock and CLOCK_BOOTTIME ([`BootClock`]), and instants on both.
//! - `clock_jump`: a warning when the measured database clock offset jumps ([`ClockJumps`]).
//! - `machine`: the election as one state machine with no I/O: its `State`, and `step`,
//!   which takes what happened and returns what to do; `machine/round` takes a round
//!   through its statements, `machine/fold` says what a finished round means.
//! - `run`: the loop ([`Election`]) that carries the machine's actions out against the
//!   store and the channels.
//! - `handles`: how the loop is steered from outside ([`ResignHandle`], [`RenewHandle`],
//!   [`ClaimGate`], [`CandidacyGate`]).

pub(crate) mod clock;
mod clock_jump;
mod handles;
pub(crate) mod machine;
mod run;
pub mod settings;
mod status;

pub use clock::{BootClock, boottime};
pub use clock_jump::{ClockJump, ClockJumps};
pub use handles::{CandidacyGate, ClaimGate, FenceHandle, RenewHandle, ResignHandle};
pub use run::Election;
pub use settings::{ElectionSettings, Setting, SettingsError, safety_margin};
pub use status::{Role, RoleEvent, RoundObserver, RoundReport, Status};

#[cfg(test)]
mod tests;
