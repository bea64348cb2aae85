//! The text form of each kind of value a key takes, as serde field attributes: durations by
//! the one set of duration rules, and flags and integers that come as text from an
//! environment variable as well as typed from the file. A refusal says only why: the
//! loader names the key and the value.

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::{Serialize, Serializer};
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use crate::duration::Rule;
use crate::logging::LogFormat;
use crate::store::{DatabaseUrl, Pooler};

/// A TOML scalar, or the same written as the text of an environment variable.
enum Scalar {
    Text(String),
    Bool(bool),
    Integer(i64),
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl Visitor<'_> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, a boolean or an integer")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(text.to_owned()))
            }
            fn visit_bool<E: de::Error>(self, flag: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(flag))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Scalar, E> {
                Ok(Scalar::Integer(n))
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

/// The text of a string, or of a typed value where only text makes sense.
pub fn text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(match Scalar::deserialize(deserializer)? {
        Scalar::Text(text) => text,
        Scalar::Bool(flag) => flag.to_string(),
        Scalar::Integer(n) => n.to_string(),
    })
}

/// `true` or `false`, typed or as text.
pub fn flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    match Scalar::deserialize(deserializer)? {
        Scalar::Bool(flag) => Ok(flag),
        Scalar::Text(text) => match text.trim() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(de::Error::custom("expected true or false")),
        },
        Scalar::Integer(_) => Err(de::Error::custom("expected true or false")),
    }
}

/// An integer, typed or as text.
pub fn integer<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    match Scalar::deserialize(deserializer)? {
        Scalar::Integer(n) => Ok(n),
        Scalar::Text(text) => text
            .trim()
            .parse()
            .map_err(|_| de::Error::custom("expected an integer (higher wins; default 0)")),
        Scalar::Bool(_) => Err(de::Error::custom(
            "expected an integer (higher wins; default 0)",
        )),
    }
}

fn by_rule<'de, D: Deserializer<'de>>(deserializer: D, rule: Rule) -> Result<Duration, D::Error> {
    rule.parse(&text(deserializer)?).map_err(de::Error::custom)
}

/// A duration the way the configuration takes it ("1m 30s").
pub fn write_duration<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    humantime::format_duration(*value)
        .to_string()
        .serialize(serializer)
}

/// A duration above zero, at most a day.
pub mod positive {
    pub use super::write_duration as serialize;

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<std::time::Duration, D::Error> {
        super::by_rule(deserializer, crate::duration::POSITIVE)
    }
}

/// `election.preempt_after`: zero turns preemption off.
pub mod preemption {
    pub use super::write_duration as serialize;

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<std::time::Duration, D::Error> {
        super::by_rule(
            deserializer,
            crate::duration::Rule::zero_means("preemption off"),
        )
    }
}

/// `database.pooler`.
pub fn pooler<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Pooler, D::Error> {
    Pooler::parse(text(deserializer)?.trim()).ok_or_else(|| {
        de::Error::custom(
            "expected \"none\", \"session\" or \"transaction\" (PgBouncer's pool_mode)",
        )
    })
}

/// The database URL, password redacted.
pub fn redacted<S: Serializer>(url: &DatabaseUrl, serializer: S) -> Result<S::Ok, S::Error> {
    url.redacted().serialize(serializer)
}

/// `log.format`.
pub mod log_format {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<LogFormat, D::Error> {
        match text(deserializer)?.as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(de::Error::custom(
                "expected \"text\" or \"json\" (--log-format wins over it)",
            )),
        }
    }

    pub fn serialize<S: Serializer>(format: &LogFormat, serializer: S) -> Result<S::Ok, S::Error> {
        match format {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
        .serialize(serializer)
    }
}

/// `http.listen`: an address and port, `:PORT` for every IPv4 address, or a host name and
/// port (`localhost:9090`, looked up now: its first IPv4 address, else its first); empty
/// is unset.
pub fn listen<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<SocketAddr>, D::Error> {
    let text = text(deserializer)?;
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let expected = "expected an address and port such as 127.0.0.1:9090, [::]:9090, :9090 \
                    (every IPv4 address) or localhost:9090";
    if let Some(port) = text.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| de::Error::custom(expected))?;
        return Ok(Some(SocketAddr::from(([0, 0, 0, 0], port))));
    }
    if let Ok(addr) = text.parse() {
        return Ok(Some(addr));
    }
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| de::Error::custom(expected))?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(de::Error::custom(expected));
    }
    use std::net::ToSocketAddrs;
    let found: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|error| {
            de::Error::custom(format!("cannot look up {host:?} ({error}); {expected}"))
        })?
        .collect();
    let first = found.iter().find(|a| a.is_ipv4()).or(found.first());
    first
        .copied()
        .map(Some)
        .ok_or_else(|| de::Error::custom(format!("{host:?} has no address; {expected}")))
}
