DROP TABLE IF EXISTS leaderd_member;
ALTER TABLE service_leader_lock
    DROP COLUMN resign_term,
    DROP COLUMN handover_until,
    DROP COLUMN handover_to,
    DROP COLUMN paused_until;
