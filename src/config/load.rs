//! Reading the configuration: the TOML file and the `LEADERD_<SECTION>__<KEY>` variables
//! merged, unknown keys refused, and the raw values validated into a [`Config`]. Every
//! rule about a name or a timing is the election's own (`election::settings`), reported
//! under the configuration key.

use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Config, ConfigError, DEFAULT_DATABASE_URL, DEFAULT_STATUS_PATH, EnvFallback, invalid};
use crate::duration::{POSITIVE, Rule};
use crate::env_names::{self as names, KNOWN_KEYS};
use crate::hooks::HooksConfig;
use crate::hooks::config::health_check::HealthCheckConfig;
use crate::kubernetes::KubernetesConfig;
use crate::logging::LogFormat;
use crate::store::{Backend, DatabaseUrl, Pooler};

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
    #[serde(default)]
    kubernetes: RawKubernetes,
}

#[derive(Debug, Default, Deserialize)]
struct RawKubernetes {
    role_label: Option<String>,
    pod_name: Option<String>,
    namespace: Option<String>,
    api_url: Option<String>,
    token_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
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
    candidate: Option<bool>,
    /// An integer; read as text so that a TOML integer and a variable both work.
    priority: Option<String>,
    preempt_after: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawDatabase {
    url: Option<String>,
    url_file: Option<PathBuf>,
    password_file: Option<PathBuf>,
    connect_timeout: Option<String>,
    query_timeout: Option<String>,
    migrate: Option<bool>,
    pooler: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawStatus {
    path: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
struct RawLog {
    level: Option<String>,
    format: Option<String>,
}

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
        let strays = names::strays(env);
        if let Some((variable, meant)) = strays.near_miss {
            return Err(ConfigError::NearMiss { variable, meant });
        }
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
            .filter(|(name, _)| super::is_config_variable(name))
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
        let health_check = match merged.get::<config::Value>("election.health_check") {
            Ok(value) => Some(HealthCheckConfig::parse(&value)?),
            Err(config::ConfigError::NotFound(_)) => None,
            Err(error) => return Err(error.into()),
        };
        let mut raw: RawConfig = merged.try_deserialize()?;
        let fallbacks = hook_variable_fallbacks(&mut raw, env, node_id.is_some());
        let mut config = Self::validate(raw, node_id, env)?;
        config.hooks = hooks;
        config.health_check = health_check;
        config.env_fallbacks = fallbacks;
        config.unknown_variables = strays.unknown;
        Ok(config)
    }

    fn validate(
        raw: RawConfig,
        node_id: Option<&str>,
        env: &HashMap<String, String>,
    ) -> Result<Self, ConfigError> {
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
        if election.starts_with(crate::lock::LOCK_ROW_PREFIX) {
            return Err(invalid(
                "election.name",
                &election,
                "names starting with \"lock:\" are the rows of `leaderd lock`; choose another",
            ));
        }
        let priority = match raw.election.priority.as_deref() {
            None => 0,
            Some(text) => text.trim().parse::<i64>().map_err(|_| {
                invalid(
                    "election.priority",
                    text,
                    "expected an integer (higher wins; default 0)",
                )
            })?,
        };
        let preempt_after = duration_by(
            "election.preempt_after",
            raw.election.preempt_after.as_deref().unwrap_or("10s"),
            Rule::zero_means("preemption off"),
        )?;
        let database_url = database_url(&raw.database, env.get("CREDENTIALS_DIRECTORY"))?;
        let database_url = match raw.database.pooler.as_deref() {
            None => database_url,
            Some(text) => {
                let pooler = Pooler::parse(text).ok_or_else(|| {
                    invalid(
                        "database.pooler",
                        text,
                        "expected \"none\", \"session\" or \"transaction\" (PgBouncer's pool_mode)",
                    )
                })?;
                if pooler == Pooler::Transaction && database_url.backend() != Backend::Postgres {
                    return Err(invalid(
                        "database.pooler",
                        text,
                        format!(
                            "only PostgreSQL connections can go through a transaction pooler, \
                             and database.url is {}",
                            database_url
                        ),
                    ));
                }
                database_url.with_pooler(pooler)
            }
        };
        let kubernetes = kubernetes(raw.kubernetes, env)?;
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
            candidate: raw.election.candidate.unwrap_or(true),
            health_check: None,
            priority,
            preempt_after,
            database_url,
            connect_timeout,
            query_timeout,
            migrate: raw.database.migrate.unwrap_or(true),
            status_path: raw
                .status
                .path
                .unwrap_or_else(|| PathBuf::from(DEFAULT_STATUS_PATH)),
            log_level: raw.log.level.unwrap_or_else(|| "info".to_owned()),
            log_format: match raw.log.format.as_deref() {
                None | Some("text") => LogFormat::Text,
                Some("json") => LogFormat::Json,
                Some(other) => {
                    return Err(invalid(
                        "log.format",
                        other,
                        "expected \"text\" or \"json\" (--log-format wins over it)",
                    ));
                }
            },
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
            kubernetes,
            env_fallbacks: Vec::new(),
            unknown_variables: Vec::new(),
        })
    }
}

