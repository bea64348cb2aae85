//! Configuration: a TOML file plus `LEADERD_<SECTION>__<KEY>` environment overrides, read
//! into [`Config`], one struct per section. A key is a field of its section, with its
//! default and its text form; `load.rs` checks it, and config/leaderd.toml documents it.
//! The known keys, the printed form and the reload's comparison all follow from the
//! structs. Every error names the offending key and value.

mod load;
mod names;
mod preflight;
mod secrets;
mod value;

pub use crate::env_names::DEFAULT_CONFIG_VARIABLE;

use crate::election::settings::{Setting, SettingsError};
use crate::hooks::HooksConfig;
use crate::hooks::config::health_check::HealthCheckConfig;
use crate::kubernetes::KubernetesConfig;
use crate::logging::LogFormat;
use crate::store::{DatabaseUrl, Pooler, UrlError};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "cannot read configuration file {path:?} ({source}); check the path and that leaderd's user may read it"
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("configuration file {path:?} is not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("unknown configuration key `{key}` (from {origin}); {hint}")]
    UnknownKey {
        key: String,
        origin: String,
        /// The key meant ("did you mean …?"), else the names it could have been.
        hint: String,
    },
    #[error(
        "environment variable {variable} is not one leaderd reads, so its value would be \
         ignored; did you mean {meant}? (configuration variables are \
         LEADERD_<SECTION>__<KEY>, with two underscores)"
    )]
    NearMiss {
        /// The variable set.
        variable: String,
        /// The configuration variable it is close to.
        meant: String,
    },
    #[error("{key} = {value:?}: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
    /// A section that names its own key and value (`[hooks]`, `[election.health_check]`).
    #[error("{0}")]
    Section(String),
    #[error(
        "{key} = {path:?}: cannot read the file ({source}); check the path and that leaderd's user may read it"
    )]
    SecretFile {
        key: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{key} = {path:?}: the database URL in the file ({url}) is not usable: {reason}")]
    UrlInFile {
        key: &'static str,
        path: PathBuf,
        /// Redacted.
        url: String,
        reason: String,
    },
    #[error("{key} = {path:?}: the password cannot go into database URL {url}: {reason}")]
    PasswordInUrl {
        key: &'static str,
        path: PathBuf,
        /// Redacted.
        url: String,
        reason: &'static str,
    },
    #[error("node.id is not set and the host name cannot be read ({0}); set node.id")]
    Hostname(#[source] std::io::Error),
}

fn invalid(key: &str, value: impl fmt::Display, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
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

impl From<UrlError> for ConfigError {
    fn from(error: UrlError) -> Self {
        invalid("database.url", error.url, error.reason)
    }
}

/// The validated configuration. `check-config` prints it (the database password
/// redacted), and a reload compares it section by section.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Always present: the loader fills `node.id` in when nothing sets it.
    pub node: Node,
    #[serde(default)]
    pub election: Election,
    #[serde(default)]
    pub database: Database,
    #[serde(default)]
    pub status: Status,
    #[serde(default)]
    pub log: Log,
    #[serde(default)]
    pub http: Http,
    #[serde(default)]
    pub hooks: HooksConfig,
    /// `[kubernetes]`: the role label on this node's pod.
    #[serde(default)]
    pub kubernetes: KubernetesConfig,
    /// Hook variables taken as configuration because the real key was not set (logged
    /// once logging is up).
    #[serde(skip)]
    pub env_fallbacks: Vec<EnvFallback>,
    /// `LEADERD_*` variables that are neither configuration, nor documented, nor close to a
    /// configuration variable (logged once, as one warning).
    #[serde(skip)]
    pub unknown_variables: Vec<String>,
}

/// `[node]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// This node's id in the table: the host name unless set.
    pub id: String,
}

