//! Which database to use: a [`DatabaseUrl`] names the [`Backend`] and carries the
//! password to the driver without ever letting it reach a log line.

use std::fmt;

use super::backend::Backend;
use super::pooler::Pooler;

mod check;

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

/// A database URL whose password never reaches a log line: `Display` and `Debug` redact it.
///
/// Parsed once: the user name and password are taken out of the URL (percent-decoded) and
/// handed to the driver as fields ([`DatabaseUrl::user`], [`DatabaseUrl::password`]), and
/// the driver reads the rest ([`DatabaseUrl::address`]: hosts, database, parameters). So
/// what `check-config` accepts is what connects: the user information ends at the last
/// `@` of the authority, as the url crate reads it, whichever driver connects. A `@` or `:`
/// in a password may be written as is; `/`, `?`, `#` and `%` must be percent-encoded, as
/// in any URL (`database.password_file` takes the password as it is).
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    /// The URL without its user information (`mariadb://` read as `mysql://`).
    address: String,
    user: Option<String>,
    password: Option<String>,
    backend: Backend,
    /// What sits between leaderd and the database (`database.pooler`).
    pooler: Pooler,
    /// Whether connecting may create an SQLite file that is not there (`run`, `lock` and
    /// `migrate` may; the operator commands only use a database that exists).
    may_create: bool,
}

/// Percent-encodes all but the unreserved characters (RFC 3986).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `text` split into the URL without its user information, and the user information
/// (still encoded) if it has some: up to the last `@` of the authority, which ends at the
/// first `/`, `?` or `#`.
fn split_user_info(text: &str) -> (String, Option<&str>) {
    let Some(start) = text.find("://").map(|i| i + 3) else {
        return (text.to_owned(), None);
    };
    let rest = &text[start..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => (
            format!("{}{}", &text[..start], &rest[at + 1..]),
            Some(&rest[..at]),
        ),
        None => (text.to_owned(), None),
    }
}

