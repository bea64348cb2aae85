//! Configuration: a TOML file plus `LEADERD_<SECTION>__<KEY>` environment overrides,
//! validated into [`Config`]. Every error names the offending key and value.

use serde::{Deserialize, Serialize};

use crate::election::settings::{self, Setting, SettingsError};
use crate::hooks::HooksConfig;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every key leaderd reads, by section. Anything else is an error, so a typo such as
/// `election.tll` is caught instead of silently running with the default.
const KNOWN_KEYS: &[(&str, &[&str])] = &[
    ("node", &["id"]),
    ("election", &["name", "ttl", "interval"]),
    (
        "database",
        &["url", "connect_timeout", "query_timeout", "migrate"],
    ),
    ("status", &["path"]),
    ("log", &["level"]),
    ("http", &["listen"]),
    ("hooks", crate::hooks::config::HOOK_KEYS),
];

const ENV_PREFIX: &str = "LEADERD_";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration: {0}")]
    Load(#[from] config::ConfigError),
    #[error("unknown configuration key `{key}` (from {origin}); known keys: {known}")]
    UnknownKey {
        key: String,
        origin: String,
        known: String,
    },
    #[error("{key} = {value:?}: {reason}")]
    Invalid {
        key: &'static str,
        value: String,
        reason: String,
    },
    #[error(transparent)]
    Hooks(#[from] crate::hooks::config::HookConfigError),
    #[error("node.id is not set and the host name cannot be read ({0}); set node.id")]
    Hostname(#[source] std::io::Error),
}

fn invalid(key: &'static str, value: impl fmt::Display, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// The configuration key of each election setting.
fn key_of(setting: Setting) -> &'static str {
    match setting {
        Setting::Name => "election.name",
        Setting::NodeId => "node.id",
        Setting::Ttl => "election.ttl",
        Setting::Interval => "election.interval",
        // Not configurable: the daemon polls once per interval.
        Setting::Poll => "election.interval",
    }
}

impl From<SettingsError> for ConfigError {
    fn from(error: SettingsError) -> Self {
        invalid(key_of(error.setting()), error.value(), error.reason(key_of))
    }
}

/// Which database a URL points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Postgres,
    Mysql,
    Sqlite,
}

/// A database URL whose password never reaches a log line: `Display` and `Debug` redact it,
/// and only [`DatabaseUrl::expose`] gives the real text to the driver.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    url: String,
    backend: Backend,
}

impl DatabaseUrl {
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let bad = |reason: &str| invalid("database.url", redact(text), reason);
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

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node's id in the table (the container id of the seed): the host name unless set.
    pub node_id: String,
    /// Which election (row) this node joins.
    pub election: String,
    /// How long a renewal keeps the lease, by the database clock.
    pub ttl: Duration,
    /// How often a node claims or renews.
    pub interval: Duration,
    pub database_url: DatabaseUrl,
    /// Bound on establishing a connection, session set-up included.
    pub connect_timeout: Duration,
    /// Bound on one statement, client side and server side.
    pub query_timeout: Duration,
    /// Apply the embedded migrations when `run` starts.
    pub migrate: bool,
    pub status_path: PathBuf,
    /// The default tracing filter when `RUST_LOG` is not set.
    pub log_level: String,
    /// Where to serve /leader, /status and /metrics (off unless set).
    pub http_listen: Option<std::net::SocketAddr>,
    pub hooks: HooksConfig,
}

#[derive(Debug, Default, Deserialize)]
struct RawConfig {
    #[serde(default)]
    node: RawNode,
    #[serde(default)]
    election: RawElection,
    #[serde(default)]
    database: RawDatabase,
    #[serde(default)]
    status: RawStatus,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    http: RawHttp,
}

