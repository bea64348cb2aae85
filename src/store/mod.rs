//! The lease table, seen as a handful of single-statement operations.
//!
//! [`LeaseStore`] is what the election needs from a database; [`SqlStore`] provides it over
//! one owned connection to PostgreSQL, MySQL/MariaDB or SQLite. No operation opens a
//! multi-statement transaction, and a connection is dropped after any error, timeout or
//! cancellation, so it is never reused in an unknown state.
//!
//! - `lease.rs`, `member.rs`: the rows as read and written; `error.rs`: [`StoreError`].
//! - `lease_store.rs`: the traits, [`LeaseStore`] and [`ControlStore`].
//! - `sql_store.rs`: [`SqlStore`], over one [`DbConnection`] (`connection/`), whose statements
//!   `dialect/` holds; `shared.rs`: many elections over a few connections.
//! - `url.rs`, `tls/`: the [`DatabaseUrl`] and the TLS it asks for; `pooler.rs`,
//!   `notify.rs`, `wakeup/`: transaction poolers, and waking waiting nodes;
//!   `backend.rs`, `error_text.rs`: which database, and its errors' text.
//! - `fence.rs`: [`Fence`], the statement leader work runs last in its own transaction so
//!   that nothing of it commits once a new term has begun.
//! - `memory/`: the same tables in memory, for tests (`table.rs`: statement by statement).

mod backend;
mod connection;
mod dialect;
mod error;
pub(crate) mod error_text;
mod fence;
mod lease;
mod lease_store;
mod member;
#[cfg(any(test, feature = "test-util"))]
pub mod memory;
mod notify;
mod pooler;
pub mod shared;
mod sql_store;
mod tls;
mod url;
mod wakeup;

pub use backend::Backend;
pub use connection::{DbConnection, migrations_applied};
pub use error::StoreError;
pub use fence::{Fence, FenceBackend, FenceError};
pub use lease::{Commands, HeldRow, Lease, LeaseRow, Pending, ProcessToken};
pub use lease_store::{ControlStore, LeaseStore, StepDownRequest};
pub use member::{
    LEGACY_MEMBER_PERIOD, MEMBER_PERIOD, MEMBER_PRUNE_AFTER, Member, MemberRecord, MemberStanding,
    RecordOrder,
};
pub use pooler::Pooler;
pub use sql_store::{SqlStore, Timeouts};
pub use tls::TlsError;
pub use url::{DatabaseUrl, UrlError};