fn decode(part: &str, what: &str) -> Result<String, String> {
    percent_encoding::percent_decode_str(part)
        .decode_utf8()
        .map(|text| text.into_owned())
        .map_err(|_| format!("the {what} is not UTF-8 once percent-decoded"))
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
        let (address, user, password) = match backend {
            Backend::Sqlite => (url, None, None),
            _ => {
                let (address, user_info) = split_user_info(&url);
                let (user, password) = match user_info {
                    None => (None, None),
                    Some(info) => {
                        let (user, password) = match info.split_once(':') {
                            Some((user, password)) => (user, Some(password)),
                            None => (info, None),
                        };
                        let user = Some(decode(user, "user name").map_err(|r| bad(&r))?)
                            .filter(|u| !u.is_empty());
                        let password = password
                            .map(|p| decode(p, "password"))
                            .transpose()
                            .map_err(|r| bad(&r))?;
                        (user, password)
                    }
                };
                (address, user, password)
            }
        };
        let parsed = DatabaseUrl {
            address,
            user,
            password,
            backend,
            pooler: Pooler::None,
            may_create: true,
        };
        match backend {
            Backend::Sqlite if parsed.sqlite_path().is_empty() => {
                return Err(bad(
                    "sqlite URLs need a file path, e.g. sqlite://leaderd.sqlite3",
                ));
            }
            Backend::Sqlite => {}
            // Checked here, by the drivers' own parsers, so that a mistake stops
            // `check-config` and `run` (check.rs). The TLS parameters are leaderd's.
            Backend::Postgres => {
                let (rest, _) =
                    super::tls::split(&parsed.address, backend).map_err(|e| bad(&e.to_string()))?;
                check::postgres(&parsed.address, &rest).map_err(|reason| bad(&reason))?
            }
            Backend::Mysql => {
                url::Url::parse(&parsed.address)
                    .map_err(|e| bad(&format!("not a valid URL: {e}")))?;
                check::mysql_parameters(&parsed.address).map_err(|reason| bad(&reason))?;
                let (rest, _) =
                    super::tls::split(&parsed.address, backend).map_err(|e| bad(&e.to_string()))?;
                check::mysql(&rest).map_err(|reason| bad(&reason))?
            }
        }
        Ok(parsed)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The URL without its user information, for the driver: hosts, database, parameters.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The user name, percent-decoded.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The password, percent-decoded: for the driver only.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The URL with its password (percent-encoded), for tests.
    pub fn expose(&self) -> String {
        self.with_user_info(self.password.as_deref().map(encode))
    }

    /// The URL with the user information put back, the password as given.
    fn with_user_info(&self, password: Option<String>) -> String {
        if self.user.is_none() && password.is_none() {
            return self.address.clone();
        }
        let Some(start) = self.address.find("://").map(|i| i + 3) else {
            return self.address.clone();
        };
        let user = self.user.as_deref().map(encode).unwrap_or_default();
        let password = password.map(|p| format!(":{p}")).unwrap_or_default();
        format!(
            "{}{user}{password}@{}",
            &self.address[..start],
            &self.address[start..]
        )
    }

    /// For `sqlite://PATH`: the file path (`sqlite:///abs/path` is absolute).
    pub fn sqlite_path(&self) -> &str {
        self.address
            .strip_prefix("sqlite://")
            .unwrap_or(&self.address)
    }

    /// This URL with `password` in place of its own. An error says why not, without the
    /// password.
    pub fn with_password(&self, password: &str) -> Result<DatabaseUrl, &'static str> {
        if self.backend == Backend::Sqlite {
            return Err("an sqlite:// database has no password");
        }
        Ok(DatabaseUrl {
            password: Some(password.to_owned()),
            ..self.clone()
        })
    }

    pub fn redacted(&self) -> String {
        self.with_user_info(self.password.as_ref().map(|_| "***".to_owned()))
    }

    /// This URL, reached through `pooler`.
    pub fn with_pooler(mut self, pooler: Pooler) -> DatabaseUrl {
        self.pooler = pooler;
        self
    }

    /// This URL for a command that must not create a database: an SQLite file that is
    /// not there is an error, not a new database.
    pub fn existing_only(mut self) -> DatabaseUrl {
        self.may_create = false;
        self
    }

    /// Why connecting must not go ahead: an SQLite file that is not there, where this
    /// URL may not create one.
    pub fn missing_sqlite_file(&self) -> Option<String> {
        let path = self.sqlite_path();
        (self.backend == Backend::Sqlite
            && !self.may_create
            && !std::path::Path::new(path).exists())
        .then(|| {
            format!(
                "no database: {path} does not exist (`leaderd migrate` or a running node \
                     creates it)"
            )
        })
    }

    /// What sits between leaderd and the database.
    pub fn pooler(&self) -> Pooler {
        self.pooler
    }

    /// Whether connections go through a pooler in transaction mode (PostgreSQL only): no
    /// named prepared statements, no session settings, no LISTEN.
    pub fn transaction_pooled(&self) -> bool {
        self.backend == Backend::Postgres && self.pooler == Pooler::Transaction
    }
}

fn redact(text: &str) -> String {
    match url::Url::parse(text) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(Some("***"));
            url.to_string()
        }
        Ok(_) => text.to_owned(),
        Err(_) => multi_host::redact(text).unwrap_or_else(|| {
            // Unparseable: keep it only if there is no credential in it.
            match text.contains('@') {
                true => "<redacted>".to_owned(),
                false => text.to_owned(),
            }
        }),
    }
}

/// libpq's multi-host URLs (`postgres://user:pw@h1:5432,h2:5433/db?…`), which the url crate
/// cannot parse: the user information is found by hand.
mod multi_host {
    /// `(before the password, the password, after it)`, or `None` when `text` is not a
    /// URL whose authority (up to the first `/`, `?` or `#`) has user information.
    fn split(text: &str) -> Option<(&str, Option<&str>, &str)> {
        let start = text.find("://")? + 3;
        let rest = &text[start..];
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        let at = start + authority.rfind('@')?;
        let user_info = &text[start..at];
        Some(match user_info.find(':') {
            Some(colon) => (
                &text[..start + colon + 1],
                Some(&text[start + colon + 1..at]),
                &text[at..],
            ),
            None => (&text[..at], None, &text[at..]),
        })
    }

