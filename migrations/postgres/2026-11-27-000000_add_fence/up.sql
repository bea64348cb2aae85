-- The fence for leader work (docs/fencing.md): `SELECT leaderd_fence(election, term)`,
-- run inside the work's own transaction, fails (SQLSTATE LD001, and the transaction is
-- aborted) unless the election's row is in `term`, held, and live by the database clock,
-- and holds the row against a new term until the transaction ends: a write fenced in
-- term T commits before term T+1 starts, or not at all.

-- `term` becomes a key column: PostgreSQL counts the columns of a plain unique index as
-- the row's key, and an UPDATE that changes a key column takes the row's strongest lock
-- (FOR UPDATE), which waits for the fence's FOR KEY SHARE. Claims and reacquires change
-- the term, so they wait for every fenced transaction of the term; renewals, releases and
-- the operator commands leave it alone and take FOR NO KEY UPDATE, which does not wait:
-- a fenced transaction never holds the leader's own renewal back. (name, term) is unique
-- because name is, so the index refuses nothing any release writes.
CREATE UNIQUE INDEX IF NOT EXISTS service_leader_lock_name_term
    ON service_leader_lock (name, term);
COMMENT ON INDEX service_leader_lock_name_term IS
    'leaderd: never scanned, but makes term a key column, which the fence''s lock depends on (docs/fencing.md): do not drop';

-- SECURITY DEFINER: the work's role needs EXECUTE on this function only, not SELECT and
-- UPDATE on the table (a lock for KEY SHARE asks for UPDATE). search_path is the one the
-- migration ran with, so the table found is leaderd's.
CREATE OR REPLACE FUNCTION leaderd_fence(election TEXT, fenced_term BIGINT) RETURNS VOID
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $fence$
DECLARE
    held_term BIGINT;
    holder TEXT;
    left_ms BIGINT;
    reason TEXT;
BEGIN
    -- The lock below holds a claim back only while `term` is a key column: refuse rather
    -- than pass without it (the index looks redundant and is never scanned, so it is the
    -- first an index advisor drops).
    IF NOT EXISTS (
        SELECT 1 FROM pg_index i
        WHERE i.indrelid = 'service_leader_lock'::regclass
          AND i.indisunique AND i.indimmediate AND i.indisvalid
          AND i.indpred IS NULL AND i.indexprs IS NULL
          AND (SELECT a.attnum FROM pg_attribute a
               WHERE a.attrelid = i.indrelid AND a.attname = 'term') = ANY (i.indkey::int2[])) THEN
        RAISE EXCEPTION USING ERRCODE = 'LD002',
            MESSAGE = format('leaderd fence: election %s: the unique index on service_leader_lock (name, term) is gone, without which the fence holds no claim back: run leaderd migrate', quote_literal(election)),
            HINT = 'run leaderd migrate, which creates it again (service_leader_lock_name_term)';
    END IF;
    -- The lock first: a claim under way is waited for, and READ COMMITTED then reads what
    -- it wrote. Under REPEATABLE READ or SERIALIZABLE a new term committed after the
    -- transaction's snapshot makes this fail with SQLSTATE 40001 (fails closed).
    PERFORM 1 FROM service_leader_lock WHERE name = election FOR KEY SHARE;
    -- Then the check, by the database clock now, on the row once locked: no claim can
    -- commit while the lock is held; a renewal or a release may, and READ COMMITTED sees it.
    SELECT term, container_id,
           FLOOR(EXTRACT(EPOCH FROM ("timestamp" + lease_ms * INTERVAL '1 millisecond'
                                     - clock_timestamp())) * 1000)::BIGINT
      INTO held_term, holder, left_ms
      FROM service_leader_lock WHERE name = election;
    IF NOT FOUND THEN
        reason := 'no such election';
    ELSIF held_term IS DISTINCT FROM fenced_term THEN
        reason := format('term %s holds', held_term);
    ELSIF holder IS NULL THEN
        reason := format('term %s holds, but its holder released it', held_term);
    ELSIF left_ms <= 0 THEN
        reason := format('term %s holds, but its lease lapsed %s ms ago', held_term, -left_ms);
    END IF;
    IF reason IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LD001',
            MESSAGE = format('leaderd fence: election %s: term %s given, %s', quote_literal(election), fenced_term, reason),
            HINT = 'the term is over: stop acting as its leader';
    END IF;
    -- The lock lasts until the transaction ends. A client that goes quiet after the fence
    -- (frozen, cut off, crashed) would hold the next claim back for as long as the server
    -- keeps its session: so what is left of the transaction gets at most the lease time
    -- left, for each statement and each wait for the client, after which the server ends
    -- the statement or the session (and the transaction with it).
    IF current_setting('statement_timeout')::INTERVAL = INTERVAL '0'
       OR current_setting('statement_timeout')::INTERVAL > left_ms * INTERVAL '1 millisecond' THEN
        PERFORM set_config('statement_timeout', left_ms::TEXT, true);
    END IF;
    IF current_setting('idle_in_transaction_session_timeout')::INTERVAL = INTERVAL '0'
       OR current_setting('idle_in_transaction_session_timeout')::INTERVAL > left_ms * INTERVAL '1 millisecond' THEN
        PERFORM set_config('idle_in_transaction_session_timeout', left_ms::TEXT, true);
    END IF;
END
$fence$;

-- Leader work's role gets it with GRANT EXECUTE (docs/fencing.md); nobody else can hold
-- an election's row against a new term.
REVOKE ALL ON FUNCTION leaderd_fence(TEXT, BIGINT) FROM PUBLIC;
