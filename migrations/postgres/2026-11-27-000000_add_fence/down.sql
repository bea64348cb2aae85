DROP FUNCTION IF EXISTS leaderd_fence(TEXT, BIGINT);
DROP INDEX IF EXISTS service_leader_lock_name_term;
