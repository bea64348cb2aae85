//! The database's secrets: the URL from `database.url_file`, else `database.url`, else the
//! systemd credential `database-url`, else the default; then the password from
//! `database.password_file`, else from the credential `database-password`, put into it
//! (replacing any password it has). Files are read on every load, so a reload sees a
//! rotated secret (and reports that the database changed). No error or log line carries a
//! secret: URLs are shown redacted, password files by path only.

use std::path::{Path, PathBuf};

use super::{Config, ConfigError, DEFAULT_DATABASE_URL, Database, UrlSource, invalid};
use crate::store::{Backend, DatabaseUrl};

/// The systemd credentials leaderd reads from `$CREDENTIALS_DIRECTORY` when the
/// configuration names no source of its own (`LoadCredential=database-url:…`).
const CREDENTIAL_URL: &str = "database-url";
const CREDENTIAL_PASSWORD: &str = "database-password";

/// The contents of a secret file, without the line end an editor or `echo` adds.
fn read_secret(key: &'static str, path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::SecretFile {
        key,
        path: path.to_owned(),
        source,
    })?;
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

/// A credential file, if systemd passed one by that name. An empty one (line ends aside)
/// counts as none: the shipped unit pairs each `LoadCredential=` with a
/// `SetCredential=NAME:\n` fallback, so that a missing source file does not stop the unit.
fn credential(directory: Option<&String>, name: &str) -> Option<PathBuf> {
    let path = Path::new(directory.filter(|d| !d.is_empty())?).join(name);
    let text = std::fs::read(&path).ok()?;
    text.iter()
        .any(|byte| !matches!(byte, b'\n' | b'\r'))
        .then_some(path)
}

/// Puts the URL in force into `database.url`, from the sources above; `credentials` is
/// `$CREDENTIALS_DIRECTORY`.
pub(super) fn resolve(
    database: &mut Database,
    credentials: Option<&String>,
) -> Result<(), ConfigError> {
    let from_file = |key: &'static str, path: &Path| -> Result<DatabaseUrl, ConfigError> {
        DatabaseUrl::parse(&read_secret(key, path)?).map_err(|error| ConfigError::UrlInFile {
            key,
            path: path.to_owned(),
            url: error.url,
            reason: error.reason,
        })
    };
    let url = match (&database.url_file, &database.url_text) {
        (Some(path), Some(url)) => {
            let url = DatabaseUrl::parse(url).map_or_else(|e| e.url, |u| u.redacted());
            return Err(invalid(
                "database.url_file",
                path.display(),
                format!("database.url is set too ({url}); set one of them"),
            ));
        }
        (Some(path), None) => (from_file("database.url_file", path)?, UrlSource::UrlFile),
        (None, Some(url)) => (DatabaseUrl::parse(url)?, UrlSource::Url),
        (None, None) => match credential(credentials, CREDENTIAL_URL) {
            Some(path) => (
                from_file("database.url_file", &path)?,
                UrlSource::Credential,
            ),
            None => (
                DatabaseUrl::parse(DEFAULT_DATABASE_URL)?,
                UrlSource::Default,
            ),
        },
    };
    let (url, source) = url;
    database.source = source;
    database.url = with_password(url, database.password_file.as_ref(), credentials)?;
    Ok(())
}

pub(super) fn with_password(
    url: DatabaseUrl,
    password_file: Option<&PathBuf>,
    credentials: Option<&String>,
) -> Result<DatabaseUrl, ConfigError> {
    let key = "database.password_file";
    let path = match password_file {
        Some(path) => path.clone(),
        None => match credential(credentials, CREDENTIAL_PASSWORD) {
            // A credential meant for a server is no error where the URL names SQLite.
            Some(_) if url.backend() == Backend::Sqlite => return Ok(url),
            Some(path) => path,
            None => return Ok(url),
        },
    };
    let password = read_secret(key, &path)?;
    url.with_password(&password)
        .map_err(|reason| ConfigError::PasswordInUrl {
            key,
            path,
            url: url.redacted(),
            reason,
        })
}

impl Config {
    /// This configuration on the database `url` (`--database URL`), which wins over
    /// `database.url`, `database.url_file` and the credential; `database.password_file`
    /// and `database.pooler` still apply.
    pub fn with_database(mut self, url: &str) -> Result<Self, ConfigError> {
        let database = &mut self.database;
        let parsed = DatabaseUrl::parse(url).map_err(|e| invalid("--database", e.url, e.reason))?;
        database.url = with_password(parsed, database.password_file.as_ref(), None)?
            .with_pooler(database.pooler);
        database.source = UrlSource::Flag;
        Ok(self)
    }
}
