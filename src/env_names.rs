//! The names of the configuration: its keys, the `LEADERD_*` environment variables, and the
//! "did you mean" for a name that is close to one of them. A typo must stop the node, not
//! run it on a default: `LEADERD_DATABASE_URL` (one underscore) would otherwise leave every
//! host on its own SQLite file, each electing itself.

use std::collections::HashMap;

/// Names another default file (tests; other layouts); empty: no default file.
pub const DEFAULT_CONFIG_VARIABLE: &str = "LEADERD_DEFAULT_CONFIG";

/// Every key leaderd reads, by section. Anything else is an error, so a typo such as
/// `election.tll` is caught instead of silently running with the default.
pub(super) const KNOWN_KEYS: &[(&str, &[&str])] = &[
    ("node", &["id"]),
    (
        "election",
        &[
            "name",
            "ttl",
            "interval",
            "candidate",
            "health_check",
            "priority",
            "preempt_after",
        ],
    ),
    (
        "database",
        &[
            "url",
            "url_file",
            "password_file",
            "connect_timeout",
            "query_timeout",
            "migrate",
            "pooler",
        ],
    ),
    ("status", &["path"]),
    ("log", &["level", "format"]),
    ("http", &["listen"]),
    (
        "kubernetes",
        &[
            "role_label",
            "pod_name",
            "namespace",
            "api_url",
            "token_file",
            "ca_file",
        ],
    ),
    ("hooks", crate::hooks::config::HOOK_KEYS),
];

pub(super) const ENV_PREFIX: &str = "LEADERD_";

/// The `LEADERD_*` variables leaderd sets for its hooks and lock commands
/// (docs/hooks-and-locks.md). A leaderd started from a hook inherits them; they are not
/// configuration, and never a typo.
pub(super) const HOOK_VARIABLES: &[&str] = &[
    "LEADERD_EVENT",
    "LEADERD_ELECTION",
    "LEADERD_NODE_ID",
    "LEADERD_ROLE",
    "LEADERD_LEADER",
    "LEADERD_PREVIOUS_LEADER",
    "LEADERD_TERM",
    "LEADERD_LOCK",
    "LEADERD_HOLDER",
];

/// Other `LEADERD_*` variables with a documented meaning that are not configuration keys:
/// the default configuration file's path, and the test suite's own (docs/testing.md).
pub(super) const OTHER_VARIABLES: &[&str] = &[
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

/// Whether `candidate` is close enough to `name` to be its typo: a letter or two off,
/// relative to the length, so that short names do not match everything.
fn close(name: &str, candidate: &str) -> Option<usize> {
    let distance = strsim::damerau_levenshtein(name, candidate);
    let allowed = match candidate.chars().count() {
        0..=3 => 1,
        4..=8 => 2,
        _ => 3,
    };
    (distance <= allowed).then_some(distance)
}

/// The closest of `candidates` to `name`, if one is close (ties: the first).
pub(super) fn closest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .filter_map(|c| close(name, c).map(|d| (d, c)))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// What to say about the unknown `key` (`section` or `section.key`): the key meant, as a
/// key or as the variable (`as_variable`), else the names it could have been.
pub(super) fn suggestion(key: &str, as_variable: bool) -> String {
    let name = |k: String| match as_variable {
        true => variable_of(&k),
        false => format!("`{k}`"),
    };
    let sections = || KNOWN_KEYS.iter().map(|(s, _)| *s);
    let all_keys = || {
        KNOWN_KEYS
            .iter()
            .flat_map(|(s, keys)| keys.iter().map(move |k| (*s, *k)))
    };
    match key.split_once('.') {
        None => match closest(key, sections()) {
            Some(section) => format!("did you mean {}?", name(section.to_owned())),
            None => format!(
                "the sections are {}",
                sections().collect::<Vec<_>>().join(", ")
            ),
        },
        Some((section, rest)) => {
            let Some((_, keys)) = KNOWN_KEYS.iter().find(|(s, _)| *s == section) else {
                // A misspelt section: keep the key if it is one of the section meant.
                let meant = closest(section, sections()).map(|s| {
                    let keys = KNOWN_KEYS.iter().find(|(k, _)| *k == s).unwrap().1;
                    let key = closest(rest, keys.iter().copied()).unwrap_or(rest);
                    format!("{s}.{key}")
                });
                return match meant {
                    Some(meant) => format!("did you mean {}?", name(meant)),
                    None => format!(
                        "the sections are {}",
                        sections().collect::<Vec<_>>().join(", ")
                    ),
                };
            };
            let key_name = rest.split('.').next().unwrap_or(rest);
            if let Some(key) = closest(key_name, keys.iter().copied()) {
                return format!("did you mean {}?", name(format!("{section}.{key}")));
            }
            // The right key in the wrong section (`[election] url`).
            if let Some((other, key)) = all_keys().find(|(_, k)| *k == key_name) {
                return format!("did you mean {}?", name(format!("{other}.{key}")));
            }
            format!("the keys of [{section}] are {}", keys.join(", "))
        }
    }
}

/// What the environment's `LEADERD_*` names say, apart from the configuration variables
/// themselves (which the loader reads, and whose unknown keys it refuses).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Strays {
    /// A name close to a configuration variable, and the variable probably meant.
    pub near_miss: Option<(String, String)>,
    /// Other unknown `LEADERD_*` names, sorted.
    pub unknown: Vec<String>,
}

