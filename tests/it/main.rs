//! Every integration test, in one binary (one link instead of one per file): a module per
//! topic, and the helpers they share in `support`. `cargo test --test it hooks::` runs one
//! module; `cargo test --test it store::postgres::` one backend of one module.

#[macro_use]
mod support;

mod cli;
mod cluster;
mod control;
mod differential;
mod durability;
mod errors;
mod faults;
mod fence;
mod galera;
mod hooks;
mod in_doubt;
mod lock;
mod lost_claim;
mod manual;
mod migrations;
mod mistakes;
mod ops;
mod patroni;
mod pooler;
mod primary;
mod steer;
mod store;
mod timezone;
mod ttl_spot;
mod upgrade;
mod wakeup;