#[derive(Debug, Default, Deserialize)]
struct RawHttp {
    listen: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawNode {
    id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawElection {
    name: Option<String>,
    ttl: Option<String>,
    interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawDatabase {
    url: Option<String>,
    connect_timeout: Option<String>,
    query_timeout: Option<String>,
    migrate: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
struct RawStatus {
    path: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
struct RawLog {
    level: Option<String>,
}

pub const DEFAULT_DATABASE_URL: &str = "sqlite://leaderd.sqlite3";
pub const DEFAULT_STATUS_PATH: &str = "leaderd.status.json";

impl Config {
    /// Reads `file` (if given) and the environment, then validates. `node_id` (from
    /// `--id`) wins over both.
    pub fn load(file: Option<&Path>, node_id: Option<&str>) -> Result<Self, ConfigError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        Self::load_from(file, &env, node_id)
    }

    /// [`Config::load`] with the environment given explicitly.
    pub fn load_from(
        file: Option<&Path>,
        env: &HashMap<String, String>,
        node_id: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let mut builder = config::Config::builder();
        if let Some(file) = file {
            builder = builder.add_source(
                config::File::from(file)
                    .format(config::FileFormat::Toml)
                    .required(true),
            );
        }
        // Only LEADERD_<SECTION>__<KEY> names are configuration; the LEADERD_* variables
        // that leaderd hands to its hooks (LEADERD_TERM, …) are not.
        let overrides: HashMap<String, String> = env
            .iter()
            .filter(|(name, _)| {
                name.strip_prefix(ENV_PREFIX)
                    .is_some_and(|rest| rest.contains("__"))
            })
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        builder = builder.add_source(
            config::Environment::with_prefix("LEADERD")
                .prefix_separator("_")
                .separator("__")
                .source(Some(overrides.clone())),
        );
        let merged = builder.build()?;
        reject_unknown_keys(&merged, &overrides, file)?;
        let hooks = match merged.get::<config::Map<String, config::Value>>("hooks") {
            Ok(table) => HooksConfig::parse(&table)?,
            Err(config::ConfigError::NotFound(_)) => HooksConfig::default(),
            Err(error) => return Err(error.into()),
        };
        let raw: RawConfig = merged.try_deserialize()?;
        let mut config = Self::validate(raw, node_id)?;
        config.hooks = hooks;
        Ok(config)
    }

    fn validate(raw: RawConfig, node_id: Option<&str>) -> Result<Self, ConfigError> {
        let node_id = match node_id.map(str::to_owned).or(raw.node.id) {
            Some(id) => id,
            None => hostname::get()
                .map_err(ConfigError::Hostname)?
                .to_string_lossy()
                .into_owned(),
        };
        let election = raw.election.name.unwrap_or_else(|| "default".to_owned());
        let ttl = duration("election.ttl", raw.election.ttl.as_deref(), "1200ms")?;
        let interval = duration("election.interval", raw.election.interval.as_deref(), "1s")?;
        // The election's own rules, named by configuration key.
        crate::election::ElectionSettings::new(&election, &node_id, ttl, interval)?;
        let database_url =
            DatabaseUrl::parse(raw.database.url.as_deref().unwrap_or(DEFAULT_DATABASE_URL))?;
        let connect_timeout = duration(
            "database.connect_timeout",
            raw.database.connect_timeout.as_deref(),
            "2s",
        )?;
        // A statement that outlives the lease is no use to the leader: its deadline is gone.
        let query_timeout = match raw.database.query_timeout.as_deref() {
            Some(text) => duration("database.query_timeout", Some(text), "")?,
            None => ttl,
        };
        Ok(Config {
            node_id,
            election,
            ttl,
            interval,
            database_url,
            connect_timeout,
            query_timeout,
            migrate: raw.database.migrate.unwrap_or(true),
            status_path: raw
                .status
                .path
                .unwrap_or_else(|| PathBuf::from(DEFAULT_STATUS_PATH)),
            log_level: raw.log.level.unwrap_or_else(|| "info".to_owned()),
            http_listen: match raw.http.listen.as_deref() {
                None | Some("") => None,
                Some(text) => Some(text.parse().map_err(|_| {
                    invalid(
                        "http.listen",
                        text,
                        "expected an address and port such as 127.0.0.1:9090 or [::]:9090",
                    )
                })?),
            },
            hooks: HooksConfig::default(),
        })
    }

    /// The effective configuration as TOML, with the database password redacted.
    pub fn to_toml_redacted(&self) -> String {
        let d = |d: Duration| humantime::format_duration(d).to_string();
        let table = toml::toml! {
            [node]
            id = (self.node_id.clone())

            [election]
            name = (self.election.clone())
            ttl = (d(self.ttl))
            interval = (d(self.interval))

            [database]
            url = (self.database_url.redacted())
            connect_timeout = (d(self.connect_timeout))
            query_timeout = (d(self.query_timeout))
            migrate = (self.migrate)

            [status]
            path = (self.status_path.display().to_string())

            [log]
            level = (self.log_level.clone())
        };
        let mut table = table;
        if let Some(listen) = self.http_listen {
            let mut http = toml::Table::new();
            http.insert("listen".into(), listen.to_string().into());
            table.insert("http".into(), toml::Value::Table(http));
        }
        table.insert("hooks".into(), toml::Value::Table(self.hooks.to_toml()));
        toml::to_string(&table).unwrap_or_default()
    }
}

/// Names where an unknown key came from: the environment variable, or the file.
fn origin_of(key: &str, overrides: &HashMap<String, String>, file: Option<&Path>) -> String {
    let variable = format!("{ENV_PREFIX}{}", key.replace('.', "__")).to_uppercase();
    match overrides
        .keys()
        .find(|name| name.to_uppercase() == variable)
    {
        Some(name) => format!("environment variable {name}"),
        None => file.map_or_else(|| "the environment".to_owned(), |f| f.display().to_string()),
    }
}

fn reject_unknown_keys(
    merged: &config::Config,
    overrides: &HashMap<String, String>,
    file: Option<&Path>,
) -> Result<(), ConfigError> {
    let top: HashMap<String, config::Value> = merged.clone().try_deserialize()?;
    let unknown = |key: String| ConfigError::UnknownKey {
        origin: origin_of(&key, overrides, file),
        key,
        known: KNOWN_KEYS
            .iter()
            .flat_map(|(section, keys)| keys.iter().map(move |k| format!("{section}.{k}")))
            .collect::<Vec<_>>()
            .join(", "),
    };
    for (section, value) in top {
        let Some((_, keys)) = KNOWN_KEYS.iter().find(|(s, _)| *s == section) else {
            return Err(unknown(section));
        };
        // A section given as a plain value is a type error that deserialization reports.
        if let Ok(table) = value.into_table() {
            if let Some(key) = table.keys().find(|key| !keys.contains(&key.as_str())) {
                return Err(unknown(format!("{section}.{key}")));
            }
        }
    }
    Ok(())
}

fn duration(key: &'static str, text: Option<&str>, default: &str) -> Result<Duration, ConfigError> {
    let text = text.unwrap_or(default);
    let value = humantime::parse_duration(text.trim()).map_err(|e| {
        invalid(
            key,
            text,
            format!("not a duration ({e}); write it like \"1200ms\", \"1s\" or \"1m 30s\""),
        )
    })?;
    // Every duration has the election's bounds; the error's reason is used, under `key`.
    match settings::check_duration(Setting::Ttl, value) {
        Ok(()) => Ok(value),
        Err(error) => Err(invalid(key, text, error.reason(key_of))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn load(toml: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut file = tempfile();
        file.1.write_all(toml.as_bytes()).unwrap();
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let result = Config::load_from(Some(&file.0), &env, Some("node-a"));
        std::fs::remove_file(&file.0).unwrap();
        result
    }

    fn tempfile() -> (PathBuf, std::fs::File) {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "leaderd-config-{}-{}.toml",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let file = std::fs::File::create(&path).unwrap();
        (path, file)
    }

    fn error(toml: &str, env: &[(&str, &str)]) -> String {
        load(toml, env).unwrap_err().to_string()
    }

    #[test]
    fn defaults() {
        let c = load("", &[]).unwrap();
        assert_eq!(c.node_id, "node-a");
        assert_eq!(c.election, "default");
        assert_eq!(c.ttl, Duration::from_millis(1200));
        assert_eq!(c.interval, Duration::from_secs(1));
        assert_eq!(c.query_timeout, c.ttl);
        assert_eq!(c.database_url.backend(), Backend::Sqlite);
        assert_eq!(c.database_url.sqlite_path(), "leaderd.sqlite3");
        assert!(c.migrate);
    }

    #[test]
    fn environment_overrides_file() {
        let c = load(
            "[election]\nttl = \"3s\"\n",
            &[
                ("LEADERD_ELECTION__TTL", "5s"),
                ("LEADERD_DATABASE__MIGRATE", "false"),
                // Hook variables are not configuration.
                ("LEADERD_TERM", "7"),
                ("LEADERD_NODE_ID", "x"),
            ],
        )
        .unwrap();
        assert_eq!(c.ttl, Duration::from_secs(5));
        assert!(!c.migrate);
        let c = load("", &[("LEADERD_HOOKS__CONTAINMENT", "subreaper")]).unwrap();
        assert_eq!(
            c.hooks.containment,
            crate::hooks::ContainmentMode::Subreaper
        );
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = error("[election]\ntll = \"3s\"\n", &[]);
        assert!(e.contains("`election.tll`"), "{e}");
        let e = error("", &[("LEADERD_ELECTON__TTL", "3s")]);
        assert!(e.contains("`electon`"), "{e}");
        let e = error("[nodes]\nid = \"x\"\n", &[]);
        assert!(e.contains("`nodes`"), "{e}");
    }

    #[test]
    fn bad_values_name_key_and_value() {
        let e = error("[election]\nttl = \"2x\"\n", &[]);
        assert!(
            e.starts_with("election.ttl = \"2x\": not a duration"),
            "{e}"
        );
        let e = error("[election]\nttl = \"1s\"\n", &[]);
        assert!(
            e.contains("election.ttl = \"1s\": must be greater than election.interval"),
            "{e}"
        );
        let e = error("[database]\nurl = \"redis://localhost\"\n", &[]);
        assert!(
            e.contains("database.url = \"redis://localhost\": unknown scheme \"redis\""),
            "{e}"
        );
        let e = error("[election]\nname = \"\"\n", &[]);
        assert!(e.contains("election.name = \"\": must not be empty"), "{e}");
        let long = "x".repeat(101);
        let e = Config::load_from(None, &HashMap::new(), Some(&long))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is 101 characters long"), "{e}");
        let e = Config::load_from(None, &HashMap::new(), Some(""))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("node.id = \"\": must not be empty"), "{e}");
    }

    #[test]
    fn a_ttl_must_leave_room_for_a_renewal() {
        let e = error("[election]\nttl = \"1003ms\"\n", &[]);
        assert!(
            e.contains("election.ttl = \"1s 3ms\": leaves 3ms after election.interval (1s)"),
            "{e}"
        );
        assert!(load("[election]\nttl = \"1020ms\"\n", &[]).is_ok());
        let e = error("[election]\nttl = \"100years\"\n", &[]);
        assert!(e.contains("must be at most a day"), "{e}");
    }

    #[test]
    fn passwords_are_redacted() {
        let url = DatabaseUrl::parse("postgres://app:s3cret@db:5432/app").unwrap();
        assert_eq!(url.to_string(), "postgres://app:***@db:5432/app");
        assert!(!format!("{url:?}").contains("s3cret"));
        let e = error("[database]\nurl = \"ftp://u:s3cret@h/x\"\n", &[]);
        assert!(!e.contains("s3cret"), "{e}");
        let c = load(
            "[database]\nurl = \"mysql://root:s3cret@127.0.0.1/test\"\n",
            &[],
        )
        .unwrap();
        assert!(!c.to_toml_redacted().contains("s3cret"));
    }

    #[test]
    fn mariadb_scheme_is_mysql() {
        let url = DatabaseUrl::parse("mariadb://root@127.0.0.1:3306/test").unwrap();
        assert_eq!(url.backend(), Backend::Mysql);
        assert_eq!(url.expose(), "mysql://root@127.0.0.1:3306/test");
    }
}
