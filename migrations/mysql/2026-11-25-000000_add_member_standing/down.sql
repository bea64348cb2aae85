ALTER TABLE leaderd_member DROP COLUMN standing;
