DROP TABLE IF EXISTS leaderd_member;
ALTER TABLE service_leader_lock DROP COLUMN IF EXISTS resign_term;
ALTER TABLE service_leader_lock DROP COLUMN IF EXISTS handover_until;
ALTER TABLE service_leader_lock DROP COLUMN IF EXISTS handover_to;
ALTER TABLE service_leader_lock DROP COLUMN IF EXISTS paused_until;
