DROP PROCEDURE IF EXISTS leaderd_fence;
DROP TRIGGER IF EXISTS leaderd_fence_term;
DROP TABLE IF EXISTS leaderd_fence;
