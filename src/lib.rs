//! leaderd: leader election through one row of a SQL table.
//!
//! Every node claims or renews the election's row with a short lease; the holder is the
//! leader. See README.md for how the protocol stays safe with skewed clocks, slow
//! databases and paused processes.

pub mod cli;
pub mod config;
pub mod daemon;
pub mod election;
pub mod hooks;
pub mod http;
pub mod lock;
pub mod logging;
pub mod metrics;
pub mod signals;
pub mod status_file;
pub mod store;
pub mod systemd;
