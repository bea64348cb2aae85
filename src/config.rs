//! Configuration: a TOML file plus `LEADERD_<SECTION>__<KEY>` environment overrides, read
//! into [`Config`], one struct per section. A key is a field of its section, with its
//! default and its text form; `load.rs` checks it, and config/leaderd.toml documents it.
//! The known keys, the printed form and the reload's comparison all follow from the
//! structs. Every error names the offending key and value.

mod kubernetes;
mod load;
mod names;
mod preflight;
mod secrets;
mod timing;
mod value;

pub use kubernetes::KubernetesConfig;
pub use preflight::PreflightError;

pub use crate::env_names::DEFAULT_CONFIG_VARIABLE;

use crate::election::settings::{Setting, SettingsError};
use crate::hooks::HooksConfig;
use crate::hooks::config::health_check::HealthCheckConfig;
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
    /// Settings that are legal but unwise (`timing.rs`), logged once logging is up.
    #[serde(skip)]
    pub warnings: Vec<String>,
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
    /// Where `url` came from: only `run` takes the embedded default.
    #[serde(skip)]
    pub source: UrlSource,
}

/// Where the database URL in force came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UrlSource {
    /// Nothing named a database: the embedded default, [`DEFAULT_DATABASE_URL`].
    #[default]
    Default,
    /// `database.url`, from the file or `LEADERD_DATABASE__URL`.
    Url,
    /// `database.url_file`.
    UrlFile,
    /// The systemd credential `database-url`.
    Credential,
    /// `--database URL`.
    Flag,
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
            source: UrlSource::Default,
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
    /// The store of this configuration's database; `migrate` brings its tables up to
    /// date on first use. Opening it connects to nothing yet.
    pub fn store(&self, migrate: bool) -> crate::store::SqlStore {
        crate::store::SqlStore::new(
            self.database.url.clone(),
            crate::store::Timeouts {
                connect: self.database.connect_timeout,
                query: self.database.query_timeout,
            },
            migrate,
        )
    }

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

    /// The keys whose change a reload cannot apply (they need a restart), each once:
    /// every key but the hooks' (apart from their containment) and the log level. The
    /// query timeout counts only where it is set, not where it follows the ttl.
    pub fn needs_restart(&self, new: &Config) -> Vec<String> {
        let (old_keys, new_keys) = (self.keys(), new.keys());
        let mut names: Vec<&String> = old_keys.keys().chain(new_keys.keys()).collect();
        names.sort();
        names.dedup();
        let follows_ttl = |c: &Config| c.database.query_timeout == c.election.ttl;
        let mut changed: Vec<String> = names
            .into_iter()
            .filter(|key| old_keys.get(*key) != new_keys.get(*key))
            .filter(|key| {
                (!key.starts_with("hooks.") || *key == "hooks.containment")
                    && *key != "log.level"
                    && (*key != "database.query_timeout"
                        || !(follows_ttl(self) && follows_ttl(new)))
            })
            .cloned()
            .collect();
        // The printed URL hides the password; a rotated one is a change all the same.
        if self.database.url != new.database.url && !changed.iter().any(|k| k == "database.url") {
            changed.push("database.url (its password)".to_owned());
        }
        changed
    }

    /// Every `section.key` as printed (a table below a key, such as
    /// `election.health_check`, counts as one value).
    fn keys(&self) -> std::collections::BTreeMap<String, toml::Value> {
        let table = toml::Table::try_from(self).unwrap_or_default();
        let mut keys = std::collections::BTreeMap::new();
        for (section, value) in table {
            match value {
                toml::Value::Table(entries) => {
                    for (key, value) in entries {
                        keys.insert(format!("{section}.{key}"), value);
                    }
                }
                other => {
                    keys.insert(section, other);
                }
            }
        }
        keys
    }
}

#[cfg(test)]
mod tests;
