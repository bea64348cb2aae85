//! Reading the configuration: config-rs layers the built-in defaults, the TOML file and the
//! `LEADERD_<SECTION>__<KEY>` variables (`__` between section and key), unknown keys are
//! refused with a "did you mean", and the layers are read into the section structs (whose
//! serde defaults are the one place each key's default is written). Then the rules that
//! join keys are checked. Every rule about a name or a timing is the election's own
//! (`election::settings`), reported under the configuration key.

use ::config::builder::DefaultState;
use ::config::{ConfigBuilder, Environment, Map, Source, Value, ValueKind};
use std::collections::HashMap;
use std::path::Path;

use super::kubernetes::{KubernetesConfig, check_label_key};
use super::names::{self, known_keys};
use super::{Config, ConfigError, EnvFallback, invalid};
use crate::env_names::{ENV_PREFIX, is_config_variable, variable_of};
use crate::store::{Backend, Pooler};

/// The layers before the loader's own defaults: the file, then the environment.
type Layers = ConfigBuilder<DefaultState>;

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
        let mut layers = ::config::Config::builder();
        if let Some(path) = file {
            layers = layers.add_source(TomlFile {
                origin: path.display().to_string(),
                table: read_file(path)?,
            });
        }
        // Only LEADERD_<SECTION>__<KEY> names are configuration; the LEADERD_* variables
        // that leaderd hands to its hooks (LEADERD_TERM, …) are not.
        let mut overrides: Vec<(&String, &String)> = env
            .iter()
            .filter(|(name, _)| is_config_variable(name))
            .collect();
        overrides.sort();
        let variables = overrides
            .iter()
            .map(|(name, value)| ((*name).clone(), (*value).clone()))
            .collect();
        layers = layers.add_source(
            Environment::with_prefix(ENV_PREFIX.trim_end_matches('_'))
                .prefix_separator("_")
                .separator("__")
                .source(Some(variables)),
        );
        let written = layers.build_cloned().map_err(layering)?;
        reject_unknown_keys(&sections(&written)?, &overrides, file)?;
        let (layers, env_fallbacks) = fill_node_and_election(layers, &written, env, node_id)?;
        let mut config = read_sections(layers.build().map_err(layering)?)?;
        config.check(env)?;
        config.env_fallbacks = env_fallbacks;
        config.unknown_variables = strays.unknown;
        Ok(config)
    }

    /// The rules that join keys, and the values that come from elsewhere (secrets, the
    /// downward API).
    fn check(&mut self, env: &HashMap<String, String>) -> Result<(), ConfigError> {
        let e = &self.election;
        // The election's own rules, named by configuration key.
        crate::election::ElectionSettings::new(&e.name, &self.node.id, e.ttl, e.interval)?;
        if e.name.starts_with(crate::lock::LOCK_ROW_PREFIX) {
            return Err(invalid(
                "election.name",
                &e.name,
                "names starting with \"lock:\" are the rows of `leaderd lock`; choose another",
            ));
        }
        let query_timeout_set = !self.database.query_timeout.is_zero();
        self.check_timing(query_timeout_set)?;
        let e = &self.election;
        let database = &mut self.database;
        // A statement that outlives the lease is no use to the leader: its deadline is gone.
        if database.query_timeout.is_zero() {
            database.query_timeout = e.ttl;
        }
        super::secrets::resolve(database, env.get("CREDENTIALS_DIRECTORY"))?;
        if database.pooler == Pooler::Transaction && database.url.backend() != Backend::Postgres {
            return Err(invalid(
                "database.pooler",
                database.pooler.as_str(),
                format!(
                    "only PostgreSQL connections can go through a transaction pooler, and \
                     database.url is {}",
                    database.url
                ),
            ));
        }
        database.url = database.url.clone().with_pooler(database.pooler);
        complete_kubernetes(&mut self.kubernetes, env)
    }
}

fn read_file(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    text.parse()
        .map_err(|error: toml::de::Error| ConfigError::Syntax {
            path: path.to_owned(),
            message: syntax_message(&text, &error),
        })
}

