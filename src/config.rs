//! Configuration: a TOML file plus `LEADERD_<SECTION>__<KEY>` environment overrides,
//! validated into [`Config`]. Every error names the offending key and value. This file
//! holds the typed values, their errors and their TOML form; reading them is `load.rs`.

mod load;
mod preflight;

pub use crate::env_names::{DEFAULT_CONFIG_VARIABLE, is_config_variable};

use crate::election::settings::{Setting, SettingsError};
use crate::hooks::HooksConfig;
use crate::logging::LogFormat;
use crate::store::{DatabaseUrl, UrlError};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration: {0}")]
    Load(#[from] config::ConfigError),
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
        key: &'static str,
        value: String,
        reason: String,
    },
    #[error(transparent)]
    Hooks(#[from] crate::hooks::config::HookConfigError),
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

impl From<UrlError> for ConfigError {
    fn from(error: UrlError) -> Self {
        invalid("database.url", error.url, error.reason)
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
    /// `false`: an observer, which follows the election but never claims the lease.
    pub candidate: bool,
    /// `[election.health_check]`: while it fails, this node does not claim, and steps
    /// down if it leads.
    pub health_check: Option<crate::hooks::config::health_check::HealthCheckConfig>,
    /// A leader hands over to a candidate of higher priority (see `preempt_after`).
    pub priority: i64,
    /// How long a candidate of higher priority must have been a member before the leader
    /// hands over to it; zero turns preemption off.
    pub preempt_after: Duration,
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
    /// The log line format unless `--log-format` is given.
    pub log_format: LogFormat,
    /// Where to serve /leader, /status and /metrics (off unless set).
    pub http_listen: Option<std::net::SocketAddr>,
    pub hooks: HooksConfig,
    /// `[kubernetes]`: the role label on this node's pod.
    pub kubernetes: crate::kubernetes::KubernetesConfig,
    /// Hook variables taken as configuration because the real key was not set (logged
    /// once logging is up).
    pub env_fallbacks: Vec<EnvFallback>,
    /// `LEADERD_*` variables that are neither configuration, nor documented, nor close to a
    /// configuration variable (logged once, as one warning).
    pub unknown_variables: Vec<String>,
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

pub const DEFAULT_DATABASE_URL: &str = "sqlite://leaderd.sqlite3";
pub const DEFAULT_STATUS_PATH: &str = "leaderd.status.json";

impl Config {
    /// This configuration for another election (`--election NAME`), checked by the
    /// election's rules.
    pub fn with_election(mut self, name: &str) -> Result<Self, ConfigError> {
        crate::election::ElectionSettings::new(name, &self.node_id, self.ttl, self.interval)
            .map_err(|error| match ConfigError::from(error) {
                ConfigError::Invalid { value, reason, .. } => ConfigError::Invalid {
                    key: "--election",
                    value,
                    reason,
                },
                other => other,
            })?;
        self.election = name.to_owned();
        self.env_fallbacks.retain(|f| f.key != "election.name");
        Ok(self)
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
            candidate = (self.candidate)
            priority = (self.priority)
            preempt_after = (d(self.preempt_after))

            [database]
            url = (self.database_url.redacted())
            connect_timeout = (d(self.connect_timeout))
            query_timeout = (d(self.query_timeout))
            migrate = (self.migrate)
            pooler = (self.database_url.pooler().as_str())

            [status]
            path = (self.status_path.display().to_string())

            [log]
            level = (self.log_level.clone())
            format = (match self.log_format {
                LogFormat::Text => "text",
                LogFormat::Json => "json",
            })
        };
        let mut table = table;
        if let (Some(check), Some(toml::Value::Table(election))) =
            (&self.health_check, table.get_mut("election"))
        {
            election.insert("health_check".into(), toml::Value::Table(check.to_toml()));
        }
        if let Some(listen) = self.http_listen {
            let mut http = toml::Table::new();
            http.insert("listen".into(), listen.to_string().into());
            table.insert("http".into(), toml::Value::Table(http));
        }
        table.insert("hooks".into(), toml::Value::Table(self.hooks.to_toml()));
        let k = &self.kubernetes;
        if let Some(label) = &k.role_label {
            let mut kubernetes = toml::Table::new();
            kubernetes.insert("role_label".into(), label.clone().into());
            let path = |p: &PathBuf| p.display().to_string();
            for (key, value) in [
                ("pod_name", k.pod_name.clone()),
                ("namespace", k.namespace.clone()),
                ("api_url", k.api_url.clone()),
                ("token_file", k.token_file.as_ref().map(path)),
                ("ca_file", k.ca_file.as_ref().map(path)),
            ] {
                if let Some(value) = value {
                    kubernetes.insert(key.into(), value.into());
                }
            }
            table.insert("kubernetes".into(), toml::Value::Table(kubernetes));
        }
        toml::to_string(&table).unwrap_or_default()
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
        assert_eq!(c.node_id, "node-a");
        assert_eq!(c.election, "default");
        assert_eq!(c.ttl, Duration::from_millis(1200));
        assert_eq!(c.interval, Duration::from_secs(1));
        assert_eq!(c.query_timeout, c.ttl);
        assert_eq!(c.database_url.backend(), crate::store::Backend::Sqlite);
        assert_eq!(c.database_url.sqlite_path(), "leaderd.sqlite3");
        assert!(c.migrate);
        assert!(c.candidate && c.health_check.is_none());
    }

    #[test]
    fn observers_and_health_checks() {
        let c = load(
            "[election]\ncandidate = false\n[election.health_check]\ncommand = [\"/bin/check\", \"db\"]\ninterval = \"2s\"\nfailures = 2\n",
            &[],
        )
        .unwrap();
        assert!(!c.candidate);
        let check = c.health_check.as_ref().unwrap();
        assert_eq!(check.argv, ["/bin/check", "db"]);
        assert_eq!(
            (check.interval, check.failures),
            (Duration::from_secs(2), 2)
        );
        let toml = c.to_toml_redacted();
        assert!(toml.contains("candidate = false"), "{toml}");
        assert!(toml.contains("[election.health_check]"), "{toml}");
        let c = load("", &[("LEADERD_ELECTION__CANDIDATE", "false")]).unwrap();
        assert!(!c.candidate);
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
        assert!(!c.database_url.transaction_pooled());
        assert!(c.to_toml_redacted().contains("pooler = \"none\""));
        let c = load(
            "[database]\nurl = \"postgres://u@h/x\"\npooler = \"transaction\"\n",
            &[],
        )
        .unwrap();
        assert!(c.database_url.transaction_pooled());
        assert!(c.to_toml_redacted().contains("pooler = \"transaction\""));
        let c = load("", &[("LEADERD_DATABASE__POOLER", "session")]).unwrap();
        assert!(!c.database_url.transaction_pooled());
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
        assert_eq!(load("", &[]).unwrap().log_format, LogFormat::Text);
        let c = load("[log]\nformat = \"json\"\n", &[]).unwrap();
        assert_eq!(c.log_format, LogFormat::Json);
        assert!(c.to_toml_redacted().contains("format = \"json\""));
        let c = load(
            "[log]\nformat = \"json\"\n",
            &[("LEADERD_LOG__FORMAT", "text")],
        )
        .unwrap();
        assert_eq!(c.log_format, LogFormat::Text);
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
        assert_eq!(c.database_url.expose(), "postgres://app:fromfile@db/app");
        let c = load(
            &format!(
                "[database]\nurl = \"postgres://app@db/app\"\npassword_file = \"{d}/password\"\n"
            ),
            &[],
        )
        .unwrap();
        assert_eq!(c.database_url.expose(), "postgres://app:s3cret@db/app");
        assert!(!c.to_toml_redacted().contains("s3cret"));
        // systemd credentials, when the configuration names no source.
        let creds = [("CREDENTIALS_DIRECTORY", d.to_string())];
        let creds: Vec<(&str, &str)> = creds.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let c = load("", &creds).unwrap();
        assert_eq!(c.database_url.expose(), "mysql://app:credpw@db/app");
        let c = load("[database]\nurl = \"postgres://u@h/x\"\n", &creds).unwrap();
        assert_eq!(c.database_url.expose(), "postgres://u:credpw@h/x");
        // The unit's SetCredential= fallback (a lone newline) is no credential at all.
        let empty = secrets(&[("database-url", "\n"), ("database-password", "\n")]);
        let empty = [("CREDENTIALS_DIRECTORY", empty.display().to_string())];
        let empty: Vec<(&str, &str)> = empty.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let c = load("[database]\nurl = \"postgres://u@h/x\"\n", &empty).unwrap();
        assert_eq!(c.database_url.expose(), "postgres://u@h/x");
        let c = load("", &empty).unwrap();
        assert_eq!(c.database_url.expose(), "sqlite://leaderd.sqlite3");
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
        assert_eq!((c.node_id.as_str(), c.election.as_str()), ("web-1", "jobs"));
        let variables: Vec<_> = c.env_fallbacks.iter().map(|f| f.variable).collect();
        assert_eq!(variables, ["LEADERD_NODE_ID", "LEADERD_ELECTION"]);
        assert!(c.env_fallbacks.iter().all(|f| !f.from_hook));
        let note = c.env_fallbacks[0].to_string();
        assert!(note.contains("LEADERD_NODE__ID"), "{note}");
        // Under a hook, which set them with the same meaning.
        let c = load_env(&[("LEADERD_NODE_ID", "web-1"), ("LEADERD_EVENT", "elected")]);
        assert_eq!(c.node_id, "web-1");
        assert!(c.env_fallbacks[0].from_hook);
        // The real keys win, and then nothing is noted.
        let c = load_env(&[
            ("LEADERD_NODE_ID", "web-1"),
            ("LEADERD_NODE__ID", "web-2"),
            ("LEADERD_ELECTION", "jobs"),
            ("LEADERD_ELECTION__NAME", "mail"),
        ]);
        assert_eq!((c.node_id.as_str(), c.election.as_str()), ("web-2", "mail"));
        assert!(c.env_fallbacks.is_empty());
        // --id wins too.
        let c = load("", &[("LEADERD_NODE_ID", "web-1")]).unwrap();
        assert_eq!(c.node_id, "node-a");
        assert!(c.env_fallbacks.is_empty());
    }
}
