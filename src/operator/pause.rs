//! `leaderd pause` and `resume`: a maintenance freeze in which the leader keeps leading
//! and no node takes a free or lapsed lease.

use std::process::ExitCode;
use std::time::Duration;

use super::{OperatorError, commands_store, write_failed};
use crate::config::Config;
use crate::store::ControlStore;

/// `leaderd pause [--for D]`.
pub async fn pause(config: &Config, duration: Duration) -> Result<ExitCode, OperatorError> {
    let election = config.election.name.as_str();
    let mut store = commands_store(config);
    store.pause(election, duration).await.map_err(|source| {
        let retry = || {
            format!(
                "`leaderd pause --for {}` repeats it (the pause then lasts from the repeat)",
                humantime::format_duration(duration)
            )
        };
        write_failed(election, retry, source)
    })?;
    println!(
        "election {election:?} paused for {}: the leader keeps leading, and no node takes a \
         free or lapsed lease; `leaderd resume` ends it sooner",
        humantime::format_duration(duration)
    );
    Ok(ExitCode::SUCCESS)
}

/// `leaderd resume`.
pub async fn resume(config: &Config) -> Result<ExitCode, OperatorError> {
    let election = config.election.name.as_str();
    let mut store = commands_store(config);
    let found = store.resume(election).await.map_err(|source| {
        let retry = || "`leaderd resume` repeats it harmlessly".to_owned();
        write_failed(election, retry, source)
    })?;
    match found {
        true => println!("election {election:?} resumed"),
        false => println!("election {election:?} has no row yet; nothing to resume"),
    }
    Ok(ExitCode::SUCCESS)
}
