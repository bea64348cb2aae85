//! What a command needs before it runs: a database named (only `run` takes the embedded
//! default; cron on every host would otherwise each run the job on a file of its own),
//! one that exists (an operator command never creates one), and an election the database
//! knows (unless `--new`). And the database named in its errors.

use super::Command;
use crate::config::{Config, DEFAULT_DATABASE_URL, UrlSource};

/// `--new`: the election may be one that no node has joined yet.
#[derive(Debug, Clone, Copy, clap::Args)]
pub(super) struct NewFlag {
    /// Accept an election that has no row and no member yet (one no node has joined);
    /// without it, such an election is refused (exit 67), as it is most often a typo.
    #[arg(long = "new")]
    pub(super) new: bool,
}

/// How a command uses the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DatabaseUse {
    /// Not at all (`check-config`, `status --local`, `wait --until leader`).
    None,
    /// `run`: the embedded default if none is named; creates it.
    Default,
    /// `lock`, `migrate`: a database named; an SQLite file named may be created.
    Named,
    /// The operator commands: a database named, and there already.
    Existing,
}

/// A command that needs a database named, run with none (exit 78): the message.
pub(super) fn unnamed(command: &str) -> String {
    format!(
        "`leaderd {command}` needs a database and none is configured: set database.url \
         (LEADERD_DATABASE__URL), database.url_file or the systemd credential database-url, \
         or give --database URL (an SQLite file too: --database sqlite://PATH). Only \
         `leaderd run` falls back to the embedded default {DEFAULT_DATABASE_URL}, a database \
         of this host alone"
    )
}

/// Checks that `config` names what `usage` needs, and marks a database that must exist.
pub(super) fn database(
    config: &mut Config,
    usage: DatabaseUse,
    command: &str,
) -> Result<(), String> {
    let database = &mut config.database;
    match usage {
        DatabaseUse::None | DatabaseUse::Default => Ok(()),
        _ if database.source == UrlSource::Default => Err(unnamed(command)),
        DatabaseUse::Named => Ok(()),
        DatabaseUse::Existing => {
            database.url = database.url.clone().existing_only();
            Ok(())
        }
    }
}

/// `message` with the database it was about, if it does not name it already.
pub(super) fn naming_database(message: String, url: &str) -> String {
    match message.contains(url) {
        true => message,
        false => format!("{message} (database {url})"),
    }
}

impl Command {
    /// How this command uses the database, and its name for messages.
    pub(super) fn database_use(&self) -> (DatabaseUse, &'static str) {
        match self {
            Command::Run { .. } => (DatabaseUse::Default, "run"),
            Command::Status { local: true, .. } => (DatabaseUse::None, "status --local"),
            Command::Status { .. } => (DatabaseUse::Existing, "status"),
            Command::Migrate => (DatabaseUse::Named, "migrate"),
            Command::Lock { .. } => (DatabaseUse::Named, "lock"),
            Command::Locks { .. } => (DatabaseUse::Existing, "locks"),
            Command::Resign { .. } => (DatabaseUse::Existing, "resign"),
            Command::Handover { .. } => (DatabaseUse::Existing, "handover"),
            Command::Pause { .. } => (DatabaseUse::Existing, "pause"),
            Command::Resume { .. } => (DatabaseUse::Existing, "resume"),
            Command::Watch { .. } => (DatabaseUse::Existing, "watch"),
            Command::Wait { args, .. } if args.reads_database() => (DatabaseUse::Existing, "wait"),
            _ => (DatabaseUse::None, ""),
        }
    }

    /// For a command that acts on an election in the database: whether it refuses an
    /// unknown one, and the flag that makes it accept a new one (if it has that flag).
    pub(super) fn known_election(&self) -> Option<(bool, Option<&'static str>)> {
        let new = |flag: &NewFlag| Some((!flag.new, Some("--new")));
        match self {
            Command::Status {
                local: false,
                new: flag,
                ..
            }
            | Command::Pause { new: flag, .. }
            | Command::Watch { new: flag, .. } => new(flag),
            Command::Wait {
                args, new: flag, ..
            } if args.reads_database() => new(flag),
            Command::Resign { .. } | Command::Handover { .. } | Command::Resume { .. } => {
                Some((true, None))
            }
            _ => None,
        }
    }
}
