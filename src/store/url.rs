//! Which database to use: a [`DatabaseUrl`] names the [`Backend`] and carries the
//! password to the driver without ever letting it reach a log line.

use serde::Serialize;
use std::fmt;

/// Which database a URL points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Postgres,
    Mysql,
    Sqlite,
}

/// A URL leaderd cannot use. `url` is already redacted; callers add where it came from
/// (the configuration names its key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("database URL {url:?}: {reason}")]
pub struct UrlError {
    /// The URL as given, its password redacted.
    pub url: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A database URL whose password never reaches a log line: `Display` and `Debug` redact it,
/// and only [`DatabaseUrl::expose`] gives the real text to the driver.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    url: String,
    backend: Backend,
}

impl DatabaseUrl {
    pub fn parse(text: &str) -> Result<Self, UrlError> {
        let bad = |reason: &str| UrlError {
            url: redact(text),
            reason: reason.to_owned(),
        };
        let (scheme, _) = text
            .split_once("://")
            .ok_or_else(|| bad("expected postgres://…, mysql://… or sqlite://PATH"))?;
        let (backend, url) = match scheme {
            "postgres" | "postgresql" => (Backend::Postgres, text.to_owned()),
            "mysql" => (Backend::Mysql, text.to_owned()),
            // mysql_async only accepts the mysql scheme; the protocol is the same.
            "mariadb" => (Backend::Mysql, format!("mysql{}", &text["mariadb".len()..])),
            "sqlite" => (Backend::Sqlite, text.to_owned()),
            other => {
                return Err(bad(&format!(
                    "unknown scheme {other:?}; expected postgres, postgresql, mysql, mariadb or sqlite"
                )));
            }
        };
        let parsed = DatabaseUrl { url, backend };
        match backend {
            Backend::Sqlite if parsed.sqlite_path().is_empty() => {
                return Err(bad(
                    "sqlite URLs need a file path, e.g. sqlite://leaderd.sqlite3",
                ));
            }
            Backend::Sqlite => {}
            _ => {
                url::Url::parse(&parsed.url).map_err(|e| bad(&format!("not a valid URL: {e}")))?;
            }
        }
        Ok(parsed)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The URL with its password, for the database driver only.
    pub fn expose(&self) -> &str {
        &self.url
    }

    /// For `sqlite://PATH`: the file path (`sqlite:///abs/path` is absolute).
    pub fn sqlite_path(&self) -> &str {
        self.url.strip_prefix("sqlite://").unwrap_or(&self.url)
    }

    /// This URL with `password` in place of its own (percent-encoded as needed). An error
    /// says why not, without the password.
    pub fn with_password(&self, password: &str) -> Result<DatabaseUrl, &'static str> {
        if self.backend == Backend::Sqlite {
            return Err("an sqlite:// database has no password");
        }
        let mut url = url::Url::parse(&self.url).map_err(|_| "not a valid URL")?;
        url.set_password(Some(password))
            .map_err(|()| "the URL has no host to log in to")?;
        Ok(DatabaseUrl {
            url: url.to_string(),
            backend: self.backend,
        })
    }

    pub fn redacted(&self) -> String {
        redact(&self.url)
    }
}

fn redact(text: &str) -> String {
    match url::Url::parse(text) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(Some("***"));
            url.to_string()
        }
        Ok(_) => text.to_owned(),
        // Unparseable: keep the scheme and host part only if there is no credential in it.
        Err(_) if text.contains('@') => "<redacted>".to_owned(),
        Err(_) => text.to_owned(),
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({})", self.redacted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        let url = DatabaseUrl::parse("postgres://app:s3cret@db:5432/app").unwrap();
        assert_eq!(url.to_string(), "postgres://app:***@db:5432/app");
        assert!(!format!("{url:?}").contains("s3cret"));
        let error = DatabaseUrl::parse("ftp://u:s3cret@h/x").unwrap_err();
        assert!(!error.to_string().contains("s3cret"), "{error}");
    }

    #[test]
    fn a_password_goes_into_the_url_encoded() {
        let url = DatabaseUrl::parse("postgres://app@db:5432/app").unwrap();
        let with = url.with_password("p@ss/w:rd").unwrap();
        assert_eq!(with.to_string(), "postgres://app:***@db:5432/app");
        assert_eq!(with.expose(), "postgres://app:p%40ss%2Fw%3Ard@db:5432/app");
        let sqlite = DatabaseUrl::parse("sqlite://x.db").unwrap();
        assert!(sqlite.with_password("pw").is_err());
    }

    #[test]
    fn mariadb_scheme_is_mysql() {
        let url = DatabaseUrl::parse("mariadb://root@127.0.0.1:3306/test").unwrap();
        assert_eq!(url.backend(), Backend::Mysql);
        assert_eq!(url.expose(), "mysql://root@127.0.0.1:3306/test");
    }
}
