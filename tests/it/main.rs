//! Every integration test, in one binary (one link instead of one per file): a module per
//! topic, and the helpers they share in `support`. `cargo test --test it hooks::` runs one
//! module; `cargo test --test it store::postgres::` one backend of one module.

#[macro_use]
mod support;

mod cli;
mod cluster;
mod control;
mod errors;
mod faults;
mod hooks;
mod lock;
mod manual;
mod mistakes;
mod ops;
mod pooler;
mod primary;
mod steer;
mod store;
mod upgrade;
mod wakeup;
