//! The command line: one subcommand per job (parsed in `args.rs`), each a function
//! returning a result; the exit status is decided here, at the edge.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::Config;
use crate::daemon::{self, ConfigSource};
use crate::logging::LogLevel;
use crate::operator;
use crate::signals;

mod args;
mod exit;
mod fatal;
mod flags;
mod lock;
mod locks;
mod man;
mod migrate;
mod needs;
mod start;
mod status;
mod unlock;
mod wait;

use args::{Cli, Command};
use exit::EXIT_CONFIG;

/// Parses the command line, runs the command and maps its outcome to an exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(code) = start::without_configuration(&cli) {
        return code;
    }
    let (config, file) = match start::load(&cli) {
        Ok(loaded) => loaded,
        Err(error) => return fatal::before_logging(cli.log_format, &error, EXIT_CONFIG),
    };
    // `writer` flushes the log at the end of main, before the last words on stderr.
    let format = cli.log_format.unwrap_or(config.log.format);
    let (log, writer) = start::logging(&cli, &config, format);
    if let Err(error) = start::preflight(&cli.command, &config) {
        return fatal::after_logging(format, writer, &error.to_string(), error.exit_code());
    }
    if let Command::CheckConfig = cli.command {
        start::print_config(&config, file.as_deref());
        writer.finish();
        return ExitCode::SUCCESS;
    }
    let database = config.database.url.redacted();
    match start::on_runtime(&writer, dispatch(cli, config, file, log)) {
        Ok(code) => {
            writer.finish();
            code
        }
        Err(error) => {
            let (message, status) = fatal::outcome(&error, &database);
            fatal::after_logging(format, writer, &message, status)
        }
    }
}

/// Runs the command that needs the database (all but the ones `main` answers itself).
async fn dispatch(
    cli: Cli,
    config: Config,
    file: Option<PathBuf>,
    log: LogLevel,
) -> anyhow::Result<ExitCode> {
    let done = |result: anyhow::Result<()>| result.map(|()| ExitCode::SUCCESS);
    if let Some((true, new_flag)) = cli.command.known_election() {
        operator::refuse_unknown(&config, new_flag).await?;
    }
    match cli.command {
        Command::Run { id } => {
            let source = ConfigSource {
                file,
                node_id: id,
                database: cli.database,
            };
            done(daemon::run(config, source, log).await)
        }
        Command::Status {
            json, local: true, ..
        } => Ok(status::local_status(&config, json)),
        Command::Status { json, .. } => done(status::status(config, json).await),
        Command::Migrate => done(migrate::migrate(config).await),
        Command::Resign { step_down, .. } => {
            let term = step_down.term;
            Ok(operator::step_down(&config, step_down.command(None), term).await?)
        }
        Command::Handover { to, step_down, .. } => {
            let term = step_down.term;
            Ok(operator::step_down(&config, step_down.command(Some(to)), term).await?)
        }
        Command::Pause { duration, .. } => Ok(operator::pause(&config, duration).await?),
        Command::Resume { .. } => Ok(operator::resume(&config).await?),
        Command::Watch { once, .. } => {
            let stop = signals::shutdown_signal().context("cannot install signal handlers")?;
            Ok(operator::watch(&config, once, stop).await?)
        }
        Command::Lock { args } => lock::run(config, args).await.map(ExitCode::from),
        Command::Wait { args, .. } => wait::wait(config, args).await,
        Command::Locks { args } => done(locks::locks(config, args).await),
        Command::Unlock { args } => unlock::unlock(config, args).await,
        Command::CheckConfig
        | Command::HookGuard { .. }
        | Command::Completions { .. }
        | Command::Man => unreachable!("answered before the configuration is used"),
    }
}
