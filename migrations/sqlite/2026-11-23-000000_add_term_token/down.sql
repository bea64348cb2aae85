ALTER TABLE service_leader_lock DROP COLUMN term_token;
