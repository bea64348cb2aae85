//! What can go wrong with the database, as one error type for every store.

use std::time::Duration;

use super::{error_text, tls};

/// What went wrong with the database.
///
/// Each message holds its cause's text, and no variant has a `source()`: a chain printed
/// with `{:#}` says each thing once, and a log line (`%error`) keeps the root cause
/// (connection refused, no such host, a TLS or authentication failure).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot connect to {url}: {}", error_text::connection(.cause))]
    Connect {
        url: String,
        cause: diesel::ConnectionError,
    },
    #[error("cannot connect to {url}: {cause}")]
    Tls {
        url: String,
        cause: Box<tls::TlsError>,
    },
    #[error("connecting to {url} timed out after {}", humantime::format_duration(*.after))]
    ConnectTimeout { url: String, after: Duration },
    #[error("query failed: {}{}", .0, error_text::missing_table_hint(.0))]
    Query(diesel::result::Error),
    #[error(
        "the table service_leader_lock has no column {column}, which this version needs: \
         run `leaderd migrate` (or start a node with database.migrate = true)"
    )]
    SchemaOutdated { column: &'static str },
    #[error(
        "{message}: the database role lacks a privilege leaderd needs; grant it (the grants \
         each command needs are in docs/scaling-and-databases.md, \"Permissions\")"
    )]
    PermissionDenied { message: String },
    #[error("query timed out after {}", humantime::format_duration(*.after))]
    QueryTimeout { after: Duration },
    /// MySQL: the term a claim started, read back on its connection, was not above the
    /// term it claimed on top of; the claim is in doubt (its next read tells).
    #[error(
        "the database answered term {read} for a claim on top of term {after}: the read-back \
         did not come from the claim's own session (a proxy that shares server connections \
         between clients?); the claim counts as in doubt"
    )]
    StartedTermUnread { after: i64, read: i64 },
    #[error("migrations failed: {}", error_text::chain(.0.as_ref()))]
    Migration(Box<dyn std::error::Error + Send + Sync>),
    #[error(
        "another node held the migration lock ({lock}) for more than {}, so the migrations \
         were not run: retry; if it stays held, find what holds it, or run `leaderd \
         migrate` once and set database.migrate = false on the nodes",
        humantime::format_duration(*.waited)
    )]
    MigrationLockTimeout { lock: String, waited: Duration },
    #[error("database task failed: {0}")]
    Task(tokio::task::JoinError),
    #[error("this store cannot {operation}")]
    Unsupported { operation: &'static str },
    #[error(
        "{message}: the connection goes through a pooler in transaction mode (PgBouncer \
         pool_mode = transaction), where a prepared statement does not outlive its \
         transaction; set database.pooler = \"transaction\", or connect directly or through \
         a pool in session mode"
    )]
    TransactionPooler { message: String },
}

impl From<diesel::result::Error> for StoreError {
    fn from(error: diesel::result::Error) -> Self {
        StoreError::Query(error)
    }
}

impl From<tokio::task::JoinError> for StoreError {
    fn from(error: tokio::task::JoinError) -> Self {
        StoreError::Task(error)
    }
}

impl StoreError {
    /// Every [`StoreError::kind`], so that counters by kind can start at zero.
    pub const KINDS: [&'static str; 12] = [
        "connect",
        "tls",
        "connect_timeout",
        "query",
        "missing_table",
        "schema_outdated",
        "permission",
        "query_timeout",
        "migration",
        "task",
        "pooler",
        "unsupported",
    ];

    /// A short label for logs and metrics (one of [`StoreError::KINDS`]).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Connect { .. } => "connect",
            StoreError::Tls { .. } => "tls",
            StoreError::ConnectTimeout { .. } => "connect_timeout",
            // The migrations have not run here: no outage, a step left out.
            StoreError::Query(error) if error_text::missing_table(error) => "missing_table",
            StoreError::Query(_) | StoreError::StartedTermUnread { .. } => "query",
            StoreError::SchemaOutdated { .. } => "schema_outdated",
            StoreError::PermissionDenied { .. } => "permission",
            StoreError::QueryTimeout { .. } => "query_timeout",
            StoreError::Migration(_) | StoreError::MigrationLockTimeout { .. } => "migration",
            StoreError::Task(_) => "task",
            StoreError::TransactionPooler { .. } => "pooler",
            StoreError::Unsupported { .. } => "unsupported",
        }
    }

    /// A failed statement as the error that says what to do: a privilege the role lacks (a
    /// monitoring role's "permission denied for table leaderd_member" named the table, and was
    /// read as a column to migrate), or a column the table lacks (a node of this version on a
    /// table nobody migrated yet).
    pub(crate) fn diagnosed(self) -> StoreError {
        let StoreError::Query(diesel::result::Error::DatabaseError(_, info)) = &self else {
            return self;
        };
        let message = info.message();
        if permission_denied(message) {
            return StoreError::PermissionDenied {
                message: message.to_owned(),
            };
        }
        match ADDED_COLUMNS.into_iter().find(|c| message.contains(c)) {
            Some(column) => StoreError::SchemaOutdated { column },
            None => self,
        }
    }
}

/// Columns later migrations added, which a table migrated for an older version lacks.
const ADDED_COLUMNS: [&str; 9] = [
    "term_token",
    "taken_at",
    "taken_term",
    "paused_until",
    "handover_to",
    "handover_until",
    "resign_term",
    "leaderd_member",
    "standing",
];

/// Whether the server refused a privilege: PostgreSQL's 42501 ("permission denied for
/// table …"), MySQL/MariaDB's 1142 and 1143 ("SELECT command denied to user …").
fn permission_denied(message: &str) -> bool {
    message.starts_with("permission denied for")
        || (message.contains(" command denied to user ") && message.contains(" for "))
}
