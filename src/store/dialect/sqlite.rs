//! SQLite's statements, and the PRAGMAs that set how a commit waits for the disk.

use super::Dialect;

// SQLite keeps UTC text with milliseconds; julianday() turns it back into a number.
// 'now' is fixed for the duration of one statement, and read once it holds the database's
// only write lock (after any busy wait): writes take turns, so a later one never stores an
// earlier time.
/// SQLite: a connection's commits do not wait for the disk (WAL mode), except those of
/// a statement that starts a term (see `DbConnection::start_term`).
pub(in crate::store) const SQLITE_UNSYNCED: &str = "PRAGMA synchronous = NORMAL";
/// SQLite: commits wait for the disk, for the statement about to run.
pub(in crate::store) const SQLITE_SYNCED: &str = "PRAGMA synchronous = FULL";

pub(in crate::store) const SQLITE: Dialect = Dialect {
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
              SET term = max(term + 1, CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
                  container_id = ?, term_token = ?,
                  "timestamp" = strftime('%Y-%m-%d %H:%M:%f', 'now'), lease_ms = ?,
                  handover_to = NULL, handover_until = NULL, resign_term = NULL,
                  taken_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
                  taken_term = max(term + 1, CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)
              WHERE name = ? AND term = ?
                AND (container_id IS NULL
                     OR (julianday('now') - julianday("timestamp")) * 86400000.0 >= lease_ms)
                AND (paused_until IS NULL OR julianday(paused_until) <= julianday('now'))
                AND (handover_to IS NULL OR handover_until IS NULL OR
                     julianday(handover_until) <= julianday('now')
                     OR handover_to = ?)
              RETURNING term"#,
    reacquire: r#"UPDATE service_leader_lock
                  SET term = max(term + 1, CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000),
                      term_token = ?,
                      "timestamp" = strftime('%Y-%m-%d %H:%M:%f', 'now'), lease_ms = ?,
                      handover_to = NULL, handover_until = NULL, resign_term = NULL,
                      taken_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
                  taken_term = max(term + 1, CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)
                  WHERE name = ? AND container_id = ? AND term = ?
                    AND (resign_term IS NULL OR resign_term <> term)
                    AND (handover_to IS NULL OR handover_until IS NULL OR
                         julianday(handover_until) <= julianday('now')
                         OR handover_to = ?)
                    AND (paused_until IS NULL OR julianday(paused_until) <= julianday('now')
                         OR (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms)
                  RETURNING term"#,
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
    pause: r#"INSERT INTO service_leader_lock
                  (name, container_id, "timestamp", term, lease_ms, paused_until)
              VALUES (?, NULL, strftime('%Y-%m-%d %H:%M:%f', 'now'), 0, 0,
                      strftime('%Y-%m-%d %H:%M:%f', julianday('now') + ? / 86400000.0))
              ON CONFLICT (name) DO UPDATE SET paused_until = excluded.paused_until"#,
    resume: r#"UPDATE service_leader_lock SET paused_until = NULL WHERE name = ?"#,
    resign: r#"UPDATE service_leader_lock SET resign_term = term, handover_to = NULL, handover_until = NULL
               WHERE name = ? AND container_id = ? AND term = ?
                 AND (resign_term IS NULL OR resign_term <> term)
                 AND (handover_to IS NULL OR handover_until IS NULL OR
                      julianday(handover_until) <= julianday('now'))
                 AND (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms"#,
    offer_handover: r#"UPDATE service_leader_lock
                       SET handover_to = ?,
                           handover_until = strftime('%Y-%m-%d %H:%M:%f',
                                                     julianday('now') + 2 * lease_ms / 86400000.0)
                       WHERE name = ? AND container_id = ? AND term = ?
                         AND (resign_term IS NULL OR resign_term <> term)
                         AND (handover_to IS NULL OR handover_until IS NULL OR
                              julianday(handover_until) <= julianday('now'))
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
                   AND (handover_to IS NULL OR handover_until IS NULL OR
                        julianday(handover_until) <= julianday('now'))
                   AND (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms"#,
    started_term: None,
    wake: None,
    record_member: r#"INSERT INTO leaderd_member
                          (election, node_id, candidate, priority, version, host, standing,
                           record_process, record_count, started, last_seen)
                      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, strftime('%Y-%m-%d %H:%M:%f', 'now'),
                              strftime('%Y-%m-%d %H:%M:%f', 'now'))
                      ON CONFLICT (election, node_id) DO UPDATE SET
                          candidate = excluded.candidate, priority = excluded.priority,
                          version = excluded.version, host = excluded.host,
                          standing = excluded.standing, last_seen = excluded.last_seen,
                          started = CASE WHEN ? = 1 THEN excluded.started
                                         ELSE leaderd_member.started END,
                          record_process = excluded.record_process,
                          record_count = excluded.record_count
                      WHERE leaderd_member.record_process IS NOT excluded.record_process
                         OR leaderd_member.record_count IS NULL
                         OR excluded.record_count >= leaderd_member.record_count"#,
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
                       standing, record_process
                FROM leaderd_member WHERE election = ? ORDER BY node_id"#,
    prune_members: r#"DELETE FROM leaderd_member
                      WHERE election = ?
                        AND julianday(last_seen) < julianday('now') - ? / 86400000.0"#,
    hold: r#"UPDATE service_leader_lock
               SET lease_ms = max(CAST((julianday('now') - julianday("timestamp")) * 86400000.0 AS INTEGER),
                                   0) + 1 + ?
               WHERE name = ? AND container_id = ? AND term = ?
                 AND (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms"#,
    held_rows: r#"SELECT name, container_id, term, lease_ms,
                      CAST(ROUND((julianday('now') - julianday("timestamp")) * 86400000.0) AS INTEGER) AS age_ms,
                      CASE WHEN taken_term = term THEN
                          CAST(ROUND((julianday('now') - julianday(taken_at)) * 86400000.0) AS INTEGER)
                      END AS held_ms
               FROM service_leader_lock
               WHERE container_id IS NOT NULL
                 AND (julianday('now') - julianday("timestamp")) * 86400000.0 < lease_ms
               ORDER BY name"#,
};
