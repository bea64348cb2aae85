-- The fence for leader work (docs/fencing.md): `CALL leaderd_fence(election, term)`,
-- run inside the work's own transaction, fails (SQLSTATE LD001, after rolling the
-- transaction back) unless the election's row is in `term`, held, and live by the
-- database clock, and holds the row against a new term until the transaction ends: a
-- write fenced in term T commits before term T+1 starts, or not at all.
-- Can run again (CREATE OR REPLACE, IF NOT EXISTS): DDL commits before the version record.

-- On a Galera member a lock holds on that member only, so there the fence also writes
-- the election's row of this table, and every statement that starts a term writes it too
-- (the trigger leaderd_fence_term, which `leaderd migrate` creates on Galera members
-- only: see DbConnection::create_galera_fence_trigger): certification then orders a
-- fenced transaction and the claim of the next term, whichever member each ran on, and
-- aborts the later one if the two overlap. A row of its own, not the election's:
-- renewals never write it, so a fenced transaction and the leader's renewal never abort
-- each other. Without the trigger the fence refuses on a Galera member (SQLSTATE LD002).
CREATE TABLE IF NOT EXISTS leaderd_fence (
    name   VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    term   BIGINT NOT NULL DEFAULT 0,
    writes BIGINT NOT NULL DEFAULT 0
) ENGINE = InnoDB;

CREATE OR REPLACE PROCEDURE leaderd_fence(
    IN election VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, IN fenced_term BIGINT)
    MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
    DECLARE found BIGINT;
    DECLARE held_term BIGINT;
    DECLARE holder VARCHAR(100) CHARACTER SET utf8mb4;
    DECLARE left_us BIGINT;
    DECLARE reason VARCHAR(512);
    -- Whatever fails in here (a refusal below, a lock wait that timed out, a read refused
    -- by MariaDB's innodb_snapshot_isolation) ends the caller's transaction with it:
    -- nothing it wrote commits, even if the caller goes on to COMMIT.
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    -- The lock first: a shared lock on the election's row, which every write of the row
    -- waits for (claims, and the leader's renewal too: hence "call it last"). A locking
    -- read reads the newest version whatever the isolation level, so a REPEATABLE READ
    -- snapshot from before a new term does not hide it.
    SELECT COUNT(*) INTO found FROM service_leader_lock WHERE name = election LOCK IN SHARE MODE;
    -- Then the check, in a statement that starts once the lock is held (UTC_TIMESTAMP is
    -- the statement's start, and UTC whatever the session's time zone).
    SELECT MAX(term), MAX(container_id),
           MAX(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6),
                             `timestamp` + INTERVAL (lease_ms * 1000) MICROSECOND))
      INTO held_term, holder, left_us
      FROM service_leader_lock WHERE name = election LOCK IN SHARE MODE;
    IF found = 0 THEN
        SET reason = 'no such election';
    ELSEIF NOT held_term <=> fenced_term THEN
        SET reason = CONCAT('term ', held_term, ' holds');
    ELSEIF holder IS NULL THEN
        SET reason = CONCAT('term ', held_term, ' holds, but its holder released it');
    ELSEIF left_us < 1000 THEN
        SET reason = CONCAT('term ', held_term, ' holds, but its lease lapsed ',
                            FLOOR(-left_us / 1000), ' ms ago');
    ELSEIF @@GLOBAL.wsrep_on AND NOT EXISTS (
               SELECT 1 FROM information_schema.TRIGGERS
               WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME = 'leaderd_fence_term') THEN
        ROLLBACK;
        SET reason = CONCAT('leaderd fence: election ', QUOTE(election),
                            ': this Galera member has no trigger leaderd_fence_term, without which ',
                            'a lock here cannot stop a claim on another member: run leaderd migrate ',
                            'as a user who may create triggers (see docs/fencing.md)');
        SIGNAL SQLSTATE 'LD002' SET MESSAGE_TEXT = reason;
    END IF;
    IF reason IS NOT NULL THEN
        -- Nothing of the transaction commits, even if the caller goes on to COMMIT.
        ROLLBACK;
        SET reason = CONCAT('leaderd fence: election ', QUOTE(election), ': term ', IFNULL(fenced_term, 'NULL'),
                            ' given, ', reason);
        SIGNAL SQLSTATE 'LD001' SET MESSAGE_TEXT = reason;
    END IF;
    IF @@GLOBAL.wsrep_on THEN
        INSERT INTO leaderd_fence (name, term, writes) VALUES (election, fenced_term, 1)
        ON DUPLICATE KEY UPDATE writes = writes + 1;
    END IF;
    -- The lock lasts until the transaction ends. A client that goes quiet after the fence
    -- (frozen, cut off, crashed) would hold the next claim back for as long as the server
    -- keeps its session: so the session may wait for its client, inside a transaction, for
    -- the lease time left at most (whole seconds, rounded up), after which the server ends
    -- it. A session setting: it stays lowered after this transaction.
    IF @@SESSION.idle_transaction_timeout = 0
       OR @@SESSION.idle_transaction_timeout > CEIL(left_us / 1000000) THEN
        SET SESSION idle_transaction_timeout = CEIL(left_us / 1000000);
    END IF;
    -- MariaDB applies these instead of idle_transaction_timeout to a writing or a
    -- read-only transaction wherever they are set (not 0): lowered too, never raised.
    IF @@SESSION.idle_write_transaction_timeout > CEIL(left_us / 1000000) THEN
        SET SESSION idle_write_transaction_timeout = CEIL(left_us / 1000000);
    END IF;
    IF @@SESSION.idle_readonly_transaction_timeout > CEIL(left_us / 1000000) THEN
        SET SESSION idle_readonly_transaction_timeout = CEIL(left_us / 1000000);
    END IF;
END;