/// `[election]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Election {
    /// Which election (row) this node joins.
    #[serde(deserialize_with = "value::text")]
    pub name: String,
    /// How long a renewal keeps the lease, by the database clock.
    #[serde(with = "value::positive")]
    pub ttl: Duration,
    /// How often a node claims or renews.
    #[serde(with = "value::positive")]
    pub interval: Duration,
    /// `false`: an observer, which follows the election but never claims the lease.
    #[serde(deserialize_with = "value::flag")]
    pub candidate: bool,
    /// A leader hands over to a candidate of higher priority (see `preempt_after`).
    #[serde(deserialize_with = "value::integer")]
    pub priority: i64,
    /// How long a candidate of higher priority must have been a member before the leader
    /// hands over to it; zero turns preemption off.
    #[serde(with = "value::preemption")]
    pub preempt_after: Duration,
    /// `[election.health_check]`: while it fails, this node does not claim, and steps
    /// down if it leads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheckConfig>,
}

impl Default for Election {
    fn default() -> Self {
        Election {
            name: "default".to_owned(),
            ttl: Duration::from_millis(1200),
            interval: Duration::from_secs(1),
            candidate: true,
            priority: 0,
            preempt_after: Duration::from_secs(10),
            health_check: None,
        }
    }
}

/// `[database]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Database {
    /// The URL in force: `url`, `url_file` or the systemd credential, with the password
    /// of `password_file` put in (`secrets.rs`). Read again on every load, so a reload
    /// sees a rotated secret.
    #[serde(skip_deserializing, serialize_with = "value::redacted")]
    pub url: DatabaseUrl,
    /// `url` as written.
    #[serde(rename(deserialize = "url"), skip_serializing)]
    url_text: Option<String>,
    #[serde(skip_serializing)]
    pub url_file: Option<PathBuf>,
    #[serde(skip_serializing)]
    pub password_file: Option<PathBuf>,
    /// Bound on establishing a connection, session set-up included.
    #[serde(with = "value::positive")]
    pub connect_timeout: Duration,
    /// Bound on one statement, client side and server side: the ttl unless set (zero
    /// until the loader puts it in).
    #[serde(with = "value::positive")]
    pub query_timeout: Duration,
    /// Apply the embedded migrations when `run` starts.
    #[serde(deserialize_with = "value::flag")]
    pub migrate: bool,
    /// What sits between leaderd and the database (PgBouncer's pool_mode).
    #[serde(deserialize_with = "value::pooler")]
    pub pooler: Pooler,
}

pub const DEFAULT_DATABASE_URL: &str = "sqlite://leaderd.sqlite3";
pub const DEFAULT_STATUS_PATH: &str = "leaderd.status.json";

impl Default for Database {
    fn default() -> Self {
        Database {
            url: DatabaseUrl::parse(DEFAULT_DATABASE_URL).expect("the default URL parses"),
            url_text: None,
            url_file: None,
            password_file: None,
            connect_timeout: Duration::from_secs(2),
            query_timeout: Duration::ZERO,
            migrate: true,
            pooler: Pooler::None,
        }
    }
}

/// `[status]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Status {
    pub path: PathBuf,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            path: PathBuf::from(DEFAULT_STATUS_PATH),
        }
    }
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Log {
    /// The default tracing filter when `RUST_LOG` is not set.
    #[serde(deserialize_with = "value::text")]
    pub level: String,
    /// The log line format unless `--log-format` is given.
    #[serde(with = "value::log_format")]
    pub format: LogFormat,
}

impl Default for Log {
    fn default() -> Self {
        Log {
            level: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

/// `[http]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Http {
    /// Where to serve /leader, /status and /metrics (off unless set).
    #[serde(
        deserialize_with = "value::listen",
        skip_serializing_if = "Option::is_none"
    )]
    pub listen: Option<SocketAddr>,
}

/// `LEADERD_NODE_ID` or `LEADERD_ELECTION` read in place of `node.id` or `election.name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvFallback {
    /// The variable that was read, e.g. `LEADERD_NODE_ID`.
    pub variable: &'static str,
    /// The configuration key it stood for, e.g. `node.id`.
    pub key: &'static str,
    /// The variable that sets the key, e.g. `LEADERD_NODE__ID`.
    pub instead: &'static str,
    /// This process runs under a hook (`LEADERD_EVENT` is set), which set the variable.
    pub from_hook: bool,
}

