ALTER TABLE service_leader_lock
    DROP COLUMN IF EXISTS taken_term,
    DROP COLUMN IF EXISTS taken_at;
