//! PostgreSQL's statements.

use super::Dialect;

// clock_timestamp() is read when the row is written, after any wait for its lock: writes
// of one row take turns, so a later one never stores an earlier time.
pub(in crate::store) const POSTGRES: Dialect = Dialect {
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
                  SET term = GREATEST(term + 1, (EXTRACT(EPOCH FROM statement_timestamp()) * 1000000)::BIGINT),
                      container_id = ?, term_token = ?, "timestamp" = clock_timestamp(),
                      lease_ms = ?, handover_to = NULL, handover_until = NULL, resign_term = NULL,
                      taken_at = clock_timestamp(),
                      taken_term = GREATEST(term + 1, (EXTRACT(EPOCH FROM statement_timestamp()) * 1000000)::BIGINT)
                  WHERE name = ? AND term = ?
                    AND (container_id IS NULL
                         OR "timestamp" + lease_ms * INTERVAL '1 millisecond' <= clock_timestamp())
                    AND (paused_until IS NULL OR paused_until <= clock_timestamp())
                    AND (handover_to IS NULL OR handover_until IS NULL OR
                         handover_until <= clock_timestamp() OR handover_to = ?)
                  RETURNING term)
              SELECT term,
                     set_config('synchronous_commit',
                                CASE current_setting('synchronous_commit')
                                WHEN 'remote_apply' THEN 'remote_apply' ELSE 'on' END,
                                true) AS synchronous_commit
              FROM claimed"#,
    reacquire: r#"WITH reacquired AS (
                      UPDATE service_leader_lock
                      SET term = GREATEST(term + 1, (EXTRACT(EPOCH FROM statement_timestamp()) * 1000000)::BIGINT),
                          term_token = ?, "timestamp" = clock_timestamp(), lease_ms = ?,
                          handover_to = NULL, handover_until = NULL, resign_term = NULL,
                          taken_at = clock_timestamp(),
                          taken_term = GREATEST(term + 1, (EXTRACT(EPOCH FROM statement_timestamp()) * 1000000)::BIGINT)
                      WHERE name = ? AND container_id = ? AND term = ?
                        AND (resign_term IS NULL OR resign_term <> term)
                        AND (handover_to IS NULL OR handover_until IS NULL OR
                             handover_until <= clock_timestamp() OR handover_to = ?)
                        AND (paused_until IS NULL OR paused_until <= clock_timestamp()
                             OR "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp())
                      RETURNING term)
                  SELECT term,
                         set_config('synchronous_commit',
                                    CASE current_setting('synchronous_commit')
                                    WHEN 'remote_apply' THEN 'remote_apply' ELSE 'on' END,
                                    true) AS synchronous_commit
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
    pause: r#"WITH paused AS (
                  INSERT INTO service_leader_lock
                      (name, container_id, "timestamp", term, lease_ms, paused_until)
                  VALUES (?, NULL, clock_timestamp(), 0, 0,
                          clock_timestamp() + ? * INTERVAL '1 millisecond')
                  ON CONFLICT (name) DO UPDATE SET paused_until = EXCLUDED.paused_until
                  RETURNING name)
              SELECT pg_notify('leaderd_release', name) FROM paused"#,
    resume: r#"UPDATE service_leader_lock SET paused_until = NULL WHERE name = ?"#,
    resign: r#"UPDATE service_leader_lock SET resign_term = term, handover_to = NULL, handover_until = NULL
               WHERE name = ? AND container_id = ? AND term = ?
                 AND (resign_term IS NULL OR resign_term <> term)
                 AND (handover_to IS NULL OR handover_until IS NULL OR
                      handover_until <= clock_timestamp())
                 AND "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp()"#,
    offer_handover: r#"UPDATE service_leader_lock
                       SET handover_to = ?,
                           handover_until = clock_timestamp() + 2 * lease_ms * INTERVAL '1 millisecond'
                       WHERE name = ? AND container_id = ? AND term = ?
                         AND (resign_term IS NULL OR resign_term <> term)
                         AND (handover_to IS NULL OR handover_until IS NULL OR
                              handover_until <= clock_timestamp())
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
                   AND (handover_to IS NULL OR handover_until IS NULL OR
                        handover_until <= clock_timestamp())
                   AND "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp()"#,
    // The release's channel: a hint to run a round now (notify.rs), which the leader
    // also heeds, so it sees the command at once.
    started_term: None,
    wake: Some("SELECT pg_notify('leaderd_release', ?)"),
    record_member: r#"INSERT INTO leaderd_member
                          (election, node_id, candidate, priority, version, host, standing,
                           record_process, record_count, started, last_seen)
                      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, clock_timestamp(), clock_timestamp())
                      ON CONFLICT (election, node_id) DO UPDATE SET
                          candidate = EXCLUDED.candidate, priority = EXCLUDED.priority,
                          version = EXCLUDED.version, host = EXCLUDED.host,
                          standing = EXCLUDED.standing, last_seen = EXCLUDED.last_seen,
                          started = CASE WHEN ? = 1 THEN EXCLUDED.started
                                         ELSE leaderd_member.started END,
                          record_process = EXCLUDED.record_process,
                          record_count = EXCLUDED.record_count
                      WHERE leaderd_member.record_process IS DISTINCT FROM EXCLUDED.record_process
                         OR leaderd_member.record_count IS NULL
                         OR EXCLUDED.record_count >= leaderd_member.record_count"#,
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
                       standing, record_process
                FROM leaderd_member WHERE election = ? ORDER BY node_id"#,
    prune_members: r#"DELETE FROM leaderd_member
                      WHERE election = ?
                        AND last_seen < clock_timestamp() - ? * INTERVAL '1 millisecond'"#,
    hold: r#"UPDATE service_leader_lock
               SET lease_ms = GREATEST(CEIL(EXTRACT(EPOCH FROM (clock_timestamp() - "timestamp"))
                                            * 1000)::BIGINT, 0) + ?
               WHERE name = ? AND container_id = ? AND term = ?
                 AND "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp()"#,
    held_rows: r#"SELECT name, container_id, term, lease_ms,
                      (EXTRACT(EPOCH FROM (clock_timestamp() - "timestamp")) * 1000)::BIGINT AS age_ms,
                      CASE WHEN taken_term = term THEN
                          (EXTRACT(EPOCH FROM (clock_timestamp() - taken_at)) * 1000)::BIGINT
                      END AS held_ms
               FROM service_leader_lock
               WHERE container_id IS NOT NULL
                 AND "timestamp" + lease_ms * INTERVAL '1 millisecond' > clock_timestamp()
               ORDER BY name"#,
};
