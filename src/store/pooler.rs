//! A connection pooler between leaderd and PostgreSQL (`database.pooler`).
//!
//! PgBouncer in transaction mode hands each transaction to whichever server connection is
//! free, so nothing outlives a transaction: named prepared statements, session `SET`s,
//! session advisory locks and LISTEN all break. With [`Pooler::Transaction`] leaderd keeps
//! everything inside one transaction: each statement runs in an explicit transaction that
//! first sets its limits with `SET LOCAL`, and tokio-postgres's statement (which is always
//! named) is prepared, run and closed inside it, none kept in a cache; waiting nodes poll
//! instead of LISTEN; the migrations take a transaction-level advisory lock in the one
//! transaction they all run in (`connection/migrate.rs`). Without it, the first prepared
//! statement that lands on another server connection is recognised and explained
//! ([`explain`]).

use diesel::ConnectionError;
use diesel_async::{AsyncPgConnection, SimpleAsyncConnection};
use futures_util::future::{Either, select};
use serde::Serialize;

use super::StoreError;

/// What sits between leaderd and the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooler {
    /// Nothing, or a pooler in session mode: a connection is one server session.
    #[default]
    None,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`).
    Transaction,
}

impl Pooler {
    /// The values of `database.pooler`: "none" (or "session", the same for leaderd) and
    /// "transaction".
    pub fn parse(text: &str) -> Option<Pooler> {
        match text {
            "none" | "session" => Some(Pooler::None),
            "transaction" => Some(Pooler::Transaction),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Pooler::None => "none",
            Pooler::Transaction => "transaction",
        }
    }
}

/// Hands an opened tokio-postgres connection to diesel-async. diesel-async sets the session
/// up (time zone, encoding) with statements that tokio-postgres prepares under a name; a
/// pooler in transaction mode may run each one's preparation and execution on different
/// server connections. So there a transaction is opened first and the set-up runs inside
/// it, on one server connection (PgBouncer keeps the time zone and encoding it reports
/// for the client).
pub(super) async fn hand_over<S>(
    client: tokio_postgres::Client,
    mut connection: tokio_postgres::Connection<tokio_postgres::Socket, S>,
    pooler: Pooler,
) -> Result<AsyncPgConnection, ConnectionError>
where
    S: tokio_postgres::tls::TlsStream + Unpin + Send + 'static,
{
    if pooler == Pooler::None {
        return AsyncPgConnection::try_from_client_and_connection(client, connection).await;
    }
    let bad = |error: tokio_postgres::Error| ConnectionError::BadConnection(error.to_string());
    // The connection must be driven while the client waits for its answer.
    {
        let begin = std::pin::pin!(client.batch_execute("BEGIN"));
        match select(begin, &mut connection).await {
            Either::Left((begun, _)) => begun.map_err(bad)?,
            Either::Right((ended, _)) => {
                return Err(match ended {
                    Err(error) => bad(error),
                    Ok(()) => {
                        ConnectionError::BadConnection("the server closed the connection".into())
                    }
                });
            }
        }
    }
    let mut conn = AsyncPgConnection::try_from_client_and_connection(client, connection).await?;
    conn.batch_execute("COMMIT")
        .await
        .map_err(ConnectionError::CouldntSetupConfiguration)?;
    Ok(conn)
}

/// The server's answer when a named prepared statement met a server connection other
/// than the one it was prepared on: tokio-postgres names them `s0`, `s1`, … in every
/// process, so one of another client's is there already, or ours is not.
fn is_pooled_statement_error(message: &str) -> bool {
    message.starts_with("prepared statement \"s")
        && (message.ends_with("does not exist") || message.ends_with("already exists"))
}

/// `error`, or [`StoreError::TransactionPooler`] when it shows that a pooler in
/// transaction mode sits in front of the database while `database.pooler` says none.
/// Also on connecting: diesel-async's own session set-up prepares statements too.
pub(super) fn explain(error: StoreError) -> StoreError {
    use diesel::result::Error::DatabaseError;
    let info = match &error {
        StoreError::Query(DatabaseError(_, info)) => info,
        StoreError::Connect {
            cause: ConnectionError::CouldntSetupConfiguration(DatabaseError(_, info)),
            ..
        } => info,
        _ => return error,
    };
    match is_pooled_statement_error(info.message()) {
        true => StoreError::TransactionPooler {
            message: info.message().to_owned(),
        },
        false => error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(Pooler::parse("session"), Some(Pooler::None));
        assert_eq!(Pooler::parse("none"), Some(Pooler::None));
        assert_eq!(Pooler::parse("transaction"), Some(Pooler::Transaction));
        assert_eq!(Pooler::parse("statement"), None);
    }

    #[test]
    fn pooled_statement_errors_are_recognised() {
        assert!(is_pooled_statement_error(
            "prepared statement \"s0\" does not exist"
        ));
        assert!(is_pooled_statement_error(
            "prepared statement \"s3\" already exists"
        ));
        assert!(!is_pooled_statement_error("relation \"x\" does not exist"));
    }
}
