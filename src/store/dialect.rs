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
    /// (name) -> holder, term, lease_ms, age_ms by the database clock, now_us, term_token,
    /// held_ms (since the term started; NULL where `taken_at` is not the current term's),
    /// and the pending commands: paused_ms and handover_ms (time left, NULL once over),
    /// handover_to, resign_term.
    pub(super) get: &'static str,
    /// (name): create the row, unheld, if it does not exist. Its row count means nothing:
    /// leadership is only ever taken by `claim`.
    pub(super) ensure_row: &'static str,
    /// (holder, term_token, lease_ms, name, expected_term, holder): take a released or
    /// lapsed lease, unless paused or handed over to another node; clears the handover.
    /// It and the reacquire write when the term started (`taken_at`, `taken_term`), which
    /// renewals, holds and releases keep.
    /// Its commit, and a reacquire's, must outlive a crash of the server: a term lost
    /// after it was acknowledged can be handed out again. On PostgreSQL both set
    /// `synchronous_commit` on for their own transaction, whatever the server, database
    /// or role says, so that they wait for the WAL flush and, under synchronous
    /// replication, for the synchronous standby. On SQLite they are synced
    /// (`DbConnection::write_synced`); MySQL's settings are the server's, and a node warns
    /// once when they let a commit be lost (`innodb_flush_log_at_trx_commit`, `sync_binlog`).
    pub(super) claim: &'static str,
    /// (term_token, lease_ms, name, holder, term, holder): start a new term on a row this
    /// process still holds, unless asked to resign it, handed over to another node, or
    /// paused with the lease lapsed.
    pub(super) reacquire: &'static str,
    /// (lease_ms, name, holder, term, resign_seen, paused_seen): extend a live lease of
    /// ours, if the commands pending on the row are the ones the leader has seen (0 or 1
    /// each): a new command makes it match nothing, and the leader reads the row.
    pub(super) renew: &'static str,
    /// (name, holder, term): give the row up. A handover the leader was asked for gets its
    /// window anew (two lease lengths from now), so that it covers the step-down however
    /// long that took. On PostgreSQL its commit does not wait for
    /// the WAL flush (`synchronous_commit` off for its own transaction): the holder has
    /// stopped acting already, so a release lost in a server crash only leaves the lease
    /// to lapse, as a stopped node's does, and the claim that follows it flushes it.
    pub(super) release: &'static str,
    /// (pause_ms, name): no claim of a free or lapsed lease for pause_ms.
    pub(super) pause: &'static str,
    /// (name): end a pause.
    pub(super) resume: &'static str,
    /// (name, holder, term): ask the leader of a live term to step down. Like the
    /// handovers below, it asks nothing of a leader that is already asked or whose lease
    /// is offered to a node (one step-down at a time: one under way is not redirected, an
    /// offer's answer cannot be mistaken for another command, and a repeated command is
    /// harmless).
    pub(super) resign: &'static str,
    /// (to, name, holder, term): offer a live term's lease to `to`: only `to` may claim
    /// for two of its lease lengths, and the leader is not asked yet; `to` accepts the
    /// offer ([`Dialect::accept_handover`]) if it runs and could lead.
    pub(super) offer_handover: &'static str,
    /// (node, name, node, term): `node` accepts the offer of a live term's lease, which
    /// asks the leader to step down (a command the leader's renewal sees).
    pub(super) accept_handover: &'static str,
    /// (to, name, holder, term): ask the leader of a live term to step down, and let only
    /// `to` claim for two of its lease lengths, without asking `to` (`handover --force`,
    /// and a candidate that preempts, being `to` itself).
    pub(super) handover: &'static str,
    /// (name) on PostgreSQL: wakes every node that LISTENs (a command is pending).
    pub(super) wake: Option<&'static str>,
    /// (election, node_id, candidate, priority, version, host, standing, fresh): a node
    /// records itself; `fresh` (1 on a process's first record) resets `started`.
    pub(super) record_member: &'static str,
    /// (hold_ms, election, node_id): a node that lost by preemption does not preempt for
    /// hold_ms.
    pub(super) hold_preemption: &'static str,
    /// (election) -> node_id, candidate, priority, version, host, member_ms (since
    /// started), seen_ms (since last_seen), no_preempt_ms (left, NULL once over),
    /// standing.
    pub(super) members: &'static str,
    /// (election, older_than_ms): forget members not seen for that long.
    pub(super) prune_members: &'static str,
}