/// A TOML error in one line (toml's own display draws the line with a caret under it):
/// where, and what.
fn syntax_message(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end().replace('\n', "; ");
    match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

/// The file as a layer: its tables as config-rs values, each naming the file it came from.
#[derive(Debug, Clone)]
struct TomlFile {
    origin: String,
    table: toml::Table,
}

impl Source for TomlFile {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<Map<String, Value>, ::config::ConfigError> {
        Ok(table_value(&self.origin, &self.table))
    }
}

fn table_value(origin: &String, table: &toml::Table) -> Map<String, Value> {
    table
        .iter()
        .map(|(key, value)| (key.clone(), toml_value(origin, value)))
        .collect()
}

fn toml_value(origin: &String, value: &toml::Value) -> Value {
    let kind = match value {
        toml::Value::String(text) => ValueKind::String(text.clone()),
        toml::Value::Integer(n) => ValueKind::I64(*n),
        toml::Value::Float(x) => ValueKind::Float(*x),
        toml::Value::Boolean(flag) => ValueKind::Boolean(*flag),
        toml::Value::Datetime(when) => ValueKind::String(when.to_string()),
        toml::Value::Array(items) => {
            ValueKind::Array(items.iter().map(|v| toml_value(origin, v)).collect())
        }
        toml::Value::Table(table) => ValueKind::Table(table_value(origin, table)),
    };
    Value::new(Some(origin), kind)
}

/// config-rs's own failures: none is expected of these sources and keys.
fn layering(error: ::config::ConfigError) -> ConfigError {
    ConfigError::Section(format!("cannot read the configuration: {error}"))
}

/// The sections the layers hold, each with its keys (a section given as a plain value has
/// none: deserialization reports it).
fn sections(layered: &::config::Config) -> Result<Vec<(String, Vec<String>)>, ConfigError> {
    let mut sections: Vec<(String, Vec<String>)> = layered
        .collect()
        .map_err(layering)?
        .into_iter()
        .map(|(section, value)| {
            let mut keys: Vec<String> = match value.into_table() {
                Ok(table) => table.into_keys().collect(),
                Err(_) => Vec::new(),
            };
            keys.sort();
            (section, keys)
        })
        .collect();
    sections.sort();
    Ok(sections)
}

/// The layers read into the section structs. A refusal names the key and the value, unless
/// it names its own (a `[hooks]` entry's key is deeper than the section).
fn read_sections(layered: ::config::Config) -> Result<Config, ConfigError> {
    let values = layered.clone();
    layered.try_deserialize().map_err(|error| {
        let (key, reason) = match &error {
            ::config::ConfigError::At {
                error,
                key: Some(key),
                ..
            } => (key.clone(), error.to_string()),
            ::config::ConfigError::Type {
                unexpected,
                expected,
                key: Some(key),
                ..
            } => (
                key.clone(),
                format!("invalid type: {unexpected}, expected {expected}"),
            ),
            other => (String::new(), other.to_string()),
        };
        if key.is_empty() || reason.starts_with(&key) {
            return ConfigError::Section(reason);
        }
        let value = values
            .get::<Value>(&key)
            .map(|value| value.to_string())
            .unwrap_or_default();
        invalid(&key, value, reason)
    })
}

/// Puts `node.id` and `election.name` in where nothing set them: `--id` over everything,
/// then as defaults the hook variables (below), then the host name for the id.
fn fill_node_and_election(
    mut layers: Layers,
    written: &::config::Config,
    env: &HashMap<String, String>,
    node_id: Option<&str>,
) -> Result<(Layers, Vec<EnvFallback>), ConfigError> {
    let set = |key: &str| written.get::<Value>(key).is_ok();
    if let Some(id) = node_id {
        layers = layers.set_override("node.id", id).map_err(layering)?;
    }
    let mut fallbacks = Vec::new();
    for fallback in hook_variable_fallbacks(env) {
        if set(fallback.0.key) || (fallback.0.key == "node.id" && node_id.is_some()) {
            continue;
        }
        layers = layers
            .set_default(fallback.0.key, fallback.1)
            .map_err(layering)?;
        fallbacks.push(fallback.0);
    }
    let id_given = set("node.id") || node_id.is_some();
    if !id_given && !fallbacks.iter().any(|f| f.key == "node.id") {
        let host = hostname::get().map_err(ConfigError::Hostname)?;
        layers = layers
            .set_default("node.id", host.to_string_lossy().into_owned())
            .map_err(layering)?;
    }
    Ok((layers, fallbacks))
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
fn hook_variable_fallbacks(env: &HashMap<String, String>) -> Vec<(EnvFallback, String)> {
    let from_hook = env.contains_key("LEADERD_EVENT");
    let mut taken = Vec::new();
    for (variable, key, instead) in [
        ("LEADERD_NODE_ID", "node.id", "LEADERD_NODE__ID"),
        (
            "LEADERD_ELECTION",
            "election.name",
            "LEADERD_ELECTION__NAME",
        ),
    ] {
        if let Some(value) = env.get(variable).filter(|v| !v.is_empty()) {
            let fallback = EnvFallback {
                variable,
                key,
                instead,
                from_hook,
            };
            taken.push((fallback, value.clone()));
        }
    }
    taken
}

/// `[kubernetes]`, with the downward API's `POD_NAME` and `POD_NAMESPACE` as defaults.
/// Empty strings count as unset, so a manifest can blank a key.
fn complete_kubernetes(
    k: &mut KubernetesConfig,
    env: &HashMap<String, String>,
) -> Result<(), ConfigError> {
    let set = |value: &mut Option<String>| {
        if value.as_ref().is_some_and(|v| v.trim().is_empty()) {
            *value = None;
        }
    };
    for value in [
        &mut k.role_label,
        &mut k.pod_name,
        &mut k.namespace,
        &mut k.api_url,
    ] {
        set(value);
    }
    for path in [&mut k.token_file, &mut k.ca_file] {
        if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            *path = None;
        }
    }
    let from_env = |name: &str| env.get(name).filter(|v| !v.trim().is_empty()).cloned();
    if let Some(key) = &k.role_label {
        check_label_key(key).map_err(|reason| invalid("kubernetes.role_label", key, reason))?;
    }
    if let Some(text) = &k.api_url {
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
    k.namespace = k.namespace.take().or_else(|| from_env("POD_NAMESPACE"));
    k.pod_name = match k.pod_name.take().or_else(|| from_env("POD_NAME")) {
        Some(name) => Some(name),
        // Only needed, and only looked up, when labelling is on.
        None if k.role_label.is_some() => Some(
            hostname::get()
                .map_err(ConfigError::Hostname)?
                .to_string_lossy()
                .into_owned(),
        ),
        None => None,
    };
    Ok(())
}

/// The environment variable an unknown key came from, if it did: the one that spells it,
/// or (for an unknown section) one under it.
fn variable_for<'a>(key: &str, overrides: &[(&'a String, &String)]) -> Option<&'a String> {
    let variable = variable_of(key);
    let under = format!("{variable}__");
    overrides.iter().map(|(name, _)| *name).find(|name| {
        let name = name.to_uppercase();
        name == variable || name.starts_with(&under)
    })
}

fn reject_unknown_keys(
    sections: &[(String, Vec<String>)],
    overrides: &[(&String, &String)],
    file: Option<&Path>,
) -> Result<(), ConfigError> {
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
    let known = known_keys();
    for (section, keys) in sections {
        let Some((_, known_keys)) = known.iter().find(|(s, _)| s == section) else {
            // Name a key under it too, so that the variable and the suggestion are whole.
            let key = match keys.first() {
                Some(key) => format!("{section}.{key}"),
                None => section.clone(),
            };
            return Err(unknown(key));
        };
        if let Some(key) = keys.iter().find(|key| !known_keys.contains(&key.as_str())) {
            return Err(unknown(format!("{section}.{key}")));
        }
    }
    Ok(())
}