    /// `text` with its password replaced by `***`; `None` if its credentials cannot be
    /// told apart (a `@` outside the authority).
    pub(super) fn redact(text: &str) -> Option<String> {
        match split(text) {
            Some((before, Some(_), after)) => Some(format!("{before}***{after}")),
            Some((_, None, after)) if !after[1..].contains('@') => Some(text.to_owned()),
            Some(_) => None,
            None if !text.contains('@') => Some(text.to_owned()),
            None => None,
        }
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
    fn multi_host_postgres_urls_parse_and_redact() {
        let text = "postgres://app:s3cret@h1:5432,h2:5433/app?target_session_attrs=read-write";
        let url = DatabaseUrl::parse(text).unwrap();
        assert_eq!(url.backend(), Backend::Postgres);
        assert_eq!(url.expose(), text);
        assert_eq!(
            url.to_string(),
            "postgres://app:***@h1:5432,h2:5433/app?target_session_attrs=read-write"
        );
        assert!(!format!("{url:?}").contains("s3cret"));
        let plain = DatabaseUrl::parse("postgres://h1,h2/app").unwrap();
        assert_eq!(plain.to_string(), "postgres://h1,h2/app");
        let user = DatabaseUrl::parse("postgres://app@h1,h2/app").unwrap();
        let with = user.with_password("p@ss/w:rd").unwrap();
        assert_eq!(with.expose(), "postgres://app:p%40ss%2Fw%3Ard@h1,h2/app");
        assert_eq!(with.to_string(), "postgres://app:***@h1,h2/app");
        let again = with.with_password("x").unwrap();
        assert_eq!(again.expose(), "postgres://app:x@h1,h2/app");
        let error = DatabaseUrl::parse("postgres://app:s3cret@h1:1,h2:port/app").unwrap_err();
        assert!(!error.to_string().contains("s3cret"), "{error}");
        let error =
            DatabaseUrl::parse("postgres://h1,h2/app?target_session_attrs=writable").unwrap_err();
        assert!(
            error.to_string().contains("target_session_attrs"),
            "{error}"
        );
    }

    #[test]
    fn a_bad_tls_parameter_is_refused_when_parsed() {
        let error = DatabaseUrl::parse("postgres://u:s3cret@db/app?sslmode=verify").unwrap_err();
        assert!(error.reason.contains("sslmode=\"verify\""), "{error}");
        assert!(!error.to_string().contains("s3cret"), "{error}");
        assert!(DatabaseUrl::parse("mysql://db/app?ssl-mode=NOPE").is_err());
        assert!(DatabaseUrl::parse("mysql://db/app?ssl-mode=VERIFY_IDENTITY").is_ok());
    }

    #[test]
    fn user_information_is_parsed_once_into_fields() {
        let url =
            DatabaseUrl::parse("postgres://u%20%40x:p@ss:w%2Frd%25@h:5432/db?sslmode=disable")
                .unwrap();
        assert_eq!(url.user(), Some("u @x"));
        assert_eq!(url.password(), Some("p@ss:w/rd%"));
        assert_eq!(url.address(), "postgres://h:5432/db?sslmode=disable");
        assert_eq!(
            url.to_string(),
            "postgres://u%20%40x:***@h:5432/db?sslmode=disable"
        );
        let url = DatabaseUrl::parse("mysql://root@h/db").unwrap();
        assert_eq!((url.user(), url.password()), (Some("root"), None));
        let with = url.with_password("a b%").unwrap();
        assert_eq!(with.password(), Some("a b%"));
        assert_eq!(with.expose(), "mysql://root:a%20b%25@h/db");
    }

    #[test]
    fn urls_are_checked_when_parsed() {
        let error = DatabaseUrl::parse("postgres://u:s3cret@db/app?sslmod=require").unwrap_err();
        assert!(error.reason.contains("did you mean sslmode?"), "{error}");
        assert!(!error.to_string().contains("s3cret"), "{error}");
        let error = DatabaseUrl::parse("mariadb://db/").unwrap_err();
        assert!(error.reason.starts_with("names no database"), "{error}");
    }

    #[test]
    fn mariadb_scheme_is_mysql() {
        let url = DatabaseUrl::parse("mariadb://root@127.0.0.1:3306/test").unwrap();
        assert_eq!(url.backend(), Backend::Mysql);
        assert_eq!(url.expose(), "mysql://root@127.0.0.1:3306/test");
    }
}
