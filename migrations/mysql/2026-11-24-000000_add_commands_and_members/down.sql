DROP TABLE IF EXISTS leaderd_member;
ALTER TABLE service_leader_lock
    DROP COLUMN IF EXISTS resign_term,
    DROP COLUMN IF EXISTS handover_until,
    DROP COLUMN IF EXISTS handover_to,
    DROP COLUMN IF EXISTS paused_until;