// clock_timestamp() is read when the row is written, after any wait for its lock: writes
// of one row take turns, so a later one never stores an earlier time.
pub(super) const POSTGRES: Dialect = Dialect {
    get: r#"SELECT container_id, term, lease_ms,
                   (EXTRACT(EPOCH FROM (clock_timestamp() - "timestamp")) * 1000)::BIGINT AS age_ms,
                   (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT AS now_us,
                   term_token,
                   CASE WHEN taken_term = term THEN
                       (EXTRACT(EPOCH FROM (clock_timestamp() - taken_at)) * 1000)::BIGINT
                   END AS held_ms,
                   CASE WHEN paused_until > clock_timestamp() THEN
                       (EXTRACT(EPOCH FROM (paused_until - clock_timestamp())) * 1000)::BIGINT
                   END AS paused_ms,
                   handover_to,
                   CASE WHEN handover_until > clock_timestamp() THEN
                       (EXTRACT(EPOCH FROM (handover_until - clock_timestamp())) * 1000)::BIGINT
                   END AS handover_ms,
                   resign_term
            FROM service_leader_lock WHERE name = ?"#,
    ensure_row: r#"INSERT INTO service_leader_lock (name, container_id, "timestamp", term, lease_ms)
                   VALUES (?, NULL, clock_timestamp(), 0, 0)
                   ON CONFLICT (name) DO NOTHING"#,
    // Waits for the disk (and a synchronous standby) whatever the server, database or role
    // says: `synchronous_commit` on for its own transaction, or left at `remote_apply`,
    // which waits for more (see `Dialect::claim`).
    claim: r#"WITH claimed AS (
                  UPDATE service_leader_lock
                  SET term = term + 1, container_id = ?, term_token = ?, "timestamp" = clock_timestamp(),
                      lease_ms = ?, handover_to = NULL, handover_until = NULL, resign_term = NULL,
                      taken_at = clock_timestamp(), taken_term = term + 1
                  WHERE name = ? AND term = ?
                    AND (container_id IS NULL
                         OR "timestamp" + lease_ms * INTERVAL '1 millisecond' <= clock_timestamp())
                    AND (paused_until IS NULL OR paused_until <= clock_timestamp())
                    AND (handover_to IS NULL OR handover_until <= clock_timestamp() OR handover_to = ?)
                  RETURNING name)
              SELECT set_config('synchronous_commit',
                                CASE current_setting('synchronous_commit')
                                WHEN 'remote_apply' THEN 'remote_apply' ELSE 'on' END,
                                true)
              FROM claimed"#,
    reacquire: r#"WITH reacquired AS (
                      UPDATE service_leader_lock
                      SET term = term + 1, term_token = ?, "timestamp" = clock_timestamp(), lease_ms = ?,
                          handover_to = NULL, handover_until = NULL, resign_term = NULL,
                          taken_at = clock_timestamp(), taken_term = term + 1
                      WHERE name = ? AND container_id = ? AND term = ?
                        AND (resign_term IS NULL OR resign_term <> term)
                        AND (handover_to IS NULL OR handover_until <= clock_timestamp() OR handover_to = ?)
                        AND (paused_until IS NULL OR paused_until <= clock_timestamp()
                             OR "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp())
                      RETURNING name)
                  SELECT set_config('synchronous_commit',
                                    CASE current_setting('synchronous_commit')
                                    WHEN 'remote_apply' THEN 'remote_apply' ELSE 'on' END,
                                    true)
                  FROM reacquired"#,
    renew: r#"UPDATE service_leader_lock
              SET "timestamp" = clock_timestamp(), lease_ms = ?
              WHERE name = ? AND container_id = ? AND term = ?
                AND "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp()
                AND (CASE WHEN resign_term = term THEN 1 ELSE 0 END) = ?
                AND (CASE WHEN paused_until > clock_timestamp() THEN 1 ELSE 0 END) = ?"#,
    // Also wakes the nodes that LISTEN (notify.rs); the notification is sent on commit.
    release: r#"WITH released AS (
                    UPDATE service_leader_lock
                    SET container_id = NULL, "timestamp" = clock_timestamp(),
                        handover_until = CASE WHEN handover_to IS NOT NULL AND resign_term = term
                                              THEN clock_timestamp() + 2 * lease_ms * INTERVAL '1 millisecond'
                                              ELSE handover_until END
                    WHERE name = ? AND container_id = ? AND term = ?
                    RETURNING name)
                SELECT pg_notify('leaderd_release', name),
                       set_config('synchronous_commit', 'off', true)
                FROM released"#,
    pause: r#"UPDATE service_leader_lock
              SET paused_until = clock_timestamp() + ? * INTERVAL '1 millisecond'
              WHERE name = ?"#,
    resume: r#"UPDATE service_leader_lock SET paused_until = NULL WHERE name = ?"#,
    resign: r#"UPDATE service_leader_lock SET resign_term = term
               WHERE name = ? AND container_id = ? AND term = ?
                 AND (resign_term IS NULL OR resign_term <> term)
                 AND (handover_to IS NULL OR handover_until <= clock_timestamp())
                 AND "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp()"#,
    offer_handover: r#"UPDATE service_leader_lock
                       SET handover_to = ?,
                           handover_until = clock_timestamp() + 2 * lease_ms * INTERVAL '1 millisecond'
                       WHERE name = ? AND container_id = ? AND term = ?
                         AND (resign_term IS NULL OR resign_term <> term)
                         AND (handover_to IS NULL OR handover_until <= clock_timestamp())
                         AND "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp()"#,
    // Wakes the leader (and the nodes that LISTEN), which renews now and sees the request.
    accept_handover: r#"WITH accepted AS (
                            UPDATE service_leader_lock SET resign_term = term
                            WHERE handover_to = ? AND name = ? AND container_id <> ? AND term = ?
                              AND handover_until > clock_timestamp()
                              AND "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp()
                            RETURNING name)
                        SELECT pg_notify('leaderd_release', name) FROM accepted"#,
    handover: r#"UPDATE service_leader_lock
                 SET handover_to = ?, resign_term = term,
                     handover_until = clock_timestamp() + 2 * lease_ms * INTERVAL '1 millisecond'
                 WHERE name = ? AND container_id = ? AND term = ?
                   AND (resign_term IS NULL OR resign_term <> term)
                   AND (handover_to IS NULL OR handover_until <= clock_timestamp())
                   AND "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp()"#,
    // The release's channel: a hint to run a round now (notify.rs), which the leader
    // also heeds, so it sees the command at once.
    wake: Some("SELECT pg_notify('leaderd_release', ?)"),
    record_member: r#"INSERT INTO leaderd_member
                          (election, node_id, candidate, priority, version, host, standing,
                           started, last_seen)
                      VALUES (?, ?, ?, ?, ?, ?, ?, clock_timestamp(), clock_timestamp())
                      ON CONFLICT (election, node_id) DO UPDATE SET
                          candidate = EXCLUDED.candidate, priority = EXCLUDED.priority,
                          version = EXCLUDED.version, host = EXCLUDED.host,
                          standing = EXCLUDED.standing, last_seen = EXCLUDED.last_seen,
                          started = CASE WHEN ? = 1 THEN EXCLUDED.started
                                         ELSE leaderd_member.started END"#,
    hold_preemption: r#"UPDATE leaderd_member
                        SET no_preempt_until = GREATEST(no_preempt_until,
                            clock_timestamp() + ? * INTERVAL '1 millisecond')
                        WHERE election = ? AND node_id = ?"#,
    members: r#"SELECT node_id, candidate, priority, version, host,
                       (EXTRACT(EPOCH FROM (clock_timestamp() - started)) * 1000)::BIGINT AS member_ms,
                       (EXTRACT(EPOCH FROM (clock_timestamp() - last_seen)) * 1000)::BIGINT AS seen_ms,
                       CASE WHEN no_preempt_until > clock_timestamp() THEN
                           (EXTRACT(EPOCH FROM (no_preempt_until - clock_timestamp())) * 1000)::BIGINT
                       END AS no_preempt_ms,
                       standing
                FROM leaderd_member WHERE election = ? ORDER BY node_id"#,
    prune_members: r#"DELETE FROM leaderd_member
                      WHERE election = ?
                        AND last_seen < clock_timestamp() - ? * INTERVAL '1 millisecond'"#,
};

