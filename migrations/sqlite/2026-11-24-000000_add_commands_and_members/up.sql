-- Operator commands (issue 14), kept on the election's row so that the statements every
-- node already sends see them: a pause (no claim of a free or lapsed lease until
-- paused_until), a handover (only handover_to may claim until handover_until) and a
-- resign request (the leader of resign_term steps down). All nullable: nodes of the
-- previous release ignore them, and their claims and renewals still fence on term.
-- Times are UTC text with milliseconds, like "timestamp".
ALTER TABLE service_leader_lock ADD COLUMN paused_until TEXT DEFAULT NULL;
ALTER TABLE service_leader_lock ADD COLUMN handover_to VARCHAR(100) DEFAULT NULL;
ALTER TABLE service_leader_lock ADD COLUMN handover_until TEXT DEFAULT NULL;
ALTER TABLE service_leader_lock ADD COLUMN resign_term INTEGER DEFAULT NULL;

-- Every running node of an election, recorded by itself at most every 10 s, off its
-- renewals. Times are the database clock's.
CREATE TABLE IF NOT EXISTS leaderd_member (
    election         VARCHAR(100) NOT NULL,
    node_id          VARCHAR(100) NOT NULL,
    candidate        INTEGER NOT NULL DEFAULT 1,
    priority         INTEGER NOT NULL DEFAULT 0,
    version          VARCHAR(64) NOT NULL DEFAULT '',
    host             VARCHAR(255) NOT NULL DEFAULT '',
    started          TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    last_seen        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    -- Lost leadership through preemption: not to preempt again before this.
    no_preempt_until TEXT DEFAULT NULL,
    PRIMARY KEY (election, node_id)
);