/// Sorts the `LEADERD_*` names that are neither configuration nor documented variables
/// into near misses (one underscore instead of two, a misspelt section or key) and the rest.
pub(super) fn strays(env: &HashMap<String, String>) -> Strays {
    // Each variable as written with single underscores: `DATABASE_URL` for
    // `LEADERD_DATABASE__URL`, `HOOKS_ON_ELECTED` for `LEADERD_HOOKS__ON_ELECTED`.
    let collapsed: Vec<(String, String)> = KNOWN_KEYS
        .iter()
        .flat_map(|(s, keys)| keys.iter().map(move |k| format!("{s}.{k}")))
        .map(|key| (key.replace('.', "_").to_uppercase(), variable_of(&key)))
        .collect();
    let mut names: Vec<&String> = env.keys().collect();
    names.sort();
    let mut strays = Strays::default();
    for name in names {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if is_config_variable(name)
            || HOOK_VARIABLES.contains(&name.as_str())
            || OTHER_VARIABLES.contains(&name.as_str())
            || OTHER_PREFIXES.iter().any(|p| name.starts_with(p))
        {
            continue;
        }
        let upper = rest.to_uppercase();
        // A nested key (`HOOKS_ON_ELECTED_COMMAND`) starts with its section and key.
        let nested = collapsed.iter().find_map(|(short, variable)| {
            upper
                .strip_prefix(short.as_str())
                .and_then(|tail| tail.strip_prefix('_'))
                .filter(|tail| !tail.is_empty())
                .map(|tail| format!("{variable}__{tail}"))
        });
        let meant = closest(&upper, collapsed.iter().map(|(short, _)| short.as_str()))
            .and_then(|short| collapsed.iter().find(|(s, _)| s == short))
            .map(|(_, variable)| variable.clone())
            .or(nested);
        match meant {
            Some(meant) if strays.near_miss.is_none() => {
                strays.near_miss = Some((name.clone(), meant));
            }
            Some(_) => {}
            None => strays.unknown.push(name.clone()),
        }
    }
    strays
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strays_of(names: &[&str]) -> Strays {
        strays(
            &names
                .iter()
                .map(|n| (n.to_string(), "x".to_string()))
                .collect(),
        )
    }

    #[test]
    fn near_misses_name_the_variable_meant() {
        let meant = |name: &str| strays_of(&[name]).near_miss.map(|(_, m)| m);
        let cases = [
            ("LEADERD_DATABASE_URL", "LEADERD_DATABASE__URL"),
            ("LEADERD_DATABSE_URL", "LEADERD_DATABASE__URL"),
            ("LEADERD_ELECTION_TTL", "LEADERD_ELECTION__TTL"),
            ("LEADERD_STATUS_PATH", "LEADERD_STATUS__PATH"),
            ("LEADERD_LOG_LEVEL", "LEADERD_LOG__LEVEL"),
            ("LEADERD_ELECTION_NAME", "LEADERD_ELECTION__NAME"),
            (
                "LEADERD_HOOKS_ON_ELECTED_COMMAND",
                "LEADERD_HOOKS__ON_ELECTED__COMMAND",
            ),
        ];
        for (name, expected) in cases {
            assert_eq!(meant(name).as_deref(), Some(expected), "{name}");
        }
    }

    #[test]
    fn hook_variables_and_strangers_are_no_near_misses() {
        let s = strays_of(&[
            "LEADERD_EVENT",
            "LEADERD_NODE_ID",
            "LEADERD_ELECTION",
            "LEADERD_ROLE",
            "LEADERD_LEADER",
            "LEADERD_PREVIOUS_LEADER",
            "LEADERD_TERM",
            "LEADERD_LOCK",
            "LEADERD_HOLDER",
            "LEADERD_SIM_SEED",
            "LEADERD_ELECTION__TTL",
            "LEADERD_VERSION",
            "PATH",
        ]);
        assert_eq!(s.near_miss, None);
        assert_eq!(s.unknown, ["LEADERD_VERSION"]);
    }

    #[test]
    fn suggestions_for_keys_and_sections() {
        assert_eq!(
            suggestion("election.tll", false),
            "did you mean `election.ttl`?"
        );
        assert_eq!(
            suggestion("electon.ttl", true),
            "did you mean LEADERD_ELECTION__TTL?"
        );
        assert_eq!(suggestion("nodes", false), "did you mean `node`?");
        assert_eq!(
            suggestion("election.url", false),
            "did you mean `database.url`?"
        );
        let s = suggestion("log.colour", false);
        assert_eq!(s, "the keys of [log] are level, format");
    }
}