// MySQL applies SET assignments left to right, so `term` comes first while it still reads
// the old value (and `taken_term = term` after it reads the new one). NOW(6) is the statement's start: a statement that waited for a row lock
// judges expiry by an earlier instant, which only errs towards "still live". It would also
// write that earlier instant: a renewal whose connection was reset while it waited for the
// row lock commits after the leader's next renewal, and would move the lease's start back
// before the instant the leader counts its deadline from. So the renewal never moves it
// back. Claims and reacquires need no such guard: each expects a term and starts the next,
// so none of them commits after a later write of the term it starts.
// The connection reports rows matched, not rows changed (CLIENT_FOUND_ROWS), which is what
// every check here wants.
// TIME ZONES: the lease times are DATETIME(6), which store no zone, written and compared
// with NOW(6), which is the session's time zone. Every connection that writes or compares
// them (renewal, read, claim, release, operator commands, status) must run in one zone,
// whatever the server's default (`default-time-zone`, or SYSTEM with the host's zone and
// its daylight-saving jumps): a connection in another zone would see a live lease as
// lapsed, or a lapsed one as live, by the difference. Diesel's MySQL connection sets
// `time_zone = '+00:00'` when it connects, and `DbConnection::connect` sets it again, so
// leaderd does not depend on the driver for it. `timezone::` in the tests runs nodes on a
// server whose zone is +01:00. (PostgreSQL's TIMESTAMPTZ and SQLite's UTC text have no
// such dependence.)
pub(super) const MYSQL: Dialect = Dialect {
    get: "SELECT container_id, term, lease_ms,
                 CAST(TIMESTAMPDIFF(MICROSECOND, `timestamp`, NOW(6)) DIV 1000 AS SIGNED) AS age_ms,
                 CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) AS now_us,
                 term_token,
                 CASE WHEN taken_term = term THEN
                     CAST(TIMESTAMPDIFF(MICROSECOND, taken_at, NOW(6)) DIV 1000 AS SIGNED)
                 END AS held_ms,
                 CASE WHEN paused_until > NOW(6) THEN
                     CAST(TIMESTAMPDIFF(MICROSECOND, NOW(6), paused_until) DIV 1000 AS SIGNED)
                 END AS paused_ms,
                 handover_to,
                 CASE WHEN handover_until > NOW(6) THEN
                     CAST(TIMESTAMPDIFF(MICROSECOND, NOW(6), handover_until) DIV 1000 AS SIGNED)
                 END AS handover_ms,
                 resign_term
          FROM service_leader_lock WHERE name = ?",
    // Not `on_conflict_do_nothing()`: on MariaDB that becomes ON DUPLICATE KEY UPDATE and
    // reports a row even when the key existed.
    ensure_row:
        "INSERT IGNORE INTO service_leader_lock (name, container_id, `timestamp`, term, lease_ms)
                 VALUES (?, NULL, NOW(6), 0, 0)",
    claim: "UPDATE service_leader_lock
            SET term = term + 1, container_id = ?, term_token = ?, `timestamp` = NOW(6), lease_ms = ?,
                handover_to = NULL, handover_until = NULL, resign_term = NULL,
                taken_at = NOW(6), taken_term = term
            WHERE name = ? AND term = ?
              AND (container_id IS NULL
                   OR `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND <= NOW(6))
              AND (paused_until IS NULL OR paused_until <= NOW(6))
              AND (handover_to IS NULL OR handover_until <= NOW(6) OR handover_to = ?)",
    reacquire: "UPDATE service_leader_lock
                SET term = term + 1, term_token = ?, `timestamp` = NOW(6), lease_ms = ?,
                    handover_to = NULL, handover_until = NULL, resign_term = NULL,
                    taken_at = NOW(6), taken_term = term
                WHERE name = ? AND container_id = ? AND term = ?
                  AND (resign_term IS NULL OR resign_term <> term)
                  AND (handover_to IS NULL OR handover_until <= NOW(6) OR handover_to = ?)
                  AND (paused_until IS NULL OR paused_until <= NOW(6)
                       OR `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6))",
    renew: "UPDATE service_leader_lock
            SET `timestamp` = GREATEST(`timestamp`, NOW(6)), lease_ms = ?
            WHERE name = ? AND container_id = ? AND term = ?
              AND `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6)
              AND (CASE WHEN resign_term = term THEN 1 ELSE 0 END) = ?
              AND (CASE WHEN paused_until > NOW(6) THEN 1 ELSE 0 END) = ?",
    release: "UPDATE service_leader_lock
              SET container_id = NULL, `timestamp` = NOW(6),
                  handover_until = IF(handover_to IS NOT NULL AND resign_term = term,
                                      NOW(6) + INTERVAL (2 * lease_ms * 1000) MICROSECOND,
                                      handover_until)
              WHERE name = ? AND container_id = ? AND term = ?",
    pause: "UPDATE service_leader_lock
            SET paused_until = NOW(6) + INTERVAL (? * 1000) MICROSECOND
            WHERE name = ?",
    resume: "UPDATE service_leader_lock SET paused_until = NULL WHERE name = ?",
    resign: "UPDATE service_leader_lock SET resign_term = term
             WHERE name = ? AND container_id = ? AND term = ?
               AND (resign_term IS NULL OR resign_term <> term)
               AND (handover_to IS NULL OR handover_until <= NOW(6))
               AND `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6)",
    offer_handover: "UPDATE service_leader_lock
                     SET handover_to = ?,
                         handover_until = NOW(6) + INTERVAL (2 * lease_ms * 1000) MICROSECOND
                     WHERE name = ? AND container_id = ? AND term = ?
                       AND (resign_term IS NULL OR resign_term <> term)
                       AND (handover_to IS NULL OR handover_until <= NOW(6))
                       AND `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6)",
    accept_handover: "UPDATE service_leader_lock SET resign_term = term
                      WHERE handover_to = ? AND name = ? AND container_id <> ? AND term = ?
                        AND handover_until > NOW(6)
                        AND `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6)",
    handover: "UPDATE service_leader_lock
               SET handover_to = ?, resign_term = term,
                   handover_until = NOW(6) + INTERVAL (2 * lease_ms * 1000) MICROSECOND
               WHERE name = ? AND container_id = ? AND term = ?
                 AND (resign_term IS NULL OR resign_term <> term)
                 AND (handover_to IS NULL OR handover_until <= NOW(6))
                 AND `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6)",
    wake: None,
    record_member: "INSERT INTO leaderd_member
                        (election, node_id, candidate, priority, version, host, standing,
                         started, last_seen)
                    VALUES (?, ?, ?, ?, ?, ?, ?, NOW(6), NOW(6))
                    ON DUPLICATE KEY UPDATE
                        started = IF(? = 1, VALUES(started), started),
                        candidate = VALUES(candidate), priority = VALUES(priority),
                        version = VALUES(version), host = VALUES(host),
                        standing = VALUES(standing), last_seen = VALUES(last_seen)",
    hold_preemption: "UPDATE leaderd_member
                      SET no_preempt_until = GREATEST(COALESCE(no_preempt_until, NOW(6)),
                          NOW(6) + INTERVAL (? * 1000) MICROSECOND)
                      WHERE election = ? AND node_id = ?",
    members: "SELECT node_id, candidate, priority, version, host,
                     CAST(TIMESTAMPDIFF(MICROSECOND, started, NOW(6)) DIV 1000 AS SIGNED) AS member_ms,
                     CAST(TIMESTAMPDIFF(MICROSECOND, last_seen, NOW(6)) DIV 1000 AS SIGNED) AS seen_ms,
                     CASE WHEN no_preempt_until > NOW(6) THEN
                         CAST(TIMESTAMPDIFF(MICROSECOND, NOW(6), no_preempt_until) DIV 1000 AS SIGNED)
                     END AS no_preempt_ms,
                     standing
              FROM leaderd_member WHERE election = ? ORDER BY node_id",
    prune_members: "DELETE FROM leaderd_member
                    WHERE election = ? AND last_seen < NOW(6) - INTERVAL (? * 1000) MICROSECOND",
};

// SQLite keeps UTC text with milliseconds; julianday() turns it back into a number.
// 'now' is fixed for the duration of one statement, and read once it holds the database's
// only write lock (after any busy wait): writes take turns, so a later one never stores an
// earlier time.
/// SQLite: a connection's commits do not wait for the disk (WAL mode), except those of
/// a statement that starts a term (see `DbConnection::write_synced`).
pub(super) const SQLITE_UNSYNCED: &str = "PRAGMA synchronous = NORMAL";
/// SQLite: commits wait for the disk, for the statement about to run.
pub(super) const SQLITE_SYNCED: &str = "PRAGMA synchronous = FULL";

pub(super) const SQLITE: Dialect = Dialect {
    get: r#"SELECT container_id, term, lease_ms,
                   CAST(ROUND((julianday('now') - julianday("timestamp")) * 86400000.0) AS INTEGER) AS age_ms,
                   CAST(ROUND((julianday('now') - 2440587.5) * 86400000000.0) AS INTEGER) AS now_us,
                   term_token,
                   CASE WHEN taken_term = term THEN
                       CAST(ROUND((julianday('now') - julianday(taken_at)) * 86400000.0) AS INTEGER)
                   END AS held_ms,
                   CASE WHEN julianday(paused_until) > julianday('now') THEN
                       CAST(ROUND((julianday(paused_until) - julianday('now')) * 86400000.0) AS INTEGER)
                   END AS paused_ms,
                   handover_to,
                   CASE WHEN julianday(handover_until) > julianday('now') THEN
                       CAST(ROUND((julianday(handover_until) - julianday('now')) * 86400000.0) AS INTEGER)
                   END AS handover_ms,
                   resign_term
            FROM service_leader_lock WHERE name = ?"#,
    ensure_row: r#"INSERT OR IGNORE INTO service_leader_lock (name, container_id, "timestamp", term, lease_ms)
                   VALUES (?, NULL, strftime('%Y-%m-%d %H:%M:%f', 'now'), 0, 0)"#,
    claim: r#"UPDATE service_leader_lock
              SET term = term + 1, container_id = ?, term_token = ?,
                  "timestamp" = strftime('%Y-%m-%d %H:%M:%f', 'now'), lease_ms = ?,
                  handover_to = NULL, handover_until = NULL, resign_term = NULL,
                  taken_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), taken_term = term + 1
              WHERE name = ? AND term = ?
                AND (container_id IS NULL
                     OR (julianday('now') - julianday("timestamp")) * 86400000.0 >= lease_ms)
                AND (paused_until IS NULL OR julianday(paused_until) <= julianday('now'))
                AND (handover_to IS NULL OR julianday(handover_until) <= julianday('now')
                     OR handover_to = ?)"#,
    reacquire: r#"UPDATE service_leader_lock
                  SET term = term + 1, term_token = ?,
                      "timestamp" = strftime('%Y-%m-%d %H:%M:%f', 'now'), lease_ms = ?,
                      handover_to = NULL, handover_until = NULL, resign_term = NULL,
                      taken_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), taken_term = term + 1
                  WHERE name = ? AND container_id = ? AND term = ?
                    AND (resign_term IS NULL OR resign_term <> term)
                    AND (handover_to IS NULL OR julianday(handover_until) <= julianday('now')
                         OR handover_to = ?)
                    AND (paused_until IS NULL OR julianday(paused_until) <= julianday('now')
                         OR (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms)"#,
    renew: r#"UPDATE service_leader_lock
              SET "timestamp" = strftime('%Y-%m-%d %H:%M:%f', 'now'), lease_ms = ?
              WHERE name = ? AND container_id = ? AND term = ?
                AND (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms
                AND (CASE WHEN resign_term = term THEN 1 ELSE 0 END) = ?
                AND (CASE WHEN julianday(paused_until) > julianday('now') THEN 1 ELSE 0 END) = ?"#,
    release: r#"UPDATE service_leader_lock
                SET container_id = NULL, "timestamp" = strftime('%Y-%m-%d %H:%M:%f', 'now'),
                    handover_until = CASE WHEN handover_to IS NOT NULL AND resign_term = term
                                          THEN strftime('%Y-%m-%d %H:%M:%f',
                                                        julianday('now') + 2 * lease_ms / 86400000.0)
                                          ELSE handover_until END
                WHERE name = ? AND container_id = ? AND term = ?"#,
    pause: r#"UPDATE service_leader_lock
              SET paused_until = strftime('%Y-%m-%d %H:%M:%f', julianday('now') + ? / 86400000.0)
              WHERE name = ?"#,
    resume: r#"UPDATE service_leader_lock SET paused_until = NULL WHERE name = ?"#,
    resign: r#"UPDATE service_leader_lock SET resign_term = term
               WHERE name = ? AND container_id = ? AND term = ?
                 AND (resign_term IS NULL OR resign_term <> term)
                 AND (handover_to IS NULL OR julianday(handover_until) <= julianday('now'))
                 AND (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms"#,
    offer_handover: r#"UPDATE service_leader_lock
                       SET handover_to = ?,
                           handover_until = strftime('%Y-%m-%d %H:%M:%f',
                                                     julianday('now') + 2 * lease_ms / 86400000.0)
                       WHERE name = ? AND container_id = ? AND term = ?
                         AND (resign_term IS NULL OR resign_term <> term)
                         AND (handover_to IS NULL OR julianday(handover_until) <= julianday('now'))
                         AND (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms"#,
    accept_handover: r#"UPDATE service_leader_lock SET resign_term = term
                        WHERE handover_to = ? AND name = ? AND container_id <> ? AND term = ?
                          AND julianday(handover_until) > julianday('now')
                          AND (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms"#,
    handover: r#"UPDATE service_leader_lock
                 SET handover_to = ?, resign_term = term,
                     handover_until = strftime('%Y-%m-%d %H:%M:%f',
                                               julianday('now') + 2 * lease_ms / 86400000.0)
                 WHERE name = ? AND container_id = ? AND term = ?
                   AND (resign_term IS NULL OR resign_term <> term)
                   AND (handover_to IS NULL OR julianday(handover_until) <= julianday('now'))
                   AND (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms"#,
    wake: None,
    record_member: r#"INSERT INTO leaderd_member
                          (election, node_id, candidate, priority, version, host, standing,
                           started, last_seen)
                      VALUES (?, ?, ?, ?, ?, ?, ?, strftime('%Y-%m-%d %H:%M:%f', 'now'),
                              strftime('%Y-%m-%d %H:%M:%f', 'now'))
                      ON CONFLICT (election, node_id) DO UPDATE SET
                          candidate = excluded.candidate, priority = excluded.priority,
                          version = excluded.version, host = excluded.host,
                          standing = excluded.standing, last_seen = excluded.last_seen,
                          started = CASE WHEN ? = 1 THEN excluded.started
                                         ELSE leaderd_member.started END"#,
    hold_preemption: r#"UPDATE leaderd_member
                        SET no_preempt_until = max(COALESCE(no_preempt_until, ''),
                            strftime('%Y-%m-%d %H:%M:%f', julianday('now') + ? / 86400000.0))
                        WHERE election = ? AND node_id = ?"#,
    members: r#"SELECT node_id, candidate, priority, version, host,
                       CAST(ROUND((julianday('now') - julianday(started)) * 86400000.0) AS INTEGER) AS member_ms,
                       CAST(ROUND((julianday('now') - julianday(last_seen)) * 86400000.0) AS INTEGER) AS seen_ms,
                       CASE WHEN julianday(no_preempt_until) > julianday('now') THEN
                           CAST(ROUND((julianday(no_preempt_until) - julianday('now')) * 86400000.0) AS INTEGER)
                       END AS no_preempt_ms,
                       standing
                FROM leaderd_member WHERE election = ? ORDER BY node_id"#,
    prune_members: r#"DELETE FROM leaderd_member
                      WHERE election = ?
                        AND julianday(last_seen) < julianday('now') - ? / 86400000.0"#,
};

/// MySQL's wake-up lock (see `wakeup.rs`), named after the database and the election
/// (`GET_LOCK` names are server-wide and at most 64 characters). (name, wait_s) -> taken:
/// 1 once taken, 0 when the wait ran out, NULL on an error.
pub(super) const MYSQL_WAKE_TAKE: &str =
    "SELECT CAST(GET_LOCK(CONCAT('leaderd_wake_', LEFT(SHA2(CONCAT(DATABASE(), '/', ?), 256), 40)), ?)
            AS SIGNED) AS taken";
/// (name): lets go of the wake-up lock.
pub(super) const MYSQL_WAKE_GIVE_BACK: &str =
    "DO RELEASE_LOCK(CONCAT('leaderd_wake_', LEFT(SHA2(CONCAT(DATABASE(), '/', ?), 256), 40)))";

/// () -> wsrep_on: 1 on a Galera member, whose `GET_LOCK` holds on that member only (an
/// error on MySQL, which has no such variable).
pub(super) const MYSQL_WSREP_ON: &str = "SELECT CAST(@@GLOBAL.wsrep_on AS SIGNED) AS wsrep_on";

/// () -> flush_log, sync_binlog, log_bin: the server settings a commit's durability
/// depends on (see `sql/mod.rs`'s `check_mysql_durability`).
pub(super) const MYSQL_DURABILITY: &str =
    "SELECT CAST(@@GLOBAL.innodb_flush_log_at_trx_commit AS SIGNED) AS flush_log,
            CAST(@@GLOBAL.sync_binlog AS SIGNED) AS sync_binlog,
            CAST(@@GLOBAL.log_bin AS SIGNED) AS log_bin";

/// (left_ms, name, holder, term): a lock whose work is done keeps its live lease in
/// `term` for `left_ms` more by the database clock, and renews it no more (`leaderd lock
/// --hold-at-least`). It leaves `timestamp` (the last renewal) alone and sets the lease to
/// end `left_ms` from now, rounded up; the holder stays, so others see who holds it.
pub(super) fn hold(backend: super::Backend) -> &'static str {
    match backend {
        super::Backend::Postgres => {
            r#"UPDATE service_leader_lock
               SET lease_ms = CEIL(EXTRACT(EPOCH FROM (clock_timestamp() - "timestamp")) * 1000)::BIGINT + ?
               WHERE name = ? AND container_id = ? AND term = ?
                 AND "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp()"#
        }
        super::Backend::Mysql => {
            "UPDATE service_leader_lock
             SET lease_ms = CAST(CEIL(TIMESTAMPDIFF(MICROSECOND, `timestamp`, NOW(6)) / 1000) AS SIGNED) + ?
             WHERE name = ? AND container_id = ? AND term = ?
               AND `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6)"
        }
        super::Backend::Sqlite => {
            r#"UPDATE service_leader_lock
               SET lease_ms = CAST((julianday('now') - julianday("timestamp")) * 86400000.0 AS INTEGER) + 1 + ?
               WHERE name = ? AND container_id = ? AND term = ?
                 AND (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms"#
        }
    }
}

/// () -> name, container_id, term, lease_ms, age_ms, held_ms (as [`Dialect::get`] reads
/// it): every row whose lease is live by the database clock, elections' and locks'
/// (`leaderd locks`), by name.
pub(super) fn held_rows(backend: super::Backend) -> &'static str {
    match backend {
        super::Backend::Postgres => {
            r#"SELECT name, container_id, term, lease_ms,
                      (EXTRACT(EPOCH FROM (clock_timestamp() - "timestamp")) * 1000)::BIGINT AS age_ms,
                      CASE WHEN taken_term = term THEN
                          (EXTRACT(EPOCH FROM (clock_timestamp() - taken_at)) * 1000)::BIGINT
                      END AS held_ms
               FROM service_leader_lock
               WHERE container_id IS NOT NULL
                 AND "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp()
               ORDER BY name"#
        }
        super::Backend::Mysql => {
            "SELECT name, container_id, term, lease_ms,
                    CAST(TIMESTAMPDIFF(MICROSECOND, `timestamp`, NOW(6)) DIV 1000 AS SIGNED) AS age_ms,
                    CASE WHEN taken_term = term THEN
                        CAST(TIMESTAMPDIFF(MICROSECOND, taken_at, NOW(6)) DIV 1000 AS SIGNED)
                    END AS held_ms
             FROM service_leader_lock
             WHERE container_id IS NOT NULL
               AND `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6)
             ORDER BY name"
        }
        super::Backend::Sqlite => {
            r#"SELECT name, container_id, term, lease_ms,
                      CAST(ROUND((julianday('now') - julianday("timestamp")) * 86400000.0) AS INTEGER) AS age_ms,
                      CASE WHEN taken_term = term THEN
                          CAST(ROUND((julianday('now') - julianday(taken_at)) * 86400000.0) AS INTEGER)
                      END AS held_ms
               FROM service_leader_lock
               WHERE container_id IS NOT NULL
                 AND (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms
               ORDER BY name"#
        }
    }
}

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
