//! MySQL's and MariaDB's statements, and the server variables leaderd reads there.

use super::Dialect;

/// Whether a member record applies: it comes from another process than the row's last
/// one, or is not older than it (see `RecordOrder`).
macro_rules! ordered {
    () => {
        "(NOT (record_process <=> VALUES(record_process)) OR record_count IS NULL
          OR VALUES(record_count) >= record_count)"
    };
}

// MySQL applies SET assignments left to right, and MariaDB too unless `sql_mode` has
// SIMULTANEOUS_ASSIGNMENT, where every one reads the old row: so `taken_term` comes first
// and both it and `term` compute the new term from the old one (NOW(6) is one reading per
// statement), which gives the same value either way. The new term is also
// kept as the connection's LAST_INSERT_ID, which `started_term` reads back (no
// `UPDATE .. RETURNING` here). NOW(6) is the
// statement's start: a statement that waited for a row lock judges expiry by an earlier
// instant, which only errs towards "still live". It would also
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
pub(in crate::store) const MYSQL: Dialect = Dialect {
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
            SET taken_term = GREATEST(term + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)),
                term = LAST_INSERT_ID(GREATEST(term + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))),
                container_id = ?, term_token = ?, `timestamp` = NOW(6), lease_ms = ?,
                handover_to = NULL, handover_until = NULL, resign_term = NULL,
                taken_at = NOW(6)
            WHERE name = ? AND term = ?
              AND (container_id IS NULL
                   OR `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND <= NOW(6))
              AND (paused_until IS NULL OR paused_until <= NOW(6))
              AND (handover_to IS NULL OR handover_until IS NULL OR
                   handover_until <= NOW(6) OR handover_to = ?)",
    reacquire: "UPDATE service_leader_lock
                SET taken_term = GREATEST(term + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)),
                    term = LAST_INSERT_ID(GREATEST(term + 1, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))),
                    term_token = ?, `timestamp` = NOW(6), lease_ms = ?,
                    handover_to = NULL, handover_until = NULL, resign_term = NULL,
                    taken_at = NOW(6)
                WHERE name = ? AND container_id = ? AND term = ?
                  AND (resign_term IS NULL OR resign_term <> term)
                  AND (handover_to IS NULL OR handover_until IS NULL OR
                       handover_until <= NOW(6) OR handover_to = ?)
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
    pause: "INSERT INTO service_leader_lock
                (name, container_id, `timestamp`, term, lease_ms, paused_until)
            VALUES (?, NULL, NOW(6), 0, 0, NOW(6) + INTERVAL (? * 1000) MICROSECOND)
            ON DUPLICATE KEY UPDATE paused_until = VALUES(paused_until)",
    resume: "UPDATE service_leader_lock SET paused_until = NULL WHERE name = ?",
    resign: "UPDATE service_leader_lock SET resign_term = term, handover_to = NULL, handover_until = NULL
             WHERE name = ? AND container_id = ? AND term = ?
               AND (resign_term IS NULL OR resign_term <> term)
               AND (handover_to IS NULL OR handover_until IS NULL OR handover_until <= NOW(6))
               AND `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6)",
    offer_handover: "UPDATE service_leader_lock
                     SET handover_to = ?,
                         handover_until = NOW(6) + INTERVAL (2 * lease_ms * 1000) MICROSECOND
                     WHERE name = ? AND container_id = ? AND term = ?
                       AND (resign_term IS NULL OR resign_term <> term)
                       AND (handover_to IS NULL OR handover_until IS NULL OR
                            handover_until <= NOW(6))
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
                 AND (handover_to IS NULL OR handover_until IS NULL OR handover_until <= NOW(6))
                 AND `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6)",
    started_term: Some("SELECT CAST(LAST_INSERT_ID() AS SIGNED) AS term"),
    wake: None,
    // No WHERE on an upsert here: every column is kept unless the record is not late
    // (`ordered!`). The order's own columns go last, so that every condition reads them
    // as they were, whether assignments run left to right or simultaneously.
    record_member: concat!(
        "INSERT INTO leaderd_member
             (election, node_id, candidate, priority, version, host, standing,
              record_process, record_count, started, last_seen)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NOW(6), NOW(6))
         ON DUPLICATE KEY UPDATE
             started = IF(? = 1 AND ", ordered!(), ", VALUES(started), started),
             candidate = IF(", ordered!(), ", VALUES(candidate), candidate),
             priority = IF(", ordered!(), ", VALUES(priority), priority),
             version = IF(", ordered!(), ", VALUES(version), version),
             host = IF(", ordered!(), ", VALUES(host), host),
             standing = IF(", ordered!(), ", VALUES(standing), standing),
             last_seen = IF(", ordered!(), ", VALUES(last_seen), last_seen),
             record_count = IF(", ordered!(), ", VALUES(record_count), record_count),
             record_process = IF(record_process <=> VALUES(record_process),
                                 record_process, VALUES(record_process))"
    ),
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
                     standing, record_process
              FROM leaderd_member WHERE election = ? ORDER BY node_id",
    prune_members: "DELETE FROM leaderd_member
                    WHERE election = ? AND last_seen < NOW(6) - INTERVAL (? * 1000) MICROSECOND",
    hold: "UPDATE service_leader_lock
             SET lease_ms = GREATEST(CAST(CEIL(TIMESTAMPDIFF(MICROSECOND, `timestamp`, NOW(6)) / 1000)
                                           AS SIGNED), 0) + ?
             WHERE name = ? AND container_id = ? AND term = ?
               AND `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6)",
    held_rows: "SELECT name, container_id, term, lease_ms,
                    CAST(TIMESTAMPDIFF(MICROSECOND, `timestamp`, NOW(6)) DIV 1000 AS SIGNED) AS age_ms,
                    CASE WHEN taken_term = term THEN
                        CAST(TIMESTAMPDIFF(MICROSECOND, taken_at, NOW(6)) DIV 1000 AS SIGNED)
                    END AS held_ms
             FROM service_leader_lock
             WHERE container_id IS NOT NULL
               AND `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND > NOW(6)
             ORDER BY name",
};

/// MySQL's wake-up lock (see `wakeup.rs`), named after the database and the election
/// (`GET_LOCK` names are server-wide and at most 64 characters). (name, wait_s) -> taken:
/// 1 once taken, 0 when the wait ran out, NULL on an error.
pub(in crate::store) const MYSQL_WAKE_TAKE: &str =
    "SELECT CAST(GET_LOCK(CONCAT('leaderd_wake_', LEFT(SHA2(CONCAT(DATABASE(), '/', ?), 256), 40)), ?)
            AS SIGNED) AS taken";
/// (name): lets go of the wake-up lock.
pub(in crate::store) const MYSQL_WAKE_GIVE_BACK: &str =
    "DO RELEASE_LOCK(CONCAT('leaderd_wake_', LEFT(SHA2(CONCAT(DATABASE(), '/', ?), 256), 40)))";

/// () -> wsrep_on: 1 on a Galera member, whose `GET_LOCK` holds on that member only (an
/// error on MySQL, which has no such variable).
pub(in crate::store) const MYSQL_WSREP_ON: &str =
    "SELECT CAST(@@GLOBAL.wsrep_on AS SIGNED) AS wsrep_on";

/// () -> flush_log, sync_binlog, log_bin: the server settings a commit's durability
/// depends on (see `connection/mod.rs`'s `check_mysql_durability`).
pub(in crate::store) const MYSQL_DURABILITY: &str =
    "SELECT CAST(@@GLOBAL.innodb_flush_log_at_trx_commit AS SIGNED) AS flush_log,
            CAST(@@GLOBAL.sync_binlog AS SIGNED) AS sync_binlog,
            CAST(@@GLOBAL.log_bin AS SIGNED) AS log_bin";
