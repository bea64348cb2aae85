//! leaderd: leader election through one row of a SQL table.
//!
//! Every node claims or renews the election's row with a short lease; the holder is the
//! leader. See docs/protocol.md for how the protocol stays safe with skewed clocks, slow
//! databases and paused processes.
//!
//! # Layout
//!
//! The core is the library. Its dependencies run one way, store ← election ← lock, and
//! none of it knows the daemon (`scripts/check-layers.sh` keeps it so, and no file cycle
//! anywhere in `src/`):
//!
//! - [`store`]: the lease table as single-statement operations ([`LeaseStore`]), over one
//!   connection to PostgreSQL, MySQL/MariaDB or SQLite ([`SqlStore`]), with every
//!   statement of the protocol, for each backend, in `store/dialect/` (the session
//!   plumbing stands beside its code; that module's doc names each place), and the
//!   [`DatabaseUrl`] that names the database.
//! - [`election`]: one node's part in an election: its [`ElectionSettings`], the election
//!   as one state machine with no I/O (a `State` and a `step` that takes what happened and
//!   returns what to do), and the loop ([`Election`]) that carries its actions out and
//!   publishes its [`Status`] on a watch channel.
//! - [`lock`]: a named lock around one piece of work ([`LockOptions`], [`LockGuard`]): an
//!   election that holds at most one term.
//!
//! The daemon, `leaderd` the binary, is built on the core and private to this crate:
//!
//! - `cli`: the subcommands, and the exit status of each outcome; it names the daemon
//!   only to start it (`daemon::run`).
//! - `config`: the TOML file and `LEADERD_*` overrides, validated into a `Config` (with
//!   `Config::store`, so that operator commands connect without the daemon).
//! - `daemon`: `leaderd run`, the election wired to its consumers, which are its own
//!   modules: `members` (the node's record in the members table, and preemption by
//!   priority), the status file's writer, `http`, `metrics`, `systemd`, `kubernetes` (the
//!   pod's role label) and `outage` (a database outage, logged while it lasts).
//! - `operator`: `leaderd resign`, `handover`, `pause`, `resume` and `watch`.
//! - `hooks`: commands run on role changes, and the leader command fenced to the lease.
//! - `status_file`: the status file's document, written by the daemon and read by
//!   `leaderd status --local`, `leaderd wait` and `/status`.
//! - `logging`, `signals`: log output, and signals turned into shutdown and reload (for
//!   `run`, `watch` and `lock`).
//! - `duration`: the one set of rules for every duration flag and key; `env_names`: the
//!   `LEADERD_*` variables and what each configures (hooks keep them from their commands).
//! - `standing`: what a node is besides its role (candidate or observer, its health),
//!   read by the status file, metrics, `/status`, the members task and the health check.

pub mod election;
pub mod lock;
pub mod store;

pub(crate) mod cli;
pub(crate) mod config;
pub(crate) mod daemon;
pub(crate) mod duration;
pub(crate) mod env_names;
pub(crate) mod hooks;
pub(crate) mod logging;
pub(crate) mod operator;
pub(crate) mod signals;
#[cfg(test)]
mod sim;
pub(crate) mod standing;
pub(crate) mod status_file;

// The names a program needs to run an election or take a lock, each once at the root. The
// rest (row types, member records, the daemon's commands) stays in its module.

/// One node's part in an election: [`Election::new`] with its settings and a store, then
/// [`Election::run`]; it publishes its [`Status`] on a watch channel.
pub use election::Election;
/// The fence leader work runs last in its transactions, from a [`LockGuard`] or an
/// election's [`FenceHandle`], and why it refused.
pub use election::FenceHandle;
/// What an election's status, role events and stepping down need.
pub use election::{ClaimGate, ResignHandle, Role, RoleEvent, Status};
/// The election's settings, validated as a whole, and what is wrong with one of them.
pub use election::{ElectionSettings, SettingsError};
/// A named lock around one piece of work: how to take it, the guard that holds it, and
/// why it could not be taken or was lost.
pub use lock::{LockError, LockGuard, LockOptions};
/// The connection both run on: a PostgreSQL, MySQL/MariaDB or SQLite URL, its parse
/// error, the connect and statement timeouts, and the store itself.
pub use store::{DatabaseUrl, SqlStore, Timeouts, UrlError};
pub use store::{Fence, FenceError};
/// What an election needs of a store (for a store of one's own, or a generic bound), and
/// its error.
pub use store::{LeaseStore, StoreError};

/// The `leaderd` binary's entry point: parses the command line, runs the command and
/// returns its exit status. Not part of the library API.
#[doc(hidden)]
pub fn main() -> std::process::ExitCode {
    cli::main()
}
