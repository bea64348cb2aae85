ALTER TABLE leaderd_member DROP COLUMN IF EXISTS record_count;
ALTER TABLE leaderd_member DROP COLUMN IF EXISTS record_process;
