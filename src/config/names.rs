//! The configuration's key names, taken from the section structs, and the "did you mean"
//! for a name that is close to one of them. A typo must stop the node, not run it on a
//! default: `LEADERD_DATABASE_URL` (one underscore) would otherwise leave every host on its
//! own SQLite file, each electing itself.

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use std::collections::HashMap;

use crate::env_names::{ENV_PREFIX, is_config_variable, is_documented, variable_of};

/// A section's name and its keys.
pub(super) type Section = (&'static str, &'static [&'static str]);

/// Every key leaderd reads, by section: the fields of each section's struct. Anything else
/// is an error, so a typo such as `election.tll` is caught instead of silently running
/// with the default.
pub(super) fn known_keys() -> Vec<Section> {
    vec![
        ("node", fields::<super::Node>()),
        ("election", fields::<super::Election>()),
        ("database", fields::<super::Database>()),
        ("status", fields::<super::Status>()),
        ("log", fields::<super::Log>()),
        ("http", fields::<super::Http>()),
        ("hooks", crate::hooks::config::HOOK_KEYS),
        ("kubernetes", fields::<super::KubernetesConfig>()),
    ]
}

/// The field names a derived `Deserialize` reads, which it hands to `deserialize_struct`.
pub(super) fn fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Fields<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Fields<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("only the field names were wanted"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut fields));
    fields
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
fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .filter_map(|c| close(name, c).map(|d| (d, c)))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// What to say about the unknown `key` (`section` or `section.key`): the key meant, as a
/// key or as the variable (`as_variable`), else the names it could have been.
pub(super) fn suggestion(key: &str, as_variable: bool) -> String {
    let known = known_keys();
    let name = |k: String| match as_variable {
        true => variable_of(&k),
        false => format!("`{k}`"),
    };
    let sections = || known.iter().map(|(s, _)| *s);
    let all_keys = || {
        known
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
            let Some((_, keys)) = known.iter().find(|(s, _)| *s == section) else {
                // A misspelt section: keep the key if it is one of the section meant.
                let meant = closest(section, sections()).map(|s| {
                    let keys = known.iter().find(|(k, _)| *k == s).unwrap().1;
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
    let collapsed: Vec<(String, String)> = known_keys()
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
        if is_config_variable(name) || is_documented(name) {
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
    fn the_known_sections_are_the_configuration_s_fields() {
        let sections: Vec<_> = known_keys().iter().map(|(s, _)| *s).collect();
        assert_eq!(sections, fields::<super::super::Config>());
        let election = known_keys()[1].1;
        assert!(election.contains(&"health_check") && election.contains(&"ttl"));
        let database = known_keys()[2].1;
        for key in ["url", "url_file", "password_file", "pooler"] {
            assert!(database.contains(&key), "{database:?}");
        }
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
            "LEADERD_FENCE",
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