/// `[kubernetes]`, with the downward API's `POD_NAME` and `POD_NAMESPACE` as defaults.
/// Empty strings count as unset, so a manifest can blank a key.
fn kubernetes(
    raw: RawKubernetes,
    env: &HashMap<String, String>,
) -> Result<KubernetesConfig, ConfigError> {
    let set = |value: Option<String>| value.filter(|v| !v.trim().is_empty());
    let from_env = |name: &str| set(env.get(name).cloned());
    let role_label = set(raw.role_label);
    if let Some(key) = &role_label {
        crate::kubernetes::check_label_key(key)
            .map_err(|reason| invalid("kubernetes.role_label", key, reason))?;
    }
    let api_url = set(raw.api_url);
    if let Some(text) = &api_url {
        match url::Url::parse(text) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {}
            _ => {
                return Err(invalid(
                    "kubernetes.api_url",
                    text,
                    "expected an http(s) URL such as https://10.0.0.1:443; leave it unset \
                     in a pod, where the API server is found from KUBERNETES_SERVICE_HOST",
                ));
            }
        }
    }
    let pod_name = match set(raw.pod_name).or_else(|| from_env("POD_NAME")) {
        Some(name) => Some(name),
        // Only needed, and only looked up, when labelling is on.
        None if role_label.is_some() => Some(
            hostname::get()
                .map_err(ConfigError::Hostname)?
                .to_string_lossy()
                .into_owned(),
        ),
        None => None,
    };
    let empty_path = |path: Option<PathBuf>| path.filter(|p| !p.as_os_str().is_empty());
    Ok(KubernetesConfig {
        role_label,
        pod_name,
        namespace: set(raw.namespace).or_else(|| from_env("POD_NAMESPACE")),
        api_url,
        token_file: empty_path(raw.token_file),
        ca_file: empty_path(raw.ca_file),
    })
}

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

