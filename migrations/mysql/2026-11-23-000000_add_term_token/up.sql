-- Which process started the current term: its random token XOR the term (see
-- ProcessToken::for_term). A node whose claim's answer was lost reads it to tell its own
-- term from one started by another process with the same node id. Nullable, and written
-- only by claims and reacquires: older nodes keep working on this schema, and a term one
-- of them starts leaves a value that matches no later term.
-- Every MySQL migration can run again (IF NOT EXISTS, MariaDB's): each DDL statement
-- commits on its own, before the version record (see run_migrations in src/store/sql.rs).
ALTER TABLE service_leader_lock ADD COLUMN IF NOT EXISTS term_token BIGINT DEFAULT NULL;
