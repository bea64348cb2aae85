-- The fence for leader work (docs/fencing.md): an INSERT into this view,
-- `INSERT INTO leaderd_fence (election, term) VALUES (…, …)`, run inside the work's own
-- transaction, fails (SQLITE_CONSTRAINT_TRIGGER, a message starting "leaderd fence:",
-- and the whole transaction rolled back) unless the election's row is in `term`, held,
-- and live by the database clock. SQLite has no stored functions; an INSTEAD OF trigger
-- on a view that holds no rows is the statement.
-- Its lock: as a write, the INSERT takes the database's one write lock, held until the
-- transaction ends, so no claim (no write at all) commits before the fenced transaction
-- has ended: a write fenced in term T commits before term T+1 starts, or not at all.
-- The messages are fixed text, not built from the row: RAISE takes an expression only
-- from SQLite 3.47 on, and older sqlite3 programs must still read this schema.
-- SQLite runs this and its version record in one transaction.
CREATE VIEW IF NOT EXISTS leaderd_fence (election, term) AS
    SELECT name, term FROM service_leader_lock WHERE 0;

CREATE TRIGGER IF NOT EXISTS leaderd_fence_check INSTEAD OF INSERT ON leaderd_fence
BEGIN
    SELECT RAISE(ROLLBACK, 'leaderd fence: no such election')
    WHERE NOT EXISTS (SELECT 1 FROM service_leader_lock WHERE name = NEW.election);
    SELECT RAISE(ROLLBACK, 'leaderd fence: the term given is not the election''s current term')
    FROM service_leader_lock WHERE name = NEW.election AND term IS NOT NEW.term;
    SELECT RAISE(ROLLBACK, 'leaderd fence: the term given was released by its holder')
    FROM service_leader_lock WHERE name = NEW.election AND container_id IS NULL;
    SELECT RAISE(ROLLBACK, 'leaderd fence: the lease of the term given has lapsed')
    FROM service_leader_lock
    WHERE name = NEW.election
      AND (julianday('now') - julianday("timestamp")) * 86400000.0 >= lease_ms;
END;
