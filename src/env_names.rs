//! The names of the `LEADERD_*` environment variables: the configuration's, and the others
//! leaderd sets or reads. The configuration's keys, and the "did you mean" for a name close
//! to one of them, are `config/names.rs`'s.

/// Names another default file (tests; other layouts); empty: no default file.
pub const DEFAULT_CONFIG_VARIABLE: &str = "LEADERD_DEFAULT_CONFIG";

pub(crate) const ENV_PREFIX: &str = "LEADERD_";

/// The `LEADERD_*` variables leaderd sets for its hooks and lock commands
/// (docs/hooks-and-locks.md). A leaderd started from a hook inherits them; they are not
/// configuration, and never a typo.
const HOOK_VARIABLES: &[&str] = &[
    "LEADERD_EVENT",
    "LEADERD_ELECTION",
    "LEADERD_NODE_ID",
    "LEADERD_ROLE",
    "LEADERD_LEADER",
    "LEADERD_PREVIOUS_LEADER",
    "LEADERD_TERM",
    "LEADERD_FENCE",
    "LEADERD_LOCK",
    "LEADERD_HOLDER",
];

/// Other `LEADERD_*` variables with a documented meaning that are not configuration keys:
/// the default configuration file's path, and the test suite's own (docs/testing.md).
const OTHER_VARIABLES: &[&str] = &[
    DEFAULT_CONFIG_VARIABLE,
    "LEADERD_OLD_RELEASE",
    "LEADERD_FAULT_SEED",
    "LEADERD_KUBERNETES_VALIDATE",
    "LEADERD_PROMTOOL",
    // build.rs's, which cargo also sets for the test binaries it runs (and so for every
    // leaderd they start).
    "LEADERD_COMMIT",
];

/// Prefixes of the test suite's variables (the simulator's `LEADERD_SIM_SEED`, …).
const OTHER_PREFIXES: &[&str] = &["LEADERD_SIM_"];

/// Whether `name` is one of leaderd's configuration variables, `LEADERD_<SECTION>__<KEY>`
/// (`LEADERD_DATABASE__URL` carries the password). The `LEADERD_*` variables leaderd hands
/// to its hooks (`LEADERD_TERM`, `LEADERD_NODE_ID`, …) have no `__` and are not.
pub fn is_config_variable(name: &str) -> bool {
    name.strip_prefix(ENV_PREFIX)
        .is_some_and(|rest| rest.contains("__"))
}

/// The variable that sets `key` (`election.ttl` → `LEADERD_ELECTION__TTL`).
pub fn variable_of(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.replace('.', "__")).to_uppercase()
}

/// Whether `name` is a documented `LEADERD_*` variable that is not configuration: one
/// leaderd sets for its hooks, or one of the others it or its tests read.
pub fn is_documented(name: &str) -> bool {
    HOOK_VARIABLES.contains(&name)
        || OTHER_VARIABLES.contains(&name)
        || OTHER_PREFIXES.iter().any(|p| name.starts_with(p))
}
