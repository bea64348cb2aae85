//! SQL of the tests' own beside the store's, as an operator or a stepped clock would leave
//! the tables: every stored time moved, the handover columns set by hand, rows deleted.
//! (The contract tests and the differential test use them.)

use crate::support::Backend;
use leaderd::store::DbConnection;
use std::time::Duration;

/// Runs one statement of the test's own.
pub(crate) async fn execute(conn: &mut DbConnection, sql: &str) {
    use diesel_async::SimpleAsyncConnection;
    match conn {
        DbConnection::Postgres(c) => c.batch_execute(sql).await,
        DbConnection::Mysql(c) => c.batch_execute(sql).await,
        DbConnection::Sqlite(c) => c.batch_execute(sql).await,
    }
    .unwrap_or_else(|error| panic!("{sql}: {error}"));
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|name| format!("'{name}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `column` moved by `us` microseconds (NULL stays NULL). SQLite keeps milliseconds:
/// the caller moves it by whole ones.
fn moved(backend: Backend, column: &str, us: i64) -> String {
    match backend {
        Backend::Postgres => format!("{column} = {column} + {us} * INTERVAL '1 microsecond'"),
        Backend::Mysql => format!("{column} = {column} + INTERVAL {us} MICROSECOND"),
        Backend::Sqlite => format!(
            "{column} = strftime('%Y-%m-%d %H:%M:%f', julianday({column}) + {} / 86400000.0)",
            us / 1000
        ),
    }
}

/// Moves every stored time of the rows of `names` (and of their members; every row if
/// `None`) by `us` microseconds: forward, as if the database clock had stepped back;
/// backward, as if it had stepped forward.
pub(crate) async fn move_times(
    conn: &mut DbConnection,
    backend: Backend,
    names: Option<&[String]>,
    us: i64,
) {
    let timestamp = match backend {
        Backend::Mysql => "`timestamp`",
        _ => "\"timestamp\"",
    };
    let leases = [timestamp, "taken_at", "paused_until", "handover_until"]
        .map(|column| moved(backend, column, us))
        .join(", ");
    let members = ["started", "last_seen", "no_preempt_until"]
        .map(|column| moved(backend, column, us))
        .join(", ");
    let (rows, elections) = match names {
        Some(names) => {
            let names = quoted(names);
            (
                format!("WHERE name IN ({names})"),
                format!("WHERE election IN ({names})"),
            )
        }
        None => (String::new(), String::new()),
    };
    // One round trip.
    execute(
        conn,
        &format!(
            "UPDATE service_leader_lock SET {leases} {rows};
             UPDATE leaderd_member SET {members} {elections}"
        ),
    )
    .await;
}

/// Sets the handover columns of `name` by hand; `until` is (ahead, how far) from the
/// database clock now.
pub(crate) async fn edit_handover(
    conn: &mut DbConnection,
    backend: Backend,
    name: &str,
    to: Option<&str>,
    until: Option<(bool, Duration)>,
) {
    let to = to.map_or("NULL".to_owned(), |to| format!("'{to}'"));
    let until = match until {
        None => "NULL".to_owned(),
        Some((ahead, by)) => {
            let ms = by.as_millis() as i64 * if ahead { 1 } else { -1 };
            match backend {
                Backend::Postgres => format!("clock_timestamp() + {ms} * INTERVAL '1 millisecond'"),
                Backend::Mysql => format!("NOW(6) + INTERVAL {} MICROSECOND", ms * 1000),
                Backend::Sqlite => {
                    format!("strftime('%Y-%m-%d %H:%M:%f', julianday('now') + {ms} / 86400000.0)")
                }
            }
        }
    };
    execute(
        conn,
        &format!(
            "UPDATE service_leader_lock SET handover_to = {to}, handover_until = {until}
             WHERE name = '{name}'"
        ),
    )
    .await;
}

/// Deletes the rows of `names` and their members.
pub(crate) async fn delete(conn: &mut DbConnection, names: &[String]) {
    let names = quoted(names);
    execute(
        conn,
        &format!(
            "DELETE FROM service_leader_lock WHERE name IN ({names});
             DELETE FROM leaderd_member WHERE election IN ({names})"
        ),
    )
    .await;
}