/// The database URL: `database.url_file`, else `database.url`, else the systemd credential
/// `database-url`, else the default; then the password from `database.password_file`, else
/// from the credential `database-password`, put into it (replacing any password it has).
/// Files are read on every load, so a reload sees a rotated secret (and reports that the
/// URL changed). No error or log line carries a secret: URLs are shown redacted, password
/// files by path only.
fn database_url(
    raw: &RawDatabase,
    credentials: Option<&String>,
) -> Result<DatabaseUrl, ConfigError> {
    let from_file = |key: &'static str, path: &Path| -> Result<DatabaseUrl, ConfigError> {
        DatabaseUrl::parse(&read_secret(key, path)?).map_err(|error| ConfigError::UrlInFile {
            key,
            path: path.to_owned(),
            url: error.url,
            reason: error.reason,
        })
    };
    let url = match (&raw.url_file, &raw.url) {
        (Some(_), Some(url)) => {
            return Err(invalid(
                "database.url_file",
                DatabaseUrl::parse(url).map_or_else(|e| e.url, |u| u.redacted()),
                "database.url is set too; set one of them",
            ));
        }
        (Some(path), None) => from_file("database.url_file", path)?,
        (None, Some(url)) => DatabaseUrl::parse(url)?,
        (None, None) => match credential(credentials, CREDENTIAL_URL) {
            Some(path) => from_file("database.url_file", &path)?,
            None => DatabaseUrl::parse(DEFAULT_DATABASE_URL)?,
        },
    };
    let (key, path) = match &raw.password_file {
        Some(path) => ("database.password_file", path.clone()),
        None => match credential(credentials, CREDENTIAL_PASSWORD) {
            // A credential meant for a server is no error where the URL names SQLite.
            Some(_) if url.backend() == Backend::Sqlite => return Ok(url),
            Some(path) => ("database.password_file", path),
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

/// `LEADERD_NODE_ID` and `LEADERD_ELECTION` look like configuration variables but are not
/// (those are `LEADERD_NODE__ID` and `LEADERD_ELECTION__NAME`): set by hand, they would
/// silently do nothing, and the node would join as its host name or in the election
/// "default". They are also what leaderd sets for its hooks, with the same meaning: this
/// node's id and its election. A `leaderd status` run from `on_elected` inherits them, and
/// since leaderd keeps its own configuration variables from hooks, they are the only way
/// such a command learns which election it is about. So each is taken as the key's value
/// when the key is set nowhere else (`--id`, the environment, the file): right for the
/// hook's child, and what the hand who set it meant. The caller logs each one taken — a
/// warning naming the real variable, or a debug line under a hook (`LEADERD_EVENT` set),
/// where it is expected.
fn hook_variable_fallbacks(
    raw: &mut RawConfig,
    env: &HashMap<String, String>,
    id_given: bool,
) -> Vec<EnvFallback> {
    let from_hook = env.contains_key("LEADERD_EVENT");
    let mut taken = Vec::new();
    let mut fill = |slot: &mut Option<String>,
                    variable: &'static str,
                    key: &'static str,
                    instead: &'static str| {
        if slot.is_some() {
            return;
        }
        if let Some(value) = env.get(variable).filter(|v| !v.is_empty()) {
            *slot = Some(value.clone());
            taken.push(EnvFallback {
                variable,
                key,
                instead,
                from_hook,
            });
        }
    };
    if !id_given {
        fill(
            &mut raw.node.id,
            "LEADERD_NODE_ID",
            "node.id",
            "LEADERD_NODE__ID",
        );
    }
    fill(
        &mut raw.election.name,
        "LEADERD_ELECTION",
        "election.name",
        "LEADERD_ELECTION__NAME",
    );
    taken
}

/// The environment variable an unknown key came from, if it did: the one that spells it,
/// or (for an unknown section) one under it.
fn variable_for<'a>(key: &str, overrides: &'a HashMap<String, String>) -> Option<&'a String> {
    let variable = names::variable_of(key);
    let under = format!("{variable}__");
    let mut names: Vec<&String> = overrides.keys().collect();
    names.sort();
    names.into_iter().find(|name| {
        let name = name.to_uppercase();
        name == variable || name.starts_with(&under)
    })
}

fn reject_unknown_keys(
    merged: &config::Config,
    overrides: &HashMap<String, String>,
    file: Option<&Path>,
) -> Result<(), ConfigError> {
    let top: HashMap<String, config::Value> = merged.clone().try_deserialize()?;
    let unknown = |key: String| {
        let (origin, hint) = match variable_for(&key, overrides) {
            Some(name) => (
                format!("environment variable {name}"),
                names::suggestion(&key, true),
            ),
            None => (
                file.map_or_else(|| "the environment".to_owned(), |f| f.display().to_string()),
                names::suggestion(&key, false),
            ),
        };
        ConfigError::UnknownKey { key, origin, hint }
    };
    let mut sections: Vec<_> = top.into_iter().collect();
    sections.sort_by(|a, b| a.0.cmp(&b.0));
    for (section, value) in sections {
        let Some((_, keys)) = KNOWN_KEYS.iter().find(|(s, _)| *s == section) else {
            // Name a key under it too, so that the variable and the suggestion are whole.
            let key = match value.into_table() {
                Ok(table) => match table.keys().min() {
                    Some(key) => format!("{section}.{key}"),
                    None => section,
                },
                Err(_) => section,
            };
            return Err(unknown(key));
        };
        // A section given as a plain value is a type error that deserialization reports.
        if let Ok(table) = value.into_table() {
            let mut table_keys: Vec<&String> = table.keys().collect();
            table_keys.sort();
            if let Some(key) = table_keys
                .into_iter()
                .find(|key| !keys.contains(&key.as_str()))
            {
                return Err(unknown(format!("{section}.{key}")));
            }
        }
    }
    Ok(())
}

/// A duration key (`default` when unset), by the one set of duration rules.
fn duration(key: &'static str, text: Option<&str>, default: &str) -> Result<Duration, ConfigError> {
    duration_by(key, text.unwrap_or(default), POSITIVE)
}

fn duration_by(key: &'static str, text: &str, rule: Rule) -> Result<Duration, ConfigError> {
    rule.parse(text)
        .map_err(|reason| invalid(key, text, reason))
}
