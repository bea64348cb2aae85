-- Operator commands (issue 14), kept on the election's row so that the statements every
-- node already sends see them: a pause (no claim of a free or lapsed lease until
-- paused_until), a handover (only handover_to may claim until handover_until) and a
-- resign request (the leader of resign_term steps down). All nullable: nodes of the
-- previous release ignore them, and their claims and renewals still fence on term.
-- Can run again (IF NOT EXISTS): DDL commits before the version record is written.
ALTER TABLE service_leader_lock
    ADD COLUMN IF NOT EXISTS paused_until DATETIME(6) DEFAULT NULL,
    ADD COLUMN IF NOT EXISTS handover_to VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL,
    ADD COLUMN IF NOT EXISTS handover_until DATETIME(6) DEFAULT NULL,
    ADD COLUMN IF NOT EXISTS resign_term BIGINT DEFAULT NULL;

-- Every running node of an election, recorded by itself at most every 10 s, off its
-- renewals. Times are the database clock's.
CREATE TABLE IF NOT EXISTS leaderd_member (
    election         VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    node_id          VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    candidate        BIGINT NOT NULL DEFAULT 1,
    priority         BIGINT NOT NULL DEFAULT 0,
    version          VARCHAR(64) NOT NULL DEFAULT '',
    host             VARCHAR(255) NOT NULL DEFAULT '',
    started          DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    last_seen        DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    -- Lost leadership through preemption: not to preempt again before this.
    no_preempt_until DATETIME(6) DEFAULT NULL,
    PRIMARY KEY (election, node_id)
) ENGINE = InnoDB;