impl fmt::Display for EnvFallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let EnvFallback {
            variable,
            key,
            instead,
            ..
        } = self;
        write!(
            f,
            "{key} taken from {variable}, as {key} is not set; the configuration variable \
             is {instead} (with two underscores)"
        )
    }
}

/// The file read when no `--config` is given, if it exists (where the package puts it).
pub const DEFAULT_CONFIG_PATH: &str = "/etc/leaderd/leaderd.toml";

/// The default configuration file: `$LEADERD_DEFAULT_CONFIG`, else
/// [`DEFAULT_CONFIG_PATH`].
pub fn default_path() -> PathBuf {
    std::env::var_os(DEFAULT_CONFIG_VARIABLE)
        .map_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH), PathBuf::from)
}

/// The file to read when no `--config` is given: the default one, if it exists.
pub fn default_file() -> Option<PathBuf> {
    Some(default_path()).filter(|path| !path.as_os_str().is_empty() && path.exists())
}

impl Config {
    /// This configuration for another election (`--election NAME`), checked by the
    /// election's rules.
    pub fn with_election(mut self, name: &str) -> Result<Self, ConfigError> {
        let e = &self.election;
        crate::election::ElectionSettings::new(name, &self.node.id, e.ttl, e.interval).map_err(
            |error| match ConfigError::from(error) {
                ConfigError::Invalid { value, reason, .. } => invalid("--election", value, reason),
                other => other,
            },
        )?;
        self.election.name = name.to_owned();
        self.env_fallbacks.retain(|f| f.key != "election.name");
        Ok(self)
    }

    /// The effective configuration as TOML, every default spelled out and the database
    /// password redacted.
    pub fn to_toml_redacted(&self) -> String {
        toml::to_string(self).unwrap_or_else(|error| format!("# cannot be shown: {error}\n"))
    }

