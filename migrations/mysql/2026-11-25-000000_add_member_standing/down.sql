ALTER TABLE leaderd_member DROP COLUMN IF EXISTS standing;
