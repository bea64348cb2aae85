//! Which database a URL points at: a leaf, so that the URL and its TLS parameters can
//! both name it without importing each other.

use serde::Serialize;

/// Which database a URL points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Postgres,
    Mysql,
    Sqlite,
}
