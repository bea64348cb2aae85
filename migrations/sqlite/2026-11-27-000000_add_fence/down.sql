DROP TRIGGER IF EXISTS leaderd_fence_check;
DROP VIEW IF EXISTS leaderd_fence;
