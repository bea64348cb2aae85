//! Every statement leaderd sends, for each backend, in one place.
//!
//! The protocol is optimistic concurrency on one row per election (seed 002): `term` is the
//! row's version. Every write names the term it expects, so a write based on a stale view
//! changes nothing. Expiry is judged only by the database clock, inside the statements.
//! Each statement binds its parameters once and in the same order on every backend, so the
//! binding code below is shared and only the text differs. Parameters are written `?` on
//! every backend; [`Statement`] numbers them `$1, $2, …` for PostgreSQL.

use diesel::backend::Backend as DieselBackend;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::serialize::ToSql;
use diesel::sql_types::{BigInt, HasSqlType, Text, Untyped};

/// The statements of one backend.
pub(super) struct Dialect {
    /// (name) -> holder, term, lease_ms, age_ms by the database clock, now_us, term_token.
    pub(super) get: &'static str,
    /// (name): create the row, unheld, if it does not exist. Its row count means nothing:
    /// leadership is only ever taken by `claim`.
    pub(super) ensure_row: &'static str,
    /// (holder, term_token, lease_ms, name, expected_term): take a released or lapsed lease.
    pub(super) claim: &'static str,
    /// (term_token, lease_ms, name, holder, term): start a new term on a row this process
    /// still holds.
    pub(super) reacquire: &'static str,
    /// (lease_ms, name, holder, term): extend a live lease of ours.
    pub(super) renew: &'static str,
    /// (name, holder, term): give the row up.
    pub(super) release: &'static str,
}

// clock_timestamp() is read when the row is written, after any wait for its lock: writes
// of one row take turns, so a later one never stores an earlier time.
pub(super) const POSTGRES: Dialect = Dialect {
    get: r#"SELECT container_id, term, lease_ms,
                   (EXTRACT(EPOCH FROM (clock_timestamp() - "timestamp")) * 1000)::BIGINT AS age_ms,
                   (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT AS now_us,
                   term_token
            FROM service_leader_lock WHERE name = ?"#,
    ensure_row: r#"INSERT INTO service_leader_lock (name, container_id, "timestamp", term, lease_ms)
                   VALUES (?, NULL, clock_timestamp(), 0, 0)
                   ON CONFLICT (name) DO NOTHING"#,
    claim: r#"UPDATE service_leader_lock
              SET term = term + 1, container_id = ?, term_token = ?, "timestamp" = clock_timestamp(),
                  lease_ms = ?
              WHERE name = ? AND term = ?
                AND (container_id IS NULL
                     OR "timestamp" + lease_ms * INTERVAL '1 millisecond' <= clock_timestamp())"#,
    reacquire: r#"UPDATE service_leader_lock
                  SET term = term + 1, term_token = ?, "timestamp" = clock_timestamp(), lease_ms = ?
                  WHERE name = ? AND container_id = ? AND term = ?"#,
    renew: r#"UPDATE service_leader_lock
              SET "timestamp" = clock_timestamp(), lease_ms = ?
              WHERE name = ? AND container_id = ? AND term = ?
                AND "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp()"#,
    // Also wakes the nodes that LISTEN (notify.rs); the notification is sent on commit.
    release: r#"WITH released AS (
                    UPDATE service_leader_lock
                    SET container_id = NULL, "timestamp" = clock_timestamp()
                    WHERE name = ? AND container_id = ? AND term = ?
                    RETURNING name)
                SELECT pg_notify('leaderd_release', name) FROM released"#,
};

// MySQL applies SET assignments left to right, so `term` comes first while it still reads
// the old value. NOW(6) is the statement's start: a statement that waited for a row lock
// judges expiry by an earlier instant, which only errs towards "still live". It would also
// write that earlier instant: a renewal whose connection was reset while it waited for the
// row lock commits after the leader's next renewal, and would move the lease's start back
// before the instant the leader counts its deadline from. So the renewal never moves it
// back. Claims and reacquires need no such guard: each expects a term and starts the next,
// so none of them commits after a later write of the term it starts.
// The connection reports rows matched, not rows changed (CLIENT_FOUND_ROWS), which is what
// every check here wants.
pub(super) const MYSQL: Dialect = Dialect {
    get: "SELECT container_id, term, lease_ms,
                 CAST(TIMESTAMPDIFF(MICROSECOND, `timestamp`, NOW(6)) DIV 1000 AS SIGNED) AS age_ms,
                 CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) AS now_us,
                 term_token
          FROM service_leader_lock WHERE name = ?",
    // Not `on_conflict_do_nothing()`: on MariaDB that becomes ON DUPLICATE KEY UPDATE and
    // reports a row even when the key existed.
    ensure_row:
        "INSERT IGNORE INTO service_leader_lock (name, container_id, `timestamp`, term, lease_ms)
                 VALUES (?, NULL, NOW(6), 0, 0)",
    claim: "UPDATE service_leader_lock
            SET term = term + 1, container_id = ?, term_token = ?, `timestamp` = NOW(6), lease_ms = ?
            WHERE name = ? AND term = ?
              AND (container_id IS NULL
                   OR `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND <= NOW(6))",
    reacquire: "UPDATE service_leader_lock
                SET term = term + 1, term_token = ?, `timestamp` = NOW(6), lease_ms = ?
                WHERE name = ? AND container_id = ? AND term = ?",
    renew: "UPDATE service_leader_lock
            SET `timestamp` = GREATEST(`timestamp`, NOW(6)), lease_ms = ?
            WHERE name = ? AND container_id = ? AND term = ?
              AND `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6)",
    release: "UPDATE service_leader_lock
              SET container_id = NULL, `timestamp` = NOW(6)
              WHERE name = ? AND container_id = ? AND term = ?",
};

