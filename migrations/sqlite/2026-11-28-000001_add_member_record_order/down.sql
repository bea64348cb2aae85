ALTER TABLE leaderd_member DROP COLUMN record_count;
ALTER TABLE leaderd_member DROP COLUMN record_process;
