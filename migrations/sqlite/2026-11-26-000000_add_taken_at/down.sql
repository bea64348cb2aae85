ALTER TABLE service_leader_lock DROP COLUMN taken_term;
ALTER TABLE service_leader_lock DROP COLUMN taken_at;