// SQLite keeps UTC text with milliseconds; julianday() turns it back into a number.
// 'now' is fixed for the duration of one statement, and read once it holds the database's
// only write lock (after any busy wait): writes take turns, so a later one never stores an
// earlier time.
pub(super) const SQLITE: Dialect = Dialect {
    get: r#"SELECT container_id, term, lease_ms,
                   CAST(ROUND((julianday('now') - julianday("timestamp")) * 86400000.0) AS INTEGER) AS age_ms,
                   CAST(ROUND((julianday('now') - 2440587.5) * 86400000000.0) AS INTEGER) AS now_us,
                   term_token
            FROM service_leader_lock WHERE name = ?"#,
    ensure_row: r#"INSERT OR IGNORE INTO service_leader_lock (name, container_id, "timestamp", term, lease_ms)
                   VALUES (?, NULL, strftime('%Y-%m-%d %H:%M:%f', 'now'), 0, 0)"#,
    claim: r#"UPDATE service_leader_lock
              SET term = term + 1, container_id = ?, term_token = ?,
                  "timestamp" = strftime('%Y-%m-%d %H:%M:%f', 'now'), lease_ms = ?
              WHERE name = ? AND term = ?
                AND (container_id IS NULL
                     OR (julianday('now') - julianday("timestamp")) * 86400000.0 >= lease_ms)"#,
    reacquire: r#"UPDATE service_leader_lock
                  SET term = term + 1, term_token = ?,
                      "timestamp" = strftime('%Y-%m-%d %H:%M:%f', 'now'), lease_ms = ?
                  WHERE name = ? AND container_id = ? AND term = ?"#,
    renew: r#"UPDATE service_leader_lock
              SET "timestamp" = strftime('%Y-%m-%d %H:%M:%f', 'now'), lease_ms = ?
              WHERE name = ? AND container_id = ? AND term = ?
                AND (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms"#,
    release: r#"UPDATE service_leader_lock
                SET container_id = NULL, "timestamp" = strftime('%Y-%m-%d %H:%M:%f', 'now')
                WHERE name = ? AND container_id = ? AND term = ?"#,
};

/// A value bound to a statement.
pub(super) enum Param<'a> {
    Text(&'a str),
    BigInt(i64),
}

/// One of a dialect's fixed statements with its parameters, in the order of its `?`s.
///
/// diesel never caches a `sql_query` (its text could be anything), so each one is parsed
/// and planned anew and costs an extra round trip on PostgreSQL. These texts are fixed,
/// so this type lets diesel prepare each once per connection and key it by its text.
pub(super) struct Statement<'a> {
    sql: &'static str,
    params: Vec<Param<'a>>,
}

impl<'a> Statement<'a> {
    pub(super) fn new(sql: &'static str, params: Vec<Param<'a>>) -> Self {
        Statement { sql, params }
    }
}

impl<DB> QueryFragment<DB> for Statement<'_>
where
    DB: DieselBackend + HasSqlType<Text> + HasSqlType<BigInt>,
    str: ToSql<Text, DB>,
    i64: ToSql<BigInt, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> diesel::QueryResult<()> {
        let mut pieces = self.sql.split('?');
        out.push_sql(pieces.next().unwrap_or_default());
        let mut params = self.params.iter();
        for piece in pieces {
            match params.next() {
                Some(Param::Text(text)) => out.push_bind_param::<Text, str>(text)?,
                Some(Param::BigInt(number)) => out.push_bind_param::<BigInt, i64>(number)?,
                None => {
                    return Err(diesel::result::Error::QueryBuilderError(
                        format!("too few parameters for statement {:?}", self.sql).into(),
                    ));
                }
            }
            out.push_sql(piece);
        }
        match params.next() {
            None => Ok(()),
            Some(_) => Err(diesel::result::Error::QueryBuilderError(
                format!("too many parameters for statement {:?}", self.sql).into(),
            )),
        }
    }
}

// Keyed by its text in the statement cache (no static id: one type serves every text).
impl QueryId for Statement<'_> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for Statement<'_> {
    type SqlType = Untyped;
}
