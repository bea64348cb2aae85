DROP TABLE IF EXISTS leaderd_member;
ALTER TABLE service_leader_lock DROP COLUMN resign_term;
ALTER TABLE service_leader_lock DROP COLUMN handover_until;
ALTER TABLE service_leader_lock DROP COLUMN handover_to;
ALTER TABLE service_leader_lock DROP COLUMN paused_until;
