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
//! - `hold`: what a node holds in the database ([`Hold`](hold::Hold)), as far as it knows.
//! - `round`: one round's statements and what their answers mean.
//! - `step_down`: stop acting, publish it, wait for it to be durable, release.
//! - `candidacy`: the state machine that folds each round's outcome in; `publish`: what
//!   it publishes.
//! - `run`: the loop ([`Election`]) and its handles ([`ResignHandle`], [`RenewHandle`],
//!   [`ClaimGate`]).

mod candidacy;
mod clock;
mod hold;
mod publish;
mod round;
mod run;
pub mod settings;
mod status;
mod step_down;

pub use clock::{BootClock, boottime};
pub use run::{CandidacyGate, ClaimGate, Election, RenewHandle, ResignHandle};
pub use settings::{ElectionSettings, Setting, SettingsError, safety_margin};
pub use status::{Role, RoleEvent, RoundObserver, RoundReport, Status};

#[cfg(test)]
mod tests;
