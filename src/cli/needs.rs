//! What a command needs before it runs: a database named (only `run` takes the embedded
//! default; cron on every host would otherwise each run the job on a file of its own),
//! one that exists (an operator command never creates one), and an election the database
//! knows (unless `--new`). And the database named in its errors.

use crate::config::{Config, DEFAULT_DATABASE_URL, UrlSource};

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
