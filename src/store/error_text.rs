//! The text of database errors: a driver error's whole cause chain with each part once
//! (drivers repeat themselves: "Input/output error: Input/output error: Connection
//! refused"), and the `leaderd migrate` hint, given only where a table is missing.

use std::error::Error;

/// `error` and its sources, joined by ": ", each part once. The root cause (connection
/// refused, no such host, network unreachable) is often in the sources only.
pub(crate) fn chain(error: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(error) = next {
        for part in error.to_string().split(": ") {
            let part = part.trim();
            // A part already said, maybe quoted ("Server error: `ERROR 1045: …'").
            if !part.is_empty() && !parts.iter().any(|p| p.contains(part)) {
                parts.push(part.to_owned());
            }
        }
        next = error.source();
    }
    parts.join(": ")
}

/// A connection error's text (see [`chain`]).
pub(crate) fn connection(error: &diesel::ConnectionError) -> String {
    chain(error)
}

/// Whether the statement failed because a table of leaderd's is missing: the migrations
/// have not run on this database.
pub(crate) fn missing_table(error: &diesel::result::Error) -> bool {
    let diesel::result::Error::DatabaseError(_, info) = error else {
        return false;
    };
    let message = info.message();
    // SQLite; PostgreSQL (42P01); MySQL/MariaDB (1146).
    message.starts_with("no such table")
        || (message.starts_with("relation ") && message.ends_with("does not exist"))
        || (message.starts_with("Table ") && message.ends_with("doesn't exist"))
}

/// What to add to the message of a failed statement: the migrate hint for a missing table.
pub(crate) fn missing_table_hint(error: &diesel::result::Error) -> &'static str {
    match missing_table(error) {
        true => {
            "; the table does not exist: run `leaderd migrate` (or start a node with \
             database.migrate = true)"
        }
        false => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl Error for E {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn each_part_once_and_the_root_cause_kept() {
        let e = E(
            "error connecting to server",
            Some(Box::new(E("Connection refused (os error 111)", None))),
        );
        assert_eq!(
            chain(&e),
            "error connecting to server: Connection refused (os error 111)"
        );
        let e = E(
            "Input/output error: Input/output error: Connection refused",
            Some(Box::new(E("Input/output error: Connection refused", None))),
        );
        assert_eq!(chain(&e), "Input/output error: Connection refused");
        let e = E(
            "Server error: `ERROR 28000 (1698): Access denied'",
            Some(Box::new(E("ERROR 28000 (1698): Access denied", None))),
        );
        assert_eq!(
            chain(&e),
            "Server error: `ERROR 28000 (1698): Access denied'"
        );
    }
}
