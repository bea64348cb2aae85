//! The fence's statement on each backend (docs/fencing.md): what leader work runs, last,
//! inside its own transaction. It is handed out as text (`LEADERD_FENCE`, for any client
//! and shell), so the election and the term are written into it as literals. What it does
//! is installed by the migrations `migrations/<backend>/2026-11-27-000000_add_fence`:
//! a PL/pgSQL function (PostgreSQL), a procedure (MySQL/MariaDB), a view with an INSTEAD
//! OF trigger (SQLite).

use crate::store::Backend;

/// The fence on `backend`, its parameters (election, term) written `?`: what
/// `Fence::check` prepares once per connection and binds each term to.
pub(in crate::store) fn fence_call(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "SELECT leaderd_fence(?, ?)",
        Backend::Mysql => "CALL leaderd_fence(?, ?)",
        Backend::Sqlite => "INSERT INTO leaderd_fence (election, term) VALUES (?, ?)",
    }
}

/// The fence of `term` of `election` on `backend`, ready to run: [`fence_call`] with its
/// parameters written in as literals.
pub(in crate::store) fn fence_statement(backend: Backend, election: &str, term: i64) -> String {
    let election = match backend {
        Backend::Postgres => postgres_text(election),
        Backend::Mysql => mysql_text(election),
        Backend::Sqlite => sqlite_text(election),
    };
    let mut pieces = fence_call(backend).split('?');
    let (before, between, after) = (pieces.next(), pieces.next(), pieces.next());
    let (before, between, after) = (
        before.unwrap_or_default(),
        between.unwrap_or_default(),
        after.unwrap_or_default(),
    );
    format!("{before}{election}{between}{term}{after}")
}

/// MySQL/MariaDB, on a Galera member only (created by `connection/migrate.rs`): every statement
/// that starts a term also writes the election's row of `leaderd_fence`, which the fence
/// writes there too, so that certification orders a fenced transaction and the next claim
/// whichever members they ran on. A term's start is a change of `term`; a renewal, a
/// release or an operator command writes nothing more.
pub(in crate::store) const MYSQL_GALERA_TRIGGER: &str =
    "CREATE TRIGGER IF NOT EXISTS leaderd_fence_term
    AFTER UPDATE ON service_leader_lock FOR EACH ROW
    IF NEW.term <> OLD.term THEN
        INSERT INTO leaderd_fence (name, term, writes) VALUES (NEW.name, NEW.term, 1)
        ON DUPLICATE KEY UPDATE term = NEW.term, writes = writes + 1;
    END IF";

/// () -> present: 1 if this database has the trigger of [`MYSQL_GALERA_TRIGGER`].
pub(in crate::store) const MYSQL_GALERA_TRIGGER_PRESENT: &str =
    "SELECT CAST(COUNT(*) AS SIGNED) AS present FROM information_schema.TRIGGERS
     WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME = 'leaderd_fence_term'";

/// Names without a quote or a backslash are written as they are, the others so that no
/// server setting changes what they mean.
fn plain(text: &str) -> bool {
    !text.contains(['\'', '\\'])
}

/// `'…'`, or an escape string (`E'…'`), which reads backslashes the same whatever
/// `standard_conforming_strings` says.
fn postgres_text(text: &str) -> String {
    match plain(text) {
        true => format!("'{text}'"),
        false => format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "\\'")),
    }
}

/// `'…'` for plain ASCII, else the UTF-8 bytes in hex (`_utf8mb4 X'…'`): neither the
/// session's character set nor `NO_BACKSLASH_ESCAPES` changes what it means.
fn mysql_text(text: &str) -> String {
    if plain(text) && text.is_ascii() {
        return format!("'{text}'");
    }
    let hex: String = text.bytes().map(|b| format!("{b:02X}")).collect();
    format!("_utf8mb4 X'{hex}'")
}

/// `'…'` with quotes doubled: SQLite has no backslash escapes.
fn sqlite_text(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_written_as_they_are() {
        let term = 1_764_000_000_123_456;
        assert_eq!(
            fence_statement(Backend::Postgres, "orders", term),
            "SELECT leaderd_fence('orders', 1764000000123456)"
        );
        assert_eq!(
            fence_statement(Backend::Mysql, "lock:nightly", 7),
            "CALL leaderd_fence('lock:nightly', 7)"
        );
        assert_eq!(
            fence_statement(Backend::Sqlite, "orders", 7),
            "INSERT INTO leaderd_fence (election, term) VALUES ('orders', 7)"
        );
    }

    #[test]
    fn quotes_and_backslashes_cannot_end_the_literal() {
        let name = r"it's a \ name";
        assert_eq!(
            fence_statement(Backend::Postgres, name, 1),
            r"SELECT leaderd_fence(E'it\'s a \\ name', 1)"
        );
        assert_eq!(
            fence_statement(Backend::Mysql, name, 1),
            "CALL leaderd_fence(_utf8mb4 X'697427732061205C206E616D65', 1)"
        );
        assert_eq!(
            fence_statement(Backend::Sqlite, name, 1),
            r"INSERT INTO leaderd_fence (election, term) VALUES ('it''s a \ name', 1)"
        );
        assert_eq!(
            fence_statement(Backend::Postgres, "a, ?b", 1),
            "SELECT leaderd_fence('a, ?b', 1)"
        );
        assert_eq!(
            fence_statement(Backend::Mysql, "é", 1),
            "CALL leaderd_fence(_utf8mb4 X'C3A9', 1)"
        );
    }
}
