//! Reading the configuration: the TOML file and the `LEADERD_<SECTION>__<KEY>` variables
//! merged into one table, unknown keys refused, the table read into the section structs,
//! and the rules that join keys checked. Every rule about a name or a timing is the
//! election's own (`election::settings`), reported under the configuration key.

use std::collections::HashMap;
use std::path::Path;

use super::names::{self, known_keys};
use super::{Config, ConfigError, EnvFallback, invalid};
use crate::env_names::{ENV_PREFIX, is_config_variable, variable_of};
use crate::kubernetes::KubernetesConfig;
use crate::store::{Backend, Pooler};

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
        let mut table = match file {
            Some(path) => read_file(path)?,
            None => toml::Table::new(),
        };
        // Only LEADERD_<SECTION>__<KEY> names are configuration; the LEADERD_* variables
        // that leaderd hands to its hooks (LEADERD_TERM, …) are not.
        let mut overrides: Vec<(&String, &String)> = env
            .iter()
            .filter(|(name, _)| is_config_variable(name))
            .collect();
        overrides.sort();
        for (name, value) in &overrides {
            set(&mut table, &path_of(name), value);
        }
        reject_unknown_keys(&table, &overrides, file)?;
        let env_fallbacks = fill_node_and_election(&mut table, env, node_id)?;
        let mut config = read_sections(table)?;
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
            message: error.to_string().trim_end().to_owned(),
        })
}

/// The key path a configuration variable sets: `LEADERD_ELECTION__TTL` → election, ttl.
fn path_of(variable: &str) -> Vec<String> {
    variable
        .strip_prefix(ENV_PREFIX)
        .unwrap_or(variable)
        .split("__")
        .map(str::to_lowercase)
        .collect()
}

/// Sets `value` at `path`, making the tables on the way (over whatever the file had there).
fn set(table: &mut toml::Table, path: &[String], value: &str) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut table = table;
    for name in parents {
        let entry = table
            .entry(name.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        table = entry.as_table_mut().expect("made a table above");
    }
    table.insert(last.clone(), toml::Value::String(value.to_owned()));
}

/// The value at a dotted key, if the table has one.
fn lookup<'a>(table: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    let mut parts = key.split('.');
    let mut value = table.get(parts.next()?)?;
    for part in parts {
        value = value.as_table()?.get(part)?;
    }
    Some(value)
}

/// The table read into the section structs. A refusal names the key and the value, unless
/// it names its own (a `[hooks]` entry's key is deeper than the section).
fn read_sections(table: toml::Table) -> Result<Config, ConfigError> {
    serde_path_to_error::deserialize(toml::Value::Table(table.clone())).map_err(|error| {
        let key = error.path().to_string();
        let reason = error.inner().message().to_owned();
        if reason.starts_with(&key) {
            return ConfigError::Section(reason);
        }
        let value = match lookup(&table, &key) {
            Some(toml::Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        invalid(&key, value, reason)
    })
}

/// Puts `node.id` and `election.name` into the table where nothing set them: `--id` first,
/// then the hook variables (below), then the host name for the id.
fn fill_node_and_election(
    table: &mut toml::Table,
    env: &HashMap<String, String>,
    node_id: Option<&str>,
) -> Result<Vec<EnvFallback>, ConfigError> {
    if let Some(id) = node_id {
        set(table, &["node".into(), "id".into()], id);
    }
    let fallbacks = hook_variable_fallbacks(table, env);
    if lookup(table, "node.id").is_none() {
        let host = hostname::get().map_err(ConfigError::Hostname)?;
        set(
            table,
            &["node".into(), "id".into()],
            &host.to_string_lossy(),
        );
    }
    Ok(fallbacks)
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
    table: &mut toml::Table,
    env: &HashMap<String, String>,
) -> Vec<EnvFallback> {
    let from_hook = env.contains_key("LEADERD_EVENT");
    let mut taken = Vec::new();
    for (variable, key) in [
        ("LEADERD_NODE_ID", "node.id"),
        ("LEADERD_ELECTION", "election.name"),
    ] {
        if lookup(table, key).is_some() {
            continue;
        }
        if let Some(value) = env.get(variable).filter(|v| !v.is_empty()) {
            let path: Vec<String> = key.split('.').map(str::to_owned).collect();
            set(table, &path, value);
            taken.push(EnvFallback {
                variable,
                key,
                instead: match key {
                    "node.id" => "LEADERD_NODE__ID",
                    _ => "LEADERD_ELECTION__NAME",
                },
                from_hook,
            });
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
        crate::kubernetes::check_label_key(key)
            .map_err(|reason| invalid("kubernetes.role_label", key, reason))?;
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
    table: &toml::Table,
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
    let mut sections: Vec<_> = table.iter().collect();
    sections.sort_by(|a, b| a.0.cmp(b.0));
    for (section, value) in sections {
        let Some((_, keys)) = known.iter().find(|(s, _)| s == section) else {
            // Name a key under it too, so that the variable and the suggestion are whole.
            let key = match value.as_table().and_then(|t| t.keys().min()) {
                Some(key) => format!("{section}.{key}"),
                None => section.clone(),
            };
            return Err(unknown(key));
        };
        // A section given as a plain value is a type error that deserialization reports.
        if let Some(table) = value.as_table() {
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
