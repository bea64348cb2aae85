-- Where each member record stands among its node's records: the recording process's
-- token and which of its records it is. A late record (one that waited behind a row lock
-- after its client gave up on it) never overwrites a later one of the same process, such
-- as its `stopped`. NULL in rows of older versions, which any record overwrites.
ALTER TABLE leaderd_member ADD COLUMN IF NOT EXISTS record_process BIGINT DEFAULT NULL;
ALTER TABLE leaderd_member ADD COLUMN IF NOT EXISTS record_count BIGINT DEFAULT NULL;