    /// The keys whose change a reload cannot apply (they need a restart): every section but
    /// the hooks (apart from their containment) and the log level.
    pub fn needs_restart(&self, new: &Config) -> Vec<&'static str> {
        let mut changed = Vec::new();
        let mut compare = |key: &'static str, differs: bool| {
            if differs {
                changed.push(key);
            }
        };
        compare("node", self.node != new.node);
        compare("election", self.election != new.election);
        compare("database", self.database != new.database);
        compare("status", self.status != new.status);
        compare("http", self.http != new.http);
        compare("log.format", self.log.format != new.log.format);
        compare(
            "hooks.containment",
            self.hooks.containment != new.hooks.containment,
        );
        compare("kubernetes", self.kubernetes != new.kubernetes);
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
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
        assert_eq!(c.node.id, "node-a");
        assert_eq!(c.election.name, "default");
        assert_eq!(c.election.ttl, Duration::from_millis(1200));
        assert_eq!(c.election.interval, Duration::from_secs(1));
        assert_eq!(c.database.query_timeout, c.election.ttl);
        assert_eq!(c.database.url.backend(), crate::store::Backend::Sqlite);
        assert_eq!(c.database.url.sqlite_path(), "leaderd.sqlite3");
        assert!(c.database.migrate);
        assert!(c.election.candidate && c.election.health_check.is_none());
    }

    #[test]
    fn observers_and_health_checks() {
        let c = load(
            "[election]\ncandidate = false\n[election.health_check]\ncommand = [\"/bin/check\", \"db\"]\ninterval = \"2s\"\nfailures = 2\n",
            &[],
        )
        .unwrap();
        assert!(!c.election.candidate);
        let check = c.election.health_check.as_ref().unwrap();
        assert_eq!(check.argv, ["/bin/check", "db"]);
        assert_eq!(
            (check.interval, check.failures),
            (Duration::from_secs(2), 2)
        );
        let toml = c.to_toml_redacted();
        assert!(toml.contains("candidate = false"), "{toml}");
        assert!(toml.contains("[election.health_check]"), "{toml}");
        let c = load("", &[("LEADERD_ELECTION__CANDIDATE", "false")]).unwrap();
        assert!(!c.election.candidate);
        let e = error("[election.health_check]\ncommand = \"check\"\n", &[]);
        assert!(e.contains("election.health_check.command"), "{e}");
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
        assert_eq!(c.election.ttl, Duration::from_secs(5));
        assert!(!c.database.migrate);
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
        assert!(e.contains("did you mean `election.ttl`?"), "{e}");
        // A misspelt section names the variable, and the one meant.
        let e = error("", &[("LEADERD_ELECTON__TTL", "3s")]);
        assert!(e.contains("`electon.ttl`"), "{e}");
        assert!(
            e.contains("from environment variable LEADERD_ELECTON__TTL"),
            "{e}"
        );
        assert!(e.contains("did you mean LEADERD_ELECTION__TTL?"), "{e}");
        let e = error("[nodes]\nid = \"x\"\n", &[]);
        assert!(e.contains("`nodes.id`") && e.contains("`node.id`?"), "{e}");
        // One underscore: not a configuration variable, but close to one.
        let e = error("", &[("LEADERD_DATABASE_URL", "postgres://h/db")]);
        assert!(e.contains("LEADERD_DATABASE_URL"), "{e}");
        assert!(e.contains("did you mean LEADERD_DATABASE__URL?"), "{e}");
        let c = load("", &[("LEADERD_WHATEVER", "1"), ("LEADERD_TERM", "3")]).unwrap();
        assert_eq!(c.unknown_variables, ["LEADERD_WHATEVER"]);
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
    fn pooler_mode() {
        let c = load("[database]\nurl = \"postgres://u@h/x\"\n", &[]).unwrap();
        assert!(!c.database.url.transaction_pooled());
        assert!(c.to_toml_redacted().contains("pooler = \"none\""));
        let c = load(
            "[database]\nurl = \"postgres://u@h/x\"\npooler = \"transaction\"\n",
            &[],
        )
        .unwrap();
        assert!(c.database.url.transaction_pooled());
        assert!(c.to_toml_redacted().contains("pooler = \"transaction\""));
        let c = load("", &[("LEADERD_DATABASE__POOLER", "session")]).unwrap();
        assert!(!c.database.url.transaction_pooled());
        let e = error("[database]\npooler = \"statement\"\n", &[]);
        assert!(
            e.starts_with("database.pooler = \"statement\": expected"),
            "{e}"
        );
        let e = error(
            "[database]\nurl = \"mysql://u:s3cret@h/x\"\npooler = \"transaction\"\n",
            &[],
        );
        assert!(
            e.contains("only PostgreSQL") && !e.contains("s3cret"),
            "{e}"
        );
    }

    #[test]
    fn log_format_from_file_and_environment() {
        assert_eq!(load("", &[]).unwrap().log.format, LogFormat::Text);
        let c = load("[log]\nformat = \"json\"\n", &[]).unwrap();
        assert_eq!(c.log.format, LogFormat::Json);
        assert!(c.to_toml_redacted().contains("format = \"json\""));
        let c = load(
            "[log]\nformat = \"json\"\n",
            &[("LEADERD_LOG__FORMAT", "text")],
        )
        .unwrap();
        assert_eq!(c.log.format, LogFormat::Text);
        let e = error("", &[("LEADERD_LOG__FORMAT", "xml")]);
        assert!(
            e.starts_with("log.format = \"xml\": expected \"text\" or \"json\""),
            "{e}"
        );
    }

    /// A directory of its own with `files` in it.
    fn secrets(files: &[(&str, &str)]) -> PathBuf {
        let (file, _) = tempfile();
        std::fs::remove_file(&file).unwrap();
        let dir = file.with_extension("d");
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn database_secrets_from_files_and_credentials() {
        let dir = secrets(&[
            ("url", "postgres://app:fromfile@db/app\n"),
            ("password", "s3cret\n"),
            ("bad", "postgres://app:s3cret@db:port/app\n"),
            ("database-url", "mysql://app:cred@db/app"),
            ("database-password", "credpw"),
        ]);
        let d = dir.display();
        let c = load(&format!("[database]\nurl_file = \"{d}/url\"\n"), &[]).unwrap();
        assert_eq!(c.database.url.expose(), "postgres://app:fromfile@db/app");
        let c = load(
            &format!(
                "[database]\nurl = \"postgres://app@db/app\"\npassword_file = \"{d}/password\"\n"
            ),
            &[],
        )
        .unwrap();
        assert_eq!(c.database.url.expose(), "postgres://app:s3cret@db/app");
        assert!(!c.to_toml_redacted().contains("s3cret"));
        // systemd credentials, when the configuration names no source.
        let creds = [("CREDENTIALS_DIRECTORY", d.to_string())];
        let creds: Vec<(&str, &str)> = creds.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let c = load("", &creds).unwrap();
        assert_eq!(c.database.url.expose(), "mysql://app:credpw@db/app");
        let c = load("[database]\nurl = \"postgres://u@h/x\"\n", &creds).unwrap();
        assert_eq!(c.database.url.expose(), "postgres://u:credpw@h/x");
        // The unit's SetCredential= fallback (a lone newline) is no credential at all.
        let empty = secrets(&[("database-url", "\n"), ("database-password", "\n")]);
        let empty = [("CREDENTIALS_DIRECTORY", empty.display().to_string())];
        let empty: Vec<(&str, &str)> = empty.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let c = load("[database]\nurl = \"postgres://u@h/x\"\n", &empty).unwrap();
        assert_eq!(c.database.url.expose(), "postgres://u@h/x");
        let c = load("", &empty).unwrap();
        assert_eq!(c.database.url.expose(), "sqlite://leaderd.sqlite3");
        std::fs::remove_dir_all(empty[0].1).unwrap();
        // Errors name the key and the file, never the secret.
        let e = error(&format!("[database]\nurl_file = \"{d}/bad\"\n"), &[]);
        assert!(e.starts_with("database.url_file = "), "{e}");
        assert!(e.contains("/bad") && !e.contains("s3cret"), "{e}");
        let e = error(&format!("[database]\npassword_file = \"{d}/none\"\n"), &[]);
        assert!(
            e.contains("database.password_file") && e.contains("/none"),
            "{e}"
        );
        assert!(e.contains("cannot read the file"), "{e}");
        let e = error(
            &format!("[database]\npassword_file = \"{d}/password\"\n"),
            &[],
        );
        assert!(e.contains("sqlite") && !e.contains("s3cret"), "{e}");
        let e = error(
            &format!("[database]\nurl = \"postgres://u:s3cret@h/x\"\nurl_file = \"{d}/url\"\n"),
            &[],
        );
        assert!(
            e.contains("set one of them") && !e.contains("s3cret"),
            "{e}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn kubernetes_keys_and_downward_api_defaults() {
        let c = load("", &[("POD_NAME", "web-1")]).unwrap();
        assert_eq!(c.kubernetes.role_label, None);
        let c = load(
            "[kubernetes]\nrole_label = \"leaderd.io/role\"\n",
            &[("POD_NAME", "web-1"), ("POD_NAMESPACE", "jobs")],
        )
        .unwrap();
        let k = &c.kubernetes;
        assert_eq!(k.role_label.as_deref(), Some("leaderd.io/role"));
        assert_eq!(k.pod_name.as_deref(), Some("web-1"));
        assert_eq!(k.namespace.as_deref(), Some("jobs"));
        assert!(
            c.to_toml_redacted()
                .contains("role_label = \"leaderd.io/role\"")
        );
        // The keys win over the downward API variables.
        let c = load(
            "[kubernetes]\nrole_label = \"role\"\npod_name = \"p\"\nnamespace = \"n\"\n",
            &[("POD_NAME", "web-1"), ("POD_NAMESPACE", "jobs")],
        )
        .unwrap();
        assert_eq!(c.kubernetes.pod_name.as_deref(), Some("p"));
        assert_eq!(c.kubernetes.namespace.as_deref(), Some("n"));
        let e = error("", &[("LEADERD_KUBERNETES__ROLE_LABEL", "Leaderd.io/role")]);
        assert!(
            e.starts_with(
                "kubernetes.role_label = \"Leaderd.io/role\": not a Kubernetes label key"
            ),
            "{e}"
        );
        let e = error("[kubernetes]\napi_url = \"10.0.0.1:443\"\n", &[]);
        assert!(
            e.starts_with("kubernetes.api_url = \"10.0.0.1:443\""),
            "{e}"
        );
        let e = error("[kubernetes]\nrole = \"x\"\n", &[]);
        assert!(e.contains("`kubernetes.role`"), "{e}");
    }

    fn load_env(env: &[(&str, &str)]) -> Config {
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load_from(None, &env, None).unwrap()
    }

    #[test]
    fn hook_variables_stand_in_for_unset_node_id_and_election_name() {
        let c = load_env(&[("LEADERD_NODE_ID", "web-1"), ("LEADERD_ELECTION", "jobs")]);
        assert_eq!(
            (c.node.id.as_str(), c.election.name.as_str()),
            ("web-1", "jobs")
        );
        let variables: Vec<_> = c.env_fallbacks.iter().map(|f| f.variable).collect();
        assert_eq!(variables, ["LEADERD_NODE_ID", "LEADERD_ELECTION"]);
        assert!(c.env_fallbacks.iter().all(|f| !f.from_hook));
        let note = c.env_fallbacks[0].to_string();
        assert!(note.contains("LEADERD_NODE__ID"), "{note}");
        // Under a hook, which set them with the same meaning.
        let c = load_env(&[("LEADERD_NODE_ID", "web-1"), ("LEADERD_EVENT", "elected")]);
        assert_eq!(c.node.id, "web-1");
        assert!(c.env_fallbacks[0].from_hook);
        // The real keys win, and then nothing is noted.
        let c = load_env(&[
            ("LEADERD_NODE_ID", "web-1"),
            ("LEADERD_NODE__ID", "web-2"),
            ("LEADERD_ELECTION", "jobs"),
            ("LEADERD_ELECTION__NAME", "mail"),
        ]);
        assert_eq!(
            (c.node.id.as_str(), c.election.name.as_str()),
            ("web-2", "mail")
        );
        assert!(c.env_fallbacks.is_empty());
        // --id wins too.
        let c = load("", &[("LEADERD_NODE_ID", "web-1")]).unwrap();
        assert_eq!(c.node.id, "node-a");
        assert!(c.env_fallbacks.is_empty());
    }

    #[test]
    fn a_reload_names_the_sections_that_need_a_restart() {
        let old = load("[database]\nurl = \"postgres://u:one@h/x\"\n", &[]).unwrap();
        let same = |toml: &str, env: &[(&str, &str)]| old.needs_restart(&load(toml, env).unwrap());
        let base = "[database]\nurl = \"postgres://u:one@h/x\"\n";
        // What a reload applies: the hooks and the log level.
        assert!(same(base, &[("LEADERD_LOG__LEVEL", "debug")]).is_empty());
        let hooks = format!("{base}[hooks]\non_elected = [\"/bin/true\"]\n");
        assert!(same(&hooks, &[]).is_empty());
        // A rotated password, though the printed form is the same.
        assert_eq!(
            same("[database]\nurl = \"postgres://u:two@h/x\"\n", &[]),
            ["database"]
        );
        assert_eq!(
            same(base, &[("LEADERD_ELECTION__PRIORITY", "3")]),
            ["election"]
        );
        assert_eq!(
            same(base, &[("LEADERD_HOOKS__CONTAINMENT", "subreaper")]),
            ["hooks.containment"]
        );
    }
}
